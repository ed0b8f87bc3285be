"""The scheduling model as the pages show it: when a waiting job is predicted to start, in
words ("in 12 min"), why it waits (which limit), and a dry run's answer. Read-only: the
forecasts are ``scheduling.forecasts``'; ``static/js/live.js`` (``until``) words times the same
way."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs.states import WAITING_STATES
from paddlecloud_core.spec import priority_name
from scheduling.forecasts import Prediction, datacenter_forecast
from scheduling.sooner import sooner_find

# What each kind of reason (``paddlecloud_core.scheduling.Reason.kind``) waits for.
REASON_LABELS = {
    "quota": "your quota",
    "group": "your group's quota",
    "capacity": "the datacenter's capacity",
    "turn": "its turn (fair share)",
    "behind": "another of your jobs, ahead of it in your queue",
    "never": "nothing: it can never start",
    "budget": "your budget",
    "storage": "room in your home (its storage quota)",
    "after": "the jobs it runs after to end",
}


def until(moment: datetime | None, now: datetime | None = None) -> str:
    """How long until ``moment``, as the pages word it: "now", "in 12 min", "in 3.5 h",
    "in 2.1 days" (a moment already passed is "now")."""
    if moment is None:
        return ""
    seconds = (moment - (now or timezone.now())).total_seconds()
    if seconds < 60:
        return "now"
    if round(seconds / 60) < 60:
        return f"in {round(seconds / 60)} min"
    if seconds < 48 * 3600:
        return f"in {seconds / 3600:.1f} h"
    return f"in {seconds / 86400:.1f} days"


def prediction_shown(prediction: Prediction | None, now: datetime | None = None) -> dict | None:
    """A prediction for a template: the times, and ``at`` in words (``None``: no prediction;
    ``at`` None: not within the forecast's horizon)."""
    if prediction is None:
        return None
    return {"at": prediction.at, "earliest": prediction.earliest, "latest": prediction.latest,
            "until": until(prediction.at, now), "unknown": prediction.unknown}


def prediction_parsed(shown: dict | None) -> Prediction | None:
    """A prediction as the API words it (ISO times) back into times."""
    if not shown:
        return None
    return Prediction(*(parse_datetime(shown[key]) if shown.get(key) else None
                        for key in ("at", "earliest", "latest")), shown.get("unknown") or "")


def waiting_report(job) -> tuple[dict | None, Prediction | None]:
    """Why a waiting job does not run, for its page: its reason (as recorded, and the kind of
    limit it waits for, from the plan now), its priority, and its predicted start (one
    forecast of its datacenter). (None, None) for a job that does not wait."""
    if job.state not in WAITING_STATES:
        return None, None
    plan, predicted = datacenter_forecast(job.datacenter, [job.owner_id])
    reason = plan.reasons.get(job.pk) or plan.never.get(job.pk)
    prediction = predicted.get(job.pk)
    return {
        "reason": job.state_reason or (reason.message if reason else ""),
        "waits_for": REASON_LABELS.get(reason.kind, "") if reason else "",
        "kind": reason.kind if reason else "",
        "priority": priority_name(job.priority),
        "prediction": prediction_shown(prediction),
        "sooner": sooner_find(job),
    }, prediction


def admission_shown(admission: dict | None) -> dict | None:
    """A dry run's ``admission`` answer for the submit page."""
    if not admission:
        return None
    return {"starts": admission["starts"], "position": admission.get("position"),
            "reason": admission.get("reason") or "",
            "prediction": prediction_shown(prediction_parsed(admission.get("predicted_start"))),
            "sooner": admission.get("sooner") or []}

"""What users do with sweeps, and how a sweep goes on: its next trials submitted as earlier ones
end, running trials stopped early by its rule (``paddlecloud_core.experiments``).

``sweep_advance`` is the one place a sweep moves. It runs under the sweep's row lock, so two
workers (the hook on a trial's end, every worker's watch) never submit a trial twice, and it
may run any number of times: it submits only what is missing and stops only what still runs.
"""

from __future__ import annotations

import statistics
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import OuterRef, Q, Subquery, prefetch_related_objects
from django.utils import timezone

from accounts.audit import audit_record
from accounts.models import AuditEntry
from jobs.files import metrics_file
from jobs.metrics import PAGE, metrics_read
from jobs.models import Job, Replica
from jobs.notify import job_changed
from jobs.services import job_remove, job_submit, killed_stop
from jobs.states import ACTIVE_STATES, FINAL_JOB_STATES, WAITING_STATES, JobState
from jobs.transitions import jobs_transition
from kernel.errors import ConflictError, NotFoundError, PaddleCloudError, ValidationError
from kernel.queue import SWEEP_ADVANCE, task_later_once
from paddlecloud_core import experiments as rules
from paddlecloud_core.spec import name_problem
from scheduling.forecasts import job_predictions

from .models import Sweep, Trial


def sweep_rules(sweep: Sweep) -> rules.Sweep:
    return rules.sweep_check(sweep.spec)


def _problems_error(problems: dict[str, str]) -> ValidationError:
    return ValidationError("; ".join(f"{k}: {v}" for k, v in problems.items()),
                           fields={k: [v] for k, v in problems.items()})


def sweep_submit(user, datacenter, data) -> Sweep:
    """Check and record a sweep and submit its first trials (``parallel`` of them). A sweep
    refused — by its own rules, or because its first trial would be (the base job's fields,
    named ``job.FIELD``; its quota) — leaves nothing: no sweep, no job."""
    try:
        checked = rules.sweep_check(data, name_problem=name_problem)
    except rules.SweepProblems as exc:
        raise _problems_error(exc.problems) from None
    try:
        with transaction.atomic():
            sweep = Sweep.objects.create(owner=user, datacenter=datacenter, name=checked.name,
                                         spec=checked.as_dict)
            try:
                _trial_submit(sweep, checked, 1)
            except ValidationError as exc:  # the base job's fields
                fields = {f"job.{k}": v for k, v in exc.fields.items()}
                raise ValidationError(
                    "; ".join(f"{k}: {v[0]}" for k, v in fields.items()) or exc.message,
                    fields=fields) from None
            _advance(Sweep.objects.select_for_update().get(pk=sweep.pk), checked)
    except IntegrityError:
        raise ValidationError.for_field(
            "name", f"you already have a sweep named {checked.name!r}: delete it first "
                    f"(paddlectl delete sweep {checked.name}) or pick another name") from None
    sweep.refresh_from_db()
    return sweep


def _trial_submit(sweep: Sweep, checked: rules.Sweep, number: int) -> Trial:
    settings = rules.trial_settings(checked, number)
    job = job_submit(sweep.owner, sweep.datacenter,
                     rules.trial_job(checked, number, settings)).job
    return Trial.objects.create(sweep=sweep, number=number, settings=settings, job=job)


def sweep_advance(sweep_id: int, *, wait: bool = True) -> None:
    """Move a running sweep on: stop the trials its rule stops, submit the next ones into the
    free slots, and end it once every trial has ended. ``wait=False`` (the watch) leaves a
    sweep another worker is advancing to that worker."""
    with transaction.atomic():
        sweep = (Sweep.objects.select_for_update(skip_locked=not wait)
                 .select_related("owner", "datacenter").filter(pk=sweep_id).first())
        if sweep is None or sweep.state != Sweep.State.RUNNING:
            return
        _advance(sweep, sweep_rules(sweep))


def _advance(sweep: Sweep, checked: rules.Sweep) -> None:
    before = (sweep.best, sweep.problem, sweep.state)
    trials = list(sweep.trials.select_related("job"))
    if checked.metric:
        curves = _curves(checked, trials)
        _stop_early(sweep, checked, trials, curves)
        best = rules.best_of(checked, curves)
        found = next((t for t in trials if t.pk == best[0]), None) if best else None
        sweep.best = None if found is None else {
            "trial": found.number, "job": found.job.name if found.job else None,
            "value": best[1], "settings": found.settings}
    live = [t for t in trials if t.job is not None and t.job.state not in FINAL_JOB_STATES]
    count, problem = rules.trial_count(checked), ""
    number = len(trials)
    while len(live) < checked.parallel and number < count:
        try:
            with transaction.atomic():
                live.append(_trial_submit(sweep, checked, number + 1))
        except PaddleCloudError as exc:  # e.g. the owner's queue is full: tried again later
            problem = f"trial {number + 1} not submitted yet: {exc.message}"
            break
        number += 1
    sweep.problem = problem
    if not live and number >= count:
        sweep.state, sweep.finished_at = Sweep.State.DONE, timezone.now()
    if (sweep.best, sweep.problem, sweep.state) != before:  # the watch writes only news
        sweep.save(update_fields=["best", "problem", "state", "finished_at"])
        if trials and trials[0].job_id is not None:  # the job lists show its row anew
            job_changed(trials[0].job_id)


def _curves(checked: rules.Sweep, trials: list[Trial]) -> dict[int, list[tuple[int, float]]]:
    """Each started trial's objective by step, as its trainer 0 reported it (the SDK's other
    metrics, e.g. ``checkpoint``, left out)."""
    started = [t for t in trials if t.job is not None and t.job.started_at is not None]
    firsts = {r.job_id: r for r in Replica.objects.filter(
        job_id__in=[t.job_id for t in started], role=Replica.Role.TRAINER, index=0)}
    curves = {}
    for trial in started:
        replica = firsts.get(trial.job_id)
        if replica is None:
            continue
        records, _, _ = metrics_read(metrics_file(trial.job, replica), 0, PAGE)
        curve = {r["step"]: r["metrics"][checked.metric] for r in records
                 if r["metrics"].get(checked.metric) is not None}
        curves[trial.pk] = sorted(curve.items())
    return curves


def _stop_early(sweep: Sweep, checked: rules.Sweep, trials: list[Trial], curves) -> None:
    """Stop, in one pass, the running trials the sweep's rule stops, each with why."""
    reasons = {}
    for trial in trials:
        if trial.job is None or trial.job.state != JobState.RUNNING or trial.stopped_early:
            continue
        others = [curve for pk, curve in curves.items() if pk != trial.pk]
        why = rules.stop_decision(checked, curves.get(trial.pk, []), others)
        if why is not None:
            reasons[trial.job.pk] = why
            trial.stopped_early = why
    if not reasons:
        return
    stopped = [t for t in trials if t.job is not None and t.job.pk in reasons]
    _trials_kill([t.job for t in stopped], reasons)
    Trial.objects.bulk_update(stopped, ["stopped_early"])


def _trials_kill(jobs: list[Job], reasons: dict[int, str]) -> list[Job]:
    """Kill trials' jobs at once (one transition for all) and stop their replicas."""
    moved = jobs_transition(jobs, JobState.KILLED, reasons)  # each job's state is set too
    killed_stop(moved)
    return moved


def job_ended_advance(sender, job_ids, **kwargs) -> None:
    """Jobs ended (``jobs.signals.job_ended``): the sweeps of those that are trials go on."""
    for sweep_id in set(Trial.objects.filter(job_id__in=job_ids)
                        .values_list("sweep_id", flat=True)):
        task_later_once(SWEEP_ADVANCE, sweep_id)


def sweeps_watch() -> None:
    """Every running sweep advanced: early stopping reads the metrics trials report as they
    run (no event tells of them), and a sweep whose hook was lost goes on."""
    for sweep_id in Sweep.objects.filter(state=Sweep.State.RUNNING).values_list("pk", flat=True):
        sweep_advance(sweep_id, wait=False)


# --- looking at sweeps -------------------------------------------------------------------------


def sweep_get(user, datacenter, name: str) -> Sweep:
    sweep = (Sweep.objects.select_related("owner", "datacenter")
             .filter(owner=user, datacenter=datacenter, name=name).first())
    if sweep is None:
        raise NotFoundError(f"you have no sweep named {name!r} in datacenter "
                            f"{datacenter.name!r}")
    return sweep


def sweep_list(user, datacenter) -> list[dict]:
    """The user's sweeps in the datacenter as ``sweep_report`` shows them, newest first, in a
    number of queries that does not grow with the sweeps (one forecast for all their waiting
    trials)."""
    return _reports(list(Sweep.objects.filter(owner=user, datacenter=datacenter)))


def _reports(sweeps: list[Sweep]) -> list[dict]:
    """``sweep_report`` of each of ``sweeps``: their trials read at once, one forecast for all
    their waiting trials."""
    prefetch_related_objects(sweeps, "trials__job__datacenter")
    waiting = [t.job for s in sweeps for t in s.trials.all()
               if t.job is not None and t.job.state in WAITING_STATES]
    predictions = job_predictions(waiting)
    return [sweep_report(sweep, predictions) for sweep in sweeps]


def trials_folded(jobs):
    """The job list's jobs (a queryset) with a sweep's trials folded: of each sweep, only its
    first trial among them is kept (where the sweep's row goes); the other jobs stay."""
    first = (jobs.filter(trial__sweep=OuterRef("trial__sweep")).order_by("created_at", "pk")
             .values("pk")[:1])
    return jobs.filter(Q(trial__isnull=True) | Q(pk=Subquery(first)))


def trials_of(user, datacenter, jobs, name: str):
    """The job list's jobs that are trials of the user's sweep ``name``."""
    return jobs.filter(trial__sweep=sweep_get(user, datacenter, name))


def sweep_reports_of(job_ids) -> dict[int, dict]:
    """{job id: ``sweep_report`` of its sweep} for the jobs among ``job_ids`` that are trials
    (each sweep reported once, however many of its trials are asked about)."""
    links = dict(Trial.objects.filter(job_id__in=list(job_ids))
                 .values_list("job_id", "sweep_id"))
    if not links:
        return {}
    sweeps = list(Sweep.objects.filter(pk__in=set(links.values())))
    reports = dict(zip((sweep.pk for sweep in sweeps), _reports(sweeps), strict=True))
    return {job_id: reports[sweep_id] for job_id, sweep_id in links.items()}


def sweep_kill(user, datacenter, name: str) -> Sweep:
    """Stop every trial of a sweep in one pass (one transition for all its living trials) and
    submit no more."""
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().filter(
            pk=sweep_get(user, datacenter, name).pk).first()
        if sweep.state != Sweep.State.RUNNING:
            raise ConflictError(f"sweep {name!r} has already ended ({sweep.state})",
                                code="sweep_ended")
        jobs = list(Job.objects.filter(trial__sweep=sweep)
                    .exclude(state__in=FINAL_JOB_STATES))
        why = f"killed with its sweep {name} by {user.username}"
        _trials_kill(jobs, dict.fromkeys((job.pk for job in jobs), why))
        sweep.state, sweep.finished_at = Sweep.State.KILLED, timezone.now()
        sweep.save(update_fields=["state", "finished_at"])
        audit_record(user, AuditEntry.Action.JOB_KILL, f"{user.username}/{name}",
                     datacenter=datacenter, sweep=name, trials=len(jobs))
    return sweep


def sweep_delete(user, datacenter, name: str) -> None:
    """Remove an ended sweep and its trials' jobs from history (their output stays in PFS)."""
    sweep = sweep_get(user, datacenter, name)
    if sweep.state == Sweep.State.RUNNING:
        raise ConflictError(f"sweep {name!r} is running: kill it first (paddlectl kill sweep "
                            f"{name}), then delete it", code="sweep_not_ended")
    for job in Job.objects.filter(trial__sweep=sweep).select_related("owner", "datacenter"):
        if job.state in FINAL_JOB_STATES:
            job_remove(job, by=user)
    sweep.delete()


def trial_state(trial: Trial) -> str:
    """A trial as its sweep counts it: done, running, waiting, stopped (early), killed,
    removed (its job deleted), or to_submit."""
    if trial.job is None:
        return "removed"
    state = trial.job.state
    if trial.stopped_early:
        return "stopped"
    if state in (JobState.SUCCEEDED, JobState.FAILED):
        return "done"
    if state == JobState.KILLED:
        return "killed"
    return "running" if state in ACTIVE_STATES else "waiting"


def sweep_report(sweep: Sweep, predictions=None) -> dict:
    """A sweep as the API shows it: its spec, progress, best trial, trials, predicted end."""
    trials = list(sweep.trials.all())
    counts = dict.fromkeys(("done", "running", "waiting", "stopped", "killed", "removed"), 0)
    for trial in trials:
        counts[trial_state(trial)] += 1
    checked = sweep_rules(sweep)
    counts["to_submit"] = max(0, rules.trial_count(checked) - len(trials)) \
        if sweep.state == Sweep.State.RUNNING else 0
    return {
        "name": sweep.name, "state": sweep.state, "method": checked.method,
        "objective": sweep.spec.get("objective"), "progress": counts,
        "progress_shown": progress_shown(counts),
        "trials_total": rules.trial_count(checked), "best": sweep.best,
        "best_shown": best_shown(sweep.best, checked.metric),
        "problem": sweep.problem, "created_at": sweep.created_at,
        "finished_at": sweep.finished_at,
        "predicted_end": sweep_predicted_end(sweep, checked, trials, predictions),
        "trials": [{"number": t.number, "job": t.job.name if t.job else None,
                    "state": t.job.state if t.job else None, "counted": trial_state(t),
                    "settings": t.settings, "stopped_early": t.stopped_early or None}
                   for t in trials],
        "spec": sweep.spec,
    }


def sweep_predicted_end(sweep: Sweep, checked: rules.Sweep, trials: list[Trial],
                        predictions=None) -> dict:
    """When the whole sweep is predicted to end: its trials in ``parallel`` slots, each as long
    as its finished trials took on average, a waiting trial from its predicted start
    (``scheduling.forecasts``). ``{"at": None, "unknown": why}`` when nothing tells."""
    if sweep.state != Sweep.State.RUNNING:
        return {"at": sweep.finished_at, "unknown": None}
    lengths = [(t.job.finished_at - t.job.started_at).total_seconds() for t in trials
               if t.job is not None and t.job.state == JobState.SUCCEEDED
               and t.job.started_at and t.job.finished_at]
    if not lengths:
        return {"at": None, "unknown": "no trial has finished yet: how long one takes is not "
                                       "known"}
    length = timedelta(seconds=statistics.mean(lengths))
    now = timezone.now()
    live = [t.job for t in trials if t.job is not None and t.job.state not in FINAL_JOB_STATES]
    if predictions is None:
        predictions = job_predictions([j for j in live if j.state in WAITING_STATES])
    slots: list[datetime] = []
    for job in live:
        if job.state in ACTIVE_STATES:
            slots.append(max(now, (job.started_at or now) + length))
            continue
        prediction = predictions.get(job.pk)
        if prediction is None or prediction.at is None:
            why = prediction.unknown if prediction and prediction.unknown else \
                "not within the forecast's horizon"
            return {"at": None, "unknown": f"trial {job.name} has no predicted start: {why}"}
        slots.append(max(now, prediction.at) + length)
    slots += [now] * max(0, checked.parallel - len(slots))
    slots.sort()
    for _ in range(max(0, rules.trial_count(checked) - len(trials))):
        slots[0] += length
        slots.sort()
    return {"at": max(slots), "unknown": None}


def progress_shown(counts: dict) -> str:
    """A sweep's progress in words: "1 done, 2 running, 0 waiting, 1 stopped" (killed,
    removed and still to submit when there are)."""
    shown = [f"{counts[key]} {key}" for key in ("done", "running", "waiting", "stopped")]
    shown += [f"{counts[key]} {key}" for key in ("killed", "removed") if counts.get(key)]
    if counts.get("to_submit"):
        shown.append(f"{counts['to_submit']} to submit")
    return ", ".join(shown)


def best_shown(best: dict | None, metric: str) -> str | None:
    """The best value so far in words: "loss 0.0519 (lr-1: env.LEARNING_RATE=0.1)"."""
    if not best:
        return None
    settings = " ".join(f"{k}={v}" for k, v in best["settings"].items())
    return f"{metric} {best['value']:.4g} ({best['job']}: {settings})"

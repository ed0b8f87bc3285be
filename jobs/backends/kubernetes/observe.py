"""What a job's Kubernetes objects say of its replicas, as data: a pod's status, its owner's
Events, the trainers' Job, a Volcano PodGroup or a Kueue Workload in, an ``Observation`` out.

Pure functions of what the API server answered (``backend`` reads it and asks them): no
client, no request, no record. How a pod is read:

- its phases and exit codes (the main container's, else a failed init container's: the
  workspace's setup or the wait for its peers), and why a pod still waits (unschedulable,
  image pull failures, its peers) from its conditions and container states;
- a pod the cluster took away (``DisruptionTarget``, or a trainer's pod gone before it
  ended) as a disruption; a pserver whose pod its StatefulSet replaced as lost;
- a trainer's pods told apart by attempt (``pod_attempt``): its Job's first attempt plus the
  failures the Job counted or ignored for its index;
- the owner's ``FailedCreate`` Events as a wait for the namespace's quota, else a refusal
  once it persists (``refusal``); a gang scheduler's or Kueue's hold as a held wait.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timedelta

from paddlecloud_core.processes import exit_reason

from ..base import Observation, Status
from .names import FIRST_ATTEMPT_LABEL, PSERVER, ROLE_LABEL, TRAINER

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
POD_INDEX = "apps.kubernetes.io/pod-index"
# A pserver's handle once it ran: its pod's uid (before, its pod's name).
UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
IGNORED_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"
WAITING_REASONS = {  # container waiting reasons worth telling the user, with a lead-in
    "ErrImagePull": "cannot pull its image",
    "ImagePullBackOff": "cannot pull its image",
    "InvalidImageName": "its image name is invalid",
    "CreateContainerConfigError": "its container cannot be created",
    "CreateContainerError": "its container cannot be created",
    "CrashLoopBackOff": "it keeps crashing",
}
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")


def pod_attempt(pod: dict) -> int:
    """Which attempt of its replica a trainer's pod is: its Job's first, plus the failures the
    Job counted or ignored for the index before it."""
    meta = pod["metadata"]
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    return sum(int(value) if str(value).isdigit() else 0 for value in (
        labels.get(FIRST_ATTEMPT_LABEL), notes.get(FAILURE_COUNT), notes.get(IGNORED_COUNT)))


def replica_pods(pods: list[dict], replica) -> list[dict]:
    """Those of a job's ``pods`` that are the replica's, oldest first: one per attempt for a
    trainer."""
    mine = []
    for pod in pods:
        meta = pod["metadata"]
        labels, notes = meta.get("labels", {}), meta.get("annotations", {})
        if labels.get(ROLE_LABEL) != replica.role:
            continue
        index = (notes.get(COMPLETION_INDEX) or labels.get(COMPLETION_INDEX)
                 if replica.role == TRAINER else labels.get(POD_INDEX))
        if index is None and replica.role == PSERVER:
            index = meta["name"].rsplit("-", 1)[-1]
        if str(index) == str(replica.index):
            mine.append(pod)
    return sorted(mine, key=lambda p: (p["metadata"].get("creationTimestamp", ""),
                                       p["metadata"]["name"]))


def current_pod(replica, mine: list[dict]) -> dict | None:
    """The pod of the replica's current attempt (the Job controller makes a trainer a new pod
    per attempt), if it has one."""
    if replica.role == TRAINER:
        mine = [pod for pod in mine if pod_attempt(pod) == replica.attempt]
    return mine[-1] if mine else None


def pod_seen(replica, mine: list[dict]) -> Observation | None:
    """What the replica's pods (``replica_pods``) say of its current attempt; None when it
    has no pod."""
    pod = current_pod(replica, mine)
    if pod is None and replica.role == TRAINER and any(
            pod_attempt(p) > replica.attempt for p in mine):
        # Its pod went before it was seen to end, and the Job made the next: a failed pod
        # stays, so this one was deleted (evicted, preempted, its node lost, or by someone),
        # which is not the job's fault.
        return Observation(Status.LOST, disrupted=True, reason=(
            "the cluster took its pod away (it was deleted before it ended: evicted, "
            "preempted or its node lost)"))
    if pod is None:
        return None
    seen = pod_observation(pod, replica.role)
    if (replica.role == PSERVER and replica.state == "running"
            and UID.match(replica.backend_ref)
            and replica.backend_ref != pod["metadata"].get("uid")):
        # Its StatefulSet made it a new pod (evicted, its node lost): a new, empty pserver.
        # The trainers would train on against it: the pserver has failed.
        return Observation(Status.LOST, host=seen.host, disrupted=True, reason=(
            "its pod was replaced (evicted, preempted or its node lost): the parameters it "
            "held are gone"))
    return seen


STRANDED_AFTER = timedelta(seconds=30)  # past a deleted pod's grace: no kubelet confirms


def container(statuses: list[dict] | None, name: str) -> dict:
    """The status of the container ``name`` among a pod's ``statuses`` ({} if absent)."""
    return next((s for s in statuses or [] if s.get("name") == name), {})


def _disrupted(status: dict) -> bool:
    """The cluster took the pod away (evicted, preempted, its node lost): ``DisruptionTarget``."""
    return any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
               for c in status.get("conditions") or [])


def stranded(pod: dict, now: datetime) -> bool:
    """A pod the cluster took away whose node is lost: ``DisruptionTarget`` (the node
    lifecycle controller's, for a node that stopped answering), deleted, and still there
    ``STRANDED_AFTER`` past its grace, as no kubelet is left to confirm it stopped (a live one
    does within seconds: an evicted pod is not stranded). Until it goes, its Job makes its
    index no new pod (nor does a Foreground delete of the Job end)."""
    due = _moment(pod["metadata"].get("deletionTimestamp"))
    return (due is not None and due + STRANDED_AFTER < now
            and _disrupted(pod.get("status") or {}))


def _setup_detail(message: str) -> str:
    """What of the setup container's last lines says why it failed: pip's error, if it is
    there (init.sh puts pip's last lines on its stderr), and where the whole of it is."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    said = next((line for line in reversed(lines) if line.startswith("ERROR:")), "")
    return f"{said[:300]}; see output/requirements.log" if said else (
        "see output/requirements.log")


def pod_observation(pod: dict, role: str) -> Observation:
    """What one pod says of its replica (of ``role``), with the image its container runs by
    digest once the kubelet says (``imageID``)."""
    seen = _pod_observation(pod, role)
    main = container((pod.get("status") or {}).get("containerStatuses"), role)
    return replace(seen, image_id=main.get("imageID") or "") if main.get("imageID") else seen


def _pod_observation(pod: dict, role: str) -> Observation:
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    host = (pod.get("spec") or {}).get("nodeName", "")
    # A trainer's handle is its pod's name; a pserver's, its pod's uid: its StatefulSet gives a
    # new pod the old one's name.
    ref = pod["metadata"].get("name", "") if role == TRAINER else pod["metadata"].get("uid", "")
    main = container(status.get("containerStatuses"), role)
    terminated = (main.get("state") or {}).get("terminated")
    if phase == "Succeeded":
        return Observation(Status.EXITED, exit_code=0, host=host, ref=ref)
    if phase == "Failed" or (_disrupted(status) and pod["metadata"].get("deletionTimestamp")):
        disrupted = _disrupted(status)
        for init, what in (("setup", "preparing the workspace failed"),
                           ("peers", "its peers could not be reached")):
            ended = (container(status.get("initContainerStatuses"), init).get("state")
                     or {}).get("terminated")
            if terminated is None and ended and ended.get("exitCode"):
                detail = ((ended.get("message") or "").strip() or "see the replica's log")
                if init == "setup":
                    detail = _setup_detail(detail)
                return Observation(Status.EXITED, exit_code=ended["exitCode"], host=host,
                                   ref=ref, disrupted=disrupted, reason=(
                                       f"{what} (exit {ended['exitCode']}): {detail}"))
        code = (terminated or {}).get("exitCode")
        reason = status.get("reason") or (terminated or {}).get("reason") or ""
        if disrupted:
            condition = next(c for c in status["conditions"] if c["type"] == "DisruptionTarget")
            reason = (f"the cluster took its pod away ({condition.get('reason') or reason}: "
                      f"{condition.get('message') or status.get('message', '')})").strip()
        if code is None or disrupted:
            return Observation(Status.LOST, host=host, ref=ref, disrupted=disrupted,
                               exit_code=code, reason=reason if disrupted else (
                                   f"its pod failed: {reason or 'no exit status'} "
                                   f"{status.get('message', '')}").strip())
        return Observation(Status.EXITED, exit_code=code, host=host, ref=ref,
                           reason=_exit_reason(code, reason))
    if phase == "Running":
        last = (main.get("lastState") or {}).get("terminated")
        if role == PSERVER and (terminated or last):  # restarted in place by the kubelet
            ended = terminated or last
            return Observation(Status.EXITED, exit_code=ended.get("exitCode", 1), host=host,
                               ref=ref, reason=_exit_reason(ended.get("exitCode", 1),
                                                            ended.get("reason", "")))
        if terminated is not None:  # its container ended, the pod not yet
            return Observation(Status.EXITED, exit_code=terminated.get("exitCode", 1),
                               host=host, ref=ref,
                               reason=_exit_reason(terminated.get("exitCode", 1),
                                                   terminated.get("reason", "")))
        return Observation(Status.RUNNING, host=host, ref=ref)
    return Observation(Status.WAITING, host=host, ref=ref, reason=_pending_reason(status))


def _exit_reason(code: int, reason: str) -> str:
    if reason == "OOMKilled":
        return f"killed for using more memory than it asked for (OOMKilled, exit {code})"
    return "" if code == 0 else exit_reason(code)


def _pending_reason(status: dict) -> str:
    """Why a pending pod does not run, from its conditions and container states."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"cannot be scheduled: {condition.get('message') or condition.get('reason')}"
    for key in ("initContainerStatuses", "containerStatuses"):
        for each in status.get(key) or []:
            waiting = (each.get("state") or {}).get("waiting") or {}
            lead = WAITING_REASONS.get(waiting.get("reason", ""))
            if lead:
                return f"{lead}: {waiting.get('message') or waiting['reason']}"
    for each in status.get("initContainerStatuses") or []:
        if (each.get("state") or {}).get("running"):
            if each.get("name") == "peers":
                return ("waiting for its peers to have addresses and accept connections "
                        "(its log says which)")
            return "preparing its workspace (copying the package, installing requirements)"
    return "its pod is being created"


# -- what the pods' owners and the cluster's queues say ------------------------------------------

def _moment(stamp: str | None) -> datetime | None:
    """An RFC 3339 timestamp of the API server's, None if missing or unreadable."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None
    except ValueError:
        return None


def _seconds_between(first: str | None, last: str | None) -> float:
    """Seconds from one RFC 3339 timestamp of an Event to another (0 if one is missing)."""
    begun, ended = _moment(first), _moment(last)
    return (ended - begun).total_seconds() if begun and ended else 0.0


def refusal(events: list[dict], refused_seconds: float) -> Observation | None:
    """What the cluster said when it refused to create the pod (``FailedCreate``, among the
    Events of the pod's owner), if it did. A ResourceQuota's refusal is a wait: the pods of a
    job that just ended still count until they are gone. Any other (Pod Security, a
    LimitRange, a webhook) fails the replica once it has gone on for ``refused_seconds``."""
    made = max((e.get("lastTimestamp") or "" for e in events
                if e.get("reason") == "SuccessfulCreate"), default="")
    # Only what came after the last pod it made (timestamps are to the second: a refusal
    # in the same second as a success is taken as over).
    refusals = [e for e in events if e.get("reason") == "FailedCreate"
                and (e.get("lastTimestamp") or "") > made]
    if not refusals:
        return None
    last = max(refusals, key=lambda e: e.get("lastTimestamp") or "")
    message = last.get("message") or ""
    if "exceeded quota" in message:
        return Observation(Status.WAITING, reason=(
            "waiting for the namespace's quota (pods that are ending still count): "
            + message))
    # Each retry names a new pod, so each refusal may be an Event of its own: how long
    # they have gone on is from the first one's first time to the last one's last.
    others = [e for e in refusals if "exceeded quota" not in (e.get("message") or "")]
    lasted = _seconds_between(min(e.get("firstTimestamp") or "" for e in others),
                              last.get("lastTimestamp"))
    if lasted >= refused_seconds:
        return Observation(Status.REFUSED, reason=(
            "the cluster refused to create its pod: " + message))
    return Observation(Status.WAITING, reason=(
        "the cluster refuses to create its pod (retrying): " + message))


def trainers_disrupted(trainers_job: dict | None) -> bool:
    """Whether a collective job's trainers' Job failed because the cluster took one of its
    pods away (its FailJob rule on DisruptionTarget), not for a trainer's fault."""
    for condition in ((trainers_job or {}).get("status") or {}).get("conditions") or []:
        if (condition.get("type") == "Failed" and condition.get("status") == "True"
                and condition.get("reason") == "PodFailurePolicy"
                and "DisruptionTarget" in (condition.get("message") or "")):
            return True
    return False


def gang_held(group: dict | None, seen: Observation) -> Observation:
    """A pending pod of a job whose Volcano PodGroup (``group``) holds it: what Volcano says
    (``seen`` when it says nothing)."""
    status = (group or {}).get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
            # Pending: its Queue has not taken the group in (Inqueue: it has, and only room
            # on the nodes is missing).
            return Observation(Status.WAITING, host=seen.host,
                               held=status.get("phase", "Pending") == "Pending", reason=(
                f"waiting for Volcano to schedule all the job's pods at once "
                f"({status.get('phase', 'Pending')}): {condition.get('message', '')}"
            ).rstrip(": "))
    return seen


def gang_scheduled_at(group: dict | None) -> datetime | None:
    """When Volcano last scheduled the gang of a PodGroup (``group``): its ``Scheduled``
    condition, if that is newer than any ``Unschedulable`` one (a group that ran and lost
    pods is held again). Volcano rewrites the condition's time only with the rest of the
    group's status (a pod's phase changing): never before the gang was placed."""
    moments = {}
    for condition in ((group or {}).get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True":
            moments[condition.get("type")] = _moment(condition.get("lastTransitionTime"))
    scheduled, held = moments.get("Scheduled"), moments.get("Unschedulable")
    return scheduled if scheduled and (held is None or scheduled >= held) else None


def kueue_gated(pod: dict, gate: str) -> bool:
    """Whether Kueue's scheduling ``gate`` still holds the pod."""
    return any(each.get("name") == gate
               for each in (pod.get("spec") or {}).get("schedulingGates") or [])


def kueue_unseen(unseen: str) -> Observation:
    """Kueue holds the job and has no Workload for it yet (``unseen``: why that may be)."""
    return Observation(Status.WAITING, held=True,
                       reason=f"waiting for Kueue to see it ({unseen})")


def kueue_unasked(problem: object) -> Observation:
    """Kueue holds the job, and its Workload could not be read (``problem``)."""
    return Observation(Status.WAITING, held=True,
                       reason=f"waiting for Kueue to admit it ({problem})")


def kueue_held(workload: dict, position: int | None) -> Observation:
    """Why Kueue holds a job: its Workload's QuotaReserved condition, and where it stands in
    its ClusterQueue (``position``, from Kueue's visibility API; None if not known)."""
    why = ""
    for condition in (workload.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "QuotaReserved" and condition.get("status") == "False":
            why = condition.get("message") or condition.get("reason") or ""
    where = "" if position is None else f", position {position + 1} in its ClusterQueue"
    return Observation(Status.WAITING, held=True, reason=(
        f"waiting for Kueue to admit it{where}" + (f": {why}" if why else "")))


def kueue_admitted_at(workload: dict | None) -> datetime | None:
    """When Kueue admitted the ``workload`` (its Admitted condition), None while it has not."""
    for condition in ((workload or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Admitted" and condition.get("status") == "True":
            return _moment(condition.get("lastTransitionTime"))
    return None


# -- a pending pod's start: under way, or stuck ---------------------------------------------------

# The kubelet's Events of an image pull: ``Pulling`` begins one, the others end it (pulled,
# failed, backing off, not to be pulled).
PULL_BEGUN, PULL_ENDED = "Pulling", ("Pulled", "Failed", "BackOff", "ErrImageNeverPull")
# cluster-autoscaler's verdicts on an unschedulable pod: a node group grows for it, or none can.
SCALE_UP, NO_SCALE_UP = "TriggeredScaleUp", "NotTriggerScaleUp"
# How long a scale-up is taken as under way: cluster-autoscaler's default
# --max-node-provision-time, past which it gives the node up itself.
SCALE_UP_SECONDS = 15 * 60


def _event_moment(event: dict) -> datetime | None:
    """When an Event last happened (a repeated one's latest time; to the second)."""
    return _moment((event.get("series") or {}).get("lastObservedTime")
                   or event.get("lastTimestamp") or event.get("eventTime")
                   or event.get("firstTimestamp"))


def _last(events: list[dict], reasons: tuple[str, ...], where: str | None = None
          ) -> tuple[datetime, dict] | None:
    """The latest of the ``events`` with one of ``reasons`` (about the container ``where``,
    when given), and when it was."""
    found = [(moment, event) for event in events if event.get("reason") in reasons
             and (where is None or (event.get("involvedObject") or {}).get("fieldPath", "")
                  == where) and (moment := _event_moment(event)) is not None]
    return max(found, key=lambda each: each[0], default=None)


def start_underway(pod: dict, events: list[dict], now: datetime) -> str:
    """What of a pending pod's start is under way, by its ``events``: an image being pulled
    (a ``Pulling`` with no end after it, for one of its containers) or, while it is not
    scheduled, a node the autoscaler adds for it (its last verdict a ``TriggeredScaleUp``,
    less than ``SCALE_UP_SECONDS`` old); in words for the user, "" when nothing is (it is
    stuck: unschedulable with no node coming, a pull that failed). Events are to the
    second: a pull that began and ended within one is over."""
    for where in sorted({(e.get("involvedObject") or {}).get("fieldPath", "")
                         for e in events if e.get("reason") == PULL_BEGUN}):
        begun, ended = _last(events, (PULL_BEGUN,), where), _last(events, PULL_ENDED, where)
        if ended is None or begun[0] > ended[0]:
            return f"its image is being pulled ({begun[1].get('message') or PULL_BEGUN})"
    if not (pod.get("spec") or {}).get("nodeName"):
        grown, refused = _last(events, (SCALE_UP,)), _last(events, (NO_SCALE_UP,))
        if grown is not None and (refused is None or grown[0] > refused[0]) and (
                now - grown[0]).total_seconds() < SCALE_UP_SECONDS:
            return (f"the cluster's autoscaler is adding a node for it "
                    f"({grown[1].get('message') or SCALE_UP})")
    return ""


def owner_gone(kind: str, name: str, namespace: str, *, root_exists: bool) -> Observation:
    """The owner of a replica's pods (its ``kind`` ``name``) is gone, though the job was not
    stopped: deleted outside PaddleCloud, alone or with the job's root."""
    if not root_exists:
        return Observation(Status.LOST, reason=(
            f"its Kubernetes objects were deleted outside PaddleCloud ({kind} {name} in "
            f"namespace {namespace} is gone)"))
    return Observation(Status.LOST, reason=f"its {kind} {name} was deleted outside PaddleCloud")


PSERVER_POD_GONE = Observation(Status.LOST, disrupted=True, reason=(
    "its pod is gone (evicted, preempted or its node lost): the parameters it held are gone"))

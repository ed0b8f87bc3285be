"""The Job controller (batch/v1): pods per completion (Indexed or not) within parallelism,
failure accounting against backoffLimit / backoffLimitPerIndex / maxFailedIndexes and
podFailurePolicy, activeDeadlineSeconds, suspend, the status and conditions a real controller
writes, and the TTL-after-finished controller. An Indexed Job scales (elastic Indexed Jobs:
completions and parallelism changed together): new indexes get pods; when it shrinks, pods of
indexes past completions are deleted, their failures not counted, and completed or failed
indexes past it forgotten, as the real controller does."""

from __future__ import annotations

import copy
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from . import resources
from .api import DeleteOptions
from .errors import ApiError
from .objects import (
    condition_true,
    controller_uid,
    now_iso,
    owner_reference,
    seconds_since,
    set_condition,
)
from .store import Expired, json_copy

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
FAILURE_COUNT_KEY = "batch.kubernetes.io/job-index-failure-count"
IGNORED_FAILURE_COUNT_KEY = "batch.kubernetes.io/job-index-ignored-failure-count"
_COMPONENT = "job-controller"


@dataclass
class _Tracking:
    """What the controller remembers per Job (a real one keeps it in pod finalizers)."""

    counted: set[str] = field(default_factory=set)  # pod uids already counted
    failures: Counter = field(default_factory=Counter)  # failed pods per index (None: any)
    ignored: Counter = field(default_factory=Counter)  # failures an Ignore rule matched, likewise
    failed_by_policy: set[int] = field(default_factory=set)  # indexes a FailIndex rule failed
    fail_job: str | None = None  # the message of the first failure a FailJob rule matched
    seen: dict = field(default_factory=dict)  # uid -> last state of each pod not counted yet
    deleted: set[str] = field(default_factory=set)  # pods this controller deleted
    retry_at: float = 0.0  # next pod creation attempt after a refusal
    backoff_until: dict = field(default_factory=dict)  # index (None: any) -> monotonic
    started_at: float | None = None  # monotonic status.startTime, for activeDeadlineSeconds
    finished_at: float | None = None  # monotonic, for ttlSecondsAfterFinished


class JobController:
    def __init__(self, api):
        self.api = api
        self._tracking: dict[str, _Tracking] = {}
        self._cursor = api.store.rv  # the store's history is read from here on (pod removals)
        self._full_at = 0.0  # when the next pass looks at every Job

    def sync(self) -> None:
        """A pass: the Jobs that changed, whose pods changed or that wait for a moment (a
        back-off, a deadline, a TTL), as a real controller's work queue holds them; every Job
        at least once every ``Settings.full_pass_seconds``, and whenever the history it reads
        from was compacted. (A pass over thousands of Jobs on each write would hold the store's lock
        most of the time.)"""
        removed, touched = self._changes()
        now = time.monotonic()
        full = touched is None or now >= self._full_at
        if full:
            self._full_at = now + self.api.settings.full_pass_seconds
        jobs = self.api.store.list(resources.JOBS.key, read_only=True)
        for job in jobs:
            uid = job["metadata"]["uid"]
            if full or uid in touched or self._timed(job, now):
                self._sync_job(json_copy(job), removed.get(uid, {}))
        alive = {j["metadata"]["uid"] for j in jobs}
        for uid in [u for u in self._tracking if u not in alive]:
            del self._tracking[uid]

    def _timed(self, job: dict, now: float) -> bool:
        """Whether the Job waits for a moment to come (it is looked at on every pass then)."""
        tracking = self._tracking.get(job["metadata"]["uid"])
        if tracking is None:
            return True
        spec = job["spec"]
        return bool(tracking.retry_at > now or any(u > now for u in tracking.backoff_until.values())
                    or (tracking.started_at is not None
                        and spec.get("activeDeadlineSeconds") is not None)
                    or (tracking.finished_at is not None
                        and spec.get("ttlSecondsAfterFinished") is not None))

    def _changes(self) -> tuple[dict[str, dict[str, dict]], set[str] | None]:
        """Since the last pass: the pods removed, in their last state, by owning Job uid (what
        a real controller's informer delivers, and its job-tracking finalizer makes sure it
        sees); and the uids of the Jobs that changed or whose pods did (None: not known, the
        history was compacted)."""
        store, removed, touched = self.api.store, defaultdict(dict), set()
        try:
            changes = store.changes_after(self._cursor)
        except Expired:  # history compacted: the states seen by earlier passes stand in
            changes, touched = [], None
        self._cursor = store.rv
        for change in changes:
            if change.resource == resources.JOBS.key:
                touched.add(change.obj["metadata"]["uid"])
            elif change.resource == resources.PODS.key:
                owner = controller_uid(change.obj)
                if owner:
                    touched.add(owner)
                    if change.type == "DELETED":
                        removed[owner][change.obj["metadata"]["uid"]] = change.obj
        return removed, touched

    def _sync_job(self, job: dict, removed: dict[str, dict]) -> None:
        tracking = self._tracking.setdefault(job["metadata"]["uid"], _Tracking())
        if job["metadata"].get("deletionTimestamp"):
            return
        if condition_true(job, "Complete") or condition_true(job, "Failed"):
            return self._expire(job, tracking)
        original = json_copy(job)
        pods = self._pods(job)
        self._count_finished(job, pods, self._gone(job, pods, removed, tracking), tracking)
        tracking.seen = {p["metadata"]["uid"]: p for p in pods
                         if p["metadata"]["uid"] not in tracking.counted}
        active = [p for p in pods if _is_active(job, p)]
        if job["spec"].get("suspend"):
            self._suspend(job, active)
        else:
            self._resume(job)
            self._progress(job, pods, active, tracking)
        self._write_status(job, self._pods(job), original, tracking)

    def _pods(self, job: dict) -> list[dict]:
        return [p for p in self.api.store.owned(resources.PODS.key, job["metadata"]["uid"])
                if p["metadata"].get("namespace") == job["metadata"]["namespace"]]

    # --- accounting ----------------------------------------------------------------------

    def _gone(self, job: dict, pods: list[dict], removed: dict[str, dict],
              tracking: _Tracking) -> list[dict]:
        """Pods of the Job removed before they were counted, as they last were. A real pod
        keeps the job-tracking finalizer until the controller has counted it; here a pod this
        controller did not delete itself counts once gone (as Failed unless it had finished)."""
        present = self.api.store.uids(resources.PODS.key)  # uids are unique cluster-wide
        last = {**tracking.seen, **removed}
        return [pod for uid, pod in last.items() if uid not in present
                and uid not in tracking.counted and uid not in tracking.deleted]

    def _count_finished(self, job: dict, pods: list[dict], gone: list[dict],
                        tracking: _Tracking) -> None:
        status = job["status"]
        finished = [(p, _outcome(job, p)) for p in pods]
        finished += [(p, _phase(p) if _phase(p) in ("Succeeded", "Failed") else "Failed")
                     for p in gone]
        for pod, outcome in finished:
            uid = pod["metadata"]["uid"]
            if outcome is None or uid in tracking.counted:
                continue
            tracking.counted.add(uid)
            index = _index(pod)
            if _out_of_range(job, index):
                continue  # a pod of an index the Job no longer has counts for nothing
            if outcome == "Succeeded":
                status["succeeded"] = status.get("succeeded", 0) + 1
                if index is not None:
                    done = _parse_indexes(status.get("completedIndexes")) | {index}
                    status["completedIndexes"] = _format_indexes(done)
            else:
                self._count_failure(job, pod, index, tracking)

    def _count_failure(self, job: dict, pod: dict, index: int | None,
                       tracking: _Tracking) -> None:
        """A failed pod, as podFailurePolicy (if any) says: counted towards backoffLimit and
        backoffLimitPerIndex (no rule matched, Count, FailIndex, FailJob) or not (Ignore)."""
        spec, status = job["spec"], job["status"]
        message, counts, action = match_pod_failure_policy(spec.get("podFailurePolicy"), pod)
        per_index = spec.get("backoffLimitPerIndex") is not None
        if counts:
            status["failed"] = status.get("failed", 0) + 1
            tracking.failures[index] += 1
        else:
            tracking.ignored[index] += 1
        if action == "FailJob" and tracking.fail_job is None:
            tracking.fail_job = message
        if action == "FailIndex" and per_index and index is not None:
            tracking.failed_by_policy.add(index)
        # The next pod for it waits: 10 s, doubling per failure, at most 6 min (scaled); ignored
        # failures back off too, as for real.
        if per_index:
            failures = tracking.failures[index] + tracking.ignored[index]
        else:
            failures = status.get("failed", 0) + sum(tracking.ignored.values())
        key = index if per_index else None
        base = self.api.settings.job_backoff_seconds
        tracking.backoff_until[key] = time.monotonic() + min(
            base * 2 ** (failures - 1), base * 36)

    def _failure_reason(self, job: dict, pods: list[dict], tracking: _Tracking):
        """(reason, message) when the Job must fail now, else None."""
        spec, status = job["spec"], job["status"]
        if tracking.fail_job is not None:
            return "PodFailurePolicy", tracking.fail_job
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and time.monotonic() - tracking.started_at >= deadline:
            return "DeadlineExceeded", "Job was active longer than specified deadline"
        if spec.get("backoffLimitPerIndex") is not None:
            failed = self._failed_indexes(job, tracking)
            limit = spec.get("maxFailedIndexes")
            if limit is not None and len(failed) > limit:
                return "MaxFailedIndexesExceeded", ("Job has exceeded the specified maximal "
                                                    "number of failed indexes")
            return None
        restarts = sum(s.get("restartCount", 0) for p in pods
                       for s in (p.get("status") or {}).get("containerStatuses") or []) \
            if spec["template"]["spec"].get("restartPolicy") == "OnFailure" else 0
        if status.get("failed", 0) + restarts > spec.get("backoffLimit", 6):
            return "BackoffLimitExceeded", "Job has reached the specified backoff limit"
        return None

    def _failed_indexes(self, job: dict, tracking: _Tracking) -> set[int]:
        limit = job["spec"]["backoffLimitPerIndex"]
        failed = {i for i, n in tracking.failures.items() if i is not None and n > limit} | \
            tracking.failed_by_policy
        return {i for i in failed if not _out_of_range(job, i)}

    # --- progress ------------------------------------------------------------------------

    def _progress(self, job: dict, pods: list[dict], active: list[dict],
                  tracking: _Tracking) -> None:
        status, spec = job["status"], job["spec"]
        if "startTime" not in status:
            status["startTime"] = now_iso()
            tracking.started_at = time.monotonic()
        elif tracking.started_at is None:
            tracking.started_at = time.monotonic() - seconds_since(status["startTime"])
        conditions = status.setdefault("conditions", [])
        if condition_true(job, "FailureTarget") or condition_true(job, "SuccessCriteriaMet"):
            return self._finish_when_idle(job, pods, tracking)
        failure = self._failure_reason(job, pods, tracking)
        if failure is None and spec["completionMode"] == "Indexed":
            failure = self._indexed_outcome(job, tracking)
        if failure:
            set_condition(conditions, "FailureTarget", "True", reason=failure[0],
                          message=failure[1])
            self._delete_pods(job, active)
            return self._finish_when_idle(job, self._pods(job), tracking)
        if spec["completionMode"] == "Indexed":  # it shrank: what is past it goes
            status["completedIndexes"] = _format_indexes(
                {i for i in _parse_indexes(status.get("completedIndexes"))
                 if not _out_of_range(job, i)})
            if not status["completedIndexes"]:
                status.pop("completedIndexes")
            beyond = [p for p in active if _out_of_range(job, _index(p))]
            if beyond:
                self._delete_pods(job, beyond)
                active = [p for p in active if p not in beyond]
        if self._succeeded(job, active):
            set_condition(conditions, "SuccessCriteriaMet", "True", reason="CompletionsReached",
                          message="Reached expected number of succeeded pods")
            self._delete_pods(job, active)
            return self._finish_when_idle(job, self._pods(job), tracking)
        self._create_pods(job, active, tracking)

    def _indexed_outcome(self, job: dict, tracking: _Tracking):
        """Every index finished but some failed (backoffLimitPerIndex): the Job fails."""
        if job["spec"].get("backoffLimitPerIndex") is None:
            return None
        failed = self._failed_indexes(job, tracking)
        done = _parse_indexes(job["status"].get("completedIndexes"))
        if failed and len(failed | done) >= job["spec"]["completions"]:
            return "FailedIndexes", "Job has failed indexes"
        return None

    def _succeeded(self, job: dict, active: list[dict]) -> bool:
        spec, status = job["spec"], job["status"]
        if spec["completionMode"] == "Indexed":
            return len(_parse_indexes(status.get("completedIndexes"))) >= spec["completions"]
        if spec.get("completions") is None:
            return status.get("succeeded", 0) > 0 and not active
        return status.get("succeeded", 0) >= spec["completions"]

    def _finish_when_idle(self, job: dict, pods: list[dict], tracking: _Tracking) -> None:
        """The terminal condition follows the interim one once no pod is left running."""
        if any(_phase(p) not in ("Succeeded", "Failed") for p in pods):
            return
        conditions = job["status"]["conditions"]
        interim = next(c for c in conditions if c["type"] in ("FailureTarget",
                                                               "SuccessCriteriaMet"))
        tracking.finished_at = time.monotonic()
        if interim["type"] == "FailureTarget":
            set_condition(conditions, "Failed", "True", reason=interim["reason"],
                          message=interim["message"])
            self._event(job, "Warning", interim["reason"], interim["message"])
        else:
            set_condition(conditions, "Complete", "True", reason=interim["reason"],
                          message=interim["message"])
            job["status"]["completionTime"] = now_iso()
            self._event(job, "Normal", "Completed", "Job completed")

    def _create_pods(self, job: dict, active: list[dict], tracking: _Tracking) -> None:
        if time.monotonic() < tracking.retry_at:
            return
        for index in self._missing(job, active, tracking):
            pod = self._pod_for(job, index, tracking)
            try:
                created = self.api.create(resources.PODS, job["metadata"]["namespace"], pod,
                                          trusted=True)
            except ApiError as exc:
                self._event(job, "Warning", "FailedCreate", f"Error creating: {exc.message}")
                tracking.retry_at = time.monotonic() + self.api.settings.create_retry_seconds
                return
            self._event(job, "Normal", "SuccessfulCreate",
                        f"Created pod: {created['metadata']['name']}")

    def _missing(self, job: dict, active: list[dict], tracking: _Tracking) -> list:
        """Indexes (or None placeholders) of the pods to create now."""
        spec, status = job["spec"], job["status"]
        room = max(spec.get("parallelism", 1) - len(active), 0)
        now = time.monotonic()
        # podReplacementPolicy Failed: a pod still terminating is not replaced yet.
        waiting = [p for p in self._pods(job) if _terminating(p) and _outcome(job, p) is None]
        if spec["completionMode"] == "Indexed":
            busy = {_index(p) for p in active + waiting}
            done = _parse_indexes(status.get("completedIndexes"))
            if spec.get("backoffLimitPerIndex") is not None:
                done |= self._failed_indexes(job, tracking)
                busy |= {i for i, until in tracking.backoff_until.items() if now < until}
            elif now < tracking.backoff_until.get(None, 0):
                return []
            todo = [i for i in range(spec["completions"]) if i not in busy and i not in done]
            return todo[:room]
        if now < tracking.backoff_until.get(None, 0):
            return []
        room = max(room - len(waiting), 0)
        if spec.get("completions") is None:
            wanted = 0 if status.get("succeeded", 0) else spec.get("parallelism", 1)
        else:
            wanted = spec["completions"] - status.get("succeeded", 0)
        return [None] * min(max(min(wanted, spec.get("parallelism", 1)) - len(active), 0), room)

    def _pod_for(self, job: dict, index: int | None, tracking: _Tracking) -> dict:
        name = job["metadata"]["name"]
        template = copy.deepcopy(job["spec"]["template"])
        meta, spec = template.setdefault("metadata", {}), template["spec"]
        meta["generateName"] = f"{name}-{index}-" if index is not None else f"{name}-"
        meta["ownerReferences"] = [owner_reference(resources.JOBS, job)]
        if index is not None:
            meta.setdefault("labels", {})[INDEX_KEY] = str(index)
            annotations = meta.setdefault("annotations", {})
            annotations[INDEX_KEY] = str(index)
            if job["spec"].get("backoffLimitPerIndex") is not None:
                annotations[FAILURE_COUNT_KEY] = str(tracking.failures[index])
                if tracking.ignored[index]:
                    annotations[IGNORED_FAILURE_COUNT_KEY] = str(tracking.ignored[index])
            spec.setdefault("hostname", f"{name}-{index}")
            env = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                "apiVersion": "v1", "fieldPath": f"metadata.annotations['{INDEX_KEY}']"}}}
            for container in (spec.get("initContainers") or []) + spec["containers"]:
                container.setdefault("env", []).append(copy.deepcopy(env))
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    def _delete_pods(self, job: dict, pods: list[dict]) -> None:
        deleted = self._tracking[job["metadata"]["uid"]].deleted
        for pod in pods:
            meta = pod["metadata"]
            deleted.add(meta["uid"])
            try:
                self.api.delete(resources.PODS, meta["namespace"], meta["name"],
                                DeleteOptions(propagation="Background"))
            except ApiError as exc:
                if exc.code != 404:
                    raise
                continue
            self._event(job, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}")

    # --- suspend, status, TTL -------------------------------------------------------------

    def _suspend(self, job: dict, active: list[dict]) -> None:
        conditions = job["status"].setdefault("conditions", [])
        if not condition_true(job, "Suspended"):
            set_condition(conditions, "Suspended", "True", reason="JobSuspended",
                          message="Job suspended")
            self._event(job, "Normal", "Suspended", "Job suspended")
        job["status"].pop("startTime", None)
        self._tracking[job["metadata"]["uid"]].started_at = None
        self._delete_pods(job, active)

    def _resume(self, job: dict) -> None:
        if condition_true(job, "Suspended"):
            set_condition(job["status"]["conditions"], "Suspended", "False", reason="JobResumed",
                          message="Job resumed")
            self._event(job, "Normal", "Resumed", "Job resumed")

    def _write_status(self, job: dict, pods: list[dict], original: dict,
                      tracking: _Tracking) -> None:
        status = job["status"]
        status["active"] = sum(1 for p in pods if _is_active(job, p))
        status["ready"] = sum(1 for p in pods if _is_active(job, p) and condition_true(p, "Ready"))
        status["terminating"] = sum(1 for p in pods if p["metadata"].get("deletionTimestamp")
                                    and _phase(p) not in ("Succeeded", "Failed"))
        status.setdefault("uncountedTerminatedPods", {})
        if not status.get("conditions"):
            status.pop("conditions", None)  # absent, not empty, until there is one
        if job["spec"].get("backoffLimitPerIndex") is not None:
            status["failedIndexes"] = _format_indexes(self._failed_indexes(job, tracking))
        if status != (original.get("status") or {}):
            self.api.update(resources.JOBS, job, subresource="status")

    def _expire(self, job: dict, tracking: _Tracking) -> None:
        """ttlSecondsAfterFinished: delete a finished Job (and, in the foreground, its pods)."""
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        if tracking.finished_at is None:
            tracking.finished_at = time.monotonic()
        if time.monotonic() - tracking.finished_at >= ttl:
            meta = job["metadata"]
            self.api.delete(resources.JOBS, meta["namespace"], meta["name"],
                            DeleteOptions(propagation="Foreground"))

    def _event(self, job: dict, type_: str, reason: str, message: str) -> None:
        self.api.recorder.record(resources.JOBS, job, type_, reason, message,
                                 component=_COMPONENT)


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase", "Pending")


def _is_active(job: dict, pod: dict) -> bool:
    return _outcome(job, pod) is None and not _terminating(pod)


def _terminating(pod: dict) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp")) and \
        _phase(pod) not in ("Succeeded", "Failed")


def _outcome(job: dict, pod: dict) -> str | None:
    """Succeeded, Failed or None (not finished). With the default podReplacementPolicy,
    TerminatingOrFailed, a terminating pod counts as failed, so its replacement starts at
    once; with Failed, or with a podFailurePolicy, only once it has failed (and the
    replacement waits until then)."""
    phase = _phase(pod)
    if phase in ("Succeeded", "Failed"):
        return phase
    if _terminating(pod) and not _only_replaces_failed(job):
        return "Failed"
    return None


def _only_replaces_failed(job: dict) -> bool:
    spec = job["spec"]
    return spec.get("podReplacementPolicy") == "Failed" or \
        spec.get("podFailurePolicy") is not None


def match_pod_failure_policy(policy: dict | None, pod: dict):
    """(FailJob message or None, whether the failure counts, the matched action or None):
    the rules in order, the first that matches wins; a rule with an unknown action is
    skipped, and when none matches the failure counts."""
    if policy is None:
        return None, True, None
    meta = pod["metadata"]
    status = pod.get("status") or {}
    for number, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if rule.get("onExitCodes") is not None:
            container = _exit_code_match(status, rule["onExitCodes"])
            if container is None:
                continue
            code = container["state"]["terminated"]["exitCode"]
            message = (f"Container {container['name']} for pod {meta['namespace']}/"
                       f"{meta['name']} failed with exit code {code} matching {action} rule at "
                       f"index {number}")
        elif rule.get("onPodConditions") is not None:
            found = _condition_match(status, rule["onPodConditions"])
            if found is None:
                continue
            message = (f"Pod {meta['namespace']}/{meta['name']} has condition {found['type']} "
                       f"matching {action} rule at index {number}")
        else:
            continue
        if action == "Ignore":
            return None, False, action
        if action in ("Count", "FailIndex"):
            return None, True, action
        if action == "FailJob":
            return message, True, action
    return None, True, None


def _exit_code_match(status: dict, requirement: dict) -> dict | None:
    """The first terminated container (then init container) with a non-zero exit code the
    requirement matches: exit code 0 never matches, not even NotIn."""
    name, values = requirement.get("containerName"), requirement.get("values") or []
    for entry in (status.get("containerStatuses") or []) + \
            (status.get("initContainerStatuses") or []):
        terminated = (entry.get("state") or {}).get("terminated")
        if terminated is None or name not in (None, entry.get("name")):
            continue
        code = terminated.get("exitCode", 0)
        if code == 0:
            continue
        if (requirement.get("operator") == "In" and code in values) or \
                (requirement.get("operator") == "NotIn" and code not in values):
            return entry
    return None


def _condition_match(status: dict, patterns: list[dict]) -> dict | None:
    """The first pod condition some pattern names (its status defaults to True)."""
    for found in status.get("conditions") or []:
        for pattern in patterns:
            if found.get("type") == pattern.get("type") and \
                    found.get("status") == pattern.get("status", "True"):
                return found
    return None


def _out_of_range(job: dict, index: int | None) -> bool:
    """An index past an Indexed Job's completions (it was scaled down)."""
    spec = job["spec"]
    return spec.get("completionMode") == "Indexed" and index is not None and \
        index >= (spec.get("completions") or 0)


def _index(pod: dict) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(INDEX_KEY)
    return int(value) if value is not None else None


def _parse_indexes(text: str | None) -> set[int]:
    """"0,2-4" -> {0, 2, 3, 4}"""
    found: set[int] = set()
    for part in (text or "").split(","):
        if "-" in part:
            low, high = part.split("-")
            found.update(range(int(low), int(high) + 1))
        elif part:
            found.add(int(part))
    return found


def _format_indexes(indexes: set[int]) -> str:
    """{0, 2, 3, 4} -> "0,2-4", as the controller compresses completedIndexes."""
    parts, ordered = [], sorted(indexes)
    start = previous = None
    for i in [*ordered, None]:
        if i is not None and previous is not None and i == previous + 1:
            previous = i
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = i
    return ",".join(parts)

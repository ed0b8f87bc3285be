"""What a job's Kubernetes objects say of its replicas (``jobs.backends.kubernetes.observe``):
pure functions of the API server's answers, shown here with literal pods, Events, Jobs,
PodGroups and Workloads, with no cluster and no database. The backend's tests (test_backend)
show the same through the fake API server, end to end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from jobs.backends.base import Observation, Status
from jobs.backends.kubernetes import observe
from jobs.backends.kubernetes.names import FIRST_ATTEMPT_LABEL, KUEUE_GATE, ROLE_LABEL
from paddlecloud_core.snapshots import image_id_digest, image_pinned
from paddlecloud_core.spec import rerun_submission

POD_UID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
NEW_UID = "1a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
STARTED = {"startedAt": "2026-01-01T00:01:00Z"}


def pod(role="trainer", index=0, phase="Pending", *, attempt=0, failures=0, name=None,
        created="2026-01-01T00:00:00Z", uid=POD_UID, node="", main=None, init=(),
        conditions=(), deleting=False, reason=None, message=None, gates=()) -> dict:
    """A pod as the API server shows it, with what this test says of it."""
    labels = {ROLE_LABEL: role, FIRST_ATTEMPT_LABEL: str(attempt)}
    notes = {}
    if role == "trainer":
        notes[observe.COMPLETION_INDEX] = str(index)
        notes[observe.FAILURE_COUNT] = str(failures)
    else:
        labels[observe.POD_INDEX] = str(index)
    meta = {"name": name or f"{role}-{index}-{attempt + failures}", "uid": uid,
            "labels": labels, "annotations": notes, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:05:00Z"
    status = {"phase": phase, "conditions": list(conditions),
              "containerStatuses": [{"name": role, **(main or {})}],
              "initContainerStatuses": [{"name": n, **s} for n, s in init]}
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    spec = {"nodeName": node} if node else {}
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    return {"metadata": meta, "spec": spec, "status": status}


def replica(role="trainer", index=0, attempt=0, state="running", ref=""):
    return SimpleNamespace(role=role, index=index, attempt=attempt, state=state,
                           backend_ref=ref)


def ended(code, reason="", message=""):
    return {"state": {"terminated": {"exitCode": code, "reason": reason, "message": message}}}


# --- one pod ------------------------------------------------------------------------------------

def test_a_succeeded_pod_exited_0_on_its_node_known_by_its_name():
    seen = observe.pod_observation(pod(phase="Succeeded", node="n1", name="t-0"), "trainer")
    assert seen == Observation(Status.EXITED, exit_code=0, host="n1", ref="t-0")


def test_a_pserver_is_known_by_its_pods_uid():
    seen = observe.pod_observation(pod("pserver", phase="Running", node="n2"), "pserver")
    assert seen == Observation(Status.RUNNING, host="n2", ref=POD_UID)


def test_a_failed_pod_says_its_exit_and_oom_in_words():
    seen = observe.pod_observation(pod(phase="Failed", main=ended(137, "OOMKilled")),
                                   "trainer")
    assert (seen.status, seen.exit_code, seen.disrupted) == (Status.EXITED, 137, False)
    assert seen.reason == ("killed for using more memory than it asked for (OOMKilled, "
                           "exit 137)")
    seen = observe.pod_observation(pod(phase="Failed", main=ended(2)), "trainer")
    assert (seen.exit_code, seen.reason) == (2, "exited with code 2")


def test_a_failed_pod_without_an_exit_status_is_lost():
    seen = observe.pod_observation(pod(phase="Failed", reason="NodeLost", message="gone"),
                                   "trainer")
    assert seen == Observation(Status.LOST, ref="trainer-0-0",
                               reason="its pod failed: NodeLost gone")


def test_a_failed_setup_says_pips_error_and_where_the_rest_is():
    said = "Collecting nothere\nERROR: No matching distribution found for nothere\n"
    seen = observe.pod_observation(pod(phase="Failed", init=[("setup", ended(1, "Error",
                                                                             said))]),
                                   "trainer")
    assert (seen.status, seen.exit_code) == (Status.EXITED, 1)
    assert seen.reason == ("preparing the workspace failed (exit 1): ERROR: No matching "
                           "distribution found for nothere; see output/requirements.log")
    seen = observe.pod_observation(pod(phase="Failed", init=[("peers", ended(3, "", ""))]),
                                   "trainer")
    assert seen.reason == "its peers could not be reached (exit 3): see the replica's log"


def test_a_pod_the_cluster_takes_away_is_a_disruption_even_before_it_fails():
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                 "message": "preempted by a higher priority pod"}
    seen = observe.pod_observation(pod(phase="Running", conditions=[condition],
                                       deleting=True, main=ended(143)), "trainer")
    assert (seen.status, seen.exit_code, seen.disrupted) == (Status.LOST, 143, True)
    assert seen.reason == ("the cluster took its pod away (PreemptionByScheduler: preempted "
                           "by a higher priority pod)")
    # Not yet being deleted: it still runs.
    assert observe.pod_observation(pod(phase="Running", conditions=[condition]),
                                   "trainer").status == Status.RUNNING


def test_a_pserver_restarted_in_place_has_exited():
    seen = observe.pod_observation(pod("pserver", phase="Running", main={
        "state": {"running": {"startedAt": "2026-01-01T00:02:00Z"}},
        "lastState": ended(1, "Error")["state"]}), "pserver")
    assert (seen.status, seen.exit_code) == (Status.EXITED, 1)


@pytest.mark.parametrize(("status", "said"), [
    ({"conditions": [{"type": "PodScheduled", "status": "False",
                      "message": "0/3 nodes are available: 3 Insufficient cpu."}]},
     "cannot be scheduled: 0/3 nodes are available: 3 Insufficient cpu."),
    ({"containerStatuses": [{"name": "trainer", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": "Back-off pulling image \"x\""}}}]},
     "cannot pull its image: Back-off pulling image \"x\""),
    ({"initContainerStatuses": [{"name": "peers", "state": {"running": STARTED}}]},
     "waiting for its peers to have addresses and accept connections (its log says which)"),
    ({"initContainerStatuses": [{"name": "setup", "state": {"running": STARTED}}]},
     "preparing its workspace (copying the package, installing requirements)"),
    ({}, "its pod is being created"),
])
def test_why_a_pending_pod_waits(status, said):
    seen = observe.pod_observation({"metadata": {"name": "p"}, "status": status}, "trainer")
    assert (seen.status, seen.reason) == (Status.WAITING, said)


# --- a replica's pods ---------------------------------------------------------------------------

def test_a_trainers_pods_are_told_apart_by_attempt():
    first, second = pod(attempt=2), pod(attempt=2, failures=1, created="2026-01-01T00:01:00Z")
    other = pod(index=1, attempt=2)
    assert [observe.pod_attempt(p) for p in (first, second)] == [2, 3]
    mine = observe.replica_pods([second, other, first], replica(attempt=3))
    assert mine == [first, second]
    assert observe.current_pod(replica(attempt=3), mine) is second
    assert observe.current_pod(replica(attempt=2), mine) is first


def test_a_trainer_whose_pod_went_before_it_ended_was_disrupted():
    mine = [pod(attempt=1)]  # the Job's next attempt: the pod of attempt 0 was deleted
    seen = observe.pod_seen(replica(attempt=0), mine)
    assert (seen.status, seen.disrupted) == (Status.LOST, True)
    assert observe.pod_seen(replica(attempt=2), mine) is None  # not made yet


def test_a_running_pserver_whose_pod_was_replaced_is_lost():
    new = pod("pserver", phase="Running", uid=NEW_UID, node="n3")
    seen = observe.pod_seen(replica("pserver", ref=POD_UID), [new])
    assert (seen.status, seen.disrupted, seen.host) == (Status.LOST, True, "n3")
    # Its handle before it ran was its pod's name: the same pod, running.
    assert observe.pod_seen(replica("pserver", ref="pserver-0"), [new]).status == (
        Status.RUNNING)


# --- what the owners and the queues say ---------------------------------------------------------

def event(reason, message="", first="2026-01-01T00:00:00Z", last="2026-01-01T00:00:00Z"):
    return {"reason": reason, "message": message, "firstTimestamp": first,
            "lastTimestamp": last}


def test_a_quota_refusal_is_a_wait_and_another_refusal_fails_once_it_persists():
    quota = event("FailedCreate", "pods \"t-0\" is forbidden: exceeded quota: q")
    seen = observe.refusal([quota], 60)
    assert seen.status == Status.WAITING
    assert seen.reason.startswith("waiting for the namespace's quota")
    webhook = [event("FailedCreate", "denied", last="2026-01-01T00:00:30Z"),
               event("FailedCreate", "denied", first="2026-01-01T00:00:30Z",
                     last="2026-01-01T00:01:00Z")]
    assert observe.refusal(webhook, 61).reason == (
        "the cluster refuses to create its pod (retrying): denied")
    assert observe.refusal(webhook, 60) == Observation(
        Status.REFUSED, reason="the cluster refused to create its pod: denied")


def test_a_refusal_before_the_last_pod_made_is_over():
    events = [event("FailedCreate", "denied", last="2026-01-01T00:00:10Z"),
              event("SuccessfulCreate", last="2026-01-01T00:00:20Z")]
    assert observe.refusal(events, 0) is None
    assert observe.refusal([], 0) is None


def test_trainers_failed_by_a_disruption_are_told_from_a_trainers_fault():
    def job(reason, message):
        return {"status": {"conditions": [{"type": "Failed", "status": "True",
                                           "reason": reason, "message": message}]}}

    assert observe.trainers_disrupted(job("PodFailurePolicy",
                                          "Container trainer ... DisruptionTarget ..."))
    assert not observe.trainers_disrupted(job("PodFailurePolicy", "exit code 1"))
    assert not observe.trainers_disrupted(job("BackoffLimitExceeded", ""))
    assert not observe.trainers_disrupted(None)  # gone


def test_volcanos_pending_group_holds_the_job_and_an_inqueue_one_waits_for_room():
    seen = Observation(Status.WAITING, host="", reason="cannot be scheduled")

    def group(phase):
        return {"status": {"phase": phase, "conditions": [
            {"type": "Unschedulable", "status": "True", "message": "3/3 tasks in gang"}]}}

    held = observe.gang_held(group("Pending"), seen)
    assert (held.held, held.reason) == (True, "waiting for Volcano to schedule all the job's "
                                              "pods at once (Pending): 3/3 tasks in gang")
    assert not observe.gang_held(group("Inqueue"), seen).held
    assert observe.gang_held(None, seen) is seen


def test_volcano_scheduled_a_gang_when_its_scheduled_condition_is_newer_than_any_hold():
    def group(**moments):
        return {"status": {"conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": f"2026-01-01T00:0{m}:00Z"}
            for kind, m in moments.items()]}}

    assert observe.gang_scheduled_at(group(Unschedulable=1, Scheduled=2)) == datetime(
        2026, 1, 1, 0, 2, tzinfo=UTC)
    assert observe.gang_scheduled_at(group(Scheduled=2, Unschedulable=3)) is None  # held again
    assert observe.gang_scheduled_at(group(Unschedulable=1)) is None
    assert observe.gang_scheduled_at(None) is None


def test_kueue_says_why_it_holds_and_where_the_job_stands():
    workload = {"metadata": {"name": "w"}, "status": {"conditions": [
        {"type": "QuotaReserved", "status": "False", "message": "insufficient quota"}]}}
    assert observe.kueue_held(workload, 0) == Observation(Status.WAITING, held=True, reason=(
        "waiting for Kueue to admit it, position 1 in its ClusterQueue: insufficient quota"))
    assert observe.kueue_held({"metadata": {"name": "w"}}, None).reason == (
        "waiting for Kueue to admit it")
    assert observe.kueue_unseen("is Kueue installed?").held
    assert observe.kueue_gated(pod(gates=[KUEUE_GATE]), KUEUE_GATE)
    assert not observe.kueue_gated(pod(), KUEUE_GATE)


def test_kueues_admission_is_when_its_workload_was_admitted():
    admitted = {"status": {"conditions": [
        {"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"},
        {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-01-01T00:02:00Z"}]}}
    assert observe.kueue_admitted_at(admitted) == datetime(2026, 1, 1, 0, 2, tzinfo=UTC)
    pending = {"status": {"conditions": [{"type": "Admitted", "status": "False",
                                          "lastTransitionTime": "2026-01-01T00:02:00Z"}]}}
    assert observe.kueue_admitted_at(pending) is None
    assert observe.kueue_admitted_at(None) is None


def at(second: int) -> str:
    return f"2026-01-01T00:00:{second:02d}Z"


def kubelet(reason: str, second: int, container="setup") -> dict:
    return {**event(reason, f'{reason} image "paddle:3"', at(second), at(second)),
            "involvedObject": {"fieldPath": f"spec.initContainers{{{container}}}"}}


NOW = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
SCALE_UP = event("TriggeredScaleUp", "pod triggered scale-up: [{pool 1->2 (max: 5)}]", at(5),
                 at(5))


@pytest.mark.parametrize(("node", "events", "said"), [
    ("n", [kubelet("Pulling", 1)], 'its image is being pulled (Pulling image "paddle:3")'),
    ("n", [kubelet("Pulling", 1), kubelet("Pulled", 9)], ""),
    ("n", [kubelet("Pulling", 1), kubelet("Pulled", 1)], ""),  # begun and over in a second
    ("n", [kubelet("Pulling", 1), kubelet("Failed", 2)], ""),  # a failed pull is stuck
    ("n", [kubelet("Failed", 2), kubelet("BackOff", 3), kubelet("Pulling", 9)],
     'its image is being pulled (Pulling image "paddle:3")'),  # tried again after back-off
    ("n", [kubelet("Pulled", 3, "setup"), kubelet("Pulling", 4, "peers")],
     'its image is being pulled (Pulling image "paddle:3")'),  # each container's own pull
    ("", [event("FailedScheduling", "0/3 nodes are available", at(1), at(9))], ""),
    ("", [event("FailedScheduling", "0/3 nodes are available", at(1), at(9)), SCALE_UP],
     "the cluster's autoscaler is adding a node for it (pod triggered scale-up: "
     "[{pool 1->2 (max: 5)}])"),
    ("", [SCALE_UP, event("NotTriggerScaleUp", "pod didn't trigger scale-up: max size",
                          at(7), at(7))], ""),  # no node comes after all
    ("n", [SCALE_UP], ""),  # its node came: scheduled
])
def test_a_pending_pods_events_tell_a_start_under_way_from_a_stuck_one(node, events, said):
    assert observe.start_underway(pod(node=node), events, NOW) == said


def test_a_scale_up_is_under_way_as_long_as_the_autoscaler_waits_for_its_node():
    assert observe.start_underway(pod(), [SCALE_UP], NOW + timedelta(minutes=14))
    assert not observe.start_underway(pod(), [SCALE_UP], NOW + timedelta(minutes=15))


def test_an_owner_deleted_outside_the_portal_loses_the_replica():
    alone = observe.owner_gone("Job", "t", "ns", root_exists=True)
    assert alone == Observation(Status.LOST, reason="its Job t was deleted outside PaddleCloud")
    assert observe.owner_gone("Job", "t", "ns", root_exists=False).reason == (
        "its Kubernetes objects were deleted outside PaddleCloud (Job t in namespace ns is "
        "gone)")


def test_a_pod_is_stranded_only_when_no_kubelet_confirmed_it_stopped_long_after_its_grace():
    """Force-deleted by the backend (a lost node's trainer pod): taken away by the cluster,
    deleted, and still there 30 s after its grace ended. An evicted pod whose kubelet is
    slow to confirm, or a pod merely deleted (no DisruptionTarget), is not."""
    due = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    disrupted = {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                 "reason": "DeletionByTaintManager"}]}

    def pod(status: dict, deleted: bool = True) -> dict:
        meta = {"name": "t-0"}
        if deleted:
            meta["deletionTimestamp"] = due.isoformat().replace("+00:00", "Z")
        return {"metadata": meta, "status": status}

    assert observe.stranded(pod(disrupted), due + timedelta(seconds=31))
    assert not observe.stranded(pod(disrupted), due + timedelta(seconds=10))  # a kubelet's wait
    assert not observe.stranded(pod({}), due + timedelta(hours=1))  # deleted by someone
    assert not observe.stranded(pod(disrupted, deleted=False), due + timedelta(hours=1))


# --- the image a pod runs (issue 39) ----------------------------------------------------------

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize("image_id", [
    f"docker.io/paddlepaddle/paddle@{DIGEST}",  # containerd
    f"docker-pullable://paddlepaddle/paddle@{DIGEST}",  # dockershim
])
def test_a_pods_image_id_names_the_image_it_runs_by_digest(image_id):
    main = {"imageID": image_id, "state": {"running": STARTED}}
    seen = observe.pod_observation(pod(phase="Running", node="n1", main=main), "trainer")
    assert (seen.status, seen.image_id) == (Status.RUNNING, image_id)
    assert image_id_digest(seen.image_id) == DIGEST
    done = observe.pod_observation(pod(phase="Succeeded", main={"imageID": image_id}),
                                   "trainer")
    assert image_id_digest(done.image_id) == DIGEST


def test_no_image_id_yet_or_a_bare_image_id_pins_nothing():
    waiting = observe.pod_observation(pod(), "trainer")  # pulling: no imageID yet
    assert (waiting.status, waiting.image_id) == (Status.WAITING, "")
    local = {"imageID": "sha256:" + "cd" * 32}  # an image built on the node, in no registry
    seen = observe.pod_observation(pod(phase="Running", main=local), "trainer")
    assert image_id_digest(seen.image_id) == ""


def test_a_rerun_is_pinned_to_the_image_its_origin_ran():
    shown = {"name": "fit", "package": "/pfs/dc/home/a/pkg", "entry": "python t.py",
             "image": "paddlepaddle/paddle:2.6.1", "image_digest": DIGEST,
             "package_snapshot": "/pfs/dc/home/a/jobs/fit/package"}
    body = rerun_submission(shown)
    assert body["image"] == f"paddlepaddle/paddle:2.6.1@{DIGEST}"
    assert body["package"] == "/pfs/dc/home/a/jobs/fit/package"
    other = "sha256:" + "ef" * 32  # a reference pinned already: the digest it ran wins
    assert image_pinned(f"paddlepaddle/paddle:2.6.1@{other}", DIGEST) == body["image"]
    assert rerun_submission({**shown, "image_digest": ""})["image"] == shown["image"]

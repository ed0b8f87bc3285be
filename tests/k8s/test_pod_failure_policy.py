"""The Job controller's podFailurePolicy (batch/v1, GA in 1.31): rules matched in order on exit
codes or pod conditions, the Ignore, Count, FailJob and FailIndex actions, with
backoffLimitPerIndex and podReplacementPolicy Failed as the portal's Indexed Jobs use them, and
what the API server refuses."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from tests.k8s_api_server.job_controller import match_pod_failure_policy

from .helpers import condition, job_body, status_of

INDEX = "batch.kubernetes.io/job-completion-index"
FAILURES = "batch.kubernetes.io/job-index-failure-count"
IGNORED = "batch.kubernetes.io/job-index-ignored-failure-count"
DISRUPTIONS_IGNORED = {"rules": [{"action": "Ignore",
                                  "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def portal_job(name: str, completions: int, policy: dict | None = DISRUPTIONS_IGNORED,
               **spec) -> dict:
    """An Indexed Job as the portal makes them: no retry of an index, no failed index (a
    field given None is left out)."""
    spec = {"backoffLimitPerIndex": 0, "maxFailedIndexes": 0, "podReplacementPolicy": "Failed",
            "podFailurePolicy": policy, **spec}
    return job_body(name, completions=completions,
                    **{k: v for k, v in spec.items() if v is not None})


def pods_of(core, ns: str, job: str, index: int | None = None) -> list:
    pods = core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items
    return sorted((p for p in pods if index is None or p.metadata.annotations[INDEX] ==
                   str(index)), key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))


def all_running(k8s_api, core, ns: str, job: str, count: int) -> list:
    return k8s_api.wait_for(lambda: (pods := pods_of(core, ns, job)) and len(pods) == count
                            and all(p.status.phase == "Running" for p in pods) and pods,
                            message=f"{count} running pods")


def finished(batch, ns: str, name: str, type_: str):
    job = batch.read_namespaced_job(name, ns)
    found = condition(job, type_)
    return job if found and found.status == "True" else None


def replacement_of(k8s_api, core, ns: str, pod, *, timeout: float = 5.0):
    """The next pod of ``pod``'s index; with podReplacementPolicy Failed it exists only once
    ``pod`` has failed or is gone."""
    index = int(pod.metadata.annotations[INDEX])

    def found():
        pods = pods_of(core, ns, pod.metadata.labels["job-name"], index)
        new = [p for p in pods if p.metadata.name != pod.metadata.name]
        if not new:
            return None
        old = [p for p in pods if p.metadata.name == pod.metadata.name]
        assert not old or old[0].status.phase == "Failed", old[0].status.phase
        return new[0]
    return k8s_api.wait_for(found, timeout=timeout, message=f"a new pod for index {index}")


def complete_all(k8s_api, core, batch, ns: str, job: str, count: int):
    for pod in all_running(k8s_api, core, ns, job, count):
        k8s_api.controller.terminate_container(ns, pod.metadata.name, exit_code=0)
    return k8s_api.wait_for(lambda: finished(batch, ns, job, "Complete"), message="Complete")


def evict(core, ns: str, name: str) -> None:
    core.create_namespaced_pod_eviction(name, ns, {"metadata": {"name": name, "namespace": ns}})


# --- disruptions the portal's Jobs ignore ------------------------------------------------------

@pytest.mark.parametrize("termination", [0.0, 0.5], ids=["removed-at-once", "terminating"])
def test_an_evicted_pod_is_replaced_without_counting_a_failure(k8s_api, core, batch, ns,
                                                               termination):
    k8s_api.settings.pod_termination_seconds = termination
    batch.create_namespaced_job(ns, portal_job("train", 2))
    victim = all_running(k8s_api, core, ns, "train", 2)[0]
    evict(core, ns, victim.metadata.name)
    if termination:  # Failed: no replacement while the evicted pod terminates
        k8s_api.wait_for(lambda: batch.read_namespaced_job("train", ns).status.terminating == 1,
                         message="one terminating pod")
        assert len(pods_of(core, ns, "train")) == 2
    replacement = replacement_of(k8s_api, core, ns, victim)
    annotations = replacement.metadata.annotations
    assert (annotations[INDEX], annotations[FAILURES], annotations[IGNORED]) == (
        victim.metadata.annotations[INDEX], "0", "1")
    job = batch.read_namespaced_job("train", ns)
    assert not job.status.failed and job.status.failed_indexes == ""
    assert condition(job, "FailureTarget") is None and condition(job, "Failed") is None
    job = complete_all(k8s_api, core, batch, ns, "train", 2)
    assert (job.status.succeeded, job.status.failed) == (2, None)


def test_without_the_policy_an_eviction_fails_the_index_and_the_job(k8s_api, core, batch, ns):
    batch.create_namespaced_job(ns, portal_job("train", 2, policy=None))
    victim = all_running(k8s_api, core, ns, "train", 2)[0]
    evict(core, ns, victim.metadata.name)
    job = k8s_api.wait_for(lambda: finished(batch, ns, "train", "Failed"), message="Failed")
    failed = condition(job, "Failed")
    assert (failed.reason, failed.message) == (
        "MaxFailedIndexesExceeded", "Job has exceeded the specified maximal number of failed "
                                    "indexes")
    assert (job.status.failed, job.status.failed_indexes) == (
        1, victim.metadata.annotations[INDEX])
    index = int(victim.metadata.annotations[INDEX])
    assert [p.metadata.name for p in pods_of(core, ns, "train", index)] in (
        [], [victim.metadata.name])  # never replaced


def test_a_lost_nodes_pods_are_replaced_once_force_deleted(k8s_api, core, batch, ns):
    batch.create_namespaced_job(ns, portal_job("train", 3))
    pods = all_running(k8s_api, core, ns, "train", 3)
    lost = pods[0].spec.node_name
    stranded = [p for p in pods if p.spec.node_name == lost]
    k8s_api.controller.lose_node(lost)
    k8s_api.wait_for(lambda: all(condition(core.read_namespaced_pod(p.metadata.name, ns),
                                           "DisruptionTarget") for p in stranded),
                     message="DisruptionTarget on the lost node's pods")
    time.sleep(0.3)  # terminating, not failed: nothing replaces them yet
    job = batch.read_namespaced_job("train", ns)
    assert (job.status.terminating, len(pods_of(core, ns, "train"))) == (len(stranded), 3)
    assert condition(job, "FailureTarget") is None
    for pod in stranded:
        core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
    for pod in stranded:
        replacement = replacement_of(k8s_api, core, ns, pod)
        assert replacement.spec.node_name != lost
        assert (replacement.metadata.annotations[FAILURES],
                replacement.metadata.annotations[IGNORED]) == ("0", "1")
    job = complete_all(k8s_api, core, batch, ns, "train", 3)
    assert (job.status.succeeded, job.status.failed, job.status.failed_indexes) == (3, None, "")


def test_an_ordinary_failure_still_counts(k8s_api, core, batch, ns):
    k8s_api.controller.script_pods("train-1-*", namespace=ns, exit_code=1)
    batch.create_namespaced_job(ns, portal_job("train", 2))
    job = k8s_api.wait_for(lambda: finished(batch, ns, "train", "Failed"), message="Failed")
    assert condition(job, "Failed").reason == "MaxFailedIndexesExceeded"
    assert (job.status.failed, job.status.failed_indexes) == (1, "1")
    assert IGNORED not in pods_of(core, ns, "train", 1)[0].metadata.annotations


# --- the actions -------------------------------------------------------------------------------

def test_a_fail_job_rule_fails_the_whole_job_at_once(k8s_api, core, batch, ns):
    k8s_api.controller.script_pods("train-1-*", namespace=ns, exit_code=42)
    policy = {"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "In",
                                              "values": [42]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    batch.create_namespaced_job(ns, job_body("train", completions=2, backoffLimit=6,
                                             podFailurePolicy=policy))
    job = k8s_api.wait_for(lambda: finished(batch, ns, "train", "Failed"), message="Failed")
    failing = pods_of(core, ns, "train", 1)
    assert len(failing) == 1  # not retried, although backoffLimit allows 6
    message = (f"Container trainer for pod {ns}/{failing[0].metadata.name} failed with exit "
               f"code 42 matching FailJob rule at index 0")
    for type_ in ("FailureTarget", "Failed"):
        assert (condition(job, type_).reason, condition(job, type_).message) == (
            "PodFailurePolicy", message)
    assert job.status.failed >= 1 and job.spec.pod_replacement_policy in (None, "Failed")
    assert all(p.status.phase == "Failed" for p in pods_of(core, ns, "train"))  # index 0 killed
    warning = k8s_api.events(ns, involved_name="train", reason="PodFailurePolicy")[0]
    assert (warning["type"], warning["message"]) == ("Warning", message)


def test_count_is_the_default_handling_and_the_first_matching_rule_wins(k8s_api, core, batch,
                                                                         ns):
    k8s_api.controller.script_pods("once-*", namespace=ns, exit_code=3)
    policy = {"rules": [{"action": "Count", "onExitCodes": {"operator": "In", "values": [3]}},
                        {"action": "Ignore", "onExitCodes": {"operator": "NotIn",
                                                             "values": [0]}}]}
    batch.create_namespaced_job(ns, job_body("once", completions=1, indexed=False,
                                             backoffLimit=1, podFailurePolicy=policy))
    job = k8s_api.wait_for(lambda: finished(batch, ns, "once", "Failed"), message="Failed")
    assert condition(job, "Failed").reason == "BackoffLimitExceeded"
    assert job.status.failed == 2 and len(pods_of(core, ns, "once")) == 2


def test_a_fail_index_rule_fails_only_that_index_at_once(k8s_api, core, batch, ns):
    k8s_api.controller.script_pods("train-0-*", namespace=ns, exit_code=0)
    k8s_api.controller.script_pods("train-1-*", namespace=ns, exit_code=5)
    policy = {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In",
                                                                "values": [5]}}]}
    batch.create_namespaced_job(ns, job_body("train", completions=2, backoffLimitPerIndex=3,
                                             podFailurePolicy=policy))
    job = k8s_api.wait_for(lambda: finished(batch, ns, "train", "Failed"), message="Failed")
    assert (condition(job, "Failed").reason, job.status.completed_indexes,
            job.status.failed_indexes, job.status.failed) == ("FailedIndexes", "0", "1", 1)
    assert len(pods_of(core, ns, "train", 1)) == 1  # 3 retries allowed, none made


def test_an_ignored_exit_code_retries_the_index_beyond_its_limit(k8s_api, core, batch, ns):
    k8s_api.settings.job_backoff_seconds = 0.0
    k8s_api.controller.script_pods("train-0-*", namespace=ns, exit_code=7)
    policy = {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}}]}
    batch.create_namespaced_job(ns, portal_job("train", 1, policy=policy))
    pods = k8s_api.wait_for(lambda: len(p := pods_of(core, ns, "train", 0)) >= 3 and p,
                            message="two retries of index 0")
    ignored = sorted(int(p.metadata.annotations.get(IGNORED, 0)) for p in pods)
    assert ignored == list(range(len(pods)))  # absent on the first pod, then 1, 2, …
    assert {p.metadata.annotations[FAILURES] for p in pods} == {"0"}
    k8s_api.controller.script_pods("train-0-*", namespace=ns, exit_code=0)
    job = k8s_api.wait_for(lambda: finished(batch, ns, "train", "Complete"), message="Complete")
    assert (job.status.failed, job.status.failed_indexes) == (None, "")


# --- matching ----------------------------------------------------------------------------------

def _failed_pod(exit_codes: dict[str, int], *, init: dict[str, int] | None = None,
                conditions: list[dict] | None = None) -> dict:
    def statuses(codes):
        return [{"name": n, "state": {"terminated": {"exitCode": c}}} for n, c in codes.items()]
    return {"metadata": {"namespace": "ns", "name": "p"},
            "status": {"phase": "Failed", "containerStatuses": statuses(exit_codes),
                       "initContainerStatuses": statuses(init or {}),
                       "conditions": conditions or []}}


@pytest.mark.parametrize("rule, pod, action", [
    ({"operator": "NotIn", "values": [1]}, _failed_pod({"main": 0}), None),  # 0 never matches
    ({"operator": "NotIn", "values": [1]}, _failed_pod({"main": 2}), "FailJob"),
    ({"operator": "In", "values": [2]}, _failed_pod({"a": 0, "b": 2}), "FailJob"),
    ({"containerName": "a", "operator": "In", "values": [2]}, _failed_pod({"a": 0, "b": 2}),
     None),
    ({"containerName": "setup", "operator": "In", "values": [9]},
     _failed_pod({"main": 137}, init={"setup": 9}), "FailJob"),
])
def test_exit_code_rules(rule, pod, action):
    message, counts, matched = match_pod_failure_policy(
        {"rules": [{"action": "FailJob", "onExitCodes": rule}]}, pod)
    assert (matched, counts) == (action, True)
    assert (message is None) == (action is None)


def test_condition_rules_default_to_status_true_and_unknown_actions_are_skipped():
    disrupted = _failed_pod({"main": 137}, conditions=[
        {"type": "Ready", "status": "False"}, {"type": "DisruptionTarget", "status": "True"}])
    rules = [{"action": "Restart", "onPodConditions": [{"type": "DisruptionTarget"}]},
             {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget",
                                                       "status": "False"}]},
             {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    assert match_pod_failure_policy({"rules": rules}, disrupted) == (
        "Pod ns/p has condition DisruptionTarget matching FailJob rule at index 2", True,
        "FailJob")
    assert match_pod_failure_policy({"rules": rules[:2]}, disrupted) == (None, True, None)
    assert match_pod_failure_policy(None, disrupted) == (None, True, None)


# --- validation --------------------------------------------------------------------------------

def _refusal(batch, ns: str, body: dict) -> dict:
    with pytest.raises(client.ApiException) as refused:
        batch.create_namespaced_job(ns, body)
    assert refused.value.status == 422
    return status_of(refused.value)


def test_a_policy_needs_restart_policy_never(batch, ns):
    body = job_body("train", completions=1, restart_policy="OnFailure",
                    podFailurePolicy=DISRUPTIONS_IGNORED)
    assert _refusal(batch, ns, body)["message"].endswith(
        ' "train" is invalid: spec.template.spec.restartPolicy: Invalid value: '
        '"OnFailure": only "Never" is supported when podFailurePolicy is specified')


def test_a_condition_pattern_without_status_is_accepted(batch, ns):
    batch.create_namespaced_job(ns, portal_job("train", 1))
    stored = batch.read_namespaced_job("train", ns).spec.pod_failure_policy
    assert stored.rules[0].on_pod_conditions[0].type == "DisruptionTarget"


@pytest.mark.parametrize("spec, message", [
    ({"backoffLimitPerIndex": None, "maxFailedIndexes": None,
      "podFailurePolicy": {"rules": [{"action": "FailIndex", "onExitCodes": {
          "operator": "In", "values": [1]}}]}},
     'spec.podFailurePolicy.rules[0].action: Invalid value: "FailIndex": requires the '
     'backoffLimitPerIndex to be set'),
    ({"podFailurePolicy": {"rules": [{"action": "Ignore", "onExitCodes": {
        "operator": "In", "values": [1]}, "onPodConditions": [{"type": "DisruptionTarget"}]}]}},
     "spec.podFailurePolicy.rules[0]: Invalid value: specifying both OnExitCodes and "
     "OnPodConditions is not supported"),
    ({"podFailurePolicy": {"rules": [{"action": "Ignore"}]}},
     "spec.podFailurePolicy.rules[0]: Invalid value: specifying one of OnExitCodes and "
     "OnPodConditions is required"),
    ({"podFailurePolicy": {"rules": [DISRUPTIONS_IGNORED["rules"][0]] * 21}},
     "spec.podFailurePolicy.rules: Too many: 21: must have at most 20 items"),
    ({"podFailurePolicy": {"rules": [{"action": "Ignore", "onExitCodes": {
        "operator": "In", "values": [0]}}]}},
     "spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 "
     "for the In operator"),
    ({"podFailurePolicy": {"rules": [{"action": "Ignore", "onExitCodes": {
        "containerName": "nope", "operator": "NotIn", "values": [2, 1]}}]}},
     '[spec.podFailurePolicy.rules[0].onExitCodes.containerName: Invalid value: "nope": must '
     'be one of the container or initContainer names in the pod template, '
     'spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: []int32{2, 1}: must '
     'be ordered]'),
    ({"podFailurePolicy": {"rules": [{"action": "Retry", "onPodConditions": [
        {"type": "DisruptionTarget", "status": "Maybe"}]}]}},
     '[spec.podFailurePolicy.rules[0].action: Unsupported value: "Retry": supported values: '
     '"Count", "FailIndex", "FailJob", "Ignore", spec.podFailurePolicy.rules[0].'
     'onPodConditions[0].status: Unsupported value: "Maybe": supported values: "False", '
     '"True", "Unknown"]'),
    ({"podReplacementPolicy": "TerminatingOrFailed"},
     'spec.podReplacementPolicy: Unsupported value: "TerminatingOrFailed": supported values: '
     '"Failed"'),
])
def test_policy_validation(batch, ns, spec, message):
    refusal = _refusal(batch, ns, portal_job("train", 1, **spec))
    assert refusal["message"].endswith(f' "train" is invalid: {message}')

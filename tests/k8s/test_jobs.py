"""The Job controller: Indexed Jobs as pods, completion, failure policies, deadlines, TTL,
suspension and pods refused by a ResourceQuota."""

from __future__ import annotations

from .helpers import condition, job_body

INDEX = "batch.kubernetes.io/job-completion-index"


def _pods(core, ns: str, job: str):
    return sorted(core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items,
                  key=lambda p: (int(p.metadata.annotations.get(INDEX, 0)),
                                 p.metadata.creation_timestamp, p.metadata.name))


def _finished(batch, ns: str, name: str, type_: str):
    job = batch.read_namespaced_job(name, ns)
    found = condition(job, type_)
    return job if found and found.status == "True" else None


def test_an_indexed_job_becomes_one_pod_per_index(k8s_api, core, batch, ns):
    job = batch.create_namespaced_job(ns, job_body("train", completions=3))
    pods = k8s_api.wait_for(lambda: len(_pods(core, ns, "train")) == 3
                            and _pods(core, ns, "train"), message="three pods")
    for index, pod in enumerate(pods):
        meta, spec = pod.metadata, pod.spec
        assert meta.name.startswith(f"train-{index}-") and len(meta.name) == len("train-0-") + 5
        assert meta.annotations[INDEX] == str(index) and meta.labels[INDEX] == str(index)
        assert {k: meta.labels[k] for k in ("job-name", "batch.kubernetes.io/job-name",
                                             "controller-uid", "app")} == {
            "job-name": "train", "batch.kubernetes.io/job-name": "train",
            "controller-uid": job.metadata.uid, "app": "train"}
        assert (spec.hostname, spec.subdomain) == (f"train-{index}", "train-svc")
        env = spec.containers[0].env[-1]
        assert env.name == "JOB_COMPLETION_INDEX"
        assert env.value_from.field_ref.field_path == f"metadata.annotations['{INDEX}']"
        owner = meta.owner_references[0]
        assert (owner.kind, owner.name, owner.uid, owner.controller) == (
            "Job", "train", job.metadata.uid, True)
    created = [e["message"] for e in k8s_api.events(ns, involved_name="train",
                                                    reason="SuccessfulCreate")]
    assert sorted(created) == sorted(f"Created pod: {p.metadata.name}" for p in pods)


def test_the_job_completes_when_every_index_exits_zero(k8s_api, core, batch, ns):
    batch.create_namespaced_job(ns, job_body("train", completions=2))
    pods = k8s_api.wait_for(lambda: [p for p in _pods(core, ns, "train")
                                     if p.status.phase == "Running"] if len(
        _pods(core, ns, "train")) == 2 else None, message="running pods")
    running = k8s_api.wait_for(lambda: batch.read_namespaced_job("train", ns).status.ready == 2
                               and batch.read_namespaced_job("train", ns).status,
                               message="two ready pods counted")
    assert running.active == 2 and running.start_time
    for pod in pods:
        k8s_api.controller.terminate_container(ns, pod.metadata.name, exit_code=0)
    job = k8s_api.wait_for(lambda: _finished(batch, ns, "train", "Complete"), message="Complete")
    assert (job.status.succeeded, job.status.active, job.status.completed_indexes) == (2, 0, "0-1")
    assert job.status.completion_time is not None
    assert [c.type for c in job.status.conditions] == ["SuccessCriteriaMet", "Complete"]
    assert all(p.status.phase == "Succeeded" for p in _pods(core, ns, "train"))
    assert k8s_api.events(ns, involved_name="train", reason="Completed")[0]["message"] == \
        "Job completed"


def test_backoff_limit_per_index_fails_the_job_after_retries(k8s_api, core, batch, ns):
    k8s_api.controller.script_pods("train-0-*", namespace=ns, lines=["ok"], exit_code=0)
    k8s_api.controller.script_pods("train-1-*", namespace=ns, lines=["boom"], exit_code=1)
    batch.create_namespaced_job(ns, job_body("train", completions=2, backoffLimitPerIndex=1))
    job = k8s_api.wait_for(lambda: _finished(batch, ns, "train", "Failed"), message="Failed")
    failed = condition(job, "Failed")
    assert (failed.reason, failed.message) == ("FailedIndexes", "Job has failed indexes")
    assert (job.status.completed_indexes, job.status.failed_indexes) == ("0", "1")
    assert (job.status.succeeded, job.status.failed) == (1, 2)
    index_one = [p for p in _pods(core, ns, "train") if p.metadata.annotations[INDEX] == "1"]
    assert sorted(p.metadata.annotations["batch.kubernetes.io/job-index-failure-count"]
                  for p in index_one) == ["0", "1"]


def test_backoff_limit_fails_a_job_with_backoff_limit_exceeded(k8s_api, batch, ns):
    k8s_api.controller.script_pods("once-*", namespace=ns, exit_code=1)
    batch.create_namespaced_job(ns, job_body("once", completions=1, indexed=False,
                                             backoffLimit=1))
    job = k8s_api.wait_for(lambda: _finished(batch, ns, "once", "Failed"), message="Failed")
    assert condition(job, "Failed").reason == "BackoffLimitExceeded"
    assert condition(job, "Failed").message == "Job has reached the specified backoff limit"
    assert job.status.failed == 2
    warning = k8s_api.events(ns, involved_name="once", reason="BackoffLimitExceeded")
    assert warning[0]["type"] == "Warning"


def test_active_deadline_fails_the_job_and_kills_its_pods(k8s_api, core, batch, ns):
    batch.create_namespaced_job(ns, job_body("slow", completions=2, activeDeadlineSeconds=1))
    job = k8s_api.wait_for(lambda: _finished(batch, ns, "slow", "Failed"), timeout=5,
                           message="Failed")
    assert condition(job, "Failed").reason == "DeadlineExceeded"
    assert condition(job, "FailureTarget").status == "True"
    assert not _pods(core, ns, "slow")


def test_finished_jobs_are_deleted_after_their_ttl(k8s_api, core, batch, ns):
    k8s_api.controller.script_pods("short-*", namespace=ns, exit_code=0)
    batch.create_namespaced_job(ns, job_body("short", completions=1, ttlSecondsAfterFinished=0))
    k8s_api.wait_for(lambda: not batch.list_namespaced_job(ns).items, message="job deleted")
    k8s_api.wait_for(lambda: not _pods(core, ns, "short"), message="pods deleted")


def test_a_suspended_job_runs_no_pods_until_resumed(k8s_api, core, batch, ns):
    batch.create_namespaced_job(ns, job_body("later", completions=1, suspend=True))
    k8s_api.controller.sync()
    job = batch.read_namespaced_job("later", ns)
    assert condition(job, "Suspended").status == "True" and not _pods(core, ns, "later")
    batch.patch_namespaced_job("later", ns, {"spec": {"suspend": False}})
    k8s_api.wait_for(lambda: _pods(core, ns, "later"), message="a pod after resuming")
    assert condition(batch.read_namespaced_job("later", ns), "Suspended").reason == "JobResumed"


def test_quota_refusals_become_failed_create_events_and_are_retried(k8s_api, core, batch, ns):
    core.create_namespaced_resource_quota(ns, {"metadata": {"name": "pods"},
                                               "spec": {"hard": {"pods": "1"}}})
    batch.create_namespaced_job(ns, job_body("train", completions=2))
    refused = k8s_api.wait_for(lambda: k8s_api.events(ns, involved_name="train",
                                                      reason="FailedCreate"),
                               message="a FailedCreate event")
    event = refused[0]
    assert event["type"] == "Warning" and event["source"]["component"] == "job-controller"
    assert event["message"].startswith('Error creating: pods "train-')
    assert event["message"].endswith('is forbidden: exceeded quota: pods, requested: pods=1, '
                                     'used: pods=1, limited: pods=1')
    assert len(_pods(core, ns, "train")) == 1
    core.delete_namespaced_resource_quota("pods", ns)
    k8s_api.wait_for(lambda: len(_pods(core, ns, "train")) == 2, message="the retried pod")

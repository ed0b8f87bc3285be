"""Elastic trainers on Kubernetes: the trainers' Job is an elastic Indexed Job, made with MIN
indexes (without maxFailedIndexes, so a lost trainer's failed index does not fail it) and grown
— completions and parallelism together — as trainers are added and lost ones replaced by the
next index. Against the fake API server, which validates every object and patch as the real
one does."""

from __future__ import annotations

import pytest

from accounts.services import quota_set
from jobs import engine
from jobs.backends.kubernetes import manifests
from jobs.backends.kubernetes.names import object_base
from jobs.backends.kubernetes.validation import validate_objects
from jobs.models import JobEvent
from scheduling.tasks import jobs_admit
from tests.factories import package_write, submit_job
from tests.jobs.kubernetes import factories
from tests.jobs.kubernetes.test_backend import NS, running_pod
from tests.jobs.master_scenario import recordio_dataset_write
from tests.jobs.test_elastic import PROGRAM
from tests.polling import wait


def test_the_trainers_job_starts_with_min_and_its_gang_needs_min():
    job = factories.pserver_job(trainers=4, trainers_min=2, trainers_lost_limit=4,
                                trainers_below_min_seconds=300,
                                dataset="/pfs/dc1/home/alice/data/*", dataset_unit="file",
                                datacenter=factories.datacenter(kube_scheduler="volcano",
                                                                kube_queue="team"))
    objects = manifests.job_objects(job, namespace=factories.NAMESPACE)
    trainers = next(o for o in objects if o["kind"] == "Job")
    spec = trainers["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimitPerIndex"]) == (2, 2, 2)
    assert "maxFailedIndexes" not in spec
    group = next(o for o in objects if o["kind"] == "PodGroup")["spec"]
    assert (group["minMember"], group["minResources"]) == (  # MIN trainers and the pservers
        4, {"cpu": "5000m", "memory": str(9 * 2**30), "nvidia.com/gpu": "2"})
    assert validate_objects(objects) == []
    # A fixed job's Job fails at its first failed index, as before.
    fixed = manifests.trainers_job(factories.pserver_job(), factories.NAMESPACE, None)
    assert (fixed["spec"]["completions"], fixed["spec"]["maxFailedIndexes"]) == (3, 0)


@pytest.mark.django_db
def test_the_indexed_job_grows_as_trainers_are_added_and_lost_ones_replaced(
        k8s_api, kube_datacenter, alice, datacenter, pfs_home, held_tasks,
        django_capture_on_commit_callbacks):
    held_tasks.run("jobs.tasks.jobs_admit", jobs_admit)
    package_write(pfs_home, PROGRAM)
    dataset = recordio_dataset_write(pfs_home)
    quota_set(None, datacenter, alice, cpu=4000, jobs=5)  # the pserver and 3 trainers
    job = submit_job(alice, datacenter, "el", trainers="2:4", pservers=1, dataset=dataset,
                     task_records=20)
    engine.job_launch(job.pk)
    name = f"{object_base(job)}-tr"
    made = k8s_api.get("jobs.batch", NS, name)
    assert (made["spec"]["completions"], made["spec"]["parallelism"]) == (3, 3)

    def trainers(expected):
        with django_capture_on_commit_callbacks(execute=True):  # admission, when it asks
            engine.job_sync(job.pk)
        return {r.index: r.state for r in job.replicas.filter(role="trainer")} == expected

    wait(lambda: trainers({0: "running", 1: "running", 2: "running", 3: "pending"}),
         message="three trainers running")
    pod = running_pod(k8s_api, job, "trainer", 1)
    k8s_api.controller.terminate_container(NS, pod["metadata"]["name"], exit_code=3)
    # No restart allowed: trainer-1 is lost, its place given back and taken again: by
    # trainer-3, never started so far, the Job's next index.
    wait(lambda: trainers({0: "running", 1: "failed", 2: "running", 3: "running"}),
         message="trainer-1 lost and replaced")
    grown = k8s_api.get("jobs.batch", NS, name)
    assert (grown["spec"]["completions"], grown["spec"]["parallelism"]) == (4, 4)
    assert grown["status"]["failedIndexes"] == "1"
    assert not any(c["type"] == "Failed" for c in grown["status"].get("conditions") or [])
    job.refresh_from_db()
    assert (job.state, job.trainers_lost, job.trainers_held, job.trainers_shown) == (
        "running", 1, 3, "3 (2\u20134)")
    lost = JobEvent.objects.get(job=job, to_state="lost")
    assert lost.reason.startswith("trainer-1 lost (exited with code 3); the job goes on with "
                                  "2 running trainers of 2\u20134")
    # Another loss: no trainer is left that never started, so its replacement is a new one,
    # trainer-4, past the job's MAX: the Job's fifth index, told apart by the Job's attempt.
    pod = running_pod(k8s_api, job, "trainer", 0)
    k8s_api.controller.terminate_container(NS, pod["metadata"]["name"], exit_code=1)
    wait(lambda: trainers({0: "failed", 1: "failed", 2: "running", 3: "running",
                           4: "running"}), message="trainer-0 lost and replaced by trainer-4")
    grown = k8s_api.get("jobs.batch", NS, name)
    assert (grown["spec"]["completions"], grown["spec"]["parallelism"]) == (5, 5)
    assert grown["status"]["failedIndexes"] == "0-1"
    assert job.replicas.get(index=4).endpoint.startswith(f"{object_base(job)}-tr-4.")

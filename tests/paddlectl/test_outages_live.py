"""paddlectl through the portal's outages: a submission whose answer was lost, or that met the
database down, is sent again with its Idempotency-Key and makes one job; ``logs -f`` goes on
after the portal restarts, from the line after the last one it printed (a log file's, and a
running pod's log served by the cluster)."""

from __future__ import annotations

import contextlib
import threading

import pytest

from jobs import engine
from jobs.backends import backend_for
from jobs.models import Job, Replica
from jobs.states import JobState, ReplicaState
from tests.factories import job_row, submit_job
from tests.jobs.files import log_path
from tests.k8s_api_server import fixtures
from tests.kube import on_kubernetes, portal_kubeconfig
from tests.outages import TcpProxy
from tests.polling import wait

from .conftest import datacenter_entry

pytestmark = pytest.mark.django_db(transaction=True)

k8s_api = fixtures.k8s_api  # the fake API server, a fixture

SUBMIT = ("submit", "-jobname", "fit", "-entry", "python train.py")


def test_a_submission_whose_answer_was_lost_is_one_job(live_cli, package):
    proxy = TcpProxy(live_cli.portal.port, drop_answer=b"Idempotency-Key")
    proxy.start()
    try:
        live_cli.write_config([datacenter_entry(endpoint=proxy.url)])
        submitted = live_cli(*SUBMIT, package)
    finally:
        proxy.stop()
    assert proxy.dropped == 1  # the job was made, its answer never came
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stdout.startswith("job fit submitted: ")
    assert Job.objects.filter(name="fit").count() == 1


def test_a_submission_waits_out_a_database_outage(portal_process, database_proxy, cli,
                                                  package):
    portal = portal_process(database_port=database_proxy.port)
    cli.write_config([datacenter_entry(endpoint=portal.url)])
    assert cli("get", "jobs").returncode == 0  # logged in: its token cached

    database_proxy.stop()
    submitting = cli.start(*SUBMIT, package)
    try:
        wait(lambda: "the database is unavailable" in portal.output(), timeout=30,
             message=portal.output)
        database_proxy.start()
        out, err = submitting.communicate(timeout=60)
    finally:
        if submitting.poll() is None:
            submitting.kill()
            submitting.communicate()
    assert submitting.returncode == 0, err
    assert out.startswith("job fit submitted: ")
    assert Job.objects.filter(name="fit").count() == 1


@contextlib.contextmanager
def logs_followed(cli):
    """``paddlectl logs fit -f`` in the background: the process, and the lines it has printed
    (a list that grows); it is ended on leaving, if it has not."""
    following = cli.start("logs", "fit", "-f")
    printed: list[str] = []
    reader = threading.Thread(target=lambda: printed.extend(following.stdout), daemon=True)
    reader.start()
    try:
        yield following, printed
    finally:
        if following.poll() is None:
            following.kill()
        following.wait(10)
        reader.join(10)


def test_logs_follow_goes_on_after_the_portal_restarts(portal_process, cli, alice,
                                                       datacenter):
    job = job_row(alice, datacenter, "fit", state=JobState.RUNNING,
                  replicas={"state": ReplicaState.RUNNING})
    replica = job.replicas.get()
    log = log_path(job, replica)
    log.parent.mkdir(parents=True)

    def write(text: str) -> None:
        with log.open("a") as f:
            f.write(text)

    portal = portal_process()
    cli.write_config([datacenter_entry(endpoint=portal.url)])
    write("line 1\nline 2\n")
    with logs_followed(cli) as (following, printed):
        wait(lambda: "trainer-0 | line 2\n" in printed, message=lambda: str(printed))
        write("line 3\nthe start of ")  # a line half written when the portal goes
        wait(lambda: "trainer-0 | line 3\n" in printed, message=lambda: str(printed))
        portal.stop(kill=True)
        write("line 4\n")
        portal.start()
        write("line 5\n")
        wait(lambda: "trainer-0 | line 5\n" in printed, timeout=60,
             message=lambda: str(printed))
        Replica.objects.filter(pk=replica.pk).update(state=ReplicaState.SUCCEEDED)
        following.wait(30)
    assert following.returncode == 0, following.stderr.read()
    assert printed == ["trainer-0 | line 1\n", "trainer-0 | line 2\n", "trainer-0 | line 3\n",
                       "trainer-0 | the start of line 4\n", "trainer-0 | line 5\n"]


def test_logs_follow_of_a_running_pod_goes_on_after_the_portal_restarts(
        portal_process, cli, alice, datacenter, package, k8s_api, settings, held_tasks):
    with on_kubernetes(datacenter, settings, portal_kubeconfig(k8s_api),
                       {"hostPath": {"path": "/mnt/pfs"}}):
        job = submit_job(alice, datacenter)
        engine.job_launch(job.pk)
        backend = backend_for(datacenter)
        pod = wait(lambda: next((p["metadata"] for p in backend._pods(job)
                                 if p.get("status", {}).get("phase") == "Running"), None),
                   message="the trainer's pod to run")

        def write(*lines: str) -> None:
            k8s_api.controller.append_log(pod["namespace"], pod["name"], list(lines),
                                          container="trainer")

        portal = portal_process()
        cli.write_config([datacenter_entry(endpoint=portal.url)])
        write("line 1", "line 2")
        with logs_followed(cli) as (following, printed):
            wait(lambda: "trainer-0 | line 2\n" in printed, message=lambda: str(printed))
            portal.stop(kill=True)
            write("line 3")
            portal.start()
            write("line 4")
            wait(lambda: "trainer-0 | line 4\n" in printed, timeout=60,
                 message=lambda: str(printed))
            k8s_api.controller.terminate_container(pod["namespace"], pod["name"])
            following.wait(30)
        assert following.returncode == 0, following.stderr.read()
        assert printed == [f"trainer-0 | line {i}\n" for i in (1, 2, 3, 4)]

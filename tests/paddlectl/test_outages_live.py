"""paddlectl through the portal's outages: a submission whose answer was lost, or that met the
database down, is sent again with its Idempotency-Key and makes one job; ``logs -f`` goes on
after the portal restarts, from the line after the last one it printed."""

from __future__ import annotations

import threading

import pytest

from jobs.models import Job, Replica
from jobs.states import JobState, ReplicaState
from tests.factories import job_row
from tests.jobs.files import log_path
from tests.outages import TcpProxy
from tests.polling import wait

from .conftest import datacenter_entry

pytestmark = pytest.mark.django_db(transaction=True)

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
    following = cli.start("logs", "fit", "-f")
    printed: list[str] = []
    reader = threading.Thread(target=lambda: printed.extend(following.stdout), daemon=True)
    reader.start()
    try:
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
    finally:
        if following.poll() is None:
            following.kill()
        following.wait(10)
        reader.join(10)
    assert following.returncode == 0, following.stderr.read()
    assert printed == ["trainer-0 | line 1\n", "trainer-0 | line 2\n", "trainer-0 | line 3\n",
                       "trainer-0 | the start of line 4\n", "trainer-0 | line 5\n"]

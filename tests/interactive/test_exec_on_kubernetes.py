"""A command in a running pod and a connection to a port of it, through the real control
plane's API server (``pods/exec`` and ``pods/portforward`` over WebSocket, as the portal's
ServiceAccount with deploy/rbac.yaml's rights) to its node agent's kubelet API."""

from __future__ import annotations

import signal
import socket
import subprocess

import pytest
from asgiref.sync import async_to_sync

from jobs import engine
from jobs.backends import backend_for
from jobs.backends.base import BackendError
from jobs.backends.kubernetes.pods import run_as
from jobs.models import Job
from jobs.services import job_kill
from tests.factories import package_write, submit_job
from tests.kube import on_real_kubernetes
from tests.polling import wait
from tests.processes import process_stop

pytestmark = [pytest.mark.django_db, pytest.mark.real_kubernetes]

PORT = 7777
# A trainer that answers each line sent to 127.0.0.1:PORT in its pod in capitals.
ECHO = f"""\
import socket, threading
server = socket.create_server(("127.0.0.1", {PORT}))
print("listening", flush=True)

def serve(conn):
    with conn, conn.makefile("rb") as lines:
        for line in lines:
            conn.sendall(line.upper())

while True:
    threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()
"""


@pytest.fixture
def on_cluster(real_kube, datacenter, pfs_home, settings):
    with on_real_kubernetes(datacenter, settings, real_kube, pfs_home.parents[1]) as on:
        yield on


def running(job):
    def ready():
        engine.job_sync(job.pk)
        job.refresh_from_db()
        return job.state == "running" and job.replicas.get().state == "running"
    wait(ready, 90, lambda: f"job {job.name} is {job.state}: {job.state_reason}", every=0.2)
    # What the backend reads of it, read now (it looks at the cluster from a thread of its own)
    return Job.objects.select_related("datacenter", "owner").get(pk=job.pk)


async def exec_run(backend, job, replica, argv, *, tty=False, size=None, typed=b""):
    process = await backend.exec_open(job, replica, argv, tty=tty, size=size)
    try:
        if typed:
            await process.write(typed)
        out, err = b"", b""
        while True:
            channel, data = await process.read()
            if not channel:
                break
            if channel == process.STDOUT:
                out += data
            else:
                err += data
        return await process.wait(), out, err
    finally:
        await process.close()


async def echoed(backend, job, replica, port, line: bytes) -> bytes:
    stream = await backend.port_open(job, replica, port)
    try:
        await stream.write(line)
        got = b""
        while not got.endswith(b"\n"):
            data = await stream.read()
            if not data:
                break
            got += data
        return got
    finally:
        await stream.close()


def test_exec_and_port_open_reach_a_running_pod(on_cluster, alice, datacenter, pfs_home):
    package_write(pfs_home, ECHO)
    job = submit_job(alice, datacenter, "shell", image="python:3.11-slim")
    engine.job_launch(job.pk)
    job = running(job)
    replica = job.replicas.get()
    backend = backend_for(datacenter)

    # As the container runs: its uid, its environment; the command's status and streams.
    code, out, err = async_to_sync(exec_run)(
        backend, job, replica, ["sh", "-c", 'id -u; echo "$JOB_NAME"; echo oops >&2; exit 3'])
    assert (code, out.decode().split(), err) == (3, [str(run_as(datacenter)[0]), "shell"],
                                                 b"oops\n")

    # A terminal of the size asked for, and what is typed in it.
    code, out, _ = async_to_sync(exec_run)(
        backend, job, replica, ["sh", "-c", "test -t 0 && echo TTY; read x; echo got $x; "
                                            "stty size"],
        tty=True, size=(100, 30), typed=b"hi\r")
    assert code == 0
    assert b"TTY" in out and b"got hi" in out and b"30 100" in out

    missing = async_to_sync(exec_run)(backend, job, replica, ["no-such-program"])
    assert missing[0] != 0

    # The pod's own 127.0.0.1:PORT, once the trainer listens there.
    wait(lambda: "listening" in "".join(
        b.decode() for b in backend.log_stream(job, replica, follow=False, tail=None)[1]),
        60, "the trainer never listened")
    assert async_to_sync(echoed)(backend, job, replica, PORT, b"hello\n") == b"HELLO\n"
    with pytest.raises(BackendError, match="port 7778"):
        async_to_sync(echoed)(backend, job, replica, PORT + 1, b"hello\n")


@pytest.mark.django_db(transaction=True)
def test_paddlectl_exec_into_a_pod_through_the_portal(live_portal, celery_worker, real_kube,
                                                      datacenter, settings, paddlectl,
                                                      make_user):
    """The same command lines as on the local backend, through the portal's WebSockets."""
    make_user("bob")
    package_write(live_portal.home, ECHO)
    with on_real_kubernetes(datacenter, settings, real_kube, live_portal.home.parents[1]):
        job = submit_job(live_portal.user, datacenter, "shell", image="python:3.11-slim")

        def ready():
            job.refresh_from_db()
            return job.state == "running" and job.replicas.get().state == "running"
        wait(ready, 90, lambda: f"job shell is {job.state}: {job.state_reason}", every=0.2)

        who = paddlectl("exec", "shell", "--", "sh", "-c", 'id -u; echo "$JOB_NAME"; exit 4')
        assert who.returncode == 4, who.stderr
        assert who.stdout.decode().split() == [str(run_as(datacenter)[0]), "shell"]
        bob = paddlectl("exec", "shell", "--", "id", user="bob")
        assert bob.returncode != 0 and b"no job named 'shell'" in bob.stderr

        # paddlectl port-forward to the pod's port, through the portal and the API server.
        forward = subprocess.Popen(paddlectl.argv("port-forward", "shell", f"0:{PORT}"),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=paddlectl.cli("alice").environ())
        try:
            first = forward.stdout.readline()
            assert first.startswith("Forwarding from 127.0.0.1:"), first
            local = int(first.split()[2].rsplit(":", 1)[1])
            wait(lambda: "listening" in "".join(b.decode() for b in backend_for(
                datacenter).log_stream(job, job.replicas.get(), follow=False, tail=None)[1]),
                60, "the trainer never listened")
            with socket.create_connection(("127.0.0.1", local), timeout=30) as conn:
                conn.sendall(b"through the portal\n")
                assert conn.makefile("rb").readline() == b"THROUGH THE PORTAL\n"
        finally:
            process_stop(forward, signal.SIGINT)
            forward.stdout.close()
            forward.stderr.close()
        job_kill(live_portal.user, datacenter, "shell")
        wait(lambda: Job.objects.get(pk=job.pk).replicas.get().state == "killed", 60,
             "its pod did not stop")

"""``Backend.port_open`` on the local backend: a connection made in a running job's network
namespace reaches its trainer's port (which nothing on the machine's loopback does), and says
clearly when nothing listens there or the job has ended."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from jobs.backends import backend_for
from jobs.backends.base import BackendError
from jobs.backends.local.sandbox import sandbox_problem
from jobs.models import Replica

from .apps import HTTP_PORT, WS_PORT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def http_get(job, path: str) -> bytes:
    replica = Replica.objects.get(job=job, role="trainer")
    backend = backend_for(job.datacenter)

    async def exchange():
        stream = await backend.port_open(job, replica, HTTP_PORT)
        try:
            await stream.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                               .encode())
            got = b""
            while chunk := await stream.read():
                got += chunk
            return got
        finally:
            await stream.close()

    return asyncio.run(exchange())


def test_a_port_of_the_running_trainer_is_reached_in_its_own_network(serving_job):
    answer = http_get(serving_job, "/hello?x=1")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(body)["path"] == "/hello?x=1"
    if sandbox_problem() is None:  # in its own network: not on the machine's loopback
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", HTTP_PORT), timeout=5).close()


def test_nothing_listening_and_a_job_that_ended_are_said_clearly(serving_job):
    replica = Replica.objects.get(job=serving_job, role="trainer")
    backend = backend_for(serving_job.datacenter)
    with pytest.raises(BackendError, match=f"trainer-0 of job 'web': nothing listens on port "
                                           f"{WS_PORT + 1}"):
        asyncio.run(backend.port_open(serving_job, replica, WS_PORT + 1))
    backend.stop(serving_job, [replica], grace=1)
    with pytest.raises(BackendError, match="trainer-0 of job 'web' is not running"):
        asyncio.run(backend.port_open(serving_job, replica, HTTP_PORT))

"""Followers of one log spread over two portal processes (``manage.py runportal --no-worker``
on two ports, as a load balancer would spread them) on one PostgreSQL and one Redis
(channels-redis): every follower gets every line once, in order, and its end; each process is
one member of the log's group, however many of its sockets follow the log."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import redis
from django.conf import settings
from django.test import Client
from websockets.asyncio.client import connect

from jobs.models import Replica
from jobs.states import ReplicaState
from tests.conftest import close_server_connections
from tests.jobs.files import log_path
from tests.jobs.test_consumers import make_job, write
from tests.processes import ROOT, clean_env
from tests.test_runportal import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

FOLLOWERS_PER_PORTAL = 3
LINES = 3000
TIMEOUT = 60


def database_url() -> str:
    db = settings.DATABASES["default"]  # the test database
    return (f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 5432}/"
            f"{db['NAME']}")


@pytest.fixture
def two_portals(tmp_path):
    """Two portal processes on the test's database, Redis, var/ and PFS: their URLs."""
    env = clean_env(tmp_path / "var", DATABASE_URL=database_url(), REDIS_URL=settings.REDIS_URL,
                    SECRET_KEY=settings.SECRET_KEY,
                    PADDLECLOUD_PFS_ROOT=str(settings.PADDLECLOUD_PFS_ROOT))
    processes, urls = [], []
    try:
        for n in range(2):
            port = free_port()
            with (tmp_path / f"portal-{n}.log").open("w") as out:
                processes.append(subprocess.Popen(
                    [sys.executable, "manage.py", "runportal", "--no-worker", "--port",
                     str(port)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL))
            urls.append(f"http://127.0.0.1:{port}")
        for process, url in zip(processes, urls, strict=True):
            deadline = time.monotonic() + TIMEOUT
            while not healthy(url):
                assert process.poll() is None, (tmp_path / "portal-0.log").read_text()
                assert time.monotonic() < deadline, "the portal did not start"
                time.sleep(0.2)
        yield urls
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:  # channels-redis can hang on SIGTERM
                process.kill()             # (bench/README.md, logs.py)
                process.wait(15)
        close_server_connections()


def healthy(url: str) -> bool:
    with contextlib.suppress(OSError), \
            urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
        return response.status == 200
    return False


async def follow(url: str, cookie: str, connected: asyncio.Event | None = None) -> dict:
    """What one follower got: its lines (checked in order), its end, its close code."""
    got: list[str] = []
    end = None
    async with connect(f"{url.replace('http', 'ws', 1)}/ws/jobs/train/logs/?worker=trainer-0",
                       origin=url, additional_headers={"Cookie": cookie},
                       open_timeout=TIMEOUT) as ws:
        async for raw in ws:
            message = json.loads(raw)
            if message["type"] == "lines":
                assert message["first"] == len(got), "a gap or a repeat"
                got.extend(message["lines"])
                if connected is not None and len(got) >= 1:
                    connected.set()
            else:
                end = message
        return {"lines": got, "end": end, "code": ws.close_code}


def test_followers_on_two_portal_processes_get_every_line_once(two_portals, alice,
                                                              datacenter):
    job = make_job(alice, datacenter)
    replica = job.replicas.get()
    path = log_path(job, replica)
    write(path, "line 0\n")
    client = Client()
    client.force_login(alice)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    group = f"paddlecloud:group:lines.{job.uid.hex}.log.trainer0"
    store = redis.Redis.from_url(settings.REDIS_URL)

    async def run():
        followed = [asyncio.Event() for _ in range(2 * FOLLOWERS_PER_PORTAL)]
        tasks = [asyncio.create_task(follow(two_portals[i % 2], cookie, followed[i]))
                 for i in range(2 * FOLLOWERS_PER_PORTAL)]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in followed)), TIMEOUT)
        members = await asyncio.to_thread(store.zcard, group)
        for start in range(1, LINES, 100):  # while they follow, through both processes
            write(path, "".join(f"line {i}\n" for i in range(start, min(start + 100, LINES))))
            await asyncio.sleep(0.02)
        await asyncio.to_thread(
            Replica.objects.filter(pk=replica.pk).update, state=ReplicaState.SUCCEEDED)
        return members, await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT)

    try:
        members, results = asyncio.run(run())
    finally:
        store.close()
    assert members == 2  # one per process, not one per socket
    for result in results:
        assert result["lines"] == [f"line {i}" for i in range(LINES)]
        assert result["end"] == {"type": "end", "next": LINES}
        assert result["code"] == 1000

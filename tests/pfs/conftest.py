"""PFS storages to run the same tests against: a POSIX directory and an S3 bucket (moto's
standalone server: a real HTTP S3 endpoint, nothing mocked in-process)."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import boto3
import pytest

LABEL = "/pfs/dc1/home/alice"
S3_KEYS = {"region": "us-east-1", "access_key": "testing", "secret_key": "testing"}


@pytest.fixture(scope="session")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(params=["posix", "s3"])
def make_storage(request, tmp_path):
    """Storages of one fresh area: ``make_storage(read_only=False)``."""
    if request.param == "posix":
        from pfs.storage.posix import PosixStorage

        root = tmp_path / "home"
        root.mkdir()
        return lambda read_only=False: PosixStorage(LABEL, root, read_only=read_only)

    return s3_area(request.getfixturevalue("s3_endpoint"))


def s3_area(endpoint: str):
    """A fresh bucket; storages of the area ``dc1/home/alice`` in it."""
    from pfs.storage.s3 import S3Storage

    bucket = f"pfs-{uuid.uuid4().hex}"
    boto3.client("s3", endpoint_url=endpoint, region_name=S3_KEYS["region"],
                 aws_access_key_id=S3_KEYS["access_key"],
                 aws_secret_access_key=S3_KEYS["secret_key"]).create_bucket(Bucket=bucket)
    return lambda read_only=False: S3Storage(LABEL, bucket=bucket, prefix="dc1/home/alice",
                                             endpoint_url=endpoint, read_only=read_only,
                                             **S3_KEYS)


@pytest.fixture
def storage(make_storage):
    return make_storage()


@pytest.fixture
def read_only_storage(make_storage):
    """A read-only view of an area holding ``d/f`` (b"data")."""
    writable = make_storage()
    writable.mkdir(("d",))
    writable.write_bytes(("d", "f"), b"data", "seed")
    return make_storage(read_only=True)


@pytest.fixture
def s3_storage(s3_endpoint):
    """For what only S3 has (parts, markers, keys written by other tools)."""
    return s3_area(s3_endpoint)()


@pytest.fixture
def home(live_portal) -> Path:
    """alice's home on disk, as the live portal serves it."""
    return live_portal.home


@pytest.fixture
def front_portal(live_portal, settings, tmp_path):
    """The live portal behind nginx as runportal runs it (paddlecloud.front): uvicorn on the
    front's Unix socket, nginx on a free port in front. Both stopped at the end."""
    import threading
    import time

    import uvicorn

    from paddlecloud.asgi import application
    from paddlecloud.front import FrontApp, NginxFront
    from paddlecloud.serving import server_config
    from tests.conftest import LivePortal

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # A var directory whose path is longer than a Unix socket's may be (108 bytes): the
    # portal's socket is in it all the same.
    front = NginxFront(host="127.0.0.1", port=port, pfs_root=settings.PADDLECLOUD_PFS_ROOT,
                       var_dir=tmp_path / ("var-" + "v" * 120))
    server = uvicorn.Server(server_config(
        FrontApp(application, pfs_root=settings.PADDLECLOUD_PFS_ROOT),
        uds=front.socket_path, lifespan="off", log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        front.start()
        yield LivePortal(f"http://127.0.0.1:{port}", live_portal.datacenter, live_portal.user,
                         live_portal.home)
    finally:
        front.stop()
        server.should_exit = True
        thread.join(5)
        if thread.is_alive():
            server.force_exit = True
            thread.join(5)

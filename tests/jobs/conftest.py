"""The jobs tests' fixtures: the fake API server and a datacenter on it, and the WebSocket app
on both channel layers."""

import copy

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from django.conf import settings as django_settings
from django.db import connections

from tests.factories import job_row
from tests.k8s_api_server import fixtures
from tests.kube import on_kubernetes, on_real_kubernetes, pfs_volume, portal_kubeconfig
from tests.ws import WebsocketCommunicator

k8s_api = fixtures.k8s_api  # the fake API server, a fixture
k8s_cluster = fixtures.k8s_cluster  # the same, its pods really running


@pytest.fixture
def held_starts(held_tasks):
    """``held_tasks`` for tests that drive the engine step by step: starts are held (never
    sent), and a kill's stop runs at once, here."""
    from jobs import engine

    held_tasks.run("jobs.tasks.job_stop", engine.job_halt)
    return held_tasks


@pytest.fixture
def kube_datacenter(k8s_api, datacenter, settings):
    """datacenter1 on the Kubernetes backend, its cluster the fake API server (scripted pods)
    and its PFS a hostPath in pods."""
    with on_kubernetes(datacenter, settings, portal_kubeconfig(k8s_api),
                       {"hostPath": {"path": "/mnt/pfs"}}) as on:
        yield on


@pytest.fixture
def kube_pods_datacenter(k8s_cluster, datacenter, pfs_home, settings):
    """datacenter1 on the Kubernetes backend of a fake cluster whose pods really run, with the
    test's PFS root mounted in them."""
    with on_kubernetes(datacenter, settings, portal_kubeconfig(k8s_cluster),
                       pfs_volume(pfs_home.parents[1]), timeout=5) as on:
        yield on


@pytest.fixture
def real_kube_datacenter(real_kube, datacenter, pfs_home, settings):
    """datacenter1 on the Kubernetes backend of the real control plane (``real_kube``: its API
    server, controllers and scheduler, the node agent running the pods), as the portal's
    ServiceAccount, with the test's PFS root as its NFS volume."""
    with on_real_kubernetes(datacenter, settings, real_kube, pfs_home.parents[1]) as on:
        yield on


@pytest.fixture(params=["redis", "in-process"])
async def layer(request, settings):
    """Each test runs on both channel layers."""
    if request.param == "redis":
        config = copy.deepcopy(django_settings.CHANNEL_LAYERS["default"])
        assert config["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    else:
        config = {"BACKEND": "paddlecloud.layers.InProcessChannelLayer"}
    settings.CHANNEL_LAYERS = {"default": config}
    channel_layers.backends.clear()
    yield request.param
    if request.param == "redis":
        # Before the test's event loop ends: a channels-redis receive that is cancelled while
        # its connection is open can keep waiting on Redis (redis-py 8) and hold up the loop.
        await channel_layers["default"].close_pools()
    channel_layers.backends.clear()


@pytest.fixture
async def app(layer, pfs_home, settings):
    settings.ALLOWED_HOSTS = ["testserver"]
    from paddlecloud.asgi import application

    # The consumers' database calls run in asgiref's one sync thread, whose connection lives
    # from test to test (and may have been cut by a live server's clean-up): a fresh one.
    await sync_to_async(connections.close_all)()
    yield application
    await WebsocketCommunicator.hang_up_all()
    await sync_to_async(connections.close_all)()


@pytest.fixture
def prepared_jobs(alice, datacenter, backend):
    """``make(prefix, trainers=1, pservers=0, **fields)``: alice's job (package
    /pfs/datacenter1/home/alice/pkg, entry ``python train.py``, image ``img``) made straight
    in the database with its replicas and prepared on the test's ``backend``; every job made
    is stopped and cleaned up after the test."""
    from jobs.engine import job_prepare

    made = []

    def make(prefix: str, trainers: int = 1, pservers: int = 0, **fields):
        job = job_row(alice, datacenter, f"{prefix}{len(made)}", image="img",
                      trainers=trainers, pservers=pservers, replicas={}, **fields)
        job_prepare(job, backend)
        made.append(job)
        return job

    yield make
    for job in made:
        backend.stop(job, list(job.replicas.all()), grace=1)
        backend.cleanup(job)

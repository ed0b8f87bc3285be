"""A notebook and a VisualDL on the real control plane, through the live portal and a real
Celery worker: the session's pod runs the launcher (the node agent runs it as a sandboxed
process, the PFS an NFS volume), and the portal's proxy reaches its server through
``KubernetesBackend.port_open`` (the API server's ``pods/portforward``, as the portal's
ServiceAccount); the idle check asks Jupyter the same way. Code in the notebook submits a job
through the portal's Service (``PADDLECLOUD_MASTER_BASE_URL``), which runs there too. The
local backend's tests of the same (tests/paddlectl/test_notebooks_live.py, test_visualdl.py)
say more of each."""

from __future__ import annotations

import contextlib

import pytest

from interactive.models import Session
from interactive.sessions import session_keep, session_start, session_stop
from jobs.backends import backend_for
from jobs.models import Job, Replica
from jobs.states import FINAL_JOB_STATES, JobState
from tests.factories import package_write
from tests.kube import on_real_kubernetes
from tests.polling import wait
from tests.real_kube.control_plane import api_client
from tests.real_kube.node_kubelet import expose_host_port

from .notebooks import (
    kernel_run,
    notebook_running,
    route_entered,
    stopped_when_idle,
    through_route,
)
from .test_visualdl import (  # noqa: F401 - two_jobs: a fixture
    both_runs_shown,
    entered,
    logged_in,
    opened,
    others_refused,
    two_jobs,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis,
              pytest.mark.real_kubernetes]


@contextlib.contextmanager
def portal_service(admin, portal, settings):
    """The live portal as the cluster's pods reach it (``PADDLECLOUD_MASTER_BASE_URL``, where
    a notebook's code submits jobs): a Service of the portal's namespace, deleted after."""
    from kubernetes import client

    settings.PADDLECLOUD_MASTER_BASE_URL = expose_host_port(
        admin, portal.port, namespace="paddlecloud", service="paddlecloud")
    try:
        yield
    finally:  # the portal's namespace stays (deploy/namespace.yaml); the Service goes
        client.CoreV1Api(admin).delete_namespaced_service("paddlecloud", "paddlecloud")


def test_a_notebook_runs_in_a_pod_is_reached_through_the_proxy_and_stopped_once_idle(
        live_portal, celery_worker, real_kube, datacenter, settings, make_user):
    portal, alice = live_portal, live_portal.user
    make_user("bob")
    (portal.home / "data.txt").write_text("in alice's home\n")
    package = package_write(portal.home)
    with api_client(real_kube.admin_kubeconfig) as admin, portal_service(admin, portal, settings), \
            on_real_kubernetes(datacenter, settings, real_kube, portal.home.parents[1]):
        # Kept while it starts: its idle time is the test's.
        session_start(alice, datacenter, "notebook", name="nb", idle="3s")
        session_keep(alice, datacenter, "nb")
        job = notebook_running(portal.home, "nb")

        # alice's browser, through the portal's proxy: her home (the PFS volume) is its root,
        # and a kernel started over Jupyter's REST API runs code in the pod.
        host, cookie, landing = route_entered(portal, alice, "nb")
        assert landing == "/lab"
        status, contents = through_route(portal, host, cookie, "GET", "/api/contents")
        assert status == 200 and "data.txt" in {e["name"] for e in contents["content"]}
        status, kernel = through_route(portal, host, cookie, "POST", "/api/kernels",
                                       {"name": "python3"})
        assert status == 201, kernel
        said = kernel_run(portal, host, cookie, kernel["id"], (
            "import os\n"
            "print(os.environ['PADDLE_NOTEBOOK'], os.getcwd(),"
            " 'PADDLECLOUD_API_TOKEN' in os.environ, 6 * 7)"))
        home = backend_for(datacenter).paths(job).pfs_home
        assert said.split() == ["YES", home, "False", "42"], said
        # Code in it submits a job as alice, through the portal's Service.
        said = kernel_run(portal, host, cookie, kernel["id"], (
            "from paddlecloud_sdk import PaddleJob\n"
            f"job = PaddleJob(job_name='from-notebook', trainer_package='{package}',"
            " entry_point='python train.py').submit()\n"
            "print('submitted', job.job_name)"))
        assert said == "submitted from-notebook\n", said
        submitted = wait(lambda: Job.objects.filter(name="from-notebook", state__in=(
            FINAL_JOB_STATES)).first(), 90, "the job it submitted to end")
        assert (submitted.owner, submitted.state) == (alice, JobState.SUCCEEDED)

        # bob: the portal does not open it for him, and the route answers him nothing.
        bob = logged_in(portal, "bob")
        assert bob.get(f"{portal.url}/notebooks/nb/open", timeout=30).status_code == 404
        for other in ("", f"sessionid={bob.cookies['sessionid']}"):
            assert through_route(portal, host, other, "GET", "/api/kernels")[0] == 404

        # No longer kept, its one kernel idle: stopped past its limit, with its event.
        session_keep(alice, datacenter, "nb", keep=False)
        job = stopped_when_idle(job, "1 kernel, none busy", "3s")
        wait(lambda: job.replicas.get().state == "killed", 60, "its pod to stop")


@pytest.mark.usefixtures("two_jobs")
def test_visualdl_for_two_jobs_runs_in_a_pod_and_shows_both_runs_to_its_owner_alone(
        live_portal, celery_worker, real_kube, datacenter, settings, make_user):
    portal = live_portal
    make_user("bob")
    with on_real_kubernetes(datacenter, settings, real_kube, portal.home.parents[1]):
        alice = logged_in(portal)
        name = opened(portal, alice, ["mnist", "resnet"])
        assert Session.objects.get(job__name=name).jobs == ["mnist", "resnet"]
        route = entered(portal, alice, name)
        # Both jobs' metrics (and the records resnet wrote itself), read from the PFS volume.
        both_runs_shown(route)
        others_refused(portal, route, name)

        session_stop(portal.user, datacenter, name)
        wait(lambda: Replica.objects.get(job__name=name).state == "killed", 60,
             "its pod to stop")

"""Following a running job over the portal's real WebSockets (uvicorn, channels-redis, a real
Celery worker), on both backends: the local one (real processes) and Kubernetes (the fake API
server, whose containers write the PFS log as the real start script does)."""

from __future__ import annotations

import json
import textwrap

import pytest
from django.test import Client
from websockets.sync.client import connect

from jobs.backends.kubernetes.client import kube_forget
from jobs.backends.kubernetes.pods_watch import pod_caches_stop
from jobs.models import Job, Replica
from jobs.states import ReplicaState
from tests.factories import package_write
from tests.kube import datacenter_set, portal_kubeconfig
from tests.polling import wait

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

LINES = 30

TRAINER = textwrap.dedent(f"""\
    import time
    from paddlecloud_sdk import report

    for step in range({LINES}):
        print(f"step {{step}}", flush=True)
        report(step=step, loss=1 / (step + 1))
        time.sleep(0.1)
    """)


def socket(portal, path: str, user=None):
    client = Client()
    client.force_login(user or portal.user)
    return connect(f"{portal.url.replace('http', 'ws', 1)}{path}", open_timeout=10,
                   additional_headers={"Cookie": f"sessionid={client.cookies['sessionid'].value}",
                                       "Origin": portal.url})


def messages(ws):
    while True:
        message = json.loads(ws.recv(timeout=30))
        yield message
        if message["type"] in ("end", "error"):
            return


def submit(portal, files: dict[str, str] | None = None, **fields) -> Job:
    """alice's job ``live`` of TRAINER (and ``files`` beside it), over the API."""
    package_write(portal.home, TRAINER, files=files)
    response = portal.job_post("live", **fields)
    assert response.status_code == 201, response.text
    return Job.objects.get(name="live")


def follow_while_it_runs(portal, job):
    """Every line once and in order, the first of them while the trainer still runs."""
    wait(lambda: Replica.objects.get(job=job, role="trainer").state == ReplicaState.RUNNING,
         message="the trainer to run")
    got, running_at_first = [], None
    with socket(portal, "/ws/jobs/live/logs/?worker=trainer-0") as ws:
        for message in messages(ws):
            if message["type"] == "lines":
                assert message["first"] == len(got), "a gap or a repeat"
                got.extend(message["lines"])
                if running_at_first is None:
                    running_at_first = Replica.objects.get(job=job, role="trainer").state
            else:
                assert message == {"type": "end", "next": LINES}
    assert got == [f"step {i}" for i in range(LINES)]
    assert running_at_first == ReplicaState.RUNNING


def test_log_lines_and_metrics_of_a_local_job_come_while_it_runs(live_portal, celery_worker):
    job = submit(live_portal)
    follow_while_it_runs(live_portal, job)
    with socket(live_portal, "/ws/jobs/live/metrics/") as ws:
        records = [r for m in messages(ws) if m["type"] == "metrics" for r in m["records"]]
    assert [r["step"] for r in records] == list(range(LINES))
    assert records[-1]["metrics"] == {"loss": pytest.approx(1 / LINES)}


def test_log_lines_of_a_kubernetes_job_come_while_it_runs(live_portal, k8s_api, settings,
                                                          celery_worker):
    settings.PADDLECLOUD_KUBE_TIMEOUT = 2
    pfs = settings.PADDLECLOUD_PFS_ROOT / "datacenter1"
    datacenter_set(live_portal.datacenter, backend="kubernetes",
                   kubeconfig=str(portal_kubeconfig(k8s_api)),
                   kube_volume={"hostPath": {"path": str(pfs)}})
    k8s_api.controller.script_pods("*-tr-*", lines=[f"step {i}" for i in range(LINES)],
                                   line_interval=0.1, exit_code=0)
    try:
        job = submit(live_portal)
        follow_while_it_runs(live_portal, job)
    finally:
        pod_caches_stop()
        kube_forget()


def test_the_job_page_socket_follows_states_to_the_end(live_portal, celery_worker):
    job = submit(live_portal)
    states = []
    with socket(live_portal, "/ws/jobs/live/") as ws:
        while not states or states[-1] not in ("succeeded", "failed"):
            message = json.loads(ws.recv(timeout=30))
            if message["type"] == "job" and (not states or states[-1] != message["job"]["state"]):
                states.append(message["job"]["state"])
    assert states[-1] == "succeeded", Job.objects.get(pk=job.pk).state_reason
    assert "running" in states


def test_bob_cannot_follow_alices_job(live_portal, make_user, celery_worker):
    submit(live_portal)
    bob = make_user("bob")
    with socket(live_portal, "/ws/jobs/live/logs/", bob) as ws:
        assert json.loads(ws.recv(timeout=10))["code"] == "not_found"
        with pytest.raises(Exception) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd.code == 4404


def test_the_build_log_of_a_kubernetes_job_comes_while_it_builds_and_on_its_page(
        live_portal, k8s_api, settings, celery_worker, tmp_path):
    """A job whose runtime image is built (issue 19): ``worker=build`` follows the builder's
    log over the socket, line by line, to its end; the job page offers it as a worker."""
    from registries.services import registry_create
    from tests.registry_server import registry_server

    settings.PADDLECLOUD_KUBE_TIMEOUT = 2
    pfs = settings.PADDLECLOUD_PFS_ROOT / "datacenter1"
    lines = [f"#{i} building step {i}" for i in range(10)]
    k8s_api.controller.script_pods("build-*", container="buildkit", lines=lines,
                                   line_interval=0.2, message=json.dumps(
                                       {"containerimage.digest": "sha256:" + "cd" * 32}))
    with registry_server(tmp_path) as registry:
        datacenter_set(live_portal.datacenter, backend="kubernetes",
                       kubeconfig=str(portal_kubeconfig(k8s_api)),
                       kube_volume={"hostPath": {"path": str(pfs)}}, build_registry_insecure=True,
                       build_registry=f"{registry.host}/builds")
        registry_create(live_portal.user, live_portal.datacenter, {
            "name": "builds", "server": registry.host, "username": "x", "password": "y"})
        try:
            job = submit(live_portal, files={"requirements.txt": "six\n"})
            assert job.state == "building"
            got = []
            with socket(live_portal, "/ws/jobs/live/logs/?worker=build") as ws:
                for message in messages(ws):
                    if message["type"] == "lines":
                        got.extend(message["lines"])
            assert [line for line in got if line.startswith("#")] == lines
            assert got[-1].startswith("paddlecloud: pushed ")
            page = Client()
            page.force_login(live_portal.user)
            html = page.get("/jobs/live/", {"worker": "build"}).content.decode()
            assert "<option selected>build</option>" in html
            assert "#9 building step 9" in html
        finally:
            pod_caches_stop()
            kube_forget()

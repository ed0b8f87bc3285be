"""The portal's own metrics (kernel/metrics.py, jobs/collector.py), over real HTTP: GET
/metrics refuses without the token and answers with it (at any Host, as Prometheus scrapes a
pod's address); promtool accepts what a portal with jobs in several states exposes; the
metrics move when things happen (a submission, an API request, a 4xx, a Celery task run by
the embedded worker); no label holds a path or a job's name. A Celery worker's own endpoint
sums its prefork processes (multiprocess mode)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from django.conf import settings as django_settings
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from accounts.services import quota_set
from jobs.services import job_kill
from kernel import metrics
from tests.factories import HOME, submit_job

TOKEN = "test-metrics-token-0123456789"
PROMTOOL = shutil.which("promtool")


def promtool() -> str:
    """promtool, which checks an exposition as Prometheus would read it. Missing, the tests
    that need it fail rather than skip: ./dev test installs it (Debian's prometheus)."""
    assert PROMTOOL, "promtool is missing: apt-get install prometheus (./dev test does)"
    return PROMTOOL
ROOT = Path(__file__).resolve().parent.parent


def scrape(portal, token: str | None = TOKEN, **headers) -> requests.Response:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return requests.get(f"{portal.url}/metrics", headers=headers, timeout=30)


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of an exposition: (name, its labels) -> value."""
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(found: dict, name: str, **labels) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def read(metric, name: str, **labels) -> float:
    """A sample of one of kernel.metrics' instruments, in this process."""
    return value({(sample.name, frozenset(sample.labels.items())): sample.value
                  for family in metric.collect() for sample in family.samples}, name, **labels)


@pytest.fixture
def portal(live_portal, settings):
    """The live portal, its metrics endpoint open to TOKEN."""
    settings.PADDLECLOUD_METRICS_TOKEN = TOKEN
    return live_portal


# -- protection ---------------------------------------------------------------------------------

def test_without_a_token_configured_there_is_no_endpoint_even_from_loopback(live_portal,
                                                                            settings):
    settings.PADDLECLOUD_METRICS_TOKEN = ""
    for token in (None, "", "anything-at-all-long-enough"):
        answer = scrape(live_portal, token)
        assert answer.status_code == 404
        assert "PADDLECLOUD_METRICS_TOKEN" in answer.text
        assert "paddlecloud_" not in answer.text


def test_the_endpoint_refuses_without_the_token_and_answers_with_it(portal):
    for token, extra in ((None, {}), ("wrong-token-wrong-token", {}), (TOKEN[:-1], {}),
                         (TOKEN + "x", {})):
        answer = scrape(portal, token, **extra)
        assert answer.status_code == 401, token
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
        assert "paddlecloud_" not in answer.text
    basic = scrape(portal, None, Authorization=f"Basic {TOKEN}")
    assert basic.status_code == 401
    answer = scrape(portal)
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("text/plain; version=")
    assert "# TYPE paddlecloud_jobs gauge" in answer.text
    assert requests.post(f"{portal.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"},
                         timeout=30).status_code == 405


def test_prometheus_scrapes_the_pods_address_which_is_in_no_allowed_hosts(portal, settings):
    """Prometheus sends the pod's IP as Host, in plain HTTP: Django would answer 400
    (DisallowedHost) or redirect to HTTPS; /metrics is answered before either."""
    settings.ALLOWED_HOSTS = ["paddlecloud.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    assert scrape(portal, Host="10.1.2.3:8000").status_code == 200
    assert scrape(portal, None, Host="10.1.2.3:8000").status_code == 401
    assert requests.get(f"{portal.url}/healthz", headers={"Host": "10.1.2.3:8000"},
                        timeout=30).status_code == 400


def test_a_short_token_is_refused_at_start():
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], cwd=ROOT,
        env={**os.environ, "PADDLECLOUD_METRICS_TOKEN": "short",
             "DJANGO_SETTINGS_MODULE": "paddlecloud.settings"},
        capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "PADDLECLOUD_METRICS_TOKEN: at least 16 characters" in done.stderr


# -- the exposition -----------------------------------------------------------------------------

def test_promtool_accepts_the_exposition_of_a_portal_with_jobs_in_several_states(
        portal, package, held_tasks):
    quota_set(None, portal.datacenter, portal.user, cpu=1000, jobs=10)
    submit_job(portal.user, portal.datacenter, "first", cpu="1")  # starting
    submit_job(portal.user, portal.datacenter, "second", cpu="1")  # queued
    third = submit_job(portal.user, portal.datacenter, "third", cpu="1")
    job_kill(portal.user, portal.datacenter, third.name)  # killed
    portal.session().get(f"{portal.url}/api/v1/jobs/", timeout=30)
    portal.session().get(f"{portal.url}/api/v1/jobs/nosuch/", timeout=30)

    answer = scrape(portal)
    assert answer.status_code == 200
    checked = subprocess.run([promtool(), "check", "metrics"], input=answer.text,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    found = samples(answer.text)
    for state, count in (("starting", 1), ("queued", 1), ("killed", 1), ("running", 0),
                         ("succeeded", 0)):
        assert value(found, "paddlecloud_jobs", datacenter="datacenter1", state=state) == count
    assert value(found, "paddlecloud_queue_length", datacenter="datacenter1") == 1
    assert value(found, "paddlecloud_queue_oldest_wait_seconds", datacenter="datacenter1") > 0


def test_no_label_holds_a_path_or_a_job_name(portal, package, held_tasks):
    submit_job(portal.user, portal.datacenter, "secretname")
    session = portal.session()
    for path in ("/api/v1/jobs/secretname/", "/api/v1/jobs/secretname/events",
                 "/api/v1/jobs/othersecret/", "/api/v1/nowhere/secretpath",
                 "/secretpage/", "/api/v1/pfs/datacenter1/home/alice/secretfile"):
        session.get(f"{portal.url}{path}", timeout=30)
    asked = ("secretname", "othersecret", "secretpath", "secretpage", "secretfile", "alice")
    for (_name, labels) in samples(scrape(portal).text):
        for label, text in labels:  # (a task's name may hold "secret": pull_secret_sync)
            assert not any(word in text for word in asked), (label, text)
            assert not text.startswith("/"), (label, text)


# -- the metrics move ---------------------------------------------------------------------------

def test_a_submission_moves_the_jobs_gauge_and_the_admission_wait(portal, package, held_tasks):
    before = samples(scrape(portal).text)
    response = portal.job_post("moves", timeout=30)
    assert response.status_code == 201, response.text
    after = samples(scrape(portal).text)
    labels = {"datacenter": "datacenter1", "state": "starting"}
    assert value(after, "paddlecloud_jobs", **labels) == value(
        before, "paddlecloud_jobs", **labels) + 1
    wait = "paddlecloud_job_admission_wait_seconds_count"
    assert value(after, wait, datacenter="datacenter1") == value(
        before, wait, datacenter="datacenter1") + 1


def test_api_requests_are_counted_and_timed_by_route_and_errors_by_status(portal):
    session = portal.session()
    before = samples(scrape(portal).text)
    assert session.get(f"{portal.url}/api/v1/jobs/", timeout=30).status_code == 200
    assert session.get(f"{portal.url}/api/v1/jobs/nosuch/", timeout=30).status_code == 404
    assert requests.get(f"{portal.url}/api/v1/jobs/", timeout=30).status_code == 401
    after = samples(scrape(portal).text)

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    duration = "paddlecloud_http_request_duration_seconds_count"
    assert moved(duration, route="api-jobs", method="GET") == 2
    assert moved(duration, route="api-job", method="GET") == 1
    total = "paddlecloud_http_requests_total"
    assert moved(total, route="api-jobs", method="GET", status="200") == 1
    assert moved(total, route="api-jobs", method="GET", status="401") == 1
    assert moved(total, route="api-job", method="GET", status="404") == 1
    # The scrapes are counted too, by a route of their own.
    assert moved(total, route="metrics", method="GET", status="200") >= 1


@pytest.mark.django_db
def test_requests_through_a_synchronous_django_are_counted_alike(token_client):
    """The middleware runs sync (WSGI, the test client) as it runs async (ASGI, above)."""
    labels = {"route": "api-job-events", "method": "GET", "status": "404"}
    name = "paddlecloud_http_requests_total"
    before = read(metrics.HTTP_REQUESTS, name, **labels)
    assert token_client.get("/api/v1/jobs/nosuch/events").status_code == 404
    assert read(metrics.HTTP_REQUESTS, name, **labels) == before + 1


def test_requests_answered_before_django_are_counted_by_their_handler(portal):
    """The PFS byte streams and the master's calls skip Django: their handler names them."""
    session = portal.session()
    before = samples(scrape(portal).text)
    missing = session.get(f"{portal.url}/api/v1/pfs/content?path=/pfs/datacenter1/home/alice/"
                          "none", timeout=30)
    assert missing.status_code == 404, missing.text
    labels = {"route": "pfs.transfer.download", "method": "GET", "status": "404"}
    expected = value(before, "paddlecloud_http_requests_total", **labels) + 1
    # Counted once the answer is sent, which the client may see first.
    deadline = time.monotonic() + 30
    while (counted := value(samples(scrape(portal).text), "paddlecloud_http_requests_total",
                            **labels)) < expected:
        assert time.monotonic() < deadline, "the download was not counted"
        time.sleep(0.05)
    assert counted == expected


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_task_run_by_the_embedded_worker_is_timed(celery_worker):
    from kernel.celery import app

    name = "accounts.tasks.token_purge"
    count = "paddlecloud_celery_task_duration_seconds_count"
    labels = {"task": name, "outcome": "success"}
    before = read(metrics.TASK_DURATION, count, **labels)
    app.send_task(name).get(timeout=60)
    deadline = time.monotonic() + 30  # task_postrun comes just after the result is stored
    while read(metrics.TASK_DURATION, count, **labels) == before:
        assert time.monotonic() < deadline, "the task's duration was not observed"
        time.sleep(0.05)
    assert read(metrics.TASK_DURATION, count, **labels) == before + 1


def test_pfs_bytes_and_operations_are_counted_as_files_go_up_and_down(portal):
    """A PUT and a GET of a file, a listing and a directory's tar, through the live portal."""
    http = portal.session()
    content = f"{portal.url}/api/v1/pfs/content"
    path = f"{HOME}/data/blob.bin"

    def exposed() -> dict:
        return samples(scrape(portal).text)

    def pfs_bytes(found, direction):
        return value(found, "paddlecloud_pfs_bytes_total", direction=direction)

    def operations(found, operation):
        return value(found, "paddlecloud_pfs_operations_total", operation=operation)

    before = exposed()
    blob = os.urandom(300_000)
    put = http.put(content, params={"path": path, "parents": "1"}, data=blob, timeout=30,
                   headers={"X-Checksum-SHA256": hashlib.sha256(blob).hexdigest()})
    assert put.status_code == 201, put.text
    assert http.get(content, params={"path": path}, timeout=30).content == blob
    tree = http.get(content, params={"path": f"{HOME}/data"}, timeout=30)
    assert tree.status_code == 200
    assert http.get(f"{portal.url}/api/v1/pfs/files",
                    params={"path": HOME}, timeout=30).ok
    deadline = time.monotonic() + 30  # a stream is counted as its last bytes go out
    while pfs_bytes(after := exposed(), "download") < \
            pfs_bytes(before, "download") + len(blob) + len(tree.content):
        assert time.monotonic() < deadline, after
        time.sleep(0.05)
    assert pfs_bytes(after, "upload") == pfs_bytes(before, "upload") + len(blob)
    assert pfs_bytes(after, "download") == \
        pfs_bytes(before, "download") + len(blob) + len(tree.content)
    for operation in ("upload", "download", "download_tar", "list"):
        assert operations(after, operation) == operations(before, operation) + 1, operation
    with pytest.raises(ValueError, match="direction 'sideways'"):
        metrics.pfs_transferred("sideways", 1)


# -- a worker's own endpoint --------------------------------------------------------------------

def test_the_worker_endpoint_wants_the_token_too():
    server = metrics.WorkerMetricsServer(0, TOKEN, host="127.0.0.1").start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        assert requests.get(url, timeout=30).status_code == 401
        assert requests.get(url, headers={"Authorization": "Bearer nope-nope-nope-nope"},
                            timeout=30).status_code == 401
        answer = requests.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        assert answer.status_code == 200
        assert "paddlecloud_celery_task_duration_seconds" in answer.text
        assert requests.get(f"http://127.0.0.1:{server.port}/other",
                            headers={"Authorization": f"Bearer {TOKEN}"},
                            timeout=30).status_code == 404
    finally:
        server.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_prefork_celery_worker_serves_the_sum_of_its_processes(tmp_path):
    """`celery -A paddlecloud worker` as deploy/worker.yaml runs it (prefork, two processes,
    PROMETHEUS_MULTIPROC_DIR, PADDLECLOUD_METRICS_PORT): the tasks its children run are on
    its port, checked by promtool."""
    from kernel.celery import app

    app.control.purge()
    port = free_port()
    database = connection.settings_dict
    directory = tmp_path / "prometheus"
    directory.mkdir()
    (directory / "stale_1.db").write_bytes(b"left by a container that restarted")
    env = {**os.environ, "PADDLECLOUD_METRICS_PORT": str(port),
           "PADDLECLOUD_METRICS_TOKEN": TOKEN, "PROMETHEUS_MULTIPROC_DIR": str(directory),
           "REDIS_URL": django_settings.REDIS_URL, "PADDLECLOUD_VAR_DIR": str(tmp_path / "var"),
           "DATABASE_URL": f"postgres://{quote(database['USER'])}:"
                           f"{quote(database['PASSWORD'] or '')}@{database['HOST']}:"
                           f"{database['PORT']}/{database['NAME']}"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "paddlecloud", "worker", "--pool", "prefork",
         "--concurrency", "2", "--loglevel", "WARNING", "--without-heartbeat",
         "--without-mingle", "--without-gossip", "-n", f"metrics-test-{port}@%h"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for _ in range(4):
            app.send_task("accounts.tasks.token_purge").get(timeout=120)
        deadline = time.monotonic() + 60
        count = 0.0
        while count < 4:
            assert time.monotonic() < deadline and worker.poll() is None, "no metrics"
            try:
                answer = requests.get(url, headers=auth, timeout=10)
            except requests.ConnectionError:
                time.sleep(0.2)
                continue
            count = value(samples(answer.text), "paddlecloud_celery_task_duration_seconds_count",
                          task="accounts.tasks.token_purge", outcome="success")
            if count < 4:
                time.sleep(0.2)
        assert count == 4
        assert not (directory / "stale_1.db").exists()
        checked = subprocess.run([promtool(), "check", "metrics"], input=answer.text,
                                 capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert requests.get(url, timeout=10).status_code == 401
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
        app.control.purge()


def test_the_docs_scrape_job_is_a_prometheus_configuration(tmp_path):
    """The scrape job of the docs' "Metrics" page (docs/admin/metrics.md), checked by
    promtool: its relabelling and its bearer token file. (Debian's promtool is built without
    Kubernetes discovery: a static target stands in for kubernetes_sd_configs, which is
    checked to be there.)"""
    import textwrap

    page = (ROOT / "docs" / "admin" / "metrics.md").read_text()
    block = textwrap.dedent(re.search(r"\n  ```yaml\n(  - job_name: paddlecloud\n.*?)  ```\n",
                                      page, re.S)[1])
    assert "kubernetes_sd_configs: [{role: pod" in block
    token = tmp_path / "token"
    token.write_text(TOKEN)
    block = re.sub(r"kubernetes_sd_configs: .*", 'static_configs: [{targets: ["web:8000"]}]',
                   block).replace("/etc/prometheus/paddlecloud/token", str(token))
    config = tmp_path / "prometheus.yml"
    config.write_text("scrape_configs:\n" + textwrap.indent(block, "  "))
    checked = subprocess.run([promtool(), "check", "config", str(config)],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr

"""The portal's own metrics, for Prometheus (docs/admin/metrics.md): what the people who run it
watch.

Two kinds, exposed differently (docs/admin/metrics.md says why):

- **State kept in the database** (jobs by state and datacenter, the queues) is counted when
  Prometheus scrapes, by ``jobs.collector`` with one GROUP BY: right in any process, cheap, and
  never counted twice however many portal processes there are.
- **Events of this process** are counted here as they happen: API requests (by route, never by
  path), WebSocket followers, Celery tasks, PFS bytes and operations, and the latencies that are
  observed where a job's state changes (admission wait, start latency) and replica restarts.
  Each web pod is one process (``runportal`` serves one uvicorn process) and exposes its own
  ``GET /metrics``; a Celery worker (prefork: several processes) exposes the sum of its
  processes on a port of its own (``worker_metrics_serve``, prometheus_client's multiprocess
  mode); Prometheus adds the pods up.

``GET /metrics`` is answered before Django (``MetricsApp``): Prometheus scrapes the pod's address,
which is in no ALLOWED_HOSTS, in plain HTTP. It is protected by a bearer token,
``PADDLECLOUD_METRICS_TOKEN``, compared in constant time; without one configured the endpoint
does not exist (404) for anybody, loopback included: behind a reverse proxy on the same machine
every client may look local.

This module imports no app: any layer may record through it.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

logger = logging.getLogger(__name__)

PATH = "/metrics"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "<unmatched>"  # a request no URL pattern took (a 404 of Django's, a static file)

# -- the instruments ---------------------------------------------------------------------------

HTTP_REQUESTS = Counter(
    "paddlecloud_http_requests", "HTTP requests answered, by route (the URL pattern's name, "
    "never the path), method and status code; errors are the status codes 4xx and 5xx.",
    ["route", "method", "status"])
HTTP_DURATION = Histogram(
    "paddlecloud_http_request_duration_seconds", "Time to answer an HTTP request, by route "
    "and method: Django's answers to their headers, the PFS streams and the master's calls "
    "(answered before Django) whole.", ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
WEBSOCKETS = Gauge(
    "paddlecloud_websocket_followers", "Open WebSockets following a job list, a job or a "
    "replica's log, by consumer.", ["consumer"], multiprocess_mode="livesum")
TASK_DURATION = Histogram(
    "paddlecloud_celery_task_duration_seconds", "Time a Celery task ran, by task name and "
    "outcome (success, failure, retry).", ["task", "outcome"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900))
ADMISSION_WAIT = Histogram(
    "paddlecloud_job_admission_wait_seconds", "Time from a job's submission to its first "
    "admission (it starts: quota free, image built), by datacenter.", ["datacenter"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600,
             24 * 3600))
START_LATENCY = Histogram(
    "paddlecloud_job_start_latency_seconds", "Time from a job's admission to all its replicas "
    "running, by datacenter.", ["datacenter"],
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800))
REPLICA_RESTARTS = Counter(
    "paddlecloud_replica_restarts", "Replicas restarted, by role and kind: failure (counted "
    "against the job's restart limit) or disruption (the node or the cluster's doing).",
    ["role", "kind"])
PFS_BYTES = Counter(
    "paddlecloud_pfs_bytes", "Bytes moved through the file service, by direction (upload, "
    "download).", ["direction"])
PFS_OPERATIONS = Counter(
    "paddlecloud_pfs_operations", "File service operations, by operation (upload, download, "
    "list, stat, mkdir, remove, move, copy, ...).", ["operation"])

PFS_DIRECTIONS = frozenset({"upload", "download"})


# -- recording ----------------------------------------------------------------------------------

def http_observed(route: str, method: str, status: int, seconds: float) -> None:
    """One HTTP request answered. ``route`` is a URL pattern's name or a handler's, never a
    path: a path holds user and job names, and every one would be a series of its own."""
    method = method if method in METHODS else "other"
    HTTP_REQUESTS.labels(route, method, str(status)).inc()
    HTTP_DURATION.labels(route, method).observe(seconds)


def websocket_opened(consumer: str) -> None:
    WEBSOCKETS.labels(consumer).inc()


def websocket_closed(consumer: str) -> None:
    WEBSOCKETS.labels(consumer).dec()


def pfs_transferred(direction: str, nbytes: int) -> None:
    """Bytes moved through the PFS: ``direction`` is "upload" or "download"."""
    if direction not in PFS_DIRECTIONS:
        raise ValueError(f"pfs_transferred: direction {direction!r}, expected upload or download")
    if nbytes > 0:
        PFS_BYTES.labels(direction).inc(nbytes)


def pfs_operation(operation: str) -> None:
    """One PFS operation, named by a fixed word of the caller's (never a path)."""
    PFS_OPERATIONS.labels(operation).inc()


def replica_restarted(role: str, *, counted: bool) -> None:
    REPLICA_RESTARTS.labels(role, "failure" if counted else "disruption").inc()


def jobs_admitted(waits: Iterable[tuple[str, float]]) -> None:
    """Jobs admitted for the first time: (datacenter, seconds since submission) each."""
    for datacenter, seconds in waits:
        ADMISSION_WAIT.labels(datacenter).observe(max(seconds, 0.0))


def jobs_started(latencies: Iterable[tuple[str, float]]) -> None:
    """Jobs whose replicas all run: (datacenter, seconds since admission) each."""
    for datacenter, seconds in latencies:
        START_LATENCY.labels(datacenter).observe(max(seconds, 0.0))


# Celery: the signals fire in the process that runs the task (a prefork child, or the embedded
# worker's threads); a task's start is kept by its id until it ends.
_task_starts: dict[str, float] = {}


def task_started(task_id: str | None) -> None:
    if task_id:
        _task_starts[task_id] = time.perf_counter()


def task_ended(task_id: str | None, task_name: str, outcome: str) -> None:
    start = _task_starts.pop(task_id, None) if task_id else None
    if start is not None:
        TASK_DURATION.labels(task_name, outcome).observe(time.perf_counter() - start)


def celery_signals_connect() -> None:
    """Time every task this process runs (kernel.celery connects it once)."""
    from celery import signals

    def prerun(task_id=None, **_):
        task_started(task_id)

    def postrun(task_id=None, task=None, state=None, **_):
        outcome = {"SUCCESS": "success", "RETRY": "retry"}.get(state, "failure")
        task_ended(task_id, getattr(task, "name", "unknown"), outcome)

    signals.task_prerun.connect(prerun, weak=False)
    signals.task_postrun.connect(postrun, weak=False)


# -- exposition ---------------------------------------------------------------------------------

def token_matches(authorization: str | None, token: str) -> bool:
    """Whether an Authorization header carries ``token`` as a bearer token, compared in
    constant time."""
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                              token.encode())


def configured_token() -> str:
    from django.conf import settings

    return settings.PADDLECLOUD_METRICS_TOKEN


# What the database holds (jobs.collector registers it here): only the portal's /metrics
# exposes it, never a worker's port, so that nothing is counted twice.
DATABASE = CollectorRegistry()


def scrape() -> bytes:
    """The portal's exposition: this process's instruments, then the database's gauges."""
    return generate_latest(REGISTRY) + generate_latest(DATABASE)


def _answer(authorization: str | None, token: str) -> tuple[int, dict[str, str], bytes | None]:
    """(status, headers, body or None for "scrape now") of a scrape with this header."""
    if not token:
        return 404, {"Content-Type": "text/plain; charset=utf-8"}, (
            b"metrics are off: set PADDLECLOUD_METRICS_TOKEN\n")
    if not token_matches(authorization, token):
        return 401, {"Content-Type": "text/plain; charset=utf-8",
                     "WWW-Authenticate": 'Bearer realm="metrics"'}, (
            b"a bearer token is required: Authorization: Bearer <PADDLECLOUD_METRICS_TOKEN>\n")
    return 200, {"Content-Type": CONTENT_TYPE_LATEST, "Cache-Control": "no-store"}, None


def _scrape_with_database() -> bytes:
    """The exposition, whose database collectors (jobs.collector) ask the database: on a
    thread of Django's, its connection closed after as a request's is."""
    from django.db import close_old_connections

    close_old_connections()
    try:
        return scrape()
    finally:
        close_old_connections()


class MetricsApp:
    """ASGI middleware: ``GET /metrics`` here, before Django, everything else to ``app``."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        status, answer_headers, body = _answer(headers.get("authorization"), configured_token())
        if status == 200 and scope["method"] not in ("GET", "HEAD"):
            status, answer_headers, body = 405, {"Allow": "GET, HEAD",
                                                 "Content-Type": "text/plain"}, b""
        if body is None:
            body = await sync_to_async(_scrape_with_database, thread_sensitive=True)()
        answer_headers["Content-Length"] = str(len(body))
        await send({"type": "http.response.start", "status": status, "headers": [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer_headers.items()]})
        await send({"type": "http.response.body",
                    "body": b"" if scope["method"] == "HEAD" else body})
        http_observed("metrics", scope["method"], status, time.perf_counter() - started)


class RequestMetricsMiddleware:
    """Django middleware: every request Django answers, by the name of the URL pattern that
    took it (``api-job``, ``dashboard:jobs``), its method and status. Sync and async alike, so
    that it adds no switch between the two to a request."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        started = time.perf_counter()
        response = self.get_response(request)
        http_observed(route_of(request), request.method, response.status_code,
                      time.perf_counter() - started)
        return response

    async def _acall(self, request):
        started = time.perf_counter()
        response = await self.get_response(request)
        http_observed(route_of(request), request.method, response.status_code,
                      time.perf_counter() - started)
        return response


def route_of(request) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None:
        return UNMATCHED
    if match.url_name:
        return match.view_name  # with its namespace: "dashboard:jobs"
    return match.route or match._func_path  # a pattern without a name: its pattern


# -- a worker's own endpoint --------------------------------------------------------------------

class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # no line per scrape
        pass


class _ThreadingWSGIServer(WSGIServer):
    daemon_threads = True


def worker_metrics_app(token: str, registry: CollectorRegistry):
    def app(environ, start_response):
        status, headers, body = _answer(environ.get("HTTP_AUTHORIZATION"), token)
        if environ.get("PATH_INFO") != PATH:
            status, headers, body = 404, {"Content-Type": "text/plain"}, b"not found\n"
        if body is None:
            body = generate_latest(registry)
        reason = {200: "OK", 401: "Unauthorized", 404: "Not Found"}[status]
        start_response(f"{status} {reason}", [*headers.items(), ("Content-Length",
                                                                 str(len(body)))])
        return [body]

    return app


class WorkerMetricsServer:
    """``GET /metrics`` of a Celery worker on its own port, with the same token: the sum of
    its processes (prometheus_client's multiprocess mode, PROMETHEUS_MULTIPROC_DIR) or, without
    a directory, this process's. Never the database's gauges: the portal's /metrics has them."""

    def __init__(self, port: int, token: str, host: str = "0.0.0.0"):  # noqa: S104 (a pod)
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if directory:
            self.registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(self.registry, path=directory)
        else:
            self.registry = REGISTRY
        self.server = make_server(host, port, worker_metrics_app(token, self.registry),
                                  server_class=_ThreadingWSGIServer, handler_class=_QuietHandler)
        self.port = self.server.server_port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name="worker-metrics")

    def start(self) -> WorkerMetricsServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def multiprocess_dir_reset(directory: str) -> None:
    """Empty (or make) the multiprocess directory as a worker starts: what a restarted
    container left there (an emptyDir outlives it) belongs to processes that are gone."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    for path in Path(directory).glob("*.db"):
        path.unlink(missing_ok=True)


def worker_signals_connect() -> None:
    """A Celery worker started with PADDLECLOUD_METRICS_PORT serves its metrics there; with
    PROMETHEUS_MULTIPROC_DIR, the sum of its pool's processes."""
    from celery import signals

    def serve(**_):
        port = os.environ.get("PADDLECLOUD_METRICS_PORT")
        if not port:
            return
        token = os.environ.get("PADDLECLOUD_METRICS_TOKEN", "")
        if not token:
            logger.warning("PADDLECLOUD_METRICS_PORT is set without PADDLECLOUD_METRICS_TOKEN: "
                           "the worker's metrics answer 404")
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if directory:
            multiprocess_dir_reset(directory)
        WorkerMetricsServer(int(port), token).start()

    def process_gone(pid=None, **_):
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            multiprocess.mark_process_dead(pid or os.getpid())

    # celeryd_init: the worker's main process, before its pool forks (not the embedded worker,
    # which serves its metrics on the portal's /metrics).
    signals.celeryd_init.connect(serve, weak=False)
    signals.worker_process_shutdown.connect(process_gone, weak=False)

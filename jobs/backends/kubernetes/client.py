"""A thin layer over the official ``kubernetes`` client: the only module that talks to an API
server. Objects go in and come out as plain dicts (built by ``manifests``).

- Configuration is loaded once per datacenter: in-cluster, else its kubeconfig and context.
- Every call has a timeout; 5xx answers, timeouts and dropped connections are retried with
  exponential backoff, within a small budget, then raised as ``KubeError``.
- Throttling is waited out, not failed: a 429 (API Priority and Fairness sheds load with it,
  as does a server shutting down) and a 5xx that says ``Retry-After`` are retried after the
  time the server asks for (else the backoff), for up to ``PADDLECLOUD_KUBE_THROTTLE_SECONDS``
  of waiting, then raised as a ``KubeError`` that says the server kept throttling.
- In a namespace made a moment ago, the answers that only mean the server has not caught up
  with it (admission's "namespace not found", RBAC's 403 before it knows the portal's
  RoleBinding there) are tried again for a few seconds (``new_namespace_retry``).
- ``create`` treats 409 AlreadyExists as success when the object there belongs to the same
  job (a retried task), and as a clear error otherwise; ``delete`` treats 404 as done.
- ``watch`` streams changes from a resourceVersion and raises ``WatchExpired`` on 410 Gone,
  which is the caller's cue to list again.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlencode, urlsplit

import urllib3
import yaml
from django.conf import settings
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from ..base import BackendError
from .settings import kube_settings
from .validation import SUPPORTED_VERSIONS

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Resource:
    api: str  # "/api/v1", "/apis/apps/v1"
    plural: str
    namespaced: bool = True


RESOURCES = {
    "Namespace": Resource("/api/v1", "namespaces", namespaced=False),
    "Node": Resource("/api/v1", "nodes", namespaced=False),
    "ResourceQuota": Resource("/api/v1", "resourcequotas"),
    "LimitRange": Resource("/api/v1", "limitranges"),
    "Secret": Resource("/api/v1", "secrets"),
    "ConfigMap": Resource("/api/v1", "configmaps"),
    "Service": Resource("/api/v1", "services"),
    "Pod": Resource("/api/v1", "pods"),
    "Event": Resource("/api/v1", "events"),
    "StatefulSet": Resource("/apis/apps/v1", "statefulsets"),
    "Job": Resource("/apis/batch/v1", "jobs"),
    "PersistentVolume": Resource("/api/v1", "persistentvolumes", namespaced=False),
    "PersistentVolumeClaim": Resource("/api/v1", "persistentvolumeclaims"),
    "LocalQueue": Resource("/apis/kueue.x-k8s.io/v1beta1", "localqueues"),
    "Workload": Resource("/apis/kueue.x-k8s.io/v1beta1", "workloads"),
    "PodGroup": Resource("/apis/scheduling.volcano.sh/v1beta1", "podgroups"),
    "RoleBinding": Resource("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "NetworkPolicy": Resource("/apis/networking.k8s.io/v1", "networkpolicies"),
}
# Made once and left as they are: their specs cannot change (a volume and its claim, a
# LocalQueue's ClusterQueue). A namespace gets only its labels brought up to date.
CREATED_ONCE = frozenset({"PersistentVolume", "PersistentVolumeClaim", "LocalQueue",
                          "RoleBinding"})

RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
# The longest wait between two tries: doubling backoff stops growing there.
MAX_BACKOFF_SECONDS = 10.0
# For a moment after a namespace is made, parts of the API server that read from caches answer
# as if it (or what was just made in it) were not there: admission that reads namespaces from
# its informer (ValidatingAdmissionPolicy's matcher, until the patches of late 2025) answers a
# create in it 404 'namespace "NAME" not found'; the RBAC authorizer, which learns of
# RoleBindings from a watch (each API server of the cluster from its own), refuses 403 what the
# portal's new RoleBinding there allows. Those two answers about a namespace are tried again
# for this long (``Kube.new_namespace_retry``); any other answer is final at once.
NEW_NAMESPACE_SECONDS = 10.0
# The oldest Kubernetes whose API has every field of the job objects (the oldest they are
# validated against), and how long a server's version is taken as known.
MIN_VERSION = tuple(int(part) for part in SUPPORTED_VERSIONS[0].split("."))
VERSION_CHECK_SECONDS = 600.0
NETWORK_ERRORS = (urllib3.exceptions.HTTPError, OSError)
# An open watch holds its connection as long as it runs (the pod cache keeps one open per user
# namespace, and lists in each at once when it starts), so watches have a pool of connections
# of their own (``Kube.for_watches``): never the one the other requests reuse theirs from,
# which would then make (and, that pool full, throw away) a new connection for each request.
# Up to this many are kept there for the next watch.
WATCH_CONNECTIONS = 256


class KubeError(BackendError):
    """An API call failed for good: the message says what and why, for the job's events."""

    def __init__(self, message: str, *, status: int = 0, reason: str = ""):
        super().__init__(message)
        self.status = status
        self.reason = reason


class WatchExpired(KubeError):
    """The resourceVersion a watch started from is too old (410 Gone): list again."""


def new_namespace_answer(exc: KubeError, namespace: str) -> bool:
    """Whether ``exc`` is an answer about ``namespace`` that, just after it was made, only
    means the server has not caught up with it yet (``NEW_NAMESPACE_SECONDS``): admission's
    404 that it does not exist, or RBAC's 403 to us there (not, say, a quota's or Pod
    Security's 403, which are "is forbidden: exceeded quota", "…: violates PodSecurity")."""
    quoted = re.escape(f'"{namespace}"')
    if exc.status == 404:
        return re.match(rf"^namespaces? {quoted} not found$", str(exc)) is not None
    return exc.status == 403 and re.search(
        rf' is forbidden: User ".+" cannot .+ in the namespace {quoted}$', str(exc)) is not None


# The namespace whose new-namespace answers a call of this thread already retries: the calls
# it makes (an apply's create) leave them to it, so its deadline is the one that holds.
_retrying = threading.local()


def _status_message(status: int, data: bytes) -> tuple[str, str]:
    """The ``reason`` and ``message`` of a Kubernetes Status body (or what there is)."""
    try:
        body = json.loads(data)
        return body.get("reason", ""), body.get("message", "") or data.decode(errors="replace")
    except (ValueError, AttributeError):
        return "", data.decode(errors="replace")[:500] if data else f"HTTP {status}"


def _retry_after(response) -> float | None:
    """The seconds the server asks us to wait before trying again: its ``Retry-After``
    header (seconds; Kubernetes never sends an HTTP date), else the Status'
    ``details.retryAfterSeconds``; None if it says neither."""
    header = (response.headers or {}).get("Retry-After")
    if header is not None:
        try:
            return max(0.0, float(header))
        except ValueError:
            pass
    try:
        seconds = json.loads(response.data)["details"]["retryAfterSeconds"]
        return max(0.0, float(seconds))
    except (ValueError, TypeError, KeyError):
        return None


class Kube:
    """One API server, with the timeout and retry budget of the settings."""

    def __init__(self, api_client: k8s.ApiClient, *, name: str):
        self.api_client = api_client
        self.name = name
        self.timeout = settings.PADDLECLOUD_KUBE_TIMEOUT
        self.attempts = settings.PADDLECLOUD_KUBE_ATTEMPTS
        self.throttle_seconds = settings.PADDLECLOUD_KUBE_THROTTLE_SECONDS
        self._version: tuple[tuple[int, int], float] | None = None  # (version, when asked)
        self._username: str | None = None
        self._watches: Kube | None = None
        self._lock = threading.Lock()

    # -- requests ---------------------------------------------------------------------------

    def for_watches(self) -> Kube:
        """The same server, as the same account, on connections of its own (a pool of
        ``WATCH_CONNECTIONS``): for watches, each of which holds one while it runs, and the
        lists they start from."""
        with self._lock:
            if self._watches is None:
                configuration = copy.deepcopy(self.api_client.configuration)
                configuration.connection_pool_maxsize = WATCH_CONNECTIONS
                self._watches = Kube(k8s.ApiClient(configuration), name=self.name)
            return self._watches

    def _send(self, method: str, path: str, query: dict | None, body, *, stream: bool,
              timeout) -> k8s.rest.RESTResponse:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = ("application/merge-patch+json" if method == "PATCH"
                                       else "application/json")
        method, url, headers, body, post = self.api_client.param_serialize(
            method=method, resource_path=path,
            query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
            header_params=headers, body=body, auth_settings=["BearerToken"])
        response = self.api_client.call_api(method, url, headers, body, post,
                                            _request_timeout=timeout)
        if not stream:
            response.read()
        return response

    def request(self, method: str, path: str, *, query: dict | None = None, body=None,
                stream: bool = False, read_timeout: float | None = None):
        """The answer's JSON (or, with ``stream``, the open response), retrying 5xx and
        network errors (``attempts`` tries) and waiting out throttling (429, or a 5xx with
        ``Retry-After``: up to ``throttle_seconds`` of waiting, not counted as tries). Other
        4xx answers raise ``KubeError`` with the Status' reason at once."""
        timeout = (self.timeout, read_timeout or self.timeout)
        backoff, failures, throttled, waited = 0.2, 0, 0, 0.0
        while True:
            try:
                response = self._send(method, path, query, body, stream=stream,
                                      timeout=timeout)
            except NETWORK_ERRORS as exc:
                problem, status, asked = f"cannot reach the API server: {exc}", 0, None
            else:
                if response.status < 400:
                    return response if stream else json.loads(response.data or b"null")
                data = response.read()
                reason, message = _status_message(response.status, data)
                if response.status not in RETRIED_STATUSES:
                    raise KubeError(message, status=response.status, reason=reason)
                problem, status = f"the API server answered {response.status}: {message}", \
                    response.status
                asked = _retry_after(response)
            # Jitter, so that the workers a throttle turned away do not all come back at once.
            delay = backoff * random.uniform(0.5, 1.0)  # noqa: S311 (not a secret)
            throttling = status == 429 or asked is not None
            if throttling:
                throttled += 1
                delay = max(delay, asked or 0.0)
                if waited + delay > self.throttle_seconds:
                    raise KubeError(
                        f"Kubernetes ({self.name}): the API server kept throttling us: "
                        f"{problem} (throttled {throttled} times in {waited:.0f} s; waiting "
                        f"{delay:.0f} s more would pass PADDLECLOUD_KUBE_THROTTLE_SECONDS="
                        f"{self.throttle_seconds:g})", status=status,
                        reason="TooManyRequests" if status == 429 else "")
            else:
                failures += 1
                if failures >= self.attempts:
                    raise KubeError(f"Kubernetes ({self.name}): {problem} "
                                    f"(after {failures} attempts)", status=status)
            logger.warning("Kubernetes %s %s (%s): %s; trying again in %.1f s", method, path,
                           f"throttled {throttled}" if throttling else f"attempt {failures}",
                           problem, delay)
            time.sleep(delay)
            waited += delay
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    # -- the server -------------------------------------------------------------------------

    def version(self) -> tuple[int, int]:
        """The server's (major, minor) version, from /version (some clouds say "30+")."""
        info = self.request("GET", "/version")
        try:
            return int(info["major"]), int(re.match(r"\d+", info["minor"]).group())
        except (KeyError, TypeError, ValueError, AttributeError):
            raise KubeError(f"Kubernetes ({self.name}) answered /version with {info!r}, "
                            "not a version") from None

    def version_check(self, *, fresh: bool = False) -> str:
        """The server's version ("1.31"), if it is ``MIN_VERSION`` or newer; else
        ``KubeError`` saying so. Asked again after ``VERSION_CHECK_SECONDS`` (or if
        ``fresh``): clusters are upgraded, and rolled back."""
        now = time.monotonic()
        if fresh or self._version is None or now - self._version[1] > VERSION_CHECK_SECONDS:
            self._version = (self.version(), now)
        found = self._version[0]
        shown, needed = ".".join(map(str, found)), ".".join(map(str, MIN_VERSION))
        if found < MIN_VERSION:
            raise KubeError(
                f"datacenter {self.name}: its cluster runs Kubernetes {shown}, older than "
                f"PaddleCloud needs ({needed} or newer: the trainers' indexed Job uses "
                "backoffLimitPerIndex and podReplacementPolicy, deploy/'s admission policy "
                "admissionregistration.k8s.io/v1); upgrade the cluster")
        return shown

    def username(self) -> str:
        """Who the API server takes us for ("system:serviceaccount:paddlecloud:paddlecloud"),
        from a SelfSubjectReview (which every authenticated account may make); asked once."""
        if self._username is None:
            answer = self.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                  body={"apiVersion": "authentication.k8s.io/v1",
                                        "kind": "SelfSubjectReview"})
            try:
                self._username = answer["status"]["userInfo"]["username"]
            except (KeyError, TypeError):
                raise KubeError(f"Kubernetes ({self.name}) answered a SelfSubjectReview with "
                                f"{answer!r}, not who we are") from None
        return self._username

    # -- objects ----------------------------------------------------------------------------

    @staticmethod
    def path(kind: str, namespace: str | None = None, name: str | None = None) -> str:
        resource = RESOURCES[kind]
        path = resource.api
        if resource.namespaced and namespace:
            path += f"/namespaces/{namespace}"
        path += f"/{resource.plural}"
        return f"{path}/{name}" if name else path

    async def channels(self, path: str, query: list[tuple[str, str]]):
        """A WebSocket to ``path`` (a pod's ``exec`` or ``portforward``) speaking
        ``v4.channel.k8s.io``, as the same account over the same TLS as every request: an
        open ``websockets`` connection (``streams.py`` reads and writes its frames). The API
        server passes a v4 upgrade on to the kubelet as it is. A refusal (RBAC, a pod that is
        not there or not running) raises ``KubeError`` with the server's message."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake, InvalidStatus

        configuration = self.api_client.configuration
        url = urlsplit(configuration.host)
        scheme = "wss" if url.scheme == "https" else "ws"
        address = f"{scheme}://{url.netloc}{url.path.rstrip('/')}{path}?{urlencode(query)}"
        headers = {}
        bearer = configuration.auth_settings().get("BearerToken")
        if bearer and bearer.get("value"):
            headers["Authorization"] = bearer["value"]
        tls = {"ssl": _ssl_context(configuration)} if scheme == "wss" else {}
        if tls and getattr(configuration, "tls_server_name", None):
            tls["server_hostname"] = configuration.tls_server_name
        try:
            return await connect(address, additional_headers=headers,
                                 subprotocols=[CHANNEL_PROTOCOL], open_timeout=self.timeout,
                                 max_size=None, compression=None, ping_interval=None, **tls)
        except InvalidStatus as exc:
            response = exc.response
            reason, message = _status_message(response.status_code, response.body or b"")
            raise KubeError(message, status=response.status_code, reason=reason) from None
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            raise KubeError(f"Kubernetes ({self.name}): cannot reach the API server: {exc}") \
                from None

    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        try:
            return self.request("GET", self.path(kind, namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, obj: dict, *, same_if: tuple[str, str] | None = None) -> dict:
        """Create ``obj``. If it exists already and carries the label ``same_if`` (key,
        value) — it was made by an earlier run of the same task — that one is returned;
        any other 409 is an error that names the object."""
        kind, meta = obj["kind"], obj["metadata"]
        try:
            return self._post(obj)
        except KubeError as exc:
            if exc.status != 409 or exc.reason != "AlreadyExists":
                raise
        existing = self.get(kind, meta.get("namespace"), meta["name"])
        if existing is not None and (same_if is None or existing["metadata"].get(
                "labels", {}).get(same_if[0]) == same_if[1]):
            return existing
        raise KubeError(f"{kind} {meta['name']} already exists in namespace "
                        f"{meta.get('namespace')} and belongs to something else", status=409,
                        reason="AlreadyExists")

    def apply(self, obj: dict) -> dict:
        """Create ``obj``, or replace what is there with it (namespace objects, secrets; a
        Namespace's labels only; ``CREATED_ONCE`` kinds never)."""
        kind, meta = obj["kind"], obj["metadata"]
        for _ in range(3):  # a concurrent change makes the replace conflict: read again
            existing = self.get(kind, meta.get("namespace"), meta["name"])
            if existing is None:
                try:
                    return self._post(obj)
                except KubeError as exc:
                    if exc.reason != "AlreadyExists":
                        raise
                    continue
            if kind in CREATED_ONCE:
                return existing
            if kind == "Namespace":
                # Only its labels are ours to change (its Pod Security level, when the
                # datacenter's volume or uid changed); others' labels and its finalizers stay.
                labels = existing["metadata"].get("labels") or {}
                if all(labels.get(k) == v for k, v in meta.get("labels", {}).items()):
                    return existing
                replacement = {**existing, "metadata": {
                    **existing["metadata"], "labels": {**labels, **meta.get("labels", {})}}}
            else:
                replacement = {**obj, "metadata": {
                    **meta, "resourceVersion": existing["metadata"]["resourceVersion"]}}
            try:
                return self.request("PUT", self.path(kind, meta.get("namespace"),
                                                     meta["name"]), body=replacement)
            except KubeError as exc:
                if exc.status != 409:
                    raise
        raise KubeError(f"{kind} {meta['name']} keeps changing under us; try again")

    def _post(self, obj: dict) -> dict:
        """Create ``obj``; in a namespace just made, as ``new_namespace_retry`` tries."""
        namespace = obj["metadata"].get("namespace")
        return self.new_namespace_retry(namespace, lambda: self.request(
            "POST", self.path(obj["kind"], namespace), body=obj))

    def new_namespace_retry(self, namespace: str | None, call: Callable[[], T]) -> T:
        """``call()``, tried again, backing off, while it meets an answer that only means
        ``namespace`` was made a moment ago (``new_namespace_answer``), for up to
        ``NEW_NAMESPACE_SECONDS``; then that answer is raised. Within such a call, another
        (an apply's create in the same namespace) is not retried again: the outer one is."""
        if not namespace or getattr(_retrying, "namespace", None) == namespace:
            return call()
        outer, _retrying.namespace = getattr(_retrying, "namespace", None), namespace
        try:
            deadline = time.monotonic() + NEW_NAMESPACE_SECONDS
            delay = 0.05
            while True:
                try:
                    return call()
                except KubeError as exc:
                    if not new_namespace_answer(exc, namespace) \
                            or time.monotonic() + delay > deadline:
                        raise
                    logger.info("Kubernetes %s: in namespace %s, just made: %s; trying again",
                                self.name, namespace, exc)
                time.sleep(delay)
                delay = min(2 * delay, 1.0)
        finally:
            _retrying.namespace = outer

    def delete(self, kind: str, namespace: str | None, name: str, *,
               grace: float | None = None, propagation: str = "Background") -> bool:
        """Delete the object and (by owner references) what it owns. False if it was gone."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1",
                "propagationPolicy": propagation}
        if grace is not None:
            body["gracePeriodSeconds"] = int(grace)
        try:
            self.request("DELETE", self.path(kind, namespace, name), body=body)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def list(self, kind: str, namespace: str | None = None, *, selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[dict], str]:
        """Every object of ``kind`` (in ``namespace``, or in all), and the list's
        resourceVersion to watch from."""
        answer = self.request("GET", self.path(kind, namespace), query={
            "labelSelector": selector, "fieldSelector": field_selector})
        items = answer.get("items") or []
        for item in items:  # lists leave these out of their items
            item.setdefault("kind", kind)
        return items, answer["metadata"].get("resourceVersion", "")

    def watch(self, kind: str, namespace: str | None, *, selector: str | None,
              resource_version: str, timeout_seconds: int = 60,
              opened: Callable[[urllib3.BaseHTTPResponse], None] | None = None
              ) -> Iterator[dict]:
        """The changes after ``resource_version``, as ``{"type", "object"}`` events, until the
        server ends the stream (best on ``for_watches``' connections). Raises ``WatchExpired``
        on 410 Gone (in-stream or not). ``opened`` is given the open stream: another thread
        may ``shutdown()`` it to end the watch at once."""
        try:
            response = self.request("GET", self.path(kind, namespace), stream=True, query={
                "watch": "true", "labelSelector": selector,
                "resourceVersion": resource_version, "timeoutSeconds": timeout_seconds,
                "allowWatchBookmarks": "true"}, read_timeout=timeout_seconds + self.timeout)
        except KubeError as exc:
            if exc.status == 410:
                raise WatchExpired(str(exc), status=410, reason=exc.reason) from None
            raise
        try:
            if opened is not None:
                opened(response.response)
            for line in _lines(response.response):
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    if status.get("code") == 410:
                        raise WatchExpired(status.get("message", "resourceVersion too old"),
                                           status=410, reason=status.get("reason", "Expired"))
                    raise KubeError(status.get("message", "watch error"),
                                    status=status.get("code", 0))
                yield event
        finally:
            response.response.release_conn()

    # -- Kueue ------------------------------------------------------------------------------

    def queue_position(self, namespace: str, local_queue: str, workload: str) -> int | None:
        """The workload's position in its ClusterQueue (0: next), from Kueue's visibility
        API; None where Kueue does not list it (admitted, or no visibility API)."""
        path = (f"/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/{namespace}/localqueues/"
                f"{local_queue}/pendingworkloads")
        try:
            answer = self.request("GET", path)
        except KubeError as exc:
            if exc.status in (403, 404, 503):
                return None
            raise
        for item in answer.get("items") or []:
            if (item.get("metadata") or {}).get("name") == workload:
                return item.get("positionInClusterQueue")
        return None

    # -- pods -------------------------------------------------------------------------------

    def pod_log(self, namespace: str, name: str, *, container: str | None = None,
                follow: bool = False, tail_lines: int | None = None,
                previous: bool = False) -> Iterator[bytes]:
        """A pod's log, in chunks as they come (following until the container ends); with
        ``previous``, its container's run before the current one."""
        path = self.path("Pod", namespace, name) + "/log"
        query = {"container": container, "follow": "true" if follow else None,
                 "tailLines": tail_lines, "previous": "true" if previous else None}
        response = self.request("GET", path, query=query, stream=True,
                                read_timeout=3600 if follow else None)
        try:
            yield from response.response.stream(64 * 1024, decode_content=True)
        finally:
            response.response.release_conn()

    def events_for(self, namespace: str, uid: str) -> list[dict]:
        """The Events about one object (by uid), oldest first."""
        events, _ = self.list("Event", namespace, field_selector=f"involvedObject.uid={uid}")
        return sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


CHANNEL_PROTOCOL = "v4.channel.k8s.io"


def _ssl_context(configuration: k8s.Configuration) -> ssl.SSLContext | None:
    """The TLS of the configuration's requests (its CA, its client certificate), for a
    WebSocket: None for plain HTTP."""
    if not configuration.host.startswith("https"):
        return None
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        context.check_hostname = False
    return context


def _lines(response) -> Iterator[bytes]:
    """Newline-delimited records of a streamed response."""
    pending = b""
    for chunk in response.stream(64 * 1024, decode_content=True):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from (line for line in lines if line.strip())
    if pending.strip():
        yield pending


# -- one client per datacenter -----------------------------------------------------------------

_clients: dict[tuple, Kube] = {}
_clients_lock = threading.Lock()


def kube_for(datacenter) -> Kube:
    """The datacenter's API server, its configuration loaded the first time (in-cluster, else
    its kubeconfig and context). A broken configuration raises ``KubeError`` saying so."""
    key = _client_key(datacenter)
    with _clients_lock:
        if key not in _clients:
            _clients[key] = Kube(_api_client(datacenter), name=datacenter.name)
        return _clients[key]


def _client_key(datacenter) -> tuple:
    settings_ = kube_settings(datacenter)
    return settings_.kube_in_cluster, settings_.kubeconfig, settings_.kube_context


def api_server(datacenter) -> str | None:
    """The URL of the datacenter's API server, as its configuration names it (None: that
    cannot be loaded): datacenters with the same one share a cluster and its namespaces."""
    try:
        return _configuration(datacenter).host.rstrip("/").lower()
    except KubeError:
        return None


def _api_client(datacenter) -> k8s.ApiClient:
    configuration = _configuration(datacenter)
    configuration.retries = False  # ours, with backoff, in Kube.request
    return k8s.ApiClient(configuration)


def _configuration(datacenter) -> k8s.Configuration:
    configuration = k8s.Configuration()
    settings_ = kube_settings(datacenter)
    try:
        if settings_.kube_in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(
                config_file=settings_.kubeconfig or None,
                context=settings_.kube_context or None, client_configuration=configuration,
                persist_config=False)
    except (ConfigException, OSError, ValueError, TypeError, yaml.YAMLError) as exc:
        where = ("the in-cluster service account" if settings_.kube_in_cluster else
                 f"kubeconfig {settings_.kubeconfig or '~/.kube/config'}")
        raise KubeError(f"datacenter {datacenter.name}: cannot load {where}: {exc}") from None
    return configuration


def kube_forget(datacenter=None) -> None:
    """Drop cached clients (a datacenter's configuration changed; tests)."""
    with _clients_lock:
        if datacenter is None:
            _clients.clear()
        else:
            _clients.pop(_client_key(datacenter), None)

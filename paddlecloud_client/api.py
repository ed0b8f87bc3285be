"""The PaddleCloud API client: HTTP, tokens and errors. It never prints.

Every request carries ``Authorization: Bearer <token>``; the token comes from the cache or a
login, and a cached token the server refuses (401) is replaced by one fresh login and the
request retried once. Non-2xx answers become ``ApiError`` with the server's message;
connection failures and timeouts become ``NetworkError`` naming the endpoint.

A job's submission carries an ``Idempotency-Key`` and is tried again, with that key, when the
portal cannot be reached or answers 503 (a restart, its database or Redis down): the portal
makes the job once however often it is sent.
"""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import requests

from paddlecloud_client.config import Config, Datacenter
from paddlecloud_client.errors import ApiError, NetworkError
from paddlecloud_client.tokens import FILENAME, TokenCache, token_key
from paddlecloud_core import __version__
from paddlecloud_core.errors import causes
from paddlecloud_core.logcursor import log_cursor

CONNECT_TIMEOUT = 10
READ_TIMEOUT = 60
TRANSFER_TIMEOUT = 300
BLOCK = 1 << 20
LOGIN_PATH = "/api/v1/auth/token/"
DEVICE_PATH = "/api/v1/auth/device/"
DEVICE_TOKEN_PATH = "/api/v1/auth/device/token/"  # noqa: S105 - a path
JOBS = "/api/v1/jobs/"
SWEEPS = "/api/v1/sweeps/"
SESSIONS = "/api/v1/sessions/"
BUILDS = "/api/v1/builds/"

Body = bytes | Callable[[], Any] | None  # a callable makes a fresh body for each attempt
SUBMIT_ATTEMPTS = 5
SUBMIT_BACKOFF = 1.0  # seconds before the second attempt, doubled each time (Retry-After wins)
SUBMIT_BACKOFF_MAX = 15.0
LOG_RECONNECT_SECONDS = 60  # a followed log lost is asked for again for this long at most
LOG_RECONNECT_BACKOFF = (0.2, 5.0)  # seconds between the attempts: the first, the most


class ApiClient:
    def __init__(self, endpoint: str, datacenter: str, username: str, password: str,
                 token_cache: TokenCache, *, hint: str = "check `endpoint` in ~/.paddle/config",
                 token: str = "", agent: str = "paddlectl"):
        self.endpoint = endpoint.rstrip("/")
        self.datacenter = datacenter
        self.username = username
        self._password = password
        # A token from the config (made on the Tokens page): used as it is, never replaced.
        self.fixed_token = token
        self.cache = token_cache
        self.hint = hint
        self.key = token_key(self.endpoint, datacenter, username)
        self.session = requests.Session()
        self.session.headers["User-Agent"] = f"{agent}/{__version__}"

    # -- requests ---------------------------------------------------------------------------

    def request(self, method: str, path: str, *, params: dict | None = None,
                json: Any = None, body: Body = None, headers: dict | None = None,
                stream: bool = False, transfer: bool = False, wait: bool = False,
                auth: bool = True) -> requests.Response:
        """Send one request; a 2xx response, else ``ApiError`` / ``NetworkError``.

        ``transfer``: a long read timeout (bytes in bulk); ``wait``: none at all (a followed
        log may stay quiet for hours).
        """
        read = None if wait else TRANSFER_TIMEOUT if transfer else READ_TIMEOUT
        send = {"params": params, "json": json, "headers": headers, "stream": stream,
                "timeout": (CONNECT_TIMEOUT, read)}
        if not auth:
            return self._checked(self._send(method, path, None, body, **send))
        token, fresh = self._token()
        response = self._send(method, path, token, body, **send)
        if response.status_code == 401 and self.fixed_token:
            self._checked(response, refused_token=True)
        if response.status_code == 401 and not fresh:
            response.close()
            self.cache.drop(self.key)
            response = self._send(method, path, self.login()["token"], body, **send)
        return self._checked(response)

    def call(self, method: str, path: str, **kwargs) -> Any:
        """``request`` and the answer's JSON (None for an empty answer)."""
        response = self.request(method, path, **kwargs)
        return response.json() if response.content else None

    def iter_content(self, response: requests.Response) -> Iterator[bytes]:
        """The body of a streamed response in 1 MiB blocks; a lost connection is an error."""
        try:
            yield from response.iter_content(BLOCK)
        except requests.RequestException as exc:
            raise self._network_error(exc, "connection lost while receiving") from None

    def _send(self, method, path, token, body, *, headers=None, **kwargs) -> requests.Response:
        headers = dict(headers or {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = body() if callable(body) else body
        try:
            return self.session.request(method, self.endpoint + path, data=data,
                                        headers=headers, **kwargs)
        except requests.RequestException as exc:
            raise self._network_error(exc) from None

    @staticmethod
    def websocket_error(message: dict, close_code: int | None) -> ApiError:
        """A portal WebSocket's ``{"type": "error"}`` message, and the close that followed it
        (4000 + the HTTP status the API would answer), as the error it is."""
        status = close_code - 4000 if close_code and 4000 <= close_code < 5000 else 0
        return ApiError(status, str(message.get("code") or "error"),
                        str(message.get("message") or "refused"), message.get("fields"))

    def _checked(self, response: requests.Response,
                 refused_token: bool = False) -> requests.Response:
        """``response`` if it is a 2xx, else the ``ApiError`` its body describes."""
        if response.ok:
            return response
        try:
            payload = response.json()
        except ValueError:
            payload = None
        response.close()
        if isinstance(payload, dict) and isinstance(payload.get("message"), str):
            message = payload["message"]
            if refused_token:
                message = (message.split("; run `paddlectl login`")[0]
                           + f"; the token is `token` of datacenter {self.datacenter!r} in "
                           f"your config: make a new one on the Tokens page, "
                           f"{self.endpoint}/tokens/, and put it there")
            error = ApiError(response.status_code, str(payload.get("code") or "error"),
                             message, payload.get("fields"))
        else:
            request, status = response.request, response.status_code
            error = ApiError(status, "http_error",
                             f"{request.method} {request.url}: {status} {response.reason}")
        retry_after = response.headers.get("Retry-After", "")
        error.retry_after = int(retry_after) if retry_after.isdigit() else None
        raise error

    def _network_error(self, exc: requests.RequestException,
                       doing: str = "cannot reach") -> NetworkError:
        return NetworkError(f"{doing} {self.endpoint}: {network_reason(exc)}; {self.hint}")

    # -- tokens -----------------------------------------------------------------------------

    def token(self, fresh: bool = False) -> str:
        """The token requests carry; with ``fresh``, a new login's (the cached one was
        refused), unless it is the config's own."""
        if fresh and not self.fixed_token:
            self.cache.drop(self.key)
            return self.login()["token"]
        return self._token()[0]

    def _token(self) -> tuple[str, bool]:
        """The token to use, and whether it was just issued."""
        if self.fixed_token:
            return self.fixed_token, False
        entry = self.cache.get(self.key)
        if entry is not None:
            return entry["token"], False
        return self.login()["token"], True

    def login(self) -> dict:
        """A new token (revoking the cached one, if any); the server's answer."""
        if not self._password:
            raise ApiError(401, "no_password",
                           f"datacenter {self.datacenter!r} has no password in the config (a "
                           "single sign-on user): run `paddlectl login --web`, or put a token "
                           f"from the Tokens page ({self.endpoint}/tokens/) in the config as "
                           "`token:`")
        issued = self.call("POST", LOGIN_PATH, auth=False, json={
            "username": self.username, "password": self._password,
            "datacenter": self.datacenter, "name": "paddlectl"})
        return self._keep(issued)

    def _keep(self, issued: dict) -> dict:
        old = self.cache.get(self.key)
        self.cache.put(self.key, {key: issued.get(key) for key in ("token", "id", "expires_at")})
        if old is not None and old.get("token") != issued.get("token"):
            with contextlib.suppress(NetworkError):  # else it expires on its own
                self._revoke(old["token"]).close()
        return issued

    def device_login(self, show: Callable[[dict], None],
                     sleep: Callable[[float], None] = time.sleep) -> dict:
        """``paddlectl login --web``: ask for a login, ``show`` its code and page to the user,
        poll until they approve it in the browser; the token is cached as a login's is."""
        started = self.call("POST", DEVICE_PATH, auth=False, json={
            "username": self.username, "datacenter": self.datacenter, "name": "paddlectl"})
        show(started)
        interval = float(started.get("interval") or 2)
        deadline = time.monotonic() + float(started.get("expires_in") or 600)
        while time.monotonic() < deadline:
            sleep(interval)
            try:
                issued = self.call("POST", DEVICE_TOKEN_PATH, auth=False,
                                   json={"device_code": started["device_code"]})
            except ApiError as exc:
                if exc.code == "authorization_pending":
                    continue
                if exc.code == "slow_down":
                    interval += 1
                    continue
                raise
            if issued.get("username") != self.username:  # the server checks it too
                raise ApiError(403, "wrong_user", f"the login was approved for "
                               f"{issued.get('username')!r}, not {self.username!r}")
            return self._keep(issued)
        raise ApiError(401, "expired_token", "the login was not approved in time; run "
                                             "`paddlectl login --web` again")

    def logout(self) -> bool:
        """Revoke the cached token and forget it; False when there was none."""
        entry = self.cache.get(self.key)
        if entry is None:
            self.cache.drop(self.key)
            return False
        response = self._revoke(entry["token"])
        if response.status_code != 401:  # a token the server no longer takes is gone anyway
            self._checked(response)
        self.cache.drop(self.key)
        return True

    def _revoke(self, token: str) -> requests.Response:
        return self._send("DELETE", LOGIN_PATH, token, None,
                          timeout=(CONNECT_TIMEOUT, READ_TIMEOUT))

    # -- endpoints --------------------------------------------------------------------------

    def server_version(self) -> dict:
        return self.call("GET", "/api/v1/version", auth=False)

    def me(self) -> dict:
        return self.call("GET", "/api/v1/me")

    def pfs_list(self, path: str, recursive: bool = False) -> dict:
        return self.call("GET", "/api/v1/pfs/files",
                         params={"path": path, "recursive": int(recursive)})

    def pfs_stat(self, path: str) -> dict:
        return self.call("GET", "/api/v1/pfs/stat", params={"path": path})

    def pfs_mkdir(self, path: str, parents: bool = False) -> dict:
        return self.call("POST", "/api/v1/pfs/mkdir", json={"path": path, "parents": parents})

    def pfs_remove(self, path: str, recursive: bool = False) -> dict:
        return self.call("DELETE", "/api/v1/pfs/files",
                         params={"path": path, "recursive": int(recursive)})

    def pfs_usage(self) -> dict:
        return self.call("GET", "/api/v1/pfs/usage")

    # -- registry credentials ---------------------------------------------------------------

    def registry_list(self) -> list[dict]:
        return self.call("GET", "/api/v1/registries/")

    def registry_get(self, name: str) -> dict:
        return self.call("GET", f"/api/v1/registries/{quote(name, safe='')}/")

    def registry_create(self, name: str, server: str, username: str, password: str) -> dict:
        return self.call("POST", "/api/v1/registries/", json={
            "name": name, "server": server, "username": username, "password": password})

    def registry_delete(self, name: str) -> None:
        self.call("DELETE", f"/api/v1/registries/{quote(name, safe='')}/")

    # -- notification subscriptions ---------------------------------------------------------

    def notify_list(self) -> list[dict]:
        return self.call("GET", "/api/v1/notifications/subscriptions/")

    def notify_create(self, fields: dict) -> dict:
        """A new subscription; a webhook's comes with its ``secret``, shown this once."""
        return self.call("POST", "/api/v1/notifications/subscriptions/", json=fields)

    def notify_delete(self, subscription: str) -> None:
        self.call("DELETE", f"/api/v1/notifications/subscriptions/{quote(subscription, safe='')}/")

    def notify_test(self, subscription: str) -> dict:
        return self.call("POST",
                         f"/api/v1/notifications/subscriptions/{quote(subscription, safe='')}/test")

    def quota(self) -> dict:
        """Each resource's limit and use: ``{"cpu": {"limit", "used", …}, …}``."""
        return self.call("GET", "/api/v1/quota")

    def budgets(self) -> list[dict]:
        """Your budgets and your group's: GPU-hours and CPU-hours per window, used and left
        (none from a portal older than budgets, which has no such page)."""
        try:
            return self.call("GET", "/api/v1/quota/budgets")
        except ApiError as exc:
            if exc.status == 404:
                return []
            raise

    def usage(self, params: dict, fmt: str = "json") -> dict | str:
        """The usage report (``since``, ``until``, ``by``, ``per``, ``group``, ``user``): its
        JSON, or with ``fmt`` csv the rows as the portal exports them."""
        return self._export("/api/v1/usage", params, fmt)

    def audit(self, params: dict, fmt: str = "json") -> list[dict] | str:
        """The audit entries you may read (``action``, ``since``, ``until``, ``user``,
        ``limit``), newest first; with ``fmt`` csv as the portal exports them."""
        return self._export("/api/v1/audit", params, fmt)

    def _export(self, path: str, params: dict, fmt: str) -> Any:
        """An export's JSON, or its CSV text (``fmt`` csv); empty ``params`` left out."""
        params = {k: v for k, v in params.items() if v}
        if fmt == "csv":
            return self.request("GET", path, params={**params, "format": "csv"}).text
        return self.call("GET", path, params=params)

    def group(self) -> dict:
        """Your group: ``{"name", "weight", "members", "quota"}`` (404 when in none)."""
        return self.call("GET", "/api/v1/group")

    # -- jobs -------------------------------------------------------------------------------

    def job_list(self, state: str | None = None, *, group: bool = False,
                 folded: bool = False) -> list[dict]:
        """Every job of the datacenter (with ``group``: of your group's members), newest
        first, following the cursor pages; with ``folded``, a sweep's trials as one row of
        the sweep (``"kind": "sweep"``), as the job list shows them."""
        params = {"limit": 500, **({"state": state} if state else {})}
        if group:
            return self.pages("/api/v1/group/jobs/", params)
        return self.pages(JOBS, {**params, **({} if folded else {"unfolded": "true"})})

    def pages(self, path: str, params: dict) -> list[dict]:
        """Every row of a cursor-paged list, following ``next`` from the first page."""
        rows: list[dict] = []
        while True:
            page = self.call("GET", path, params=params)
            rows += page.get("results", [])
            if not page.get("next"):
                return rows
            params = {key: values[-1]
                      for key, values in parse_qs(urlsplit(page["next"]).query).items()}

    def job_submit(self, body: dict) -> dict:
        """The job created, or with ``dry_run`` in ``body`` the plan of what it would start.
        A submission the portal may not have received, or could not take (503), is sent again
        with the same ``Idempotency-Key``, SUBMIT_ATTEMPTS times at most."""
        if body.get("dry_run"):
            return self.call("POST", JOBS, json=body)
        key = {"Idempotency-Key": str(uuid.uuid4())}
        return self.retried(lambda: self.call("POST", JOBS, json=body, headers=key))

    def retried(self, send: Callable[[], Any], attempts: int = SUBMIT_ATTEMPTS) -> Any:
        """``send()``, again after a network error or a 503, with backoff (the server's
        Retry-After when it gives one), ``attempts`` times at most; then the last error, saying
        how long it was tried."""
        started, delay = time.monotonic(), SUBMIT_BACKOFF
        for attempt in range(1, attempts + 1):
            try:
                return send()
            except (NetworkError, ApiError) as exc:
                if not _transient(exc, (503,)):
                    raise
                if attempt == attempts:
                    tried = (f" (tried {attempts} times over "
                             f"{time.monotonic() - started:.0f} s; try again later)")
                    if isinstance(exc, ApiError):
                        raise ApiError(exc.status, exc.code, exc.message + tried,
                                       exc.fields) from None
                    raise NetworkError(exc.message + tried) from None
                time.sleep(getattr(exc, "retry_after", None) or delay)
                delay = min(delay * 2, SUBMIT_BACKOFF_MAX)
        return None  # (attempts < 1)

    def job_get(self, name: str) -> dict:
        return self.call("GET", _job_path(name))

    def job_workers(self, name: str) -> list[dict]:
        return self.call("GET", _job_path(name, "workers"))

    def job_events(self, name: str) -> list[dict]:
        """Every event of the job, oldest first, following the cursor pages."""
        return self.pages(_job_path(name, "events"), {"limit": 1000})

    def job_kill(self, name: str) -> dict:
        return self.call("POST", _job_path(name, "kill"))

    def job_delete(self, name: str) -> None:
        self.call("DELETE", _job_path(name))

    def sweep_submit(self, body: dict) -> dict:
        return self.call("POST", SWEEPS, json=body)

    def sweep_list(self) -> list[dict]:
        return self.call("GET", SWEEPS)

    def sweep_get(self, name: str) -> dict:
        return self.call("GET", f"{SWEEPS}{quote(name, safe='')}/")

    def sweep_kill(self, name: str) -> dict:
        return self.call("POST", f"{SWEEPS}{quote(name, safe='')}/kill")

    def sweep_delete(self, name: str) -> None:
        self.call("DELETE", f"{SWEEPS}{quote(name, safe='')}/")

    def session_start(self, body: dict) -> dict:
        """A session (a notebook: ``{"kind": "notebook", "gpu", "cpu", "memory", "image",
        "idle", "name"}``), started as a job of the user's."""
        return self.call("POST", SESSIONS, json=body)

    def session_list(self, *, kind: str | None = None, ended: bool = False) -> list[dict]:
        params = {key: value for key, value in (("kind", kind), ("all", "true" if ended
                                                                   else None)) if value}
        return self.call("GET", SESSIONS, params=params)

    def session_stop(self, name: str) -> dict:
        return self.call("POST", f"{SESSIONS}{quote(name, safe='')}/stop")

    def session_keep(self, name: str, keep: bool = True) -> dict:
        return self.call("POST", f"{SESSIONS}{quote(name, safe='')}/keep", json={"keep": keep})

    def job_logs(self, name: str, *, worker: str | None = None, tail: int | None = None,
                 follow: bool = False, offset: str | None = None) -> requests.Response:
        """A worker's log as a streamed response (close it when done); header ``Log-Offset``:
        where it begins (``paddlecloud_core.logcursor``; absent for a tail of a pod's log
        not followed)."""
        params = {key: value for key, value in
                  {"worker": worker, "tail": tail, "offset": offset,
                   "follow": 1 if follow else None}.items() if value is not None}
        return self.request("GET", _job_path(name, "logs"), params=params, stream=True,
                            wait=follow)

    def job_log_blocks(self, name: str, *, worker: str | None = None,
                       tail: int | None = None, follow: bool = False) -> Iterator[bytes]:
        """A worker's log, block by block. Followed, it outlives a restart of the portal: a
        connection lost is made again (with backoff, for LOG_RECONNECT_SECONDS at most) and
        the log goes on from the byte after the last one given (of the file, or of the pod's
        container run: the ``Log-Offset`` cursor), so no line comes twice and none is missed.
        (An answer without one, from an older portal, cannot go on: a lost one is an error.)"""
        start, given, lost = None, 0, None
        delay = LOG_RECONNECT_BACKOFF[0]
        while True:
            try:
                where = {"tail": tail} if start is None else \
                    {"offset": str(start.advanced(given))}
                response = self.job_logs(name, worker=worker, follow=follow, **where)
            except (NetworkError, ApiError) as exc:
                if lost is None or not _transient(exc):
                    raise
                error = exc
            else:
                try:
                    if start is None:
                        start = log_cursor(response.headers.get("Log-Offset", "")) or False
                    for block in self.iter_content(response):
                        given += len(block)
                        lost = None
                        yield block
                    return
                except NetworkError as exc:
                    if not follow or not start:
                        raise
                    error = exc
                finally:
                    response.close()
            lost = lost or time.monotonic()
            if time.monotonic() - lost > LOG_RECONNECT_SECONDS:
                raise NetworkError(f"{error.message} (the log was asked for again for "
                                   f"{LOG_RECONNECT_SECONDS} s)") from None
            time.sleep(delay)
            delay = min(delay * 2, LOG_RECONNECT_BACKOFF[1])

    def build_create(self, body: dict) -> dict:
        """Build a runtime image (``paddlectl build``): the build, ``building``."""
        return self.call("POST", BUILDS, json=body)

    def build_get(self, build_id: str) -> dict:
        return self.call("GET", f"{BUILDS}{quote(build_id, safe='')}/")

    def build_logs(self, build_id: str, *, follow: bool = False) -> requests.Response:
        """A build's log as a streamed response (close it when done)."""
        return self.request("GET", f"{BUILDS}{quote(build_id, safe='')}/logs",
                            params={"follow": 1} if follow else None, stream=True, wait=follow)

    def job_tasks(self, name: str) -> dict:
        """What the job's master has done: ``{"passes": [{"pass", "waiting", "leased",
        "done", "set_aside", "total"}], "current_pass", "total_passes", "tasks": [...]}``
        (the tasks of the current pass, or the last)."""
        return self.call("GET", _job_path(name, "tasks"))

    def job_checkpoints(self, name: str) -> dict:
        """The job's checkpoints and its trainer 0's runs: ``{"job", "directory",
        "checkpoints": [{"step", "pass", "time", "size", "complete", "problem", "path",
        "resumed_by"}], "runs": [{"run", "started_at", "ended_at", "resumed_from",
        "lost_steps", "lost_seconds"}]}``."""
        return self.call("GET", _job_path(name, "checkpoints"))

    def templates(self) -> list[dict]:
        """The job templates to submit from: ``[{"name", "description", "spec", "locked",
        "limits"}]``."""
        return self.call("GET", "/api/v1/templates/")

    def compare(self, names: list[str], *, metric: str | None = None) -> dict:
        """Jobs side by side: ``{"jobs", "metrics", "table": [{"job", "metric", "goal",
        "final", "final_step", "best", "best_step", "points"}], "diff": [{"field", "values":
        {job: value}, "secret"}], "metric", "x", "smoothing", "max_points", "series"}``
        (``series`` with ``metric``: each job's curve, thinned, ``{"job", "points", "step",
        "time", "value"}``)."""
        params = {"jobs": ",".join(names), **({"metric": metric} if metric else {})}
        return self.call("GET", "/api/v1/compare/", params=params)

    def job_metrics(self, name: str, *, worker: str | None = None) -> dict:
        """What a worker reported with ``paddlecloud_sdk.report``: ``{"worker", "names",
        "records"}``, each record ``{"seq", "step", "time", "metrics": {name: value}}``. Every
        record, asked for page by page (the API answers a page at a time)."""
        params = {"worker": worker} if worker else {}
        page = self.call("GET", _job_path(name, "metrics"), params=params)
        records, names = page["records"], set(page["names"])
        while page.get("more"):
            page = self.call("GET", _job_path(name, "metrics"),
                             params={**params, "from": page["next"]})
            records += page["records"]
            names.update(page["names"])
        return {"worker": page["worker"], "names": sorted(names), "records": records}


def _transient(exc: BaseException, statuses=(502, 503, 504)) -> bool:
    """Whether ``exc`` may pass if the request is made again: the portal not reached, or
    unavailable for a while (restarting behind a proxy, its database or Redis down)."""
    return isinstance(exc, NetworkError) or (isinstance(exc, ApiError)
                                             and exc.status in statuses)


def _job_path(name: str, what: str = "") -> str:
    return f"{JOBS}{quote(name, safe='')}/{what}"


def network_reason(exc: BaseException) -> str:
    """A few words on why a request failed: connection refused, unknown host, timeout..."""
    if isinstance(exc, requests.ConnectTimeout):
        return f"no connection within {CONNECT_TIMEOUT} s"
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS handshake failed"
    for cause in causes(exc):
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror) or type(cause).__name__ == "NameResolutionError":
            return "unknown host"
        if isinstance(cause, ConnectionResetError):
            return "connection reset"
        if isinstance(cause, TimeoutError | requests.Timeout) \
                or type(cause).__name__ == "ReadTimeoutError":
            return "no answer in time"
    return "connection failed"


def datacenter_client(config: Config, datacenter: Datacenter,
                      agent: str = "paddlectl") -> ApiClient:
    """The client of one datacenter of the config, its tokens cached beside the config file
    (``agent`` names the program in its requests)."""
    return ApiClient(datacenter.endpoint, datacenter.name, datacenter.username,
                     datacenter.password, TokenCache(config.path.parent / FILENAME),
                     hint=f"check `endpoint` of datacenter {datacenter.name!r} in {config.path}",
                     token=datacenter.token, agent=agent)

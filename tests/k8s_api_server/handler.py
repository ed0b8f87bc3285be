"""HTTP: routes Kubernetes API paths to the REST semantics of ``api.py``, streams watches and
followed logs with chunked encoding, answers Tables to kubectl, applies injected faults and
checks the bearer token."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import traceback
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, unquote, urlsplit

from . import crds, discovery, errors, logs, rbac, resources, tables
from .api import DeleteOptions
from .errors import ApiError
from .watch import WatchDropped, watch_events

log = logging.getLogger(__name__)
_PUBLIC_PATHS = ("/version", "/healthz", "/livez", "/readyz")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver"

    def setup(self):
        super().setup()
        # Headers and body go out as separate writes: without this, Nagle's algorithm and
        # delayed ACKs add 40 ms to every request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.app.connection_opened(self.connection)

    def finish(self):
        self.server.app.connection_closed(self.connection)
        super().finish()

    def log_message(self, format, *args):
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self):
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    # --- request handling ------------------------------------------------------------

    def _serve(self):
        app = self.server.app
        self.deprecation = None  # the Warning of a deprecated custom resource version
        url = urlsplit(self.path)
        # Decoded, as Go's URL.Path the real server splits: a client that escapes a "/" in a
        # name ("lq%2Fpendingworkloads") reaches the subresource.
        path = unquote(url.path).rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        app.request_log.append((self.command, self.path))
        try:
            body = self._read_body()
            fault = app.faults.take(self.command, path)
            if fault and fault.hang_seconds:
                app.stopping.wait(fault.hang_seconds)
            if fault and fault.status:
                raise fault.error()
            self.portal = False
            if path not in _PUBLIC_PATHS:
                self._authenticate(app.settings)
            self._route(app, path, query, body)
        except ApiError as exc:
            self._send_json(exc.code, exc.status(), exc.headers)
        except ValueError as exc:  # a malformed number in the query (limit, tailLines…)
            self._send_json(400, errors.bad_request(str(exc)).status())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the fake: answer 500 and let the fixture fail
            app.errors.append(traceback.format_exc())
            self._send_json(500, ApiError(500, "InternalError",
                                          f"Internal error occurred: {exc!r}").status())

    def _read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise errors.bad_request(f"error decoding request body: {exc}") from exc

    def _authenticate(self, settings) -> None:
        """A wrong token is refused. No token at all is let in, like the old insecure port:
        kubectl never sends a bearer token over plain http. The portal's token is let in,
        its requests authorized by its rules (when they are set)."""
        sent = self.headers.get("Authorization")
        if sent == f"Bearer {settings.portal_token}":
            self.portal = settings.portal_rules is not None
        elif sent is not None and sent != f"Bearer {settings.token}":
            raise ApiError(401, "Unauthorized", "Unauthorized")

    def _route(self, app, path: str, query: dict, body) -> None:
        if path in ("/healthz", "/livez", "/readyz"):
            return self._send_bytes(200, b"ok", "text/plain")
        if path == "/version":
            return self._send_json(200, discovery.version(app.settings.kubernetes_version))
        if path == "/api":
            return self._send_json(200, discovery.api_versions(self.headers.get("Host", "")))
        types = app.api.types
        if path == "/apis":
            return self._send_json(200, discovery.api_group_list(types))
        if path == "/openapi/v3":
            return self._send_json(200, discovery.openapi_v3_root(types))
        if path.startswith("/openapi/v3/"):
            document = discovery.openapi_v3_document(path.removeprefix("/openapi/v3/"), types)
            if document is None:
                raise _no_such_path()
            return self._send_json(200, document)
        if path == "/apis/authentication.k8s.io/v1/selfsubjectreviews" and \
                self.command == "POST":
            return self._send_json(201, rbac.self_subject_review(self.portal))
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["apis"] and len(parts) == 2 and parts[1] in resources.groups(types):
            return self._send_json(200, discovery.api_group(parts[1], types))
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _no_such_path()
        if not rest:
            listing = discovery.api_resource_list(group, version, types)
            if listing is None:
                raise _no_such_path()
            return self._send_json(200, listing)
        return self._resource(app, query, body,
                              *_parse_target(app.api.lookup, group, version, rest))

    def _resource(self, app, query: dict, body, rt, namespace, name, subresource,
                  watch_path: bool) -> None:
        api, method = app.api, self.command
        if self.portal:
            watch = watch_path or query.get("watch") in ("true", "1")
            rules = app.settings.portal_rules
            if namespace and app.settings.portal_namespace_roles:
                rules = rules + rbac.namespace_rules(api.bindings_seen(namespace),
                                                     app.settings.portal_namespace_roles)
            rbac.authorize(rules,
                           rbac.verb(method, named=name is not None, watch=watch),
                           rt, namespace, name, subresource)
        self.deprecation = getattr(rt, "deprecation", None)
        if getattr(rt, "serve", None) is not None:  # an aggregated API: Kueue's visibility
            if method != "GET":
                raise errors.method_not_allowed(method.lower())
            return self._send_json(200, rt.serve(namespace, name, subresource, query))
        warnings: list[str] = []
        options = {"field_validation": query.get("fieldValidation"),
                   "dry_run": query.get("dryRun") == "All", "warnings": warnings}
        if method == "GET" and subresource == "log":
            return self._serve_log(app, namespace, name, query)
        if method == "GET" and name is None:
            if watch_path or query.get("watch") in ("true", "1"):
                return self._serve_watch(app, rt, namespace, query)
            return self._send_listing(rt, api.list(rt, namespace, query))
        if method == "GET":
            obj = api.get(rt, namespace, name)
            return self._send_listing(rt, {"items": [obj], "metadata": {}}, single=obj)
        if method == "POST" and name and subresource == "eviction":
            options = _delete_options({}, (body or {}).get("deleteOptions"))
            return self._send_json(201, api.evict(namespace, name, options))
        if method == "POST" and name is None and (namespace is not None or not rt.namespaced):
            obj = api.create(rt, namespace or "", body or {}, **options)
            return self._send_json(201, obj, _warning_headers(warnings))
        if method == "PUT" and name:
            obj = api.replace(rt, namespace or "", name, body or {}, subresource=subresource,
                              **options)
            return self._send_json(200, obj, _warning_headers(warnings))
        if method == "PATCH" and name:
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            obj = api.patch(rt, namespace or "", name, body, content_type,
                            subresource=subresource, **options)
            return self._send_json(200, obj, _warning_headers(warnings))
        if method == "DELETE" and name and subresource is None:
            code, result = api.delete(rt, namespace or "", name, _delete_options(query, body))
            return self._send_json(code, result)
        if method == "DELETE" and name is None:
            return self._send_json(200, api.delete_collection(rt, namespace, query,
                                                              _delete_options(query, body)))
        raise errors.method_not_allowed(method.lower())

    def _send_listing(self, rt, listing: dict, single: dict | None = None) -> None:
        """Plain JSON, or a Table when kubectl asks for one."""
        if "as=Table" in (self.headers.get("Accept") or ""):
            return self._send_json(200, _table(rt, listing))
        return self._send_json(200, single if single is not None else listing)

    # --- streams -----------------------------------------------------------------------

    def _serve_watch(self, app, rt, namespace, query: dict) -> None:
        events = watch_events(app.api, rt, namespace, query, is_stopping=app.stopping.is_set)
        as_table = "as=Table" in (self.headers.get("Accept") or "")
        self._start_stream("application/json")
        try:
            for event in events:
                if as_table and event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    event = {**event, "object": _table(rt, {
                        "items": [event["object"]], "metadata": {
                            "resourceVersion": event["object"]["metadata"]["resourceVersion"]}})}
                self._write_chunk(_json_line(event))
        except WatchDropped:
            return self._abort_stream()
        self._end_stream()

    def _serve_log(self, app, namespace: str, name: str, query: dict) -> None:
        pod = app.api.get(resources.PODS, namespace, name)
        generation = app.store.watch_generation
        first, more = logs.answer(app.store, app.logs, pod, query, lambda: (
            app.stopping.is_set() or app.store.watch_generation != generation))
        if more is None:
            return self._send_bytes(200, first, "text/plain")
        self._start_stream("text/plain")
        try:
            if first:
                self._write_chunk(first)
            for chunk in more:
                self._write_chunk(chunk)
        except logs.FollowDropped:
            return self._abort_stream()
        self._end_stream()

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        for key, value in self._with_deprecation({}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _abort_stream(self) -> None:
        """Cut the connection mid-stream, without the final chunk: a dropped watch."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    # --- plain responses ------------------------------------------------------------------

    def _send_json(self, code: int, body: dict, headers: dict | None = None) -> None:
        self._send_bytes(code, json.dumps(body, separators=(",", ":")).encode(),
                         "application/json", headers)

    def _send_bytes(self, code: int, data: bytes, content_type: str,
                    headers: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in self._with_deprecation(headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _with_deprecation(self, headers: dict) -> dict:
        """Every request to a deprecated version gets its warning (kubectl prints it)."""
        if not getattr(self, "deprecation", None):
            return headers
        warning = _warning_headers([self.deprecation])["Warning"]
        if headers.get("Warning"):
            warning = f"{warning}, {headers['Warning']}"
        return {**headers, "Warning": warning}


def _parse_target(lookup, group: str, version: str, rest: list[str]):
    """(resource type, namespace, name, subresource, legacy /watch/ path) of a resource path;
    ``lookup(group, version, plural)`` finds the served types (``Api.lookup``)."""
    watch_path = rest[0] == "watch"
    rest = rest[1:] if watch_path else rest
    namespace = None
    nested = lookup(group, version, rest[2]) if len(rest) >= 3 else None
    if rest and rest[0] == "namespaces" and nested is not None and nested.namespaced:
        namespace, rest = rest[1], rest[2:]
    rt = lookup(group, version, rest[0]) if rest else None
    if rt is None or len(rest) > 3 or (rt.namespaced and namespace is None and len(rest) > 1):
        raise _no_such_path()
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if subresource is not None and subresource not in rt.subresources:
        raise _no_such_path()
    return rt, namespace, name, subresource, watch_path


def _table(rt, listing: dict) -> dict:
    return crds.table(rt, listing) if isinstance(rt, crds.CustomType) else \
        tables.table(rt, listing)


def _delete_options(query: dict, body) -> DeleteOptions:
    body = body if isinstance(body, dict) else {}
    preconditions = body.get("preconditions") or {}
    propagation = query.get("propagationPolicy") or body.get("propagationPolicy")
    orphan = query.get("orphanDependents", body.get("orphanDependents"))
    if propagation is None and orphan is not None:
        propagation = "Orphan" if str(orphan).lower() == "true" else "Background"
    grace = query.get("gracePeriodSeconds", body.get("gracePeriodSeconds"))
    dry_run = query.get("dryRun") == "All" or "All" in (body.get("dryRun") or [])
    return DeleteOptions(propagation=propagation,
                         grace_seconds=int(grace) if grace not in (None, "") else None,
                         uid=preconditions.get("uid"),
                         resource_version=preconditions.get("resourceVersion"), dry_run=dry_run)


def _warning_headers(warnings: list[str]) -> dict:
    quoted = ('299 - "' + w.replace('"', '\\"') + '"' for w in warnings)
    return {"Warning": ", ".join(quoted)} if warnings else {}


def _json_line(event: dict) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


def _no_such_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")

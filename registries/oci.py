"""A client of the Distribution (OCI) HTTP API v2: image references, manifests and blobs,
and the ``config.json`` form of a registry credential.

No Django here: the portal's services, the builder (``jobs.backends.buildah``) and the
Kubernetes pull secrets use it alike.

- ``image_ref_parse``: Docker's reference grammar (``distribution/reference``): an optional
  registry host (the first part, when it has a ``.`` or a ``:``, is ``localhost`` or has an
  upper-case letter), the repository (lower-case path components), a tag and/or a
  ``@sha256:`` digest. ``ubuntu`` is ``docker.io/library/ubuntu:latest``.
- ``manifest_digest``, ``manifest_get``, ``blob_get``: what a registry holds. Anonymous first;
  on ``401`` the challenge is answered, ``Basic`` with the credentials, ``Bearer`` with a token
  from the challenge's realm (fetched with the credentials, if any). ``insecure`` means plain
  HTTP (a registry on a private network without TLS).
- ``RegistryError``: what went wrong, naming the registry; ``refused`` when the registry
  refused the credentials or the access (401/403). A message never holds the password.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
import weakref

import requests

DEFAULT_HOST = "docker.io"
# Docker Hub's API is not at its name.
API_HOSTS = {"docker.io": "registry-1.docker.io"}
LEGACY_HOSTS = ("index.docker.io",)
DEFAULT_TAG = "latest"
NAME_MAX = 255

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join(MANIFEST_TYPES)

# distribution/reference's grammar
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
PATH_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_DOMAIN_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
HOST_RE = re.compile(rf"^(?:{_DOMAIN_LABEL}(?:\.{_DOMAIN_LABEL})*|\[[0-9A-Fa-f:.]+\])"
                     r"(?::([0-9]+))?$")
TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
DIGEST_RE = re.compile(r"^sha256:[a-f0-9]{64}$")

MANIFEST_MAX = 4 * 1024 * 1024  # Distribution's own limit on a manifest


@dataclasses.dataclass(frozen=True)
class ImageRef:
    """A parsed image reference. ``tag`` is None only when the reference names a digest
    alone; ``digest`` is ``sha256:…`` or None."""

    host: str
    repository: str
    tag: str | None = DEFAULT_TAG
    digest: str | None = None

    @property
    def api_host(self) -> str:
        """Where the registry's API answers (Docker Hub's is not at its name)."""
        return API_HOSTS.get(self.host, self.host)

    @property
    def reference(self) -> str:
        """What ``/v2/<repository>/manifests/<reference>`` names: the digest, else the tag."""
        return self.digest or self.tag or DEFAULT_TAG

    @property
    def name(self) -> str:
        return f"{self.host}/{self.repository}"

    def __str__(self) -> str:
        return (self.name + (f":{self.tag}" if self.tag else "")
                + (f"@{self.digest}" if self.digest else ""))


def _bad(ref: str, rule: str) -> ValueError:
    return ValueError(f"{ref!r} is not an image reference: {rule}")


def image_ref_parse(ref: str) -> ImageRef:
    """``[host[:port]/]path[:tag][@sha256:hex]`` as Docker reads it. Raises ``ValueError``
    naming the rule a bad reference breaks."""
    if not isinstance(ref, str) or not ref:
        raise _bad(ref, "it is empty (write e.g. registry.example.com/team/trainer:1)")
    if ref != ref.strip() or any(c.isspace() for c in ref):
        raise _bad(ref, "it may not contain spaces")
    if "://" in ref:
        raise _bad(ref, f"write it without {ref.split('://')[0]}://")
    rest, _, digest = ref.partition("@")
    if digest and not DIGEST_RE.match(digest):
        raise _bad(ref, "a digest is @sha256: and 64 lower-case hexadecimal digits")
    tag = None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1:]
        if not TAG_RE.match(tag):
            raise _bad(ref, "a tag is at most 128 letters, digits, '_', '.' and '-', not "
                            "starting with '.' or '-'")
    first, sep, path = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        host = first
        match = HOST_RE.match(host)
        if match is None:
            raise _bad(ref, f"{host!r} is not a registry host[:port]")
        if match.group(1) is not None and not 0 < int(match.group(1)) < 65536:
            raise _bad(ref, f"port {match.group(1)} is not between 1 and 65535")
        if host in LEGACY_HOSTS:
            host = DEFAULT_HOST
    else:
        host, path = DEFAULT_HOST, rest
    if not path:
        raise _bad(ref, "it names no repository after the registry host")
    if path != path.lower():
        raise _bad(ref, "the repository name must be lower-case")
    if not PATH_RE.match(path):
        raise _bad(ref, "the repository is path components of lower-case letters and digits, "
                        "separated by '/', each joined inside by '.', '_', '__' or '-'")
    if host == DEFAULT_HOST and "/" not in path:
        path = f"library/{path}"
    if len(f"{host}/{path}") > NAME_MAX:
        raise _bad(ref, f"the repository name is longer than {NAME_MAX} characters")
    return ImageRef(host=host, repository=path,
                    tag=tag if tag or digest else DEFAULT_TAG, digest=digest or None)


def docker_config_json(host: str, username: str, password: str) -> str:
    """The credential as the ``~/.docker/config.json`` text that docker, buildah, skopeo
    (``--authfile``) and the kubelet (a ``.dockerconfigjson`` pull secret) read: ``auth``
    is ``base64(username:password)``; ``username`` and ``password`` repeat it in the clear for
    the readers that look there."""
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    return json.dumps({"auths": {host: {"username": username, "password": password,
                                        "auth": auth}}})


class RegistryError(Exception):
    """The registry could not be asked, or answered with an error. ``refused``: it refused the
    credentials or the access (401/403)."""

    def __init__(self, message: str, *, refused: bool = False, status: int | None = None):
        super().__init__(message)
        self.refused = refused
        self.status = status


# --- requests ------------------------------------------------------------------------------

# The Authorization a session earned per (API host, repository): the calls of one sequence
# (a manifest, then its blobs) answer a challenge once.
_earned: weakref.WeakKeyDictionary[requests.Session, dict[tuple[str, str], str]] = (
    weakref.WeakKeyDictionary())


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="…",service="…",scope="…"`` → ("bearer", {"realm": …, …})."""
    scheme, _, rest = header.strip().partition(" ")
    params = {key.lower(): quoted if quoted or not bare else bare
              for key, quoted, bare in re.findall(
                  r'([A-Za-z_]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))', rest)}
    return scheme.lower(), params


def _errors(response: requests.Response) -> str:
    """The registry's own words: ``{"errors": [{"code", "message", "detail"}]}``."""
    try:
        body = response.json()
        said = "; ".join(f"{e.get('code', '')}: {e.get('message', '')}".strip(": ")
                         for e in body.get("errors", []) if isinstance(e, dict))
    except (ValueError, AttributeError):
        said = ""
    return said or f"HTTP {response.status_code} {response.reason or ''}".strip()


def _codes(response: requests.Response) -> set[str]:
    try:
        return {e.get("code") for e in response.json().get("errors", []) if isinstance(e, dict)}
    except (ValueError, AttributeError):
        return set()


class _Registry:
    """One registry (the API host of ``ref``) asked through one session."""

    def __init__(self, ref: ImageRef, auth, insecure: bool, timeout: float,
                 session: requests.Session | None):
        self.ref = ref
        self.auth = auth
        self.timeout = timeout
        self.base = f"{'http' if insecure else 'https'}://{ref.api_host}"
        self.session = session or requests.Session()
        self.owned = session is None
        self.key = (ref.api_host, ref.repository)

    def close(self) -> None:
        if self.owned:
            self.session.close()

    def _who(self) -> str:
        return f"the registry {self.ref.host}"

    def _refused(self, response: requests.Response | None, action: str) -> RegistryError:
        said = f" ({_errors(response)})" if response is not None else ""
        if self.auth:
            message = (f"{self._who()} refused the credentials of {self.auth[0]!r} to "
                       f"{action} {self.ref.repository}{said}")
        else:
            message = (f"{self._who()} refused anonymous access to {action} "
                       f"{self.ref.repository}: it needs credentials{said}")
        return RegistryError(message, refused=True,
                             status=response.status_code if response is not None else None)

    def _send(self, method: str, url: str, headers: dict, **kwargs) -> requests.Response:
        try:
            return self.session.request(method, url, headers=headers, timeout=self.timeout,
                                        **kwargs)
        except requests.exceptions.SSLError as exc:
            raise RegistryError(f"{self._who()} cannot be reached over HTTPS: {exc} (a "
                                "registry without TLS is an insecure one)") from exc
        except requests.RequestException as exc:
            raise RegistryError(f"{self._who()} cannot be reached: {exc}") from exc

    def _token(self, params: dict[str, str], action: str) -> str:
        realm = params.get("realm")
        if not realm:
            raise RegistryError(f"{self._who()} asked for a token without naming where to "
                                "get it (no realm in its challenge)")
        query = {key: params[key] for key in ("service", "scope") if params.get(key)}
        query.setdefault("scope", f"repository:{self.ref.repository}:pull")
        try:
            response = self.session.get(realm, params=query, auth=self.auth,
                                        timeout=self.timeout)
        except requests.RequestException as exc:
            raise RegistryError(f"{self._who()}'s token service {realm} cannot be reached: "
                                f"{exc}") from exc
        if response.status_code in (401, 403):
            raise self._refused(response, action)
        if response.status_code != 200:
            raise RegistryError(f"{self._who()}'s token service {realm} answered "
                                f"{_errors(response)}", status=response.status_code)
        try:
            body = response.json()
            token = body.get("token") or body.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"{self._who()}'s token service {realm} gave no token")
        return token

    def request(self, method: str, path: str, action: str, *, headers: dict | None = None,
                **kwargs) -> requests.Response:
        """``method`` on ``/v2/<repository>/<path>``, answering one authentication challenge.
        401/403 after that raise ``RegistryError(refused=True)``; other answers are returned."""
        url = f"{self.base}/v2/{self.ref.repository}/{path}"
        headers = dict(headers or {})
        earned = _earned.setdefault(self.session, {})
        if self.key in earned:
            headers["Authorization"] = earned[self.key]
        response = self._send(method, url, headers, **kwargs)
        if response.status_code == 401:  # a challenge, or what was earned has expired
            earned.pop(self.key, None)
            scheme, params = _challenge(response.headers.get("WWW-Authenticate", ""))
            if scheme == "basic":
                if not self.auth:
                    raise self._refused(response, action)
                credentials = base64.b64encode(":".join(self.auth).encode()).decode()
                authorization = f"Basic {credentials}"
            elif scheme == "bearer":
                authorization = f"Bearer {self._token(params, action)}"
            else:
                raise self._refused(response, action)
            response.close()
            headers["Authorization"] = authorization
            response = self._send(method, url, headers, **kwargs)
            if response.status_code not in (401, 403):
                earned[self.key] = authorization
        if response.status_code in (401, 403):
            raise self._refused(response, action)
        return response

    def failed(self, response: requests.Response, what: str) -> RegistryError:
        return RegistryError(f"{self._who()} answered {_errors(response)} for {what}",
                             status=response.status_code)


def _asked(ref: ImageRef | str) -> ImageRef:
    return ref if isinstance(ref, ImageRef) else image_ref_parse(ref)


def _digest_of(body: bytes) -> str:
    return f"sha256:{hashlib.sha256(body).hexdigest()}"


def manifest_digest(ref: ImageRef | str, *, auth: tuple[str, str] | None = None,
                    insecure: bool = False, timeout: float = 10,
                    session: requests.Session | None = None) -> str | None:
    """The digest of the manifest ``ref`` names (an index or list for a multi-platform
    image), or None when the registry has no such image. ``RegistryError`` otherwise."""
    ref = _asked(ref)
    registry = _Registry(ref, auth, insecure, timeout, session)
    try:
        path = f"manifests/{ref.reference}"
        response = registry.request("HEAD", path, "pull", headers={"Accept": ACCEPT})
        if response.status_code == 404:
            return None
        digest = response.headers.get("Docker-Content-Digest")
        if response.status_code == 200 and digest:
            return digest
        # no HEAD, or no digest in its answer: the manifest itself tells
        response = registry.request("GET", path, "pull", headers={"Accept": ACCEPT})
        if response.status_code == 404 or _codes(response) & {"MANIFEST_UNKNOWN",
                                                             "NAME_UNKNOWN"}:
            return None
        if response.status_code != 200:
            raise registry.failed(response, str(ref))
        return response.headers.get("Docker-Content-Digest") or _digest_of(response.content)
    finally:
        registry.close()


def manifest_get(ref: ImageRef | str, *, auth: tuple[str, str] | None = None,
                 insecure: bool = False, timeout: float = 10,
                 session: requests.Session | None = None) -> tuple[str, str, dict]:
    """The manifest ``ref`` names: (its digest, its media type, its JSON). An image that is
    not there is a ``RegistryError`` (status 404); so is a body that does not match its
    digest."""
    ref = _asked(ref)
    registry = _Registry(ref, auth, insecure, timeout, session)
    try:
        response = registry.request("GET", f"manifests/{ref.reference}", "pull",
                                    headers={"Accept": ACCEPT})
        if response.status_code != 200:
            raise registry.failed(response, str(ref))
        body = response.content
        if len(body) > MANIFEST_MAX:
            raise RegistryError(f"the manifest of {ref} at the registry {ref.host} is larger "
                                f"than {MANIFEST_MAX} bytes")
        digest = _digest_of(body)
        said = ref.digest or response.headers.get("Docker-Content-Digest", digest)
        if said.startswith("sha256:") and said != digest:
            raise RegistryError(f"the manifest of {ref} at the registry {ref.host} does not "
                                f"match its digest {said} (it is {digest})")
        try:
            manifest = json.loads(body)
        except ValueError as exc:
            raise RegistryError(f"the manifest of {ref} at the registry {ref.host} is not "
                                f"JSON: {exc}") from exc
        if not isinstance(manifest, dict):
            raise RegistryError(f"the manifest of {ref} at the registry {ref.host} is not a "
                                "JSON object")
        media_type = (response.headers.get("Content-Type", "").split(";")[0].strip()
                      or manifest.get("mediaType", ""))
        return digest, media_type, manifest
    finally:
        registry.close()


def blob_get(ref: ImageRef | str, digest: str, *, auth: tuple[str, str] | None = None,
             insecure: bool = False, timeout: float = 10,
             session: requests.Session | None = None) -> bytes:
    """The blob ``digest`` (a layer or a config) of ``ref``'s repository, checked against
    its digest. ``RegistryError`` when it is not there or does not match."""
    ref = _asked(ref)
    if not DIGEST_RE.match(digest or ""):
        raise ValueError(f"{digest!r} is not a sha256 digest (sha256: and 64 hex digits)")
    registry = _Registry(ref, auth, insecure, timeout, session)
    try:
        response = registry.request("GET", f"blobs/{digest}", "pull", stream=True)
        try:
            if response.status_code != 200:
                raise registry.failed(response, f"{ref.name}@{digest}")
            hasher, chunks = hashlib.sha256(), []
            for chunk in response.iter_content(1 << 20):
                hasher.update(chunk)
                chunks.append(chunk)
        except requests.RequestException as exc:
            raise RegistryError(f"the registry {ref.host} broke off sending {digest}: "
                                f"{exc}") from exc
        finally:
            response.close()
        if f"sha256:{hasher.hexdigest()}" != digest:
            raise RegistryError(f"the blob {digest} from the registry {ref.host} does not "
                                f"match its digest (it is sha256:{hasher.hexdigest()})")
        return b"".join(chunks)
    finally:
        registry.close()

"""A real image registry for the tests: the Distribution registry (``docker-registry``, 2.8,
from Debian) on 127.0.0.1 over plain HTTP, its storage in the test's tmp.

``registry_server(tmp_path)`` lets anyone push and pull. With ``users`` it asks for them:
``htpasswd`` (bcrypt) Basic authentication, which Distribution 2.8 accepts over plain HTTP
(it warns about nothing; only the clients decide whether to send a password without TLS:
``insecure``/``--tls-verify=false`` do). With ``token=True`` too, it asks for a Bearer
token instead (``auth: token``), as Docker Hub and most hosted registries do: a token service
in this process checks the users' passwords and signs a JWT (RS256, its self-signed
certificate in the ``x5c`` header and in the registry's ``rootcertbundle``) granting what the
challenge's scope asks.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import json
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import bcrypt
import requests

from tests.json_answer import json_answer
from tests.processes import process_stop

REGISTRY = "/usr/bin/docker-registry"
SERVICE = "paddlecloud-test-registry"
ISSUER = "paddlecloud-test-token"


@dataclasses.dataclass
class RegistryServer:
    host: str  # 127.0.0.1:PORT
    root: Path  # its storage
    log: Path  # what it said
    users: dict[str, str]
    pid: int = 0
    realm: str | None = None  # the token service's, with token=True
    token_requests: list[dict] = dataclasses.field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.host}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _TokenService:
    """A Docker token service (the ``realm`` of a Bearer challenge) in a thread."""

    def __init__(self, where: Path, server: RegistryServer):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding, rsa
        from cryptography.x509.oid import NameOID

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=1))
                .sign(key, hashes.SHA256()))
        self.bundle = where / "token-cert.pem"
        self.bundle.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        x5c = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()

        def sign(claims: dict) -> str:
            header = {"typ": "JWT", "alg": "RS256", "x5c": [x5c]}
            signed = (f"{_b64url(json.dumps(header).encode())}."
                      f"{_b64url(json.dumps(claims).encode())}")
            signature = key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
            return f"{signed}.{_b64url(signature)}"

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                query = parse_qs(urlsplit(self.path).query)
                user = None
                header = self.headers.get("Authorization", "")
                if header.startswith("Basic "):
                    name, _, password = base64.b64decode(header[6:]).decode().partition(":")
                    if server.users.get(name) != password:
                        return json_answer(self, 401, {"details": "incorrect username or password"})
                    user = name
                server.token_requests.append({"user": user, "query": query})
                access = []
                for scope in query.get("scope", []):
                    kind, _, rest = scope.partition(":")
                    repository, _, actions = rest.rpartition(":")
                    if user is not None and kind == "repository":
                        access.append({"type": kind, "name": repository,
                                       "actions": actions.split(",")})
                moment = int(time.time())
                token = sign({"iss": ISSUER, "sub": user or "", "aud": SERVICE,
                              "exp": moment + 600, "nbf": moment - 60, "iat": moment,
                              "jti": secrets.token_hex(8), "access": access})
                json_answer(self, 200, {"token": token, "access_token": token, "expires_in": 600})


        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.realm = f"http://127.0.0.1:{self.httpd.server_address[1]}/token"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


def _config(root: Path, port: int, auth: dict | None) -> str:
    config = {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(root / "data")},
                    "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}", "secret": secrets.token_hex(16)},
    }
    if auth:
        config["auth"] = auth
    return json.dumps(config, indent=2)  # JSON is YAML


def _stop(process: subprocess.Popen) -> None:
    process_stop(process)


@contextlib.contextmanager
def registry_server(tmp_path: Path, *, users: dict[str, str] | None = None,
                    token: bool = False) -> Iterator[RegistryServer]:
    """A running registry (stopped on the way out, whatever happens), open to all, or with
    ``users`` (name → password) by Basic authentication, or by Bearer tokens (``token``)."""
    root = Path(tmp_path) / f"registry-{secrets.token_hex(4)}"
    root.mkdir(parents=True)
    server = RegistryServer(host="", root=root, log=root / "registry.log",
                            users=dict(users or {}))
    tokens = None
    auth = None
    try:
        if users and token:
            tokens = _TokenService(root, server)
            server.realm = tokens.realm
            auth = {"token": {"realm": tokens.realm, "service": SERVICE, "issuer": ISSUER,
                              "rootcertbundle": str(tokens.bundle)}}
        elif users:
            htpasswd = root / "htpasswd"
            htpasswd.write_text("".join(
                f"{name}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()}\n"
                for name, password in users.items()))
            auth = {"htpasswd": {"realm": "paddlecloud-test", "path": str(htpasswd)}}
        elif token:
            raise ValueError("a token service needs users")
        for _attempt in range(5):  # another process may take the free port first
            port = free_port()
            config = root / "config.yml"
            config.write_text(_config(root, port, auth))
            with server.log.open("ab") as log:
                process = subprocess.Popen(
                    [REGISTRY, "serve", str(config)], stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                if _answers(process, port, server.log):
                    server.host, server.pid = f"127.0.0.1:{port}", process.pid
                    break
            except BaseException:
                _stop(process)
                raise
            _stop(process)
        else:
            raise RuntimeError(f"the registry did not start:\n{server.log.read_text()[-3000:]}")
        try:
            yield server
        finally:
            _stop(process)
    finally:
        if tokens is not None:
            tokens.stop()


def _answers(process: subprocess.Popen, port: int, log: Path, wait: float = 20) -> bool:
    """Whether this registry (it says it listens: not another process on the port) answers
    ``/v2/`` (200, or 401 asking for credentials)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            answer = requests.get(f"http://127.0.0.1:{port}/v2/", timeout=2).status_code
            if (answer in (200, 401) and process.poll() is None
                    and f"listening on 127.0.0.1:{port}" in log.read_text(errors="replace")):
                return True
        except requests.RequestException:
            pass
        time.sleep(0.05)
    return False


def layer_files(ref: str, manifest: dict, auth: tuple[str, str] | None = None
                ) -> dict[str, bytes | None]:
    """Each file of an image's layers (its blobs read back from the registry over plain HTTP,
    gzip or plain tar): its content (None for what is not a regular file)."""
    import gzip
    import io
    import tarfile

    from registries.oci import blob_get

    files: dict[str, bytes | None] = {}
    for layer in manifest["layers"]:
        blob = blob_get(ref, layer["digest"], auth=auth, insecure=True, timeout=60)
        if blob[:2] == b"\x1f\x8b":
            assert "gzip" in layer["mediaType"]
            blob = gzip.decompress(blob)
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                files[name] = tar.extractfile(member).read() if member.isfile() else None
    return files

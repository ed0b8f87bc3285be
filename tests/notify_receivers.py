"""What notifications reach in the tests, on loopback: a real SMTP server (aiosmtpd) and a
webhook receiver that does what a careful one does — checks the signature and the timestamp,
and drops a notification whose id it has seen (counting the repeats, for the tests to see).

``WebhookReceiver.fail(n)`` answers the next ``n`` requests with a 500; ``hold()`` keeps the
next request unanswered until ``release()`` (a worker can be killed while it waits)."""

from __future__ import annotations

import email
import hashlib
import hmac
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiosmtpd.controller import Controller

REPLAY_SECONDS = 300


@dataclass
class Delivery:
    id: str
    path: str
    at: float
    body: dict
    headers: dict = field(default_factory=dict)


def loopback_certificate(where) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files in ``where``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = where / "webhook.crt", where / "webhook.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)


class WebhookReceiver:
    """Over plain HTTP, or HTTPS with ``tls`` (a certificate file and its key)."""

    def __init__(self, tls: tuple[str, str] | None = None):
        self.secrets: dict[str, str] = {}  # path -> the subscription's secret
        self.received: dict[str, Delivery] = {}  # id -> its first delivery
        self.repeats: list[str] = []
        self.refused: list[str] = []  # why a request was refused (bad signature, …)
        self.requests = 0
        self._failing = 0
        self._hold = threading.Event()
        self._held = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status = receiver._take(self.path, dict(self.headers), body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name="webhook-receiver")
        self.thread.start()

    def url(self, path: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}{path}"

    def fail(self, count: int) -> None:
        self._failing = count

    def hold(self) -> None:
        self._hold.set()

    def wait_held(self, timeout: float = 30) -> bool:
        return self._held.wait(timeout)

    def release(self) -> None:
        self._release.set()

    def _take(self, path: str, headers: dict, body: bytes) -> int:
        """Check and record a request; a held one is recorded and then left unanswered (as a
        receiver whose answer never reaches the sender: it will come again)."""
        with self._lock:
            self.requests += 1
            if self._failing:
                self._failing -= 1
                return 500
        status = self._check(path, headers, body)
        with self._lock:
            hold, self._hold = self._hold.is_set(), threading.Event()
        if hold:
            self._held.set()
            self._release.wait(60)
        return status

    def _check(self, path: str, headers: dict, body: bytes) -> int:
        secret = self.secrets.get(path)
        stamp, _, given = headers.get("PaddleCloud-Signature", "").partition(",v1=")
        stamp = stamp.removeprefix("t=")
        if secret is None or not stamp.isdigit():
            self.refused.append(f"{path}: no signature or no secret")
            return 400
        expected = hmac.new(secret.encode(), f"{stamp}.".encode() + body,
                            hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, given):
            self.refused.append(f"{path}: bad signature")
            return 400
        if abs(time.time() - int(stamp)) > REPLAY_SECONDS:
            self.refused.append(f"{path}: old timestamp")
            return 400
        notification = headers["PaddleCloud-Notification-Id"]
        with self._lock:
            if notification in self.received:
                self.repeats.append(notification)
            else:
                self.received[notification] = Delivery(notification, path, time.time(),
                                                       json.loads(body), headers)
        return 200

    def events(self, path: str | None = None) -> list[str]:
        return sorted(d.headers["PaddleCloud-Event"] for d in self.received.values()
                      if path is None or d.path == path)

    def stop(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


class _Mailbox:
    def __init__(self):
        self.messages: list[email.message.Message] = []

    async def handle_DATA(self, server, session, envelope):
        message = email.message_from_bytes(envelope.content)
        message["X-Received-At"] = str(time.time())
        message["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
        self.messages.append(message)
        return "250 OK"


class _Controller(Controller):
    """aiosmtpd's, on a socket bound to a free port first (its own start connects to the
    port it was given, so it cannot be 0)."""

    def __init__(self, handler):
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        super().__init__(handler, hostname="127.0.0.1", port=self._socket.getsockname()[1])

    def _create_server(self):
        return self.loop.create_server(self._factory_invoker, sock=self._socket)


class SmtpServer:
    """aiosmtpd on 127.0.0.1, a port of its own; ``messages`` as received."""

    def __init__(self):
        self.mailbox = _Mailbox()
        self.controller = _Controller(self.mailbox)
        self.controller.start()
        self.port = self.controller.port

    @property
    def messages(self) -> list[email.message.Message]:
        return self.mailbox.messages

    def ids(self) -> list[str]:
        return sorted({m["X-PaddleCloud-Notification-Id"] for m in self.messages})

    def stop(self) -> None:
        self.controller.stop()

"""How the portal's HTTP server is configured (``server_config``), and how it takes request
bodies.

uvicorn's httptools protocol stops reading a connection once 64 KiB of a request body wait for
the app (``HIGH_WATER_LIMIT``), and reads on when the app asks for more. For a large upload
that is one pause, one resume and one ``receive`` message per 64 to 256 KiB: on the 2-core
machine of bench/README.md the event loop spent ~1.9 s of CPU per GiB on it, more than
hashing or writing the bytes. ``BulkBodyHttpToolsProtocol`` lets up to ``BODY_BUFFER`` wait
before it pauses, so a busy upload comes in messages of about that size (a few MiB held per
connection at most, not more with larger files).
"""

from __future__ import annotations

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

BODY_BUFFER = 2 << 20  # bytes of a request body read ahead of the app, per connection


class BulkBodyHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, reading up to ``BODY_BUFFER`` of a body ahead."""

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        cycle.body += body
        if len(cycle.body) > BODY_BUFFER:
            self.flow.pause_reading()
        cycle.message_event.set()


def server_config(app, *, host: str = "127.0.0.1", port: int = 8000,
                  **options) -> uvicorn.Config:
    """uvicorn's configuration of the portal: runportal's, and the tests' live portal's.
    Forwarded headers are the app's to judge (``kernel.security.ForwardedHeaders``), so
    uvicorn's own handling is off: it would believe them from anyone on 127.0.0.1
    (FORWARDED_ALLOW_IPS), a proxy and a job's relay alike. With ``uds`` (a Unix socket's path,
    behind nginx: paddlecloud.front) it listens there instead of on host:port."""
    return uvicorn.Config(app, host=host, port=port, http=BulkBodyHttpToolsProtocol,
                          proxy_headers=False, **options)

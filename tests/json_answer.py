"""What the tests' small HTTP servers (``http.server`` handlers) answer: JSON."""

from __future__ import annotations

import json


def json_answer(handler, status: int, body) -> None:
    """Send ``body`` as a JSON response with ``status`` from ``handler``."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)

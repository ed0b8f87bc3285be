"""What the interactive tests run in a real local job: a trainer that serves, on the ports its
environment names, HTTP (stdlib ``http.server``: GET answers what it was sent, POST a digest of
its body or the body itself) and a WebSocket echo (the ``websockets`` package), and says in its
log when both listen."""

from __future__ import annotations

import textwrap

HTTP_PORT = 18080
WS_PORT = 18081

SERVING_TRAINER = textwrap.dedent(f"""\
    import asyncio, hashlib, json, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from websockets.asyncio.server import serve


    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, body, kind="application/json", status=200):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Set-Cookie", "app_cookie=from-the-app; Path=/")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path.startswith("/page"):
                return self.answer(b"<!doctype html><title>served</title><p id=hello>hello "
                                   b"from the job</p>", "text/html")
            self.answer(json.dumps({{"path": self.path,
                                     "headers": dict(self.headers.items())}}).encode())

        def do_POST(self):
            size = int(self.headers.get("Content-Length", 0))
            digest, left = hashlib.sha256(), size
            while left:
                chunk = self.rfile.read(min(left, 65536))
                digest.update(chunk)
                left -= len(chunk)
            self.answer(json.dumps({{"size": size, "sha256": digest.hexdigest()}}).encode())

        def log_message(self, *args):
            pass


    async def echo(ws):
        async for message in ws:
            await ws.send(message if isinstance(message, bytes) else "echo: " + message)


    async def main():
        http = ThreadingHTTPServer(("127.0.0.1", {HTTP_PORT}), Handler)
        threading.Thread(target=http.serve_forever, daemon=True).start()
        async with serve(echo, "127.0.0.1", {WS_PORT}):
            print("serving", flush=True)
            await asyncio.Future()


    asyncio.run(main())
    """)

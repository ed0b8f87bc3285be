"""What the interactive tests run in a real local job: a trainer that serves, on two ports, HTTP
(stdlib ``http.server``: GET answers the path and headers it was sent, POST the size and digest
of its body) and a WebSocket echo (the ``websockets`` package) whose ``/page`` is a page that
talks to it."""

from __future__ import annotations

import textwrap

HTTP_PORT = 18080
WS_PORT = 18081

SERVING_TRAINER = textwrap.dedent(f"""\
    import asyncio, hashlib, json, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from websockets.asyncio.server import serve
    from websockets.datastructures import Headers
    from websockets.http11 import Response


    RELEASE = threading.Event()


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
            if self.path == "/stream":  # a line now, the next once /release is asked for
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.write(b"6\\r\\nfirst\\n\\r\\n")
                self.wfile.flush()
                RELEASE.wait(120)
                self.wfile.write(b"5\\r\\nlast\\n\\r\\n0\\r\\n\\r\\n")
                return
            if self.path == "/release":
                RELEASE.set()
            if self.path.startswith("/elsewhere"):  # a redirect to its own address
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{HTTP_PORT}/hello")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
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


    PAGE = (b"<!doctype html><title>echo</title><p id=said>nothing yet</p><script>"
            b"const ws = new WebSocket(`ws://${{location.host}}/echo`);"
            b"ws.onopen = () => ws.send('hi from the page');"
            b"ws.onmessage = (m) => document.getElementById('said').textContent = m.data;"
            b"</script>")


    def page(connection, request):
        if request.path == "/page":
            return Response(200, "OK", Headers([("Content-Type", "text/html"),
                                                ("Content-Length", str(len(PAGE)))]), PAGE)
        if request.path != "/echo":  # a browser's /favicon.ico
            return Response(204, "No Content", Headers([("Content-Length", "0")]), b"")
        return None


    async def echo(ws):
        async for message in ws:
            if message == "your cookies?":  # what its handshake carried
                await ws.send(ws.request.headers.get("Cookie", "none"))
            elif message == "close":
                await ws.close(4001, "asked to")
            else:
                await ws.send(message if isinstance(message, bytes) else "echo: " + message)


    async def main():
        http = ThreadingHTTPServer(("127.0.0.1", {HTTP_PORT}), Handler)
        threading.Thread(target=http.serve_forever, daemon=True).start()
        async with serve(echo, "127.0.0.1", {WS_PORT}, process_request=page):
            print("serving", flush=True)
            await asyncio.Future()


    asyncio.run(main())
    """)

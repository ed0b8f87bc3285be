"""A package index on the test machine's loopback: the "simple" repository API (PEP 503) served
by ``http.server``, recording every path it is asked for. Tests send traffic to 127.0.0.0/8
only, so the index installs and builds are allowed to reach is one of these."""

from __future__ import annotations

import contextlib
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def make_wheel(directory: Path, name: str, version: str = "1.0") -> Path:
    """A pure-Python wheel of one module, ``name``, made here (no index is asked)."""
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{name}.py", f"NAME = {name!r}\n")
        archive.writestr(f"{info}/METADATA",
                         f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                                          "Root-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return wheel


class PackageIndex:
    """``/simple/<name>/`` lists the wheels of ``name`` (each linked at ``links[name]``, by
    default this index's own ``/files/<wheel>``), ``/files/<wheel>`` serves them; anything
    else is a 404. ``seen`` holds every path asked for, in order."""

    def __init__(self, wheels: list[Path] = (), links: dict[str, str] | None = None):
        self.wheels = {wheel.name: wheel for wheel in wheels}
        self.links = links or {}
        self.seen: list[str] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # http.server's name
                index.seen.append(self.path)
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts[0] == "simple" and len(parts) == 2:
                    name = parts[1]
                    found = [w for w in index.wheels if w.split("-")[0] == name]
                    base = index.links.get(name, f"{index.url}/files/")
                    links = [f'<a href="{base}{w}">{w}</a>' for w in found]
                    if name in index.links:
                        links.append(f'<a href="{base}{name}-1.0-py3-none-any.whl">'
                                     f'{name}-1.0-py3-none-any.whl</a>')
                    self._answer(200, "text/html",
                                 f"<html><body>{''.join(links)}</body></html>".encode())
                elif parts[0] == "files" and len(parts) == 2 and parts[1] in index.wheels:
                    self._answer(200, "application/octet-stream",
                                 index.wheels[parts[1]].read_bytes())
                else:
                    self._answer(404, "text/plain", b"not here\n")

            do_HEAD = do_GET  # http.server's name

            def _answer(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def log_message(self, *args):  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def simple(self) -> str:
        return f"{self.url}/simple"


@contextlib.contextmanager
def package_index(wheels: list[Path] = (), links: dict[str, str] | None = None
                  ) -> Iterator[PackageIndex]:
    """A ``PackageIndex`` serving for the block, shut down after it."""
    index = PackageIndex(wheels, links)
    thread = threading.Thread(target=index.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield index
    finally:
        index.server.shutdown()
        index.server.server_close()
        thread.join(5)

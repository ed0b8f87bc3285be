"""HTTP to a port of a running replica, through ``Backend.port_open``: httpcore's network
backend over a replica's port, for the proxy's routes (``proxy``) and for the portal's own
requests to a session's server (``http_request``: the idle check, VisualDL's readiness)."""

from __future__ import annotations

import asyncio
import contextlib

import httpcore

from jobs.backends.base import BackendError

CONNECT_SECONDS = 30.0
MAX_ANSWER = 1 << 20  # the most ``http_request`` reads of an answer


class PortNetworkStream(httpcore.AsyncNetworkStream):
    """A replica's port (``PortStream``) as httpcore's network stream."""

    def __init__(self, stream):
        self.stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            return await asyncio.wait_for(self.stream.read(max_bytes), timeout)
        except TimeoutError:
            raise httpcore.ReadTimeout("the app did not answer in time") from None
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            try:
                await self.stream.write(buffer)
            except OSError as exc:
                raise httpcore.WriteError(str(exc)) from None

    async def aclose(self) -> None:
        with contextlib.suppress(OSError):
            await self.stream.close()

    def get_extra_info(self, info: str):
        if info == "is_readable":  # asked of an idle connection: has the app closed it?
            at_eof = getattr(self.stream, "at_eof", None)
            return bool(at_eof and at_eof())
        return None


class PortBackend(httpcore.AsyncNetworkBackend):
    """httpcore's way to a route's port: ``Backend.port_open`` of its replica as it is now."""

    def __init__(self):
        self.target = None  # (backend, job, replica, port), set before each request

    async def connect_tcp(self, host, port, timeout=None, local_address=None,
                          socket_options=None):
        backend, job, replica, port = self.target
        try:
            stream = await asyncio.wait_for(backend.port_open(job, replica, port),
                                            CONNECT_SECONDS)
        except BackendError as exc:
            raise httpcore.ConnectError(str(exc)) from None
        except TimeoutError:
            raise httpcore.ConnectError(f"port {port} did not answer in time") from None
        return PortNetworkStream(stream)

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("no UNIX sockets here")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def http_request(backend, job, replica, port: int, method: str, target: str,
                       headers: dict[str, str], body: bytes = b"") -> tuple[int, bytes]:
    """One HTTP/1.1 request to the server on ``port`` of the job's replica: its status and
    body (at most ``MAX_ANSWER`` bytes). BackendError when the port cannot be reached;
    ValueError past ``MAX_ANSWER`` or for an answer that is not HTTP."""
    network = PortBackend()
    network.target = (backend, job, replica, port)
    url = httpcore.URL(scheme=b"http", host=b"127.0.0.1", port=port, target=target.encode())
    sent = [("Host", f"127.0.0.1:{port}"), ("Connection", "close"), *headers.items()]
    async with httpcore.AsyncConnectionPool(network_backend=network, max_connections=1) as pool:
        try:
            async with pool.stream(method.encode(), url, headers=sent, content=body) as answer:
                read = bytearray()
                async for chunk in answer.aiter_stream():
                    read += chunk
                    if len(read) > MAX_ANSWER:
                        raise ValueError(f"its answer to {target} is over {MAX_ANSWER} bytes")
                return answer.status, bytes(read)
        except httpcore.ConnectError as exc:
            raise BackendError(str(exc)) from None
        except (httpcore.ProtocolError, httpcore.NetworkError) as exc:
            raise ValueError(f"its answer to {target} is not HTTP: {exc}") from None

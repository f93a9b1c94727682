"""Sending a :class:`~loadtest.plugins.Request` over HTTP (httpx) or gRPC (grpcio, optional).

A transport turns a request into a :class:`~loadtest.plugins.Response` or raises
:class:`TransportError` with a *kind* (``connect``, ``timeout``, ``network``). The kinds matter:
the liveness check stops a run when everything fails with ``connect`` (the target is gone, so
further steps would only measure refusals), while timeouts are what an overloaded server looks
like and are counted as errors of the step.

gRPC is spoken without generated code: ``grpc://host:port/package.Service/Method`` names a unary
method, the task's ``body`` is the serialized request message and the reply's bytes come back as
the body. grpcio is imported only when a ``grpc://`` URL is used, so HTTP users don't need it.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from loadtest.plugins import Request, Response


class TransportError(Exception):
    """A request got no response; ``kind`` says why (connect, timeout, network)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Transport(Protocol):
    """Sends requests to one target; one instance is shared by all workers of a run."""

    target: str

    async def send(self, request: Request) -> Response: ...

    async def aclose(self) -> None: ...


class HttpTransport:
    """HTTP/1.1 with keep-alive through one ``httpx.AsyncClient``.

    The connection pool is as large as the number of workers, so a worker never waits for a
    connection: a wait there would be the client's queue, not the server's, and would make the
    server look slower than it is.
    """

    def __init__(self, url: str, *, concurrency: int, timeout: float) -> None:
        self.target = url
        self._base = httpx.URL(url)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self._client = httpx.AsyncClient(
            limits=limits, timeout=httpx.Timeout(timeout), follow_redirects=False
        )

    def _url(self, path: str) -> httpx.URL:
        return self._base.join(path) if path else self._base

    async def send(self, request: Request) -> Response:
        try:
            resp = await self._client.request(
                request.method,
                self._url(request.path),
                headers=dict(request.headers),
                content=request.body,
            )
        except httpx.ConnectError as exc:
            raise TransportError("connect", str(exc) or "connection refused") from exc
        except httpx.TimeoutException as exc:
            raise TransportError("timeout", str(exc) or "timed out") from exc
        except httpx.HTTPError as exc:
            raise TransportError("network", str(exc) or type(exc).__name__) from exc
        return Response(status=resp.status_code, body=resp.content, headers=dict(resp.headers))

    async def aclose(self) -> None:
        await self._client.aclose()


class GrpcTransport:
    """Unary gRPC calls with raw bytes in and out (no generated stubs needed)."""

    def __init__(self, url: str, *, timeout: float) -> None:
        parts = urlsplit(url)
        if not parts.hostname or not parts.port or parts.path.count("/") != 2:
            raise ValueError(f"gRPC URL {url!r} must look like grpc://host:port/pkg.Service/Method")
        try:
            grpc_aio: Any = importlib.import_module("grpc.aio")
            grpc: Any = importlib.import_module("grpc")
        except ImportError:
            raise ValueError("gRPC targets need the grpcio package: pip install grpcio") from None
        self.target = url
        self._grpc = grpc
        self._aio = grpc_aio
        self._timeout = timeout
        self._channel: Any = grpc_aio.insecure_channel(f"{parts.hostname}:{parts.port}")
        self._call: Any = self._channel.unary_unary(parts.path)

    async def send(self, request: Request) -> Response:
        metadata = tuple((k.lower(), v) for k, v in request.headers.items()) or None
        codes = self._grpc.StatusCode
        try:
            reply = await self._call(request.body or b"", timeout=self._timeout, metadata=metadata)
        except self._aio.AioRpcError as exc:
            code = exc.code()
            if code == codes.UNAVAILABLE:
                raise TransportError("connect", str(exc.details())) from exc
            if code == codes.DEADLINE_EXCEEDED:
                raise TransportError("timeout", str(exc.details())) from exc
            return Response(status=int(code.value[0]), body=str(exc.details()).encode())
        return Response(status=0, body=bytes(reply))

    async def aclose(self) -> None:
        await self._channel.close()


def make_transport(url: str, *, concurrency: int, timeout: float) -> Transport:
    """The transport for ``url``'s scheme; ``ValueError`` (one line) for anything else."""
    scheme = urlsplit(url).scheme
    if scheme in ("http", "https"):
        if not urlsplit(url).hostname:
            raise ValueError(f"URL {url!r} has no host")
        return HttpTransport(url, concurrency=concurrency, timeout=timeout)
    if scheme == "grpc":
        return GrpcTransport(url, timeout=timeout)
    raise ValueError(f"URL {url!r} must start with http://, https:// or grpc://")

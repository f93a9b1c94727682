"""Sending a :class:`~loadtest.messages.Request` over HTTP (:mod:`loadtest.http`) or gRPC (grpcio).

A transport turns a request into a :class:`~loadtest.messages.Response` or raises
:class:`TransportError` with a *kind* (``connect``, ``timeout``, ``network``). The kinds matter:
the liveness check stops a run when everything fails with ``connect`` (the target is gone, so
further steps would only measure refusals), while timeouts are what an overloaded server looks
like and are counted as errors of the step.

gRPC is spoken without generated code: ``grpc://host:port/package.Service/Method`` names a unary
method, the task's ``body`` is the serialized request message and the reply's bytes come back as
the body. grpcio is imported only when a ``grpc://`` URL is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from loadtest.http import HttpClient, HttpError
from loadtest.messages import Request, Response


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
    """HTTP/1.1 with keep-alive through :class:`loadtest.http.HttpClient`.

    The client opens a connection whenever every open one is busy, so a worker never waits for a
    connection: a wait there would be the client's queue, not the server's, and would make the
    server look slower than it is. The number of connections is bounded by the worker count.

    A request whose path is a whole URL on another host or port goes to that origin over
    connections of its own: a targets file that lists each instance of a service (pods with no
    load balancer in front) spreads the load over them, request ``i`` to target ``i mod n``.
    """

    def __init__(self, url: str, *, headers: Mapping[str, str] | None = None) -> None:
        self.target = url
        self._headers = headers
        self._client = HttpClient(url, default_headers=headers)
        self._origins: dict[tuple[str, str], HttpClient] = {self._origin(url): self._client}
        self._by_url: dict[str, HttpClient] = {}

    @staticmethod
    def _origin(url: str) -> tuple[str, str]:
        parts = urlsplit(url)
        return parts.scheme, parts.netloc.lower()

    def _client_for(self, request: Request) -> HttpClient:
        path = request.path
        if not path.startswith(("http://", "https://")):
            return self._client
        client = self._by_url.get(path)
        if client is None:
            origin = self._origin(path)
            client = self._origins.get(origin)
            if client is None:
                client = HttpClient(f"{origin[0]}://{origin[1]}/", default_headers=self._headers)
                self._origins[origin] = client
            self._by_url[path] = client
        return client

    async def send(self, request: Request) -> Response:
        try:
            return await self._client_for(request).send(request)
        except HttpError as exc:
            raise TransportError(exc.kind, str(exc)) from None
        except ValueError as exc:  # a malformed URL or header
            raise TransportError("network", str(exc)) from None

    async def aclose(self) -> None:
        for client in self._origins.values():
            await client.aclose()


class GrpcTransport:
    """Unary gRPC calls with raw bytes in and out (no generated stubs needed)."""

    def __init__(self, url: str, *, timeout: float, headers: Mapping[str, str] | None = None) -> None:
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
        self._metadata = tuple((k.lower(), v) for k, v in (headers or {}).items())
        self._channel: Any = grpc_aio.insecure_channel(f"{parts.hostname}:{parts.port}")
        self._call: Any = self._channel.unary_unary(parts.path)

    async def send(self, request: Request) -> Response:
        metadata = (*self._metadata, *((k.lower(), v) for k, v in request.headers.items())) or None
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


def make_transport(url: str, *, timeout: float, headers: Mapping[str, str] | None = None) -> Transport:
    """The transport for ``url``'s scheme; ``ValueError`` (one line) for anything else."""
    scheme = urlsplit(url).scheme
    if scheme in ("http", "https"):
        if not urlsplit(url).hostname:
            raise ValueError(f"URL {url!r} has no host")
        return HttpTransport(url, headers=headers)
    if scheme == "grpc":
        return GrpcTransport(url, timeout=timeout, headers=headers)
    raise ValueError(f"URL {url!r} must start with http://, https:// or grpc://")

"""A minimal keep-alive HTTP/1.1 client on asyncio's protocol layer, built for sending fast.

Why not httpx or aiohttp: a load tester's client is on the measured path, and every microsecond
it spends per request is a request per second it cannot send. Side by side on this project's
2-core machine against a loopback nginx (``bench/loadtest_bench.py --clients``, numbers in
``loadtest/README.md``) httpx spent several times the CPU per request of this client, aiohttp
about twice; the client below does only what a load test needs:

* one TCP (or TLS) connection per request in flight, kept alive and reused LIFO, so a burst
  never waits for a connection and the warm ones stay warm;
* the request bytes are built once per distinct :class:`~loadtest.messages.Request` object (a task
  that returns the same object every time costs one ``transport.write`` per request);
* responses are parsed from the protocol's buffer: status line, headers, then a body framed by
  ``content-length``, ``transfer-encoding: chunked``, or the end of the connection;
* a request on a reused connection that the server closed before answering (an idle keep-alive
  timeout racing the write) is retried once on a fresh connection, as browsers and curl do; a
  request on a fresh connection is never retried.

What it does not do: redirects, cookies, compression, proxies, HTTP/2. A load test measures the
one URL it was given; following a redirect would measure two requests as one.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import cast
from urllib.parse import urljoin, urlsplit

from loadtest.messages import Request, Response

USER_AGENT = "gpuplan-loadtest"
_NO_BODY_STATUSES = frozenset({204, 304})
_CACHE_LIMIT = 4096  # distinct request objects whose bytes are kept


class HttpError(Exception):
    """No usable response; ``kind`` is ``connect`` (refused, unreachable) or ``network``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Connection(asyncio.Protocol):
    """One connection and the parser of the response currently expected on it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[Response] | None = None
        self.head_only = False
        self.closed = False
        self.got_bytes = False
        self.used = 0
        self._status = 0
        self._headers: dict[str, str] = {}
        self._length = -1  # -1: not parsed yet; -2: chunked; -3: until close
        self._head_done = False
        self._keep = True

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        self.buf += data
        if self.waiter is not None:
            try:
                self._parse()
            except ValueError as exc:
                self._fail(HttpError("network", f"bad response: {exc}"))

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost settles the waiter

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            if self._head_done and self._length == -3:
                self._finish(bytes(self.buf))
                return
            self._fail(HttpError("network", f"connection closed: {exc or 'EOF'}"))

    # -- request/response -------------------------------------------------------------------
    def start(
        self, data: bytes, head_only: bool, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[Response]:
        assert self.transport is not None
        self.waiter = loop.create_future()
        self.head_only = head_only
        self.got_bytes = False
        self.used += 1
        self._head_done = False
        self._length = -1
        self.transport.write(data)
        return self.waiter

    def _fail(self, exc: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _finish(self, body: bytes) -> None:
        waiter, self.waiter = self.waiter, None
        if not self._keep:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
        if waiter is not None and not waiter.done():
            waiter.set_result(Response(self._status, body, self._headers))

    def _parse(self) -> None:
        buf = self.buf
        if not self._head_done:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > 65536:
                    raise ValueError("response head over 64 KiB")
                return
            lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
            del buf[: end + 4]
            status_line = lines[0]
            if not status_line.startswith("HTTP/1.") or len(status_line) < 12:
                raise ValueError(f"status line {status_line[:60]!r}")
            self._status = int(status_line[9:12])
            headers: dict[str, str] = {}
            for line in lines[1:]:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
            self._headers = headers
            if 100 <= self._status < 200:  # 100 Continue and friends: the real answer follows
                self._parse()
                return
            self._head_done = True
            conn = headers.get("connection", "").lower()
            self._keep = conn != "close" and (status_line[7] == "1" or conn == "keep-alive")
            if self.head_only or self._status in _NO_BODY_STATUSES:
                self._length = 0
            elif "chunked" in headers.get("transfer-encoding", "").lower():
                self._length = -2
            elif "content-length" in headers:
                self._length = int(headers["content-length"])
            else:
                self._length = -3
                self._keep = False
        if self._length >= 0:
            if len(buf) >= self._length:
                body = bytes(buf[: self._length])
                del buf[: self._length]
                self._finish(body)
        elif self._length == -2:
            self._parse_chunked()

    def _parse_chunked(self) -> None:
        buf = self.buf
        body = bytearray()
        pos = 0
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return
            size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
            if size == 0:
                if buf[eol + 2 : eol + 4] == b"\r\n":
                    end = eol + 4
                else:
                    trailers = buf.find(b"\r\n\r\n", eol + 2)
                    if trailers < 0:
                        return
                    end = trailers + 4
                del buf[:end]
                self._finish(bytes(body))
                return
            start = eol + 2
            if len(buf) < start + size + 2:
                return
            body += buf[start : start + size]
            pos = start + size + 2


class HttpClient:
    """Keep-alive connections to one origin (scheme, host, port), shared by a sender's workers."""

    def __init__(self, url: str, *, default_headers: Mapping[str, str] | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"URL {url!r} must be http:// or https:// with a host")
        self.url = url
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if parts.scheme == "https" else None
        default_port = 443 if parts.scheme == "https" else 80
        host_header = self.host if ":" not in self.host else f"[{self.host}]"
        self._host_header = host_header if self.port == default_port else f"{host_header}:{self.port}"
        self._base_path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = {k.lower(): v for k, v in (default_headers or {}).items()}
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self._cache: dict[int, tuple[Request, bytes, bool]] = {}
        self.opened = 0

    def target_path(self, path: str) -> str:
        """The request target for a task's ``path``, resolved against the URL like a browser."""
        if not path:
            return self._base_path
        if path.startswith(("http://", "https://")):
            parts = urlsplit(path)
            if (parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)) != (
                self.host,
                self.port,
            ):
                raise ValueError(f"{path!r} is not on {self.host}:{self.port}")
            return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return urlsplit(urljoin(f"http://x{self._base_path}", path))._replace(scheme="", netloc="").geturl()

    def encode(self, request: Request) -> tuple[bytes, bool]:
        """The bytes of ``request`` and whether it is a HEAD (no body in the answer)."""
        method = request.method.upper()
        headers = dict(self._headers)
        headers.update({k.lower(): v for k, v in request.headers.items()})
        headers.setdefault("host", self._host_header)
        headers.setdefault("user-agent", USER_AGENT)
        body = request.body or b""
        if body or method in ("POST", "PUT", "PATCH"):
            headers["content-length"] = str(len(body))
        head = f"{method} {self.target_path(request.path)} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()
        )
        return (head + "\r\n").encode("latin-1") + body, method == "HEAD"

    def _bytes_for(self, request: Request) -> tuple[bytes, bool]:
        hit = self._cache.get(id(request))
        if hit is not None and hit[0] is request:
            return hit[1], hit[2]
        data, head_only = self.encode(request)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[id(request)] = (request, data, head_only)
        return data, head_only

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(_Connection, self.host, self.port, ssl=self._ssl)
        except OSError as exc:
            raise HttpError("connect", f"{self.host}:{self.port}: {exc.strerror or exc}") from None
        self.opened += 1
        self._all.add(conn)
        return conn

    async def send(self, request: Request) -> Response:
        """Send ``request`` and return its response; :class:`HttpError` when there is none."""
        data, head_only = self._bytes_for(request)
        loop = asyncio.get_running_loop()
        reused = False
        conn: _Connection | None = None
        while self._idle:
            candidate = self._idle.pop()
            if not candidate.closed:
                conn, reused = candidate, True
                break
            self._all.discard(candidate)
        if conn is None:
            conn = await self._connect()
        ok = False
        try:
            try:
                response = await conn.start(data, head_only, loop)
            except HttpError:
                if not (reused and not conn.got_bytes):
                    raise
                # The server closed an idle keep-alive connection as we wrote: once more, fresh.
                self._all.discard(conn)
                conn = await self._connect()
                response = await conn.start(data, head_only, loop)
            ok = True
            return response
        finally:
            if ok and not conn.closed:
                self._idle.append(conn)
            else:
                # Cancelled (timeout) or failed mid-response: the connection's state is unknown.
                self._all.discard(conn)
                conn.waiter = None
                if conn.transport is not None:
                    conn.transport.close()

    async def aclose(self) -> None:
        for conn in list(self._all):
            if conn.transport is not None:
                conn.transport.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)

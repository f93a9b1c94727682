"""A fault-injecting HTTP proxy in front of the API server: ``python -m e2e.chaos.proxy``.

Notes
-----
The operator under test is given a kubeconfig whose server is this proxy (plain HTTP on
127.0.0.1, no credentials); the proxy forwards every request to the real API server with the
admin client certificate, streaming the answers (watches included) through unchanged. Faults are
switched on and off while it runs, through ``/__chaos__/...`` on any of its ports:

- ``POST /__chaos__/rules`` ``{"rules": [{"status": 409, "methods": [...], "kinds": [...],
  "probability": 1.0, "count": null, "listeners": null}]}``: answer matching requests with that
  status (a Kubernetes ``Status`` body; 429 with ``Retry-After: 1``) instead of forwarding them.
  ``kinds`` are resource plurals as in the path (``nodes``, ``gpuallocationplans/status``).
- ``POST /__chaos__/stall``: every watch stream open right now goes silent (kept open, nothing
  more forwarded: kopf's known failure mode); watches opened afterwards work.
- ``POST /__chaos__/hold`` ``{"listener": "operator", "after": N}``: writes past the N-th from that
  listener wait until ``POST /__chaos__/release`` (to restart the API server mid-apply).
- ``POST /__chaos__/clear``: no rules, nothing held. ``GET /__chaos__/stats``: counters.

When the API server cannot be reached the client's connection is dropped without an answer, as a
restarting API server does. Each ``--listen NAME=PORT`` is a port of its own, so requests (and
writes) are counted per client: two operator replicas get one each.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import random
import ssl
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

CONTROL = "/__chaos__/"
READS = {"GET", "HEAD", "OPTIONS"}
# hop-by-hop headers, and the ones the proxy recomputes
SKIP_HEADERS = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
    "transfer-encoding", "upgrade", "content-length", "host",
}  # fmt: skip
REASONS = {
    409: ("Conflict", "Operation cannot be fulfilled on {kind} {name!r}: the object has been modified; "
                      "please apply your changes to the latest version and try again"),
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected by the chaos proxy"),
    503: ("ServiceUnavailable", "The server is currently unable to handle the request"),
}  # fmt: skip
SILENT_HOLD = 600.0  # a stalled watch is kept open (silent) at most this long


def kind_of(path: str) -> tuple[str, str]:
    """(resource plural[/subresource], name) of an API path; ("", "") for non-resource paths."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return "", ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return "", ""
    kind = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    return kind, rest[1] if len(rest) >= 2 else ""


@dataclass
class Rule:
    status: int
    methods: set[str] | None = None  # None: every method
    kinds: set[str] | None = None  # None: every resource
    probability: float = 1.0
    count: int | None = None  # at most this many faults, then the rule is spent
    listeners: set[str] | None = None
    watches: bool = False  # also fail watch requests

    @classmethod
    def of(cls, doc: dict[str, Any]) -> Rule:
        def opt(key: str) -> set[str] | None:
            value = doc.get(key)
            return None if value is None else {str(v) for v in value}

        return cls(
            status=int(doc["status"]),
            methods=opt("methods"),
            kinds=opt("kinds"),
            probability=float(doc.get("probability", 1.0)),
            count=doc.get("count"),
            listeners=opt("listeners"),
            watches=bool(doc.get("watches", False)),
        )

    def matches(self, listener: str, method: str, kind: str, watch: bool) -> bool:
        if self.count is not None and self.count <= 0:
            return False
        if watch and not self.watches:
            return False
        if self.listeners is not None and listener not in self.listeners:
            return False
        if self.methods is not None and method not in self.methods:
            return False
        if self.kinds is not None and kind not in self.kinds:
            return False
        return random.random() < self.probability


@dataclass
class Chaos:
    upstream: str
    session: ClientSession | None = None
    rules: list[Rule] = field(default_factory=list)
    stall_generation: int = 0
    hold: dict[str, int] = field(default_factory=dict)  # listener -> writes allowed before holding
    released: asyncio.Event = field(default_factory=asyncio.Event)
    held: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    writes: Counter[str] = field(default_factory=Counter)  # forwarded writes per listener
    write_log: list[tuple[float, str, str, str, str, int]] = field(default_factory=list)

    def fault(self, listener: str, method: str, kind: str, watch: bool) -> Rule | None:
        for rule in self.rules:
            if rule.matches(listener, method, kind, watch):
                if rule.count is not None:
                    rule.count -= 1
                return rule
        return None

    def stats(self) -> dict[str, Any]:
        return {
            "counts": dict(self.counts),
            "writes": dict(self.writes),
            "held": self.held,
            "stall_generation": self.stall_generation,
            "write_log": self.write_log[-5000:],
        }


def status_body(code: int, kind: str, name: str) -> dict[str, Any]:
    reason, message = REASONS.get(code, ("Injected", "injected by the chaos proxy"))
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message.format(kind=kind or "object", name=name),
        "reason": reason,
        "details": {"name": name, "kind": kind, "retryAfterSeconds": 1} if code == 429 else {"name": name},
        "code": code,
    }


async def control(request: web.Request, chaos: Chaos) -> web.Response:
    action = request.path[len(CONTROL) :]
    doc = await request.json() if request.can_read_body else {}
    if action == "rules":
        chaos.rules = [Rule.of(r) for r in doc.get("rules") or []]
    elif action == "stall":
        chaos.stall_generation += 1
    elif action == "hold":
        chaos.hold[str(doc["listener"])] = chaos.writes[str(doc["listener"])] + int(doc["after"])
        chaos.released.clear()
    elif action == "release":
        chaos.hold.clear()
        chaos.released.set()
    elif action == "clear":
        chaos.rules = []
        chaos.hold.clear()
        chaos.released.set()
    elif action != "stats":
        return web.json_response({"error": f"unknown action {action!r}"}, status=404)
    return web.json_response(chaos.stats())


async def hold_silently(request: web.Request) -> None:
    """Keep a stalled watch open, saying nothing, until the client gives up on it."""
    deadline = time.monotonic() + SILENT_HOLD
    while time.monotonic() < deadline:
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        await asyncio.sleep(0.5)


def drop(request: web.Request) -> web.Response:
    """No answer at all: what a client sees while the API server restarts."""
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=503)  # never sent


async def forward(request: web.Request, chaos: Chaos, listener: str) -> web.StreamResponse:
    method, (kind, name) = request.method, kind_of(request.path)
    watch = method == "GET" and request.query.get("watch") in ("true", "1")
    write = method not in READS
    body = await request.read()
    rule = chaos.fault(listener, method, kind, watch)
    if rule is not None:
        chaos.counts[f"injected {rule.status} {method} {kind}"] += 1
        headers = {"Retry-After": "1"} if rule.status == 429 else {}
        return web.json_response(status_body(rule.status, kind, name), status=rule.status, headers=headers)
    if write:
        if listener in chaos.hold and chaos.writes[listener] >= chaos.hold[listener]:
            chaos.held += 1
            try:
                await chaos.released.wait()
            finally:
                chaos.held -= 1
        chaos.writes[listener] += 1
    headers = {k: v for k, v in request.headers.items() if k.lower() not in SKIP_HEADERS}
    timeout = ClientTimeout(total=None if watch else 120, sock_connect=5)
    assert chaos.session is not None
    try:
        upstream = await chaos.session.request(
            method, chaos.upstream + request.path_qs, headers=headers, data=body or None, timeout=timeout
        )
    except (ClientError, OSError, TimeoutError) as e:
        chaos.counts[f"no upstream {method} {kind}"] += 1
        print(f"proxy: {method} {request.path_qs}: {e!r}", file=sys.stderr, flush=True)
        return drop(request)
    async with upstream:
        if write:
            chaos.write_log.append((time.time(), listener, method, kind, name, upstream.status))
        chaos.counts[f"{upstream.status} {method} {kind}{' watch' if watch else ''}"] += 1
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for k, v in upstream.headers.items():
            if k.lower() not in SKIP_HEADERS:
                response.headers.add(k, v)
        await response.prepare(request)
        generation = chaos.stall_generation
        stalled = False
        try:
            async for chunk in upstream.content.iter_any():
                if watch and chaos.stall_generation != generation:
                    if not stalled:
                        chaos.counts[f"stalled watch {kind}"] += 1
                        stalled = True
                    continue  # swallowed: the client hears nothing more
                await response.write(chunk)
        except (ClientError, OSError, TimeoutError):
            return drop(request)  # the API server went away mid-answer
        if stalled:
            await hold_silently(request)
            return drop(request)
        await response.write_eof()
        return response


def ssl_context(kubeconfig: Path, workdir: Path) -> tuple[str, ssl.SSLContext]:
    """The admin kubeconfig's server and a TLS context with its CA and client certificate."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    ctx = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    cert, key = workdir / "client.crt", workdir / "client.key"
    cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
    key.write_bytes(base64.b64decode(user["client-key-data"]))
    key.chmod(0o600)
    ctx.load_cert_chain(cert, key)
    return str(cluster["server"]).rstrip("/"), ctx


async def serve(kubeconfig: Path, listeners: dict[str, int]) -> None:
    with tempfile.TemporaryDirectory(prefix="chaos-proxy-") as tmp:
        server, ctx = ssl_context(kubeconfig, Path(tmp))
        chaos = Chaos(upstream=server)
        chaos.released.set()
        chaos.session = ClientSession(
            connector=TCPConnector(ssl=ctx, limit=0), auto_decompress=False, timeout=ClientTimeout(total=None)
        )
        runners = []
        for name, port in listeners.items():

            async def handle(request: web.Request, listener: str = name) -> web.StreamResponse:
                if request.path.startswith(CONTROL):
                    return await control(request, chaos)
                return await forward(request, chaos, listener)

            app = web.Application(client_max_size=64 * 2**20)
            app.router.add_route("*", "/{tail:.*}", handle)
            runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            runners.append(runner)
        print(f"proxy: {server} on {listeners}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            for runner in runners:
                await runner.cleanup()
            await chaos.session.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.chaos.proxy", description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", required=True, type=Path, help="the admin kubeconfig (client certificate)")
    p.add_argument("--listen", action="append", required=True, metavar="NAME=PORT")
    args = p.parse_args(argv)
    listeners = {n: int(port) for n, _, port in (item.partition("=") for item in args.listen)}
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.kubeconfig, listeners))
    return 0


if __name__ == "__main__":
    sys.exit(main())

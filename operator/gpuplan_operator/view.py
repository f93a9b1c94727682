"""The cluster's plans as one picture, served read only beside the metrics (``--view``).

Notes
-----
A team that runs the cluster wants to port-forward to the operator and look: every node a row of
cards, each card in the colour of the plan and service holding it (the page of
:func:`planner.render_page`). What is drawn is what the plans' statuses say is applied
(``status.allocations``, which the operator itself wrote) on the nodes, pods, ResourceSlices and
ResourceClaims the operator reads with its own read functions (:mod:`.cluster`): only GET and
LIST requests, never a write.

The page is rebuilt when asked and at most every ``refresh`` seconds (a wall screen reloading
every few seconds costs one cluster read per ``refresh``, not one per viewer). It is served on the
metrics port: ``/view`` answers the page, every other path the Prometheus metrics as before.
``gpuplan status NAME --html`` draws the same page for one plan with :func:`read_cluster` and
:func:`page` (the other plans' cards then show as held by others).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from gpuplan_operator import cluster, reserve
from gpuplan_operator.body import PlanBody
from gpuplan_operator.kube import KubeApi
from planner import (
    InvalidInput,
    Shown,
    build_view,
    parse_spec,
    read_allocations,
    render_page,
    shown_status,
    snapshot,
)

log = logging.getLogger("gpuplan_operator")

PATH = "/view"
JSON = dict[str, Any]


@dataclass(frozen=True)
class ClusterRead:
    """What the page is drawn from: the cluster's nodes, pods, devices and plans."""

    nodes: JSON
    pods: JSON
    plans: tuple[PlanBody, ...]
    slices: JSON | None = None
    claims: JSON | None = None


def read_cluster(kube: KubeApi) -> ClusterRead:
    """Read (GET and LIST only) what :func:`page` draws. API errors propagate to the caller."""
    slices = cluster.list_resource_slices(kube)
    return ClusterRead(
        nodes=cluster.list_nodes(kube),
        pods=cluster.list_active_pods(kube),
        plans=tuple(cluster.list_plans(kube)),
        slices=slices,
        claims=cluster.list_resource_claims(kube) if slices else None,
    )


def cluster_reader() -> Callable[[], ClusterRead]:
    """A reader with its own client (built on first use, then kept): the view reads beside the
    handlers without sharing their client or waiting for their lock."""
    from gpuplan_operator.kube import Kube, load_api_client

    client: list[KubeApi] = []

    def read() -> ClusterRead:
        if not client:
            client.append(Kube(load_api_client()))
        return read_cluster(client[0])

    return read


def _shown(plan: PlanBody) -> Shown:
    warnings: list[str] = []
    try:
        spec = parse_spec(plan.spec, plan.name, plan.namespace)
    except InvalidInput:
        spec = None  # an Invalid plan has no allocations to draw; its status says why
    try:
        allocations = read_allocations(plan.status.get("allocations") or [])
    except InvalidInput as e:
        allocations, warnings = (), [f"status allocations unreadable: {e}"]
    return shown_status(plan.namespace, plan.name, plan.status, allocations, spec, plan.spec, warnings)


def page(read: ClusterRead, only: Iterable[str] = (), generated: str = "") -> str:
    """The page of every plan (``only``: of those ``namespace/name`` keys; the cards of the other
    plans then count as held by others). Pure: no I/O."""
    wanted = set(only)
    plans = [p for p in read.plans if not p.deleting]
    shown = [p for p in plans if not wanted or f"{p.namespace}/{p.name}" in wanted]
    others = [p for p in plans if p not in shown]
    reserved: dict[str, dict[str, int]] = {}
    devices: set[tuple[str, str]] = set()
    for other in others:  # each other plan's applied units and devices
        for node, units in reserve.reserved_by_others([other], "").items():
            for name, n in units.items():
                reserved.setdefault(node, {})[name] = reserved.get(node, {}).get(name, 0) + n
        devices |= reserve.devices_reserved_by_others([other], "")
    snap = snapshot(
        read.nodes,
        reserve.foreign_pods(read.pods, reserve.plan_keys(plans)),
        reserved,
        slices_doc=read.slices,
        claims_doc=reserve.foreign_claims(read.claims),
        reserved_devices=devices,
    )
    title = ", ".join(s.key for s in [_shown(p) for p in shown]) if wanted else "the cluster's plans"
    view = build_view([_shown(p) for p in shown], snap, title)
    return render_page(view, generated)


class CachedPage:
    """The cluster's page, rebuilt when asked and older than ``refresh`` seconds."""

    def __init__(self, read: Callable[[], ClusterRead], refresh: float = 5.0) -> None:
        self._read = read
        self.refresh = refresh
        self._lock = threading.Lock()
        self._page: bytes | None = None
        self._at = 0.0

    def get(self) -> bytes:
        with self._lock:  # one rebuild at a time; viewers meanwhile wait for it
            now = time.monotonic()
            if self._page is None or now - self._at >= self.refresh:
                stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
                self._page = page(self._read(), generated=f"read from the cluster at {stamp}").encode()
                self._at = now
            return self._page


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def with_view(metrics_app: WSGIApp, cached: CachedPage) -> WSGIApp:
    """``/view``: the page; any other path: the metrics app. GET and HEAD only."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "").rstrip("/") != PATH:
            return metrics_app(environ, start_response)
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b"read only\n"]
        try:
            body = cached.get()
        except Exception as e:  # an API error: say so, keep serving
            log.warning("view: reading the cluster failed: %s", e)
            start_response("503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"reading the cluster failed: {e}\n".encode()]
        start_response(
            "200 OK",
            [
                ("Content-Type", "text/html; charset=utf-8"),
                ("Content-Length", str(len(body))),
                ("Cache-Control", "no-store"),
            ],
        )
        return [body] if environ.get("REQUEST_METHOD") == "GET" else []

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and page loads every few seconds are not worth a log line."""


def serve(app: WSGIApp, port: int, address: str) -> WSGIServer:
    """Serve ``app`` on ``address:port`` from a daemon thread."""
    server = make_server(address, port, app, server_class=_Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="gpuplan metrics and view", daemon=True).start()
    return server

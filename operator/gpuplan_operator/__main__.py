"""``python -m gpuplan_operator``: run the operator (standalone unless ``--peering`` is given).

Notes
-----
Standalone is the default because peering needs kopf's peering CRDs (``crds/kopf-peering.yaml``)
installed; with more than one replica pass ``--peering NAME`` so only one of them acts at a time.
The operator never creates its own CRD: install ``crds/gpuallocationplans.yaml`` first.

Logs: ``--log-format json`` writes one JSON object a line (kopf's formatter: message, severity,
timestamp and the object a line is about) for log collectors; ``text`` is the default.

Metrics: ``--metrics-port N`` (or ``GPUPLAN_METRICS_PORT=N``; the flag wins, 0 or empty is off,
and off is the default) serves Prometheus metrics (:mod:`.metrics`) on ``--metrics-address``
(default 0.0.0.0) at ``/metrics``. The Helm chart turns it on. ``--view`` also serves, on the same
port at ``/view``, the picture of every plan's cards on every node (:mod:`.view`, read only); off
unless asked (the chart's ``view.enabled``).

``GPUPLAN_FAULT_EXIT_AFTER_WRITES=N`` (tests only) makes the process die abruptly right after its
N-th write to the API server, to prove that a crash mid-apply converges after a restart.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence

import kopf
from prometheus_client import ProcessCollector, disable_created_metrics, start_http_server

from gpuplan_operator.metrics import Metrics
from gpuplan_operator.service import Options

FAULT_ENV = "GPUPLAN_FAULT_EXIT_AFTER_WRITES"
METRICS_PORT_ENV = "GPUPLAN_METRICS_PORT"
# --log-format: kopf's formatters; JSON lines name the object in their own field, not in a prefix.
LOG_FORMATS = {"text": (kopf.LogFormat.FULL, True), "json": (kopf.LogFormat.JSON, False)}


def parser() -> argparse.ArgumentParser:
    d = Options()
    p = argparse.ArgumentParser(
        prog="python -m gpuplan_operator",
        description="Run the gpuplan operator: plans GpuAllocationPlans and makes the cluster follow them.",
    )
    p.add_argument(
        "-n", "--namespace", action="append", default=[],
        help="watch plans in this namespace (repeatable, globs allowed); default: all namespaces",
    )  # fmt: skip
    p.add_argument("--peering", metavar="NAME", help="run with kopf peering NAME instead of standalone")
    p.add_argument("--priority", type=int, default=0, help="peering priority of this replica")
    p.add_argument(
        "--liveness", default="http://0.0.0.0:8080/healthz", metavar="URL",
        help="liveness endpoint (default %(default)s); 'none' disables it",
    )  # fmt: skip
    p.add_argument(
        "--metrics-port", type=int, metavar="N",
        help=f"serve Prometheus metrics on this port (default ${METRICS_PORT_ENV}, else off; 0 is off)",
    )  # fmt: skip
    p.add_argument(
        "--metrics-address", default="0.0.0.0", metavar="ADDR",
        help="address the metrics endpoint binds (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--view", action="store_true",
        help="also serve every plan's cards on every node as an HTML page at /view on the metrics port",
    )  # fmt: skip
    p.add_argument("--plan-seconds", type=float, default=d.plan_seconds, help="planning time budget")
    p.add_argument("--debounce", type=float, default=d.debounce, help="quiet seconds before a re-plan")
    p.add_argument("--max-delay", type=float, default=d.max_delay, help="longest wait in a burst")
    p.add_argument(
        "--settle", type=float, default=d.settle,
        help="an isolated node change after a quiet spell re-plans after this many quiet seconds "
        "instead of the debounce (default %(default)s; 0: always the debounce)",
    )  # fmt: skip
    p.add_argument("--resync", type=float, default=d.resync, help="re-plan failed plans this often")
    p.add_argument("--ready-poll", type=float, default=d.ready_poll, help="readiness checks while pending")
    p.add_argument(
        "--priority-base", type=int, default=d.priority_base, metavar="N",
        help="PriorityClass values: N + 1000 per card of the instance (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--node-grace", type=float, default=d.node_grace,
        help="seconds a node may be not Ready before its instances move (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--gang-timeout", type=float, default=d.gang_timeout,
        help="seconds released pods may stay unscheduled before their plan is re-planned around "
        "what took the cards (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--orphan-grace", type=float, default=d.orphan_grace,
        help="seconds a node label of a served plan that is gone (deleted without its clean-up) "
        "stays before it is removed (default %(default)s)",
    )  # fmt: skip
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument(
        "--log-format", choices=sorted(LOG_FORMATS), default="text",
        help="text (default) or json: one JSON object a line, for log collectors",
    )  # fmt: skip
    return p


class ExitAfterWrites:
    """``$GPUPLAN_FAULT_EXIT_AFTER_WRITES=N``: die abruptly right after the N-th accepted write.

    Writes go out in parallel, so "right after the N-th" needs a gate: at most N writes are ever
    started (one that fails frees its slot), a later one waits, and the process exits the moment
    the N-th is accepted. The cluster then holds exactly N of the operator's writes.
    """

    def __init__(self, limit: int) -> None:
        self.limit, self.started, self.accepted = limit, 0, 0
        self._lock = threading.Lock()

    def before_write(self) -> None:
        with self._lock:
            blocked = self.started >= self.limit
            if not blocked:
                self.started += 1
        if blocked:
            threading.Event().wait()  # until the N-th write ends the process

    def after_write(self, accepted: bool) -> None:
        with self._lock:
            if not accepted:
                self.started -= 1
                return
            self.accepted += 1
            done = self.accepted >= self.limit
        if done:
            print(f"gpuplan-operator: {FAULT_ENV}={self.limit} reached: exit", file=sys.stderr, flush=True)
            os._exit(137)


def _fault_injection() -> ExitAfterWrites | None:
    limit = int(os.environ.get(FAULT_ENV, "0") or 0)
    return ExitAfterWrites(limit) if limit > 0 else None


def metrics_port(flag: int | None, environ: Mapping[str, str] = os.environ) -> int:
    """The metrics port: the flag if given, else ``$GPUPLAN_METRICS_PORT``; 0 means off."""
    if flag is not None:
        value = flag
    else:
        raw = environ.get(METRICS_PORT_ENV, "").strip()
        try:
            value = int(raw or 0)
        except ValueError:
            raise ValueError(f"{METRICS_PORT_ENV}={raw!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise ValueError(f"metrics port {value} is out of range 0-65535")
    return value


def serve_metrics(metrics: Metrics, port: int, address: str, view: bool = False) -> None:
    """Prometheus metrics on ``address:port`` (a daemon thread; every path answers the metrics,
    except ``/view`` with ``view``: the cluster's picture)."""
    # no *_created series: they double the output and no dashboard here reads them
    disable_created_metrics()  # type: ignore[no-untyped-call]
    ProcessCollector(registry=metrics.registry)  # CPU, memory, open files of this process
    log = logging.getLogger("gpuplan_operator")
    if not view:
        start_http_server(port, addr=address, registry=metrics.registry)
        log.info("metrics on http://%s:%d/metrics", address, port)
        return
    from prometheus_client import make_wsgi_app

    from gpuplan_operator import view as picture

    cached = picture.CachedPage(picture.cluster_reader())
    picture.serve(picture.with_view(make_wsgi_app(metrics.registry), cached), port, address)
    log.info("metrics on http://%s:%d/metrics, the plans' picture on %s", address, port, picture.PATH)


_NOISY = ("Handler 'node_event' succeeded", "Handler 'topology_event' succeeded")


def _quiet_node_events(record: logging.LogRecord) -> bool:
    """Drop kopf's "Handler 'node_event' succeeded" line: one per node heartbeat is noise; so is
    one per NodeResourceTopology rewrite (the topology updater rewrites each node's every minute)."""
    return not (record.levelno <= logging.INFO and any(n in record.getMessage() for n in _NOISY))


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        port = metrics_port(args.metrics_port)
    except ValueError as e:
        p.error(str(e))
    if args.view and not port:
        p.error("--view is served on the metrics port: give --metrics-port (or $GPUPLAN_METRICS_PORT)")
    log_format, log_prefix = LOG_FORMATS[args.log_format]
    kopf.configure(verbose=args.verbose, log_format=log_format, log_prefix=log_prefix)
    logging.getLogger("gpuplan_operator").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    if not args.verbose:
        logging.getLogger("kopf.objects").addFilter(_quiet_node_events)
    import gpuplan_operator.handlers  # noqa: F401  (registers the handlers)

    options = Options(
        plan_seconds=args.plan_seconds,
        debounce=args.debounce,
        max_delay=args.max_delay,
        settle=args.settle,
        resync=args.resync,
        ready_poll=args.ready_poll,
        priority_base=args.priority_base,
        node_grace=args.node_grace,
        gang_timeout=args.gang_timeout,
        orphan_grace=args.orphan_grace,
    )
    metrics = Metrics()
    memo = kopf.Memo(
        options=options, write_observer=_fault_injection(), metrics=metrics, namespaces=args.namespace or []
    )
    if port:
        serve_metrics(metrics, port, args.metrics_address, view=args.view)
    kopf.run(
        standalone=args.peering is None,
        peering_name=args.peering,
        priority=args.priority,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=None if args.liveness == "none" else args.liveness,
        memo=memo,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

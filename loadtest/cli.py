"""``gpuplan loadtest``: the command line of the load tester.

``register(subparsers)`` is the ``gpuplan.commands`` entry point: it adds ``loadtest`` with its
commands ``run`` (also the default: ``loadtest URL`` means ``loadtest run URL``), ``merge``,
``classify``, ``compare`` and ``sample-server``; the run command's options live in
:mod:`loadtest.runargs`. Handlers return the exit status: 0 done, 1 the run could not finish (the
target went away), 2 invalid input - one line on stderr, never a traceback - and 130 when
interrupted (the steps finished so far are still written).

The live progress line goes to stderr; stdout carries the result (text, or JSON with ``--json -``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from loadtest import classify as classify_mod
from loadtest import report
from loadtest.merge import MergeError, load_result, merge_results
from loadtest.output import write_outputs
from loadtest.plugins import TaskError, load_task
from loadtest.progress import Progress
from loadtest.runargs import (
    UsageError,
    add_run_args,
    configs,
    headers_of,
    probe_for,
    shard_of,
    task_of,
)
from loadtest.senders import SenderError
from loadtest.session import Session, run_load_test

PROG = "gpuplan loadtest"
COMMANDS = ("run", "merge", "classify", "compare", "sample-server")


def _fail(message: str, status: int = 2) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


class _Choices(Mapping[str, argparse.ArgumentParser]):
    """The command names, plus anything that looks like a URL (it means ``run URL``)."""

    def __init__(self, names: dict[str, argparse.ArgumentParser]) -> None:
        self._names = names

    def __contains__(self, key: object) -> bool:
        return key in self._names or (isinstance(key, str) and "://" in key)

    def __getitem__(self, key: str) -> argparse.ArgumentParser:
        return self._names[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class _RunByDefault(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Sub-commands where a URL in the command's place means ``run URL``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.choices = cast(Any, _Choices(self._name_parser_map))

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if values and values[0] not in self._name_parser_map:
            values = ["run", *values]
        super().__call__(parser, namespace, values, option_string)


def _cmd_run(args: argparse.Namespace) -> int:
    notes: list[str] = []
    try:
        run_cfg, search_cfg = configs(args)
        shard = shard_of(args)
        headers = headers_of(args.header)
        task_name, task_args = task_of(args)
        task = load_task(task_name, task_args)  # fails here, once, before any process starts
        probe = probe_for(args, notes)
        for out in (args.plot, args.csv, args.hlog):
            if out:
                Path(out).parent.mkdir(parents=True, exist_ok=True)
    except (UsageError, TaskError) as exc:
        return _fail(str(exc))
    session = Session(
        url=args.url,
        task_name=task_name,
        task_args=task_args,
        headers=headers,
        run_config=run_cfg,
        search_config=search_cfg,
        instances=args.instances,
        probe=probe,
        shard=shard,
        start_at=args.start_at,
        loop=args.loop,
        notes=notes,
    )
    status = 0
    try:
        asyncio.run(
            run_load_test(
                session,
                task if run_cfg.processes == 0 else None,
                progress=Progress(enabled=not args.quiet),
            )
        )
    except ValueError as exc:  # a URL no transport serves, found before any load is sent
        return _fail(str(exc))
    except SenderError as exc:
        return _fail(str(exc), 1)
    except KeyboardInterrupt:
        session.search.stopped = "interrupted"
        status = 130
    if session.search.stopped == "aborted":
        status = 1
    result = session.result()
    if args.json == "-":
        print(json.dumps(result, indent=2))
    else:
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(report.render_text(result))
    write_outputs(result, csv_path=args.csv, hlog_path=args.hlog)
    if args.plot:
        from loadtest.plot import write_plot

        write_plot(result, args.plot)
    if status == 1:
        reason = session.runner.abort_reason if session.runner is not None else None
        print(f"{PROG}: run stopped: {reason or 'aborted'}", file=sys.stderr)
    return status


def _cmd_merge(args: argparse.Namespace) -> int:
    try:
        docs = [(path, load_result(path)) for path in args.results]
        result = merge_results(docs, partial=args.partial)
    except MergeError as exc:
        return _fail(str(exc))
    if args.json == "-":
        print(json.dumps(result, indent=2))
    else:
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(report.render_text(result))
    write_outputs(result, csv_path=args.csv, hlog_path=args.hlog)
    return 0


def _cmd_classify(args: argparse.Namespace) -> int:
    try:
        ms = [classify_mod.parse_measurement(a) for a in args.measurements]
        result = classify_mod.classify(
            ms,
            scaling_threshold=args.scaling_threshold,
            flat_threshold=args.flat_threshold,
            busy_cores_per_instance=args.busy_cores,
            available_cores=args.host_cores,
            cpu_limit_cores=args.cpu_limit,
        )
    except classify_mod.ClassifyError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(classify_mod.render_text(result))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    # imported here: compare reads plans with the planner and YAML, which a load tester in a pod
    # (the senders' image) does not carry
    from loadtest import compare as compare_mod

    try:
        rows = compare_mod.load_plan(args.plan)
        caps = compare_mod.load_capacities(args.capacities)
    except compare_mod.CompareError as exc:
        return _fail(str(exc))
    out = compare_mod.compare(rows, caps)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(compare_mod.render_text(out))
    return 0


def _cmd_sample_server(args: argparse.Namespace) -> int:
    from loadtest.sample_server import ServerConfig, serve

    try:
        cfg = ServerConfig(
            mode=args.mode,
            instances=args.instances,
            service_ms=args.service_ms,
            clock=args.clock,
            latency_ms=args.latency_ms,
            concurrency=args.concurrency,
            io_cpu_ms=args.io_cpu_ms,
            tail=args.tail,
            max_queue=args.max_queue,
            host=args.host,
            port=args.port,
            max_seconds=args.max_seconds,
            backend=args.backend,
        )
    except ValueError as exc:
        return _fail(str(exc))
    try:
        return asyncio.run(serve(cfg))
    except OSError as exc:
        return _fail(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", 1)


def _cmd_help(parser: argparse.ArgumentParser) -> Any:
    def show(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2

    return show


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``loadtest`` commands to ``parser`` (shared by ``gpuplan`` and ``python -m``)."""
    sub = parser.add_subparsers(
        dest="loadtest_command",
        metavar="COMMAND",
        action=_RunByDefault,
        title="commands (a URL in place of COMMAND means 'run URL')",
    )
    run = sub.add_parser(
        "run",
        help="find the highest rate a service holds (constant-rate, open loop)",
        description="Offer constant request rates, open loop, from several sender processes, and "
        "search for the highest rate held: error rate <= 1%, no growing backlog, no more than 1% of "
        "the due requests unsent. Bounded by --max-steps and --max-time.",
    )
    add_run_args(run)
    run.set_defaults(func=_cmd_run)

    mg = sub.add_parser(
        "merge",
        help="combine the JSON results of shards (--shard I/N) into one, exactly",
        description="Each RESULT is the JSON of one shard of the same load test (an Indexed Job's "
        "pods). Steps are merged by adding counts and HdrHistograms and the backlog sampled on "
        "the shared grid, then judged with the shards' held rule.",
    )
    mg.add_argument("results", nargs="+", metavar="RESULT.json")
    mg.add_argument("--partial", action="store_true", help="merge even when shards are missing")
    mg.add_argument("--json", metavar="FILE", help="write the merged JSON here ('-' for stdout)")
    mg.add_argument("--csv", metavar="FILE", help="write one CSV row per step")
    mg.add_argument("--hlog", metavar="FILE", help="write an HdrHistogram log of the merged timeline")
    mg.set_defaults(func=_cmd_merge)

    cl = sub.add_parser(
        "classify",
        help="recommend keyStrategy from capacities at 1 and several instances",
        description="Each MEASUREMENT is a run's JSON result (with --instances), N=RESULT.json, "
        "or N=QPS[:CPU_CORES].",
    )
    cl.add_argument("measurements", nargs="+", metavar="MEASUREMENT")
    cl.add_argument("--json", action="store_true", help="print JSON")
    cl.add_argument("--scaling-threshold", type=float, default=0.7)
    cl.add_argument("--flat-threshold", type=float, default=0.35)
    cl.add_argument(
        "--busy-cores",
        type=float,
        default=0.25,
        help="CPU cores per instance at the knee that count as busy (default 0.25)",
    )
    cl.add_argument(
        "--host-cores",
        type=float,
        help="cores the server and the load tester shared (default: what each result records)",
    )
    cl.add_argument(
        "--cpu-limit",
        type=float,
        help="a CPU limit, in cores, on the server's instances together (e.g. a pod's limit)",
    )
    cl.set_defaults(func=_cmd_classify)

    cp = sub.add_parser(
        "compare",
        help="the three allocation strategies side by side for a plan",
        description="Estimate total QPS, CPU and memory of 1 card x n, n cards x 1 and the "
        "planner's split, from PLAN (gpuplan plan -o json) and a CAPACITIES file "
        "(see loadtest/examples/capacities.yaml).",
    )
    cp.add_argument("plan")
    cp.add_argument("capacities")
    cp.add_argument("--json", action="store_true", help="print JSON")
    cp.set_defaults(func=_cmd_compare)

    ss = sub.add_parser(
        "sample-server",
        help="start the sample service (cpu- or io-bound), on loopback by default",
        description="A test service with a known knee: cpu mode serves instances/service-ms, "
        "io mode concurrency/latency-ms whatever the instances. Stops after --max-seconds.",
    )
    ss.add_argument("--mode", choices=("cpu", "io"), default="cpu")
    ss.add_argument("--instances", type=int, default=1)
    ss.add_argument("--service-ms", type=float, default=50.0, help="cpu: ms per request")
    ss.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: spin for wall time (stable knee) or own CPU time",
    )
    ss.add_argument(
        "--tail",
        type=float,
        default=0.5,
        help="cpu, wall clock: fraction of service-ms left as slack after the spin (default 0.5)",
    )
    ss.add_argument("--latency-ms", type=float, default=100.0, help="io: backend latency")
    ss.add_argument("--concurrency", type=int, default=4, help="io: backend concurrency")
    ss.add_argument("--io-cpu-ms", type=float, default=0.5, help="io: CPU ms per request")
    ss.add_argument("--max-queue", type=int, default=1000)
    ss.add_argument(
        "--backend",
        default="",
        metavar="URL",
        help="io: call this shared backend (another sample server) instead of slots of its own",
    )
    ss.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 in a pod)")
    ss.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    ss.add_argument("--max-seconds", type=float, default=600.0)
    ss.set_defaults(func=_cmd_sample_server)

    parser.set_defaults(func=_cmd_help(parser))


def register(subparsers: Any) -> None:
    """The ``gpuplan.commands`` entry point: add ``loadtest`` to gpuplan's sub-commands."""
    parser = subparsers.add_parser(
        "loadtest",
        help="load-test a service: capacity search, classify, compare strategies",
        description="Constant-rate load tests that find a service's capacity, classify it as "
        "compute- or IO-bound, and compare allocation strategies.",
    )
    configure(parser)


def main(argv: Sequence[str] | None = None, prog: str = "python -m") -> int:
    """``python -m loadtest``, and ``gpuplan loadtest`` (through :mod:`loadtest.command`)."""
    root = argparse.ArgumentParser(prog=prog)
    register(root.add_subparsers(dest="command"))
    args = root.parse_args(["loadtest", *(sys.argv[1:] if argv is None else argv)])
    func = args.func
    return int(func(args))

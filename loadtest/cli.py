"""``gpuplan loadtest``: the command line of the load tester.

``register(subparsers)`` is the ``gpuplan.commands`` entry point: it adds ``loadtest`` with its
commands ``run`` (also the default: ``loadtest URL`` means ``loadtest run URL``), ``merge``,
``classify``, ``compare`` and ``sample-server``. Handlers return the exit status: 0 done, 1 the run could not
finish (the target went away), 2 invalid input - one line on stderr, never a traceback - and 130
when interrupted (the steps finished so far are still written).

The live progress line goes to stderr; stdout carries the result (text, or JSON with ``--json -``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from loadtest import classify as classify_mod
from loadtest import compare as compare_mod
from loadtest import report
from loadtest.arrivals import Shard
from loadtest.merge import MergeError, load_result, merge_results
from loadtest.output import write_outputs
from loadtest.plugins import TaskError, load_task, parse_task_args
from loadtest.probe import ProcessProbe, is_local_host, pids_listening_on
from loadtest.progress import Progress
from loadtest.runner import RunConfig
from loadtest.search import SearchConfig
from loadtest.senders import SenderError, default_processes
from loadtest.session import Session, run_load_test
from loadtest.stats import HeldRule

PROG = "gpuplan loadtest"
COMMANDS = ("run", "merge", "classify", "compare", "sample-server")


class UsageError(Exception):
    """Invalid input: printed as one line, exit status 2."""


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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="http(s)://host:port/path or grpc://host:port/pkg.Service/Method")
    t = p.add_argument_group("request")
    t.add_argument(
        "--task",
        default="http-get",
        help="module:Class, file.py:Class, an entry point of gpuplan.loadtest.tasks, "
        "or a built-in: http-get (default), http-post, http-request, sample-work, grpc-raw, targets",
    )
    t.add_argument(
        "--task-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keyword argument for the task class (repeatable)",
    )
    t.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="add a header to every request (gRPC: metadata); repeatable",
    )
    t.add_argument("-X", "--method", help="HTTP method of the default task (default GET)")
    t.add_argument("--body", help="request body of the default task")
    t.add_argument("--body-file", metavar="FILE", help="request body of the default task, from a file")
    t.add_argument("--content-type", default="", help="content-type of --body/--body-file")
    t.add_argument(
        "--targets",
        metavar="FILE",
        help="many requests: a vegeta-format targets file (METHOD URL, headers, @body), used round-robin",
    )
    t.add_argument(
        "--timeout",
        type=_positive_float,
        default=5.0,
        help="seconds before a request counts as failed (default 5)",
    )
    t.add_argument(
        "--concurrency",
        type=int,
        default=256,
        help="connections over all sender processes, i.e. most requests in flight (default 256)",
    )
    t.add_argument(
        "--processes",
        type=int,
        default=None,
        help=f"sender processes, each with its own event loop (default one per core: {default_processes()}); "
        "0 sends from this process",
    )
    t.add_argument(
        "--loop",
        choices=("auto", "uvloop", "asyncio"),
        default="auto",
        help="event loop of the senders (auto: uvloop when installed)",
    )
    t.add_argument("--health-path", help="GET this path every second; 3 failures stop the run")
    s = p.add_argument_group("search")
    s.add_argument(
        "--search",
        choices=("bisect", "step", "fixed", "list"),
        default="bisect",
        help="bisect (default), step (start, start+step, ...), fixed (one rate) or list (--rates)",
    )
    s.add_argument("--rate", type=_positive_float, help="shorthand for --search fixed --start RATE")
    s.add_argument(
        "--rates",
        type=_rate_list,
        help="shorthand for --search list: these rates in order, e.g. 2000,4000,8000",
    )
    s.add_argument("--start", type=_positive_float, default=10.0, help="first rate (default 10)")
    s.add_argument(
        "--growth",
        type=_positive_float,
        default=2.0,
        help="bisect: factor between rates until one fails (default 2)",
    )
    s.add_argument("--step", type=_positive_float, default=10.0, help="step: increment per step (default 10)")
    s.add_argument(
        "--max-qps",
        type=_positive_float,
        default=1_000_000.0,
        help="highest rate a search may try (a fixed --rate sets its own)",
    )
    s.add_argument("--min-qps", type=_positive_float, default=0.5)
    s.add_argument(
        "--resolution",
        type=_positive_float,
        default=0.1,
        help="bisect: stop when held and failed rates are this close (default 0.1)",
    )
    s.add_argument("--max-steps", type=int, default=12)
    s.add_argument(
        "--max-time",
        type=_positive_float,
        default=300.0,
        help="seconds for the whole run; no step starts that could overrun it",
    )
    s.add_argument("--warmup", type=float, default=1.0, help="seconds per step before measuring")
    s.add_argument(
        "--window", type=_positive_float, default=4.0, help="seconds per step that are measured (default 4)"
    )
    h = p.add_argument_group("held rule")
    h.add_argument("--max-error-rate", type=float, default=0.01)
    h.add_argument(
        "--growth-tolerance",
        type=float,
        default=0.05,
        help="allowed growth of outstanding requests, as a fraction of the rate per s",
    )
    h.add_argument("--max-p99-ms", type=_positive_float, help="also require p99 under this")
    d = p.add_argument_group("shards (an Indexed Job: each pod sends a share of the rate)")
    d.add_argument(
        "--shard",
        metavar="I/N",
        help="send shard I of N of every step (I may be 'auto': $JOB_COMPLETION_INDEX); "
        "needs --rate or --rates; combine the results with 'merge'",
    )
    d.add_argument(
        "--start-at",
        type=float,
        metavar="EPOCH",
        help="start the first step at this wall-clock time (seconds since the epoch), so shards on "
        "several machines send together; step k starts at EPOCH + k x the step period",
    )
    o = p.add_argument_group("output")
    o.add_argument("--instances", type=int, help="how many instances serve the target (for classify)")
    o.add_argument(
        "--server-pid",
        type=int,
        action="append",
        default=[],
        help="probe this pid's CPU and memory (default: the local listener on the port)",
    )
    o.add_argument("--no-probe", action="store_true", help="don't probe the server")
    o.add_argument("--json", metavar="FILE", help="write the JSON result here ('-' for stdout)")
    o.add_argument("--plot", metavar="FILE.png", help="write a PNG of the run over time")
    o.add_argument("--csv", metavar="FILE", help="write one CSV row per step")
    o.add_argument(
        "--hlog", metavar="FILE", help="write the per-second latency histograms as an HdrHistogram log"
    )
    o.add_argument("--quiet", action="store_true", help="no progress line")


def _rate_list(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of rates") from None
    if not rates or any(not r > 0 for r in rates):
        raise argparse.ArgumentTypeError(f"{text!r}: rates must be positive numbers")
    return rates


def _shard(args: argparse.Namespace) -> Shard:
    if not args.shard:
        return Shard()
    index_s, sep, count_s = args.shard.partition("/")
    if index_s == "auto":
        index_s = os.environ.get("JOB_COMPLETION_INDEX", "")
        if not index_s:
            raise UsageError("--shard auto/N needs $JOB_COMPLETION_INDEX (set in an Indexed Job's pods)")
    try:
        shard = Shard(int(index_s), int(count_s))
    except ValueError:
        raise UsageError(f"--shard {args.shard!r} must look like I/N with 0 <= I < N") from None
    if not sep:
        raise UsageError(f"--shard {args.shard!r} must look like I/N with 0 <= I < N")
    return shard


def _headers(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition(":")
        if not sep or not name.strip() or any(c in name for c in " \r\n") or "\n" in value:
            raise UsageError(f"--header {pair!r} must look like 'Name: value'")
        out[name.strip()] = value.strip()
    return out


def _task(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    """The task name and arguments, from --task or the request options."""
    task_args = parse_task_args(args.task_arg)
    simple = [o for o in ("method", "body", "body_file") if getattr(args, o) is not None]
    if args.targets and simple:
        raise UsageError("--targets and --method/--body/--body-file exclude each other")
    if (args.targets or simple) and args.task != "http-get":
        raise UsageError("--targets, --method, --body and --body-file configure the default task, not --task")
    if args.body is not None and args.body_file is not None:
        raise UsageError("give --body or --body-file, not both")
    if args.targets:
        return "targets", {"file": args.targets, **task_args}
    if simple:
        request = {"method": args.method or ("POST" if simple != ["method"] else "GET")}
        if args.body is not None:
            request["body"] = args.body
        if args.body_file is not None:
            request["body_file"] = args.body_file
        if args.content_type:
            request["content_type"] = args.content_type
        return "http-request", {**request, **task_args}
    return args.task, task_args


def _configs(args: argparse.Namespace) -> tuple[RunConfig, SearchConfig]:
    if args.rate is not None and args.rates is not None:
        raise UsageError("give --rate or --rates, not both")
    if args.rate is not None:
        args.search, args.start = "fixed", args.rate
    if args.rates is not None:
        args.search, args.start = "list", args.rates[0]
    processes = default_processes() if args.processes is None else args.processes
    if not 0 <= processes <= 256:
        raise UsageError("--processes must be between 0 and 256")
    if args.concurrency < max(1, processes):
        raise UsageError(f"--concurrency ({args.concurrency}) must be at least --processes ({processes})")
    if not 0 <= args.max_error_rate < 1:
        raise UsageError("--max-error-rate must be between 0 and 1")
    if not 0 <= args.growth_tolerance < 1:
        raise UsageError("--growth-tolerance must be between 0 and 1")
    if not 1 <= args.concurrency <= 100_000:
        raise UsageError("--concurrency must be between 1 and 100000")
    if args.warmup < 0:
        raise UsageError("--warmup must not be negative")
    if args.instances is not None and args.instances < 1:
        raise UsageError("--instances must be at least 1")
    try:
        rule = HeldRule(args.max_error_rate, args.growth_tolerance, args.max_p99_ms)
        run = RunConfig(
            concurrency=args.concurrency,
            processes=processes,
            timeout=args.timeout,
            warmup=args.warmup,
            window=args.window,
            health_path=args.health_path,
            rule=rule,
        )
        search = SearchConfig(
            mode=args.search,
            start=args.start,
            growth=args.growth,
            step=args.step,
            max_qps=args.max_qps,
            min_qps=min(args.min_qps, args.start),
            resolution=args.resolution,
            max_steps=args.max_steps,
            max_time=args.max_time,
            rates=tuple(args.rates or ()),
            retry_doubtful=not args.shard,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if search.max_time < run.warmup + run.window:
        raise UsageError("--max-time is shorter than one step (--warmup + --window)")
    if args.shard and search.mode not in ("fixed", "list"):
        raise UsageError(
            "--shard needs --rate or --rates: a shard cannot see the whole verdict, so it cannot search"
        )
    if args.start_at is not None and not args.shard:
        raise UsageError("--start-at lines up shards: give --shard I/N too")
    if args.start_at is not None and args.start_at < time.time() - 1:
        raise UsageError(f"--start-at {args.start_at:.0f} is in the past")
    return run, search


def _probe_for(args: argparse.Namespace, notes: list[str]) -> ProcessProbe | None:
    if args.no_probe:
        return None
    pids: list[int] = list(args.server_pid)
    if not pids:
        parts = urlsplit(args.url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if not is_local_host(host):
            return None
        pids = pids_listening_on(port)
        if not pids:
            notes.append(f"no local process found listening on port {port}: server not probed")
            return None
    try:
        return ProcessProbe(pids)
    except Exception as exc:
        raise UsageError(f"cannot probe pid(s) {pids}: {exc}") from None


def _cmd_run(args: argparse.Namespace) -> int:
    notes: list[str] = []
    try:
        run_cfg, search_cfg = _configs(args)
        shard = _shard(args)
        headers = _headers(args.header)
        task_name, task_args = _task(args)
        task = load_task(task_name, task_args)  # fails here, once, before any process starts
        probe = _probe_for(args, notes)
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
        )
    except classify_mod.ClassifyError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(classify_mod.render_text(result))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
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
    _add_run_args(run)
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
        help="start the sample service (cpu- or io-bound) on loopback",
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
    ss.add_argument("--host", default="127.0.0.1")
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


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m loadtest``: the same commands as ``gpuplan loadtest``."""
    root = argparse.ArgumentParser(prog="python -m")
    register(root.add_subparsers(dest="command"))
    args = root.parse_args(["loadtest", *(sys.argv[1:] if argv is None else argv)])
    func = args.func
    return int(func(args))

"""The options of ``gpuplan loadtest run`` and their validation, apart from the commands.

Everything here turns the command line into settings (:class:`~loadtest.runner.RunConfig`,
:class:`~loadtest.search.SearchConfig`, the shard, the headers, the task) or into one
:class:`UsageError` line naming the option - no load is sent from this module.
"""

from __future__ import annotations

import argparse
import os
import time
from urllib.parse import urlsplit

from loadtest.arrivals import Shard
from loadtest.plugins import parse_task_args
from loadtest.probe import ProcessProbe, ServerProbe, StatsProbe, is_local_host, pids_listening_on
from loadtest.runner import RunConfig
from loadtest.search import SearchConfig
from loadtest.senders import default_processes
from loadtest.stats import HeldRule


class UsageError(Exception):
    """Invalid input: printed as one line, exit status 2."""


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def add_run_args(p: argparse.ArgumentParser) -> None:
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
        type=positive_float,
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
    s.add_argument("--rate", type=positive_float, help="shorthand for --search fixed --start RATE")
    s.add_argument(
        "--rates",
        type=rate_list,
        help="shorthand for --search list: these rates in order, e.g. 2000,4000,8000",
    )
    s.add_argument("--start", type=positive_float, default=10.0, help="first rate (default 10)")
    s.add_argument(
        "--growth",
        type=positive_float,
        default=2.0,
        help="bisect: factor between rates until one fails (default 2)",
    )
    s.add_argument("--step", type=positive_float, default=10.0, help="step: increment per step (default 10)")
    s.add_argument(
        "--max-qps",
        type=positive_float,
        default=1_000_000.0,
        help="highest rate a search may try (a fixed --rate sets its own)",
    )
    s.add_argument("--min-qps", type=positive_float, default=0.5)
    s.add_argument(
        "--resolution",
        type=positive_float,
        default=0.1,
        help="bisect: stop when held and failed rates are this close (default 0.1)",
    )
    s.add_argument("--max-steps", type=int, default=12)
    s.add_argument(
        "--max-time",
        type=positive_float,
        default=300.0,
        help="seconds for the whole run; no step starts that could overrun it",
    )
    s.add_argument("--warmup", type=float, default=1.0, help="seconds per step before measuring")
    s.add_argument(
        "--window", type=positive_float, default=4.0, help="seconds per step that are measured (default 4)"
    )
    h = p.add_argument_group("held rule")
    h.add_argument("--max-error-rate", type=float, default=0.01)
    h.add_argument(
        "--growth-tolerance",
        type=float,
        default=0.05,
        help="allowed growth of outstanding requests, as a fraction of the rate per s",
    )
    h.add_argument("--max-p99-ms", type=positive_float, help="also require p99 under this")
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
    o.add_argument(
        "--server-stats",
        action="append",
        default=[],
        metavar="URL",
        help="read the server's CPU and memory from this JSON (cpu_seconds, rss_bytes), once per "
        "instance, e.g. each pod's /stats of the sample server: for a server that is not on this machine",
    )
    o.add_argument("--no-probe", action="store_true", help="don't probe the server")
    o.add_argument("--json", metavar="FILE", help="write the JSON result here ('-' for stdout)")
    o.add_argument("--plot", metavar="FILE.png", help="write a PNG of the run over time")
    o.add_argument("--csv", metavar="FILE", help="write one CSV row per step")
    o.add_argument(
        "--hlog", metavar="FILE", help="write the per-second latency histograms as an HdrHistogram log"
    )
    o.add_argument("--quiet", action="store_true", help="no progress line")


def rate_list(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of rates") from None
    if not rates or any(not r > 0 for r in rates):
        raise argparse.ArgumentTypeError(f"{text!r}: rates must be positive numbers")
    return rates


def shard_of(args: argparse.Namespace) -> Shard:
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


def headers_of(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition(":")
        if not sep or not name.strip() or any(c in name for c in " \r\n") or "\n" in value:
            raise UsageError(f"--header {pair!r} must look like 'Name: value'")
        out[name.strip()] = value.strip()
    return out


def task_of(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
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


def configs(args: argparse.Namespace) -> tuple[RunConfig, SearchConfig]:
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


def probe_for(args: argparse.Namespace, notes: list[str]) -> ServerProbe | None:
    if args.no_probe:
        return None
    if args.server_stats:
        if args.server_pid:
            raise UsageError("--server-stats and --server-pid: give one way to probe the server")
        stats = StatsProbe(args.server_stats)
        try:
            stats.check()
        except ValueError as exc:
            raise UsageError(f"--server-stats: {exc}") from None
        return stats
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

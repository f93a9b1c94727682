"""``gpuplan``: the command line. Thin: read the inputs, call the planner, print.

Exit status: 0 a plan was found; 3 no deployable plan exists (or none was found in time); 2
invalid input, with one line on stderr naming the field and no traceback; 1 the cluster could not
be read. Other sub-commands (``gpuplan loadtest``) register through the ``gpuplan.commands``
entry points, so this package never imports them. A command imports what it needs when it runs:
``--help`` and a plan decided by the fast path never load the solver or a Kubernetes client.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpuplan.documents import load
from planner import InvalidInput

if TYPE_CHECKING:
    from planner import PlanSpec, Previous, Snapshot

FORMATS = ("text", "json", "yaml", "values", "manifests", "html")
EXIT_PLAN, EXIT_UNREACHABLE, EXIT_INVALID, EXIT_NO_PLAN = 0, 1, 2, 3


def _progress(quiet: bool) -> Any:
    start = time.monotonic()

    def report(line: str) -> None:
        if not quiet and time.monotonic() - start > 1.0:
            print(f"gpuplan: {line}", file=sys.stderr, flush=True)

    return report


def _previous_docs(doc: Any, where: str) -> dict[str, Any]:
    """An earlier ``-o json``: one plan's object, or ``{"plans": [...]}`` by ``namespace/name``."""
    if isinstance(doc, dict) and isinstance(doc.get("plans"), list):
        out = {}
        for i, one in enumerate(doc["plans"]):
            if not isinstance(one, dict) or "allocations" not in one:
                raise InvalidInput(f"previous {where}: plans[{i}]", "not a gpuplan plan -o json object")
            out[f"{one.get('namespace')}/{one.get('name')}"] = one
        return out
    if not isinstance(doc, dict) or "allocations" not in doc:
        raise InvalidInput("previous", f"{where}: not a gpuplan plan -o json output (no allocations)")
    return {"": doc}


def _previous_from(doc: Any, where: str) -> Previous | None:
    """The placement an earlier answer gave a plan (None: it was not admitted, so it holds none)."""
    from planner import previous_placements, read_allocations

    if doc.get("admitted") is False:
        return None
    try:
        return previous_placements(read_allocations(doc["allocations"]))
    except InvalidInput as e:
        raise InvalidInput(f"previous {where}: {e.field}", e.message) from None


def _previous_for(args: argparse.Namespace, specs: Sequence[PlanSpec]) -> list[Previous | None]:
    if not args.previous:
        return [None] * len(specs)
    docs = _previous_docs(load(args.previous, "previous"), args.previous)
    if "" in docs:  # one plan's answer: it is the previous of the one plan given
        if len(specs) > 1:
            raise InvalidInput("previous", "one plan's output given for several plans: use their -o json")
        return [_previous_from(docs[""], args.previous)]
    return [
        _previous_from(docs[key], args.previous) if key in docs else None
        for key in (f"{s.namespace}/{s.name}" for s in specs)
    ]


def _inputs(
    args: argparse.Namespace, specs: list[PlanSpec]
) -> tuple[Snapshot, list[PlanSpec], list[Previous | None], int]:
    """The snapshot (no plan's cards counted), every plan to plan together, each plan's previous
    placement, and how many of those plans come before the files' (the cluster's own)."""
    from gpuplan.fields import NODE_FIELDS, POD_FIELDS, load_list
    from planner import snapshot

    previous = _previous_for(args, specs)
    if args.nodes is not None:
        pods = load_list(args.pods, "pods", POD_FIELDS) if args.pods else None
        slices = load(args.slices, "slices") if args.slices else None
        claims = load(args.claims, "claims") if args.claims else None
        topology = load(args.topology, "topology") if args.topology else None
        snap = snapshot(
            load_list(args.nodes, "nodes", NODE_FIELDS),
            pods,
            slices_doc=slices,
            claims_doc=claims,
            topology_doc=topology,
        )
        return snap, specs, previous, 0
    for flag in ("pods", "slices", "claims", "topology"):
        if getattr(args, flag):
            raise InvalidInput(flag, f"--{flag} goes with --nodes; a live cluster's are read with its nodes")
    from gpuplan import live

    seen = live.read_cluster(args.kubeconfig, args.context)
    if not args.quiet:
        print(f"gpuplan: read {len(seen.nodes['items'])} nodes from {seen.server}", file=sys.stderr)
    for line in seen.skipped:  # even with -q: the plan was made without them
        print(f"gpuplan: {line}", file=sys.stderr)
    given = {f"{s.namespace}/{s.name}": i for i, s in enumerate(specs)}
    theirs: list[PlanSpec] = []
    their_previous: list[Previous | None] = []
    for plan in seen.plans:  # oldest first; a plan given as a file replaces the cluster's copy
        key = f"{plan.namespace}/{plan.name}"
        if key in given:
            i = given[key]
            if previous[i] is None and not args.previous and plan.applied:
                previous[i] = _previous_from(dict(plan.status), f"the cluster's {key}")
            continue
        if plan.spec is None:
            print(f"gpuplan: {key}: {plan.invalid} (planned without it)", file=sys.stderr)
            continue
        theirs.append(plan.spec)
        their_previous.append(
            _previous_from(dict(plan.status), f"the cluster's {key}") if plan.applied else None
        )
    snap = snapshot(
        seen.nodes,
        seen.pods,
        slices_doc=seen.slices,
        claims_doc=seen.claims,
        topology_doc=seen.topology,
    )
    return snap, [*theirs, *specs], [*their_previous, *previous], len(theirs)


def _read_plans(args: argparse.Namespace) -> list[PlanSpec]:
    from planner import parse_plan

    specs = []
    seen: dict[str, str] = {}
    for path in args.plan:
        try:
            spec = parse_plan(load(path, "plan"))
        except InvalidInput as e:
            if len(args.plan) == 1:
                raise
            raise InvalidInput(f"{path}: {e.field}", e.message) from None
        key = f"{spec.namespace}/{spec.name}"
        if key in seen:
            raise InvalidInput(f"{path}: metadata.name", f"plan {key} is also given by {seen[key]}")
        seen[key] = path
        if args.domain_attribute:
            spec = replace(spec, topology_attribute=args.domain_attribute)
        specs.append(spec)
    return specs


@contextmanager
def _fewer_collections() -> Iterator[None]:
    """Python's cycle collector off while one plan command runs.

    Reading 65,000 nodes and planning on them makes millions of small objects that live until
    the command ends and hold no cycles the collector would free early; each collection walks
    them all again. With a larger first generation (50,000 allocations) it still took a tenth of
    the run (0.5 s of 4.7 s CPU at 65,000 nodes and 50 plans), at the same peak memory as with
    no collection at all; the few cycles a command makes are freed when it ends.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def cmd_plan(args: argparse.Namespace) -> int:
    with _fewer_collections():
        return _plan(args)


def _plan(args: argparse.Namespace) -> int:
    from planner import plan_together

    files = [*args.plan, args.nodes, args.pods, args.previous, args.slices, args.claims, args.topology]
    if sum(1 for f in files if f == "-") > 1:
        raise InvalidInput("-", "standard input can be read for one option only")
    specs = _read_plans(args)
    snap, everyone, previous, skip = _inputs(args, specs)
    answers = plan_together(
        everyone,
        snap,
        previous,
        seconds=args.time_limit,
        workers=args.workers,
        progress=_progress(args.quiet),
    )
    mine, others = answers[skip:], answers[:skip]
    code = EXIT_PLAN if all(a.admitted and a.result.feasible for a in mine) else EXIT_NO_PLAN
    several = len(mine) > 1
    if args.output in ("json", "yaml"):
        doc = {"plans": [a.to_json(named=True) for a in mine]} if several else mine[0].to_json()
        if args.output == "json":
            print(_json_text(doc, large=len(snap.nodes) >= LARGE_ANSWER))
        else:
            import yaml

            print(yaml.safe_dump(doc, sort_keys=False), end="")
    elif args.output == "text":
        from gpuplan.shared import text

        print(text(mine, others), end="")
    elif args.output == "html":
        from gpuplan import page

        print(page.plans_page(mine, snap), end="")
    else:
        placed = [a for a in mine if a.admitted and a.result.feasible]
        for a in mine:
            if a not in placed:
                why = a.result.reason or a.reason.value
                who = f"{a.name}: " if several else ""
                print(f"gpuplan: {who}no deployable plan: {why}", file=sys.stderr)
        if args.output == "values":
            from planner import values_yaml

            parts = [values_yaml(a.spec, a.result) for a in placed]
            if several:
                parts = [f"# {a.name}\n{v}" for a, v in zip(placed, parts, strict=True)]
            print("---\n".join(parts), end="")
        else:
            import yaml

            from gpuplan.shared import manifests

            print(yaml.safe_dump_all(manifests(placed, args.priority_base), sort_keys=False), end="")
    return code


# nodes from which an answer is written by msgspec: below, the standard library's writer costs
# less than importing msgspec (2.7 ms for the 109 KB answer of 2,000 nodes; msgspec and what it
# imports, 6-16 ms)
LARGE_ANSWER = 10_000


def _json_text(doc: Any, large: bool) -> str:
    """The answer as indented JSON. A ``large`` one (a cluster of :data:`LARGE_ANSWER` nodes or
    more) is written by msgspec (C): at 65,000 nodes it names 165,000 nodes, a third of a second
    for the standard library's writer. The same text as ``json.dumps(doc, indent=2,
    ensure_ascii=False)`` but for how msgspec spells a float with an exponent (``1.5e-7``,
    ``0.00001``, ``1e16`` where the standard library writes ``1.5e-07``, ``1e-05``,
    ``1e+16``: the same numbers; in an answer, only a tiny ``seconds``)."""
    if not large:
        import json

        return json.dumps(doc, indent=2, ensure_ascii=False)
    import msgspec

    return msgspec.json.format(msgspec.json.encode(doc), indent=2).decode()


def cmd_status(args: argparse.Namespace) -> int:
    from gpuplan import live, status

    if args.html and not args.name:
        raise InvalidInput("--html", "names one plan: gpuplan status NAME --html")
    read = live.read_for_view(args.kubeconfig, args.context) if args.html else None
    plans = list(read.plans) if read else live.list_plans(args.kubeconfig, args.context)
    if not args.all_namespaces and args.namespace:
        plans = [p for p in plans if p.namespace == args.namespace]
    if args.name:
        plans = [p for p in plans if p.name == args.name]
        if not plans:
            where = f" in namespace {args.namespace}" if args.namespace else ""
            raise InvalidInput("name", f"no GpuAllocationPlan {args.name!r}{where}")
    if read is not None:
        from gpuplan import page

        print(page.status_page(read, [f"{p.namespace}/{p.name}" for p in plans]), end="")
        return EXIT_PLAN
    print(status.render(plans, detail=bool(args.name)), end="")
    return EXIT_PLAN


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    print(shtab.complete(parser(plugins=True, prog=args.prog), shell=args.shell), end="")
    return EXIT_PLAN


def _cluster_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kubeconfig", help="the kubeconfig to read the cluster with (default $KUBECONFIG, ~/.kube/config)"
    )
    p.add_argument("--context", help="the kubeconfig context to use (default: its current context)")


def parser(plugins: bool = True, prog: str = "gpuplan") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Plan how GPU cards are split among inference services."
    )
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command")

    pl = sub.add_parser(
        "plan",
        help="plan a GpuAllocationPlan against node files or, read only, a live cluster",
        description="Plan a GpuAllocationPlan. Nodes come from --nodes (kubectl get nodes -o yaml|json, "
        "'-' for standard input) or, without --nodes, from the cluster of --kubeconfig/--context, read "
        "only, as the operator sees it.",
    )
    pl.add_argument(
        "plan",
        nargs="+",
        help="GpuAllocationPlan manifests (or a ragnaros_operator_config JSON; '-': stdin), planned "
        "together in this order (oldest first); with a live cluster, together with its own plans",
    )
    pl.add_argument(
        "--nodes", help="kubectl get nodes -o yaml|json output ('-': stdin); omit to read the cluster"
    )
    pl.add_argument("--pods", help="kubectl get pods -A -o yaml|json output: their requests hold cards")
    pl.add_argument("--slices", help="kubectl get resourceslices -o yaml|json: GPUs one by one (DRA)")
    pl.add_argument("--claims", help="kubectl get resourceclaims -A -o yaml|json: devices already held")
    pl.add_argument(
        "--topology",
        help="kubectl get noderesourcetopologies -o yaml|json: the nodes' NUMA zones, where no "
        "ResourceSlices publish the GPUs",
    )
    pl.add_argument(
        "--domain-attribute",
        help="the device attribute that groups GPUs (default the plan's topologyAttribute, "
        "else resource.kubernetes.io/pcieRoot)",
    )
    _cluster_options(pl)
    pl.add_argument("-o", "--output", choices=FORMATS, default="text", help="output format (default text)")
    pl.add_argument(
        "--previous",
        help="an earlier -o json output: move as few instances as possible; its admitted plans "
        "hold their cards",
    )
    pl.add_argument("--time-limit", type=float, default=60.0, help="seconds (default 60)")
    pl.add_argument("--workers", type=int, default=1, help="solver threads (default 1: reproducible)")
    pl.add_argument(
        "--priority-base", type=int, default=800_000_000, metavar="N",
        help="-o manifests: PriorityClass values N + 1000 per card (the operator's --priority-base)",
    )  # fmt: skip
    pl.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    pl.set_defaults(func=cmd_plan)

    st = sub.add_parser("status", help="show the cluster's plans: phase, score, cards, readiness")
    st.add_argument("name", nargs="?", help="one plan: also its placement per node and its conditions")
    st.add_argument("-n", "--namespace", help="only this namespace")
    st.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace (the default)")
    st.add_argument(
        "--html", action="store_true",
        help="with NAME: print the plan's picture as one self-contained HTML page (every node's cards)",
    )  # fmt: skip
    _cluster_options(st)
    st.set_defaults(func=cmd_status)

    co = sub.add_parser("completion", help="print a shell completion script (bash, zsh or tcsh)")
    co.add_argument("shell", choices=("bash", "zsh", "tcsh"))
    co.set_defaults(func=cmd_completion, prog=prog)

    for name, plugin in _plugins().items() if plugins else ():  # listed for --help; run by main()
        sub.add_parser(name, help=plugin.HELP, add_help=False)
    return p


def _plugins() -> dict[str, Any]:
    """Sub-commands other packages add: ``gpuplan.commands`` entry points naming a module with
    ``HELP`` (one line) and ``main(argv) -> int``. Loading one must be cheap (see loadtest.command);
    scanning the installed distributions costs ~30 ms, so only when a plugin may be meant."""
    from importlib.metadata import entry_points

    return {ep.name: ep.load() for ep in entry_points(group="gpuplan.commands")}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuplan")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def main(argv: Sequence[str] | None = None, prog: str = "gpuplan") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cheap = argv[:1] in (["plan"], ["status"], ["--version"])
    if argv and not cheap and not argv[0].startswith("-"):
        plugin = _plugins().get(argv[0])
        if plugin is not None:
            return int(plugin.main(argv[1:]))
    p = parser(plugins=not cheap, prog=prog)
    args = p.parse_args(argv)
    if args.version:
        print(f"{prog} {_version()}")
        return EXIT_PLAN
    if not getattr(args, "func", None):
        p.print_help()
        return EXIT_INVALID
    try:
        code: int = args.func(args)
        return code
    except InvalidInput as e:
        print(f"{prog}: invalid input: {e}", file=sys.stderr)
        return EXIT_INVALID
    except BrokenPipeError:
        return EXIT_PLAN
    except Exception as e:
        # raised only by gpuplan.live, so imported only once something imported that (a plan on
        # files never does: it and what it imports were 1.7 ms of a 90 ms command)
        live = sys.modules.get("gpuplan.live")
        if live is not None and isinstance(e, live.ClusterUnreachable):
            print(f"{prog}: {e}", file=sys.stderr)
            return EXIT_UNREACHABLE
        raise


if __name__ == "__main__":
    sys.exit(main())

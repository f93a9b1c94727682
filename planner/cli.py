"""``gpuplan``: the command line. Thin: read files, call the planner, print.

Exit status (contract section 4): 0 a plan was found; 3 no deployable plan exists (or none was
found in time); 2 invalid input, with one line on stderr naming the field and no traceback.
Other sub-commands (``gpuplan loadtest``) register through the ``gpuplan.commands`` entry points,
so this package never imports them. A command imports what it needs when it runs: ``--help`` and
a plan decided by the fast path never load the solver.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import yaml

from planner.errors import InvalidInput

if TYPE_CHECKING:
    from planner.result import Previous

FORMATS = ("text", "json", "yaml", "values", "manifests")


_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster


def _parse(text: str, path: str, what: str) -> list[Any]:
    """JSON when it looks like JSON (``kubectl ... -o json``), else YAML (one or more documents)."""
    if text.lstrip().startswith(("{", "[")):
        try:
            return [json.loads(text)]
        except ValueError:
            pass  # YAML flow style also starts with a brace: let the YAML parser say what is wrong
    try:
        return [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InvalidInput(what, f"{path}: not valid YAML or JSON{where}") from None


def load(path: str, what: str) -> Any:
    """Read one YAML or JSON document (``-``: standard input); bad files name the file."""
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except FileNotFoundError:
        raise InvalidInput(what, f"{path}: no such file") from None
    except OSError as e:
        raise InvalidInput(what, f"{path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise InvalidInput(what, f"{path}: not UTF-8 text") from None
    docs = _parse(text, "standard input" if path == "-" else path, what)
    if not docs:
        raise InvalidInput(what, f"{path}: the file is empty")
    if len(docs) > 1:  # several documents: treat them as a List (kubectl-style)
        return {"kind": "List", "items": docs}
    return docs[0]


def _progress(quiet: bool) -> Any:
    start = time.monotonic()

    def report(line: str) -> None:
        if not quiet and time.monotonic() - start > 1.0:
            print(f"gpuplan: {line}", file=sys.stderr, flush=True)

    return report


def _previous(path: str) -> Previous:
    from planner.result import previous_placements, read_allocations

    doc = load(path, "previous")
    if not isinstance(doc, dict) or "allocations" not in doc:
        raise InvalidInput("previous", f"{path}: not a gpuplan plan -o json output (no allocations)")
    try:
        return previous_placements(read_allocations(doc["allocations"]))
    except InvalidInput as e:
        raise InvalidInput(f"previous {path}: {e.field}", e.message) from None


def cmd_plan(args: argparse.Namespace) -> int:
    from planner.explain import explain
    from planner.parse import parse_plan, snapshot
    from planner.render import render_manifests, values_yaml
    from planner.search import plan

    spec = parse_plan(load(args.plan, "plan"))
    snap = snapshot(load(args.nodes, "nodes"), load(args.pods, "pods") if args.pods else None)
    previous = _previous(args.previous) if args.previous else None
    result = plan(
        spec,
        snap,
        seconds=args.time_limit,
        workers=args.workers,
        previous=previous,
        progress=_progress(args.quiet),
    )
    code = 0 if result.feasible else 3
    if args.output == "json":
        print(json.dumps(result.to_json(), indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(result.to_json(), sort_keys=False), end="")
    elif args.output == "text":
        print(explain(spec, result), end="")
    elif not result.feasible:
        print(f"gpuplan: no deployable plan: {result.reason}", file=sys.stderr)
    elif args.output == "values":
        print(values_yaml(spec, result), end="")
    else:
        print(yaml.safe_dump_all(render_manifests(spec, result), sort_keys=False), end="")
    return code


def parser(plugins: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpuplan", description="Plan how GPU cards are split among inference services."
    )
    sub = p.add_subparsers(dest="command", required=True)
    pl = sub.add_parser("plan", help="plan offline from a plan manifest and a node snapshot")
    pl.add_argument("plan", help="GpuAllocationPlan manifest, or the seed's JSON config")
    pl.add_argument("--nodes", required=True, help="kubectl get nodes -o yaml output")
    pl.add_argument("--pods", help="kubectl get pods -A -o yaml output: their requests are used")
    pl.add_argument("-o", "--output", choices=FORMATS, default="text")
    pl.add_argument("--previous", help="an earlier -o json output: move as few instances as possible")
    pl.add_argument("--time-limit", type=float, default=60.0, help="seconds (default 60)")
    pl.add_argument("--workers", type=int, default=1, help="solver threads (default 1: reproducible)")
    pl.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    pl.set_defaults(func=cmd_plan)
    if plugins:  # scanning installed distributions costs ~70 ms: only when a plugin may be meant
        from importlib.metadata import entry_points

        for ep in entry_points(group="gpuplan.commands"):
            ep.load()(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser(plugins=argv[:1] != ["plan"]).parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except InvalidInput as e:
        print(f"gpuplan: invalid input: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())

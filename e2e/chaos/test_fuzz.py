"""6. Bad input fuzz: random and mutated plan manifests (hypothesis), through the CLI and through
the API server.

- ``gpuplan plan``: exit 0 (a plan), 3 (no deployable plan) or 2 (invalid input) and nothing
  else; on 2, exactly one line on stderr naming the field, and never a traceback. A manifest
  that gives any key twice (block YAML, flow YAML or JSON) is exit 2, naming the key and lines. Most examples
  run ``gpuplan.cli.main`` in this process (the very function the ``gpuplan`` script exits
  with); a few run the script itself.
- The API server: the CRD schema rejects the manifest naming the field, or the operator answers:
  ``Invalid`` with the field named and nothing else written for the plan, or a plan
  (``Applied``/``Infeasible``/a dry run) for a mutation that happens to be valid. The operator
  never exits.
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from e2e.chaos.support import ChaosOperator, Figures
from e2e.support import (
    GROUP,
    PLAN_API,
    PLURAL,
    REPO,
    Api,
    gpuplan_cli,
    label_key,
    labelled_nodes,
    one_type,
    operator_entry,
    plan_manifest,
    wait_for,
)
from gpuplan.cli import main as gpuplan_main
from gpuplan.documents import quote
from tests.duplicates import mappings, to_json, to_yaml, with_duplicate

BASE = yaml.safe_load((REPO / "examples" / "image-fence.yaml").read_text())
NODES = str(REPO / "examples" / "nodes.yaml")
# one line, "<field>: <what is wrong>" (a field may hold a colon: a request named ":")
ONE_LINE = re.compile(r"^gpuplan: invalid input: (?P<field>\S[^\n]*?): [^\n]+\n$")
INVALID = re.compile(r"^invalid spec: (?P<field>\S[^\n]*?): ")

leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**6), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
values = st.recursive(
    leaves,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
    max_leaves=8,
)


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a document: keys of mappings, indices of lists."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, (*prefix, i))


def mutate(doc: Any, path: tuple[Any, ...], op: str, value: Any, key: str) -> Any:
    """``doc`` with one change at ``path``: replaced by ``value``, deleted, or given a new ``key``."""
    doc = copy.deepcopy(doc)
    if not path:
        return value if op == "replace" else doc
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if op == "replace":
        parent[last] = value
    elif op == "delete":
        del parent[last]
    elif isinstance(parent[last], dict):
        parent[last][key] = value
    return doc


@st.composite
def mutated(draw: st.DrawFn, base: Any, under: tuple[Any, ...] = ()) -> Any:
    """The base document with one to three random mutations (below ``under``), or pure noise."""
    if not under and draw(st.integers(0, 9)) == 0:
        return draw(values)
    doc = base
    for _ in range(draw(st.integers(1, 3))):
        candidates = [p for p in paths(doc) if p[: len(under)] == under and len(p) > len(under)]
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        op = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        doc = mutate(doc, path, op, draw(values), draw(st.text(min_size=1, max_size=8)))
    return doc


def run_in_process(manifest: Any) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.yaml"
        path.write_text(yaml.safe_dump(manifest))
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = gpuplan_main(
                    ["plan", str(path), "--nodes", NODES, "-q", "--time-limit", "2", "-o", "json"]
                )
            except SystemExit as e:  # argparse's own exits
                code = int(e.code or 0)
        return code, err.getvalue()


def check_cli(code: int, err: str) -> None:
    assert "Traceback" not in err, err
    assert code in (0, 2, 3), f"exit {code}: {err}"
    if code == 2:
        assert ONE_LINE.match(err), f"not one line naming a field: {err!r}"


def test_the_cli_answers_bad_plans_in_one_line() -> None:
    seen: dict[int, int] = {}

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(manifest=mutated(BASE))
    def example(manifest: Any) -> None:
        code, err = run_in_process(manifest)
        check_cli(code, err)
        seen[code] = seen.get(code, 0) + 1

    example()
    Figures.record(
        "fuzz: CLI", examples=sum(seen.values()), exit_codes={str(k): v for k, v in sorted(seen.items())}
    )
    assert seen.get(2, 0) >= 20, f"too few invalid manifests to say anything: {seen}"


def run_text_in_process(text: str) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.yaml"
        path.write_text(text)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = gpuplan_main(["plan", str(path), "--nodes", NODES, "-q", "--time-limit", "2"])
        return code, err.getvalue()


def test_the_cli_refuses_a_key_given_twice_in_one_line() -> None:
    seen = [0]

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def example(data: st.DataObject) -> None:
        path = data.draw(st.sampled_from(mappings(BASE)), label="mapping")
        target = BASE
        for step in path:
            target = target[step]
        key = data.draw(st.sampled_from(sorted(target, key=str)), label="key")
        twice = with_duplicate(BASE, path, key, data.draw(values), data.draw(st.integers(0, len(target))))
        fmt = data.draw(st.sampled_from(["block", "flow", "json"]), label="format")
        text = to_json(twice, 2) if fmt == "json" else to_yaml(twice, flow=fmt == "flow")
        code, err = run_text_in_process(text)
        check_cli(code, err)
        assert code == 2 and f"mapping key {quote(key)} already defined at line " in err, err
        seen[0] += 1

    example()
    Figures.record("fuzz: a key given twice", examples=seen[0])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifest=mutated(BASE))
def test_the_gpuplan_script_too(manifest: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.yaml"
        path.write_text(yaml.safe_dump(manifest))
        proc = gpuplan_cli("plan", str(path), "--nodes", NODES, "-q", "--time-limit", "2", "-o", "json")
    check_cli(proc.returncode, proc.stderr)


# --- through the API server -------------------------------------------------------------------


def written_for(api: Api, ns: str, name: str) -> list[str]:
    """Whatever the operator wrote for a plan besides its status."""
    out = [f"label on {n}" for n in labelled_nodes(api, label_key(ns, name))]
    if api.configmap(ns, f"{name}-flamewakers") is not None:
        out.append("configmap")
    out += [
        f"deployment {d['metadata']['name']}"
        for d in api.deployments(ns)
        if d["metadata"]["labels"].get(f"{GROUP}/plan") == name
    ]
    return out


def test_the_api_server_and_the_operator_answer_bad_plans(
    api: Api, ns: str, chaos_operator: ChaosOperator, make_nodes: Callable[..., list[str]]
) -> None:
    nodes = make_nodes("fuzz", 2)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    base = plan_manifest(
        ns, "base", one_type(gpu_type, {"svc": {"G": 2}}, [operator_entry("svc")], deploy=True)
    )
    starts = chaos_operator.starts
    seen: dict[str, int] = {}
    counter = [0]

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(manifest=mutated(base, under=("spec",)))
    def example(manifest: Any) -> None:
        counter[0] += 1
        name = f"fuzz-{counter[0]}"
        manifest["metadata"] = {"name": name, "namespace": ns}
        try:
            api.create(PLAN_API, PLURAL, manifest, ns)
        except ApiException as e:
            assert e.status in (400, 422), f"{e.status}: {e.body}"
            assert "spec" in (e.body or ""), f"the schema's answer names no field: {e.body}"
            seen["rejected by the schema"] = seen.get("rejected by the schema", 0) + 1
            return

        def verdict() -> dict[str, Any] | None:
            plan = api.plan(ns, name) or {}
            status = plan.get("status") or {}
            done = status.get("observedGeneration") == plan.get("metadata", {}).get("generation")
            return (
                status
                if done and status.get("phase") in ("Invalid", "Applied", "Infeasible", "Planning")
                else None
            )

        status = wait_for(f"the operator's verdict on {name}", verdict, timeout=60, interval=0.3)
        phase = status["phase"]
        seen[phase] = seen.get(phase, 0) + 1
        if phase == "Invalid":
            assert INVALID.match(status["message"]), f"no field named: {status['message']!r}"
            assert written_for(api, ns, name) == [], f"an invalid plan wrote {written_for(api, ns, name)}"
        api.delete(PLAN_API, PLURAL, name, ns)
        assert chaos_operator.exited() is None, "the operator died"

    example()
    assert chaos_operator.exited() is None and chaos_operator.starts == starts
    Figures.record("fuzz: API server", examples=counter[0], outcomes=seen)
    bad = seen.get("rejected by the schema", 0) + seen.get("Invalid", 0)
    assert bad >= 8, f"too few bad manifests to say anything (about half are): {seen}"

"""The Indexed Job example is a Job the API would take, running a command the CLI accepts.

The manifest is walked against the Kubernetes client's own models (every key must be a field of
the model at that place, with the right kind of value), and its arguments are parsed by the real
command line, with ``$START_AT`` and ``$JOB_COMPLETION_INDEX`` set as the Job would set them.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import pytest
import yaml

from loadtest import cli, runargs

EXAMPLE = Path(__file__).resolve().parents[2] / "loadtest" / "examples" / "indexed-job.yaml"
PRIMITIVES: dict[str, type | tuple[type, ...]] = {
    "str": str, "int": int, "bool": bool, "object": object, "float": (int, float),
}  # fmt: skip


def check_model(value: Any, type_name: str, where: str) -> None:
    """``value`` fits the client model ``type_name`` (e.g. ``V1JobSpec``, ``list[V1Container]``)."""
    if type_name.startswith(("list[", "List[")):
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            check_model(item, type_name[5:-1], f"{where}[{i}]")
        return
    if type_name.startswith(("dict(", "Dict[")):
        assert isinstance(value, dict), where
        return
    if type_name in PRIMITIVES:
        if type_name == "object":  # IntOrString, Quantity
            assert isinstance(value, str | int), where
        else:
            assert isinstance(value, PRIMITIVES[type_name]), f"{where}: {value!r} is not {type_name}"
        return
    model = getattr(k8s, type_name)
    assert isinstance(value, dict), f"{where} must be a mapping ({type_name})"
    by_json = {j: model.openapi_types[attr] for attr, j in model.attribute_map.items()}
    for key, sub in value.items():
        assert key in by_json, f"{where}.{key} is not a field of {type_name}"
        check_model(sub, by_json[key], f"{where}.{key}")


def test_the_indexed_job_example_is_a_job() -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    check_model(doc, "V1Job", "job")
    spec = doc["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 4


def test_its_arguments_run_a_shard_of_a_ladder(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    container = doc["spec"]["template"]["spec"]["containers"][0]
    start_at = f"{time.time() + 90:.0f}"
    args = [re.sub(r"\$\(START_AT\)", start_at, a) for a in container["args"]]
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "3")
    root = argparse.ArgumentParser(prog="gpuplan")
    cli.register(root.add_subparsers(dest="command"))
    ns = root.parse_args(["loadtest", *args])
    run, search = runargs.configs(ns)
    shard = runargs.shard_of(ns)
    assert (shard.offset, shard.stride) == (3, doc["spec"]["completions"])
    assert search.mode == "list" and not search.retry_doubtful
    assert run.processes == 2 and ns.start_at == float(start_at)
    assert runargs.headers_of(ns.header) == {"X-Load-Test": "gpuplan"}
    assert container["env"][0] == {"name": "START_AT", "value": "${START_AT}"}

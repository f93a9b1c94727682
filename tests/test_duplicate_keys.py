"""A mapping key given twice is refused: exit 2, one line naming the option, the key and both lines.

Table-driven over every file ``gpuplan plan`` reads, in YAML and in JSON; then a property: any
key of any mapping of the example documents, given twice, in block YAML, flow YAML or JSON.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.cli import main
from gpuplan.documents import json_duplicate, quote
from tests.duplicates import mappings, to_json, to_yaml, with_duplicate
from tests.helpers import node_list, plan_doc

REPO = Path(__file__).resolve().parent.parent
NODES = yaml.safe_dump(node_list([("p4-000", "P4", 8), ("p4-001", "P4", 8)]))
PLAN = yaml.safe_dump(plan_doc({"face_feature_extract": {"P4": 2}}))

PLAN_YAML = """\
apiVersion: gpuplan.ragnaros.io/v1alpha1
kind: GpuAllocationPlan
metadata:
  name: twice
spec:
  requests:
    face_1vn: {P4: 2}
    face_feature_extract: {P4: 1}
    face_1vn: {P4: 4}
"""
PLAN_JSON = """\
{"apiVersion": "gpuplan.ragnaros.io/v1alpha1", "kind": "GpuAllocationPlan",
 "metadata": {"name": "twice"},
 "spec": {"requests": {
   "face_1vn": {"P4": 2},
   "face_1vn": {"P4": 4}}}}
"""
NODES_YAML = """\
kind: List
items:
- kind: Node
  metadata:
    name: p4-000
    labels:
      gpuplan.ragnaros.io/gpu-type: P4
      gpuplan.ragnaros.io/gpu-type: T4
  status:
    allocatable: {nvidia.com/gpu: "8"}
"""
NODES_JSON = """\
{
    "kind": "List",
    "items": [
        {
            "kind": "Node",
            "metadata": {"name": "p4-000", "labels": {"gpuplan.ragnaros.io/gpu-type": "P4"}},
            "status": {
                "allocatable": {
                    "nvidia.com/gpu": "8",
                    "cpu": "32",
                    "nvidia.com/gpu": "0"
                }
            }
        }
    ]
}
"""
PODS_YAML = """\
kind: List
items:
- kind: Pod
  metadata: {name: holder}
  spec:
    nodeName: p4-000
    nodeName: p4-001
    containers: [{resources: {limits: {nvidia.com/gpu: "2"}}}]
  status: {phase: Running}
"""
PODS_JSON = """\
{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "holder"},
  "spec": {"nodeName": "p4-000", "containers": [{"resources": {
    "limits": {"nvidia.com/gpu": "2"},
    "limits": {"nvidia.com/gpu": "0"}}}]},
  "status": {"phase": "Running"}}]}
"""
SLICES_YAML = """\
kind: List
items:
- kind: ResourceSlice
  spec:
    driver: gpu.example.com
    nodeName: p4-000
    pool: {name: p4-000}
    devices:
    - name: gpu-0
      attributes:
        resource.kubernetes.io/pcieRoot: {string: pci0}
        resource.kubernetes.io/pcieRoot: {string: pci1}
"""
SLICES_JSON = """\
{"kind": "List", "items": [{"kind": "ResourceSlice", "spec": {
  "driver": "gpu.example.com", "nodeName": "p4-000", "pool": {"name": "p4-000"},
  "devices": [{"name": "gpu-0"}, {"name": "gpu-1",
     "name": "gpu-2"}]}}]}
"""
CLAIMS_YAML = """\
kind: List
items:
- kind: ResourceClaim
  status:
    allocation:
      devices:
        results:
        - {request: gpu, driver: gpu.example.com, pool: p4-000, device: gpu-0}
        - request: gpu
          driver: gpu.example.com
          pool: p4-000
          pool: p4-001
          device: gpu-1
"""
CLAIMS_JSON = """\
{"kind": "List",
 "items": [{"kind": "ResourceClaim", "status": {"allocation": {"devices": {"results": []}}}}],
 "kind": "ResourceClaimList"}
"""
TOPOLOGY_YAML = """\
kind: List
items:
- kind: NodeResourceTopology
  metadata: {name: p4-000}
  zones:
  - name: node-0
    type: Node
    resources:
    - {name: nvidia.com/gpu, capacity: "4", allocatable: "4", available: "4", available: "0"}
"""
TOPOLOGY_JSON = """\
{"kind": "List", "items": [{"kind": "NodeResourceTopology", "metadata": {"name": "p4-000"},
  "zones": [{"name": "node-0", "type": "Node", "resources": []},
            {"name": "node-1", "type": "Node", "resources": [],
             "type": "Socket"}]}]}
"""


@pytest.mark.parametrize(
    ("option", "text", "key", "first", "second"),
    [
        pytest.param(
            "plan", PLAN_YAML, "face_1vn", 7, 9, id="a YAML plan naming an operator twice is refused"
        ),
        pytest.param(
            "plan", PLAN_JSON, "face_1vn", 4, 5, id="a JSON plan naming an operator twice is refused"
        ),
        pytest.param(
            "nodes",
            NODES_YAML,
            "gpuplan.ragnaros.io/gpu-type",
            7,
            8,
            id="a YAML node list with a label given twice is refused",
        ),
        pytest.param(
            "nodes",
            NODES_JSON,
            "nvidia.com/gpu",
            9,
            11,
            id="a JSON node list with an allocatable resource given twice is refused",
        ),
        pytest.param(
            "pods",
            PODS_YAML,
            "nodeName",
            6,
            7,
            id="a YAML pod list with a pod's nodeName given twice is refused",
        ),
        pytest.param(
            "pods",
            PODS_JSON,
            "limits",
            3,
            4,
            id="a JSON pod list with a container's limits given twice is refused",
        ),
        pytest.param(
            "slices",
            SLICES_YAML,
            "resource.kubernetes.io/pcieRoot",
            11,
            12,
            id="YAML ResourceSlices with a device attribute given twice are refused",
        ),
        pytest.param(
            "slices",
            SLICES_JSON,
            "name",
            3,
            4,
            id="JSON ResourceSlices with a device named twice are refused",
        ),
        pytest.param(
            "claims",
            CLAIMS_YAML,
            "pool",
            11,
            12,
            id="YAML ResourceClaims with a result's pool given twice are refused",
        ),
        pytest.param(
            "claims",
            CLAIMS_JSON,
            "kind",
            1,
            3,
            id="JSON ResourceClaims with the list's kind given twice are refused",
        ),
        pytest.param(
            "topology",
            TOPOLOGY_YAML,
            "available",
            9,
            9,
            id="a YAML NodeResourceTopology with a zone's available given twice on one line is refused",
        ),
        pytest.param(
            "topology",
            TOPOLOGY_JSON,
            "type",
            3,
            4,
            id="a JSON NodeResourceTopology with a zone's type given twice is refused",
        ),
    ],
)
def test_a_key_given_twice_is_refused_naming_it_and_both_lines(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    option: str,
    text: str,
    key: str,
    first: int,
    second: int,
) -> None:
    files = {"plan": PLAN, "nodes": NODES} | {option: text}
    paths = {}
    for name, content in files.items():
        paths[name] = tmp_path / f"{name}.{'json' if content.lstrip().startswith('{') else 'yaml'}"
        paths[name].write_text(content)
    args = ["plan", str(paths["plan"]), "--nodes", str(paths["nodes"]), "-q"]
    args += [
        a
        for name in ("pods", "slices", "claims", "topology")
        if name in paths
        for a in (f"--{name}", str(paths[name]))
    ]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == (
        f"gpuplan: invalid input: {option}: {paths[option]}: line {second}: "
        f'mapping key "{key}" already defined at line {first}\n'
    )


def test_what_is_not_a_duplicate_is_still_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same key in two mappings, a YAML merge overridden, and 1 beside "1" are no duplicates."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN + "x-defaults: &d {P4: 1}\n" + "x-other:\n  <<: *d\n  P4: 2\n  1: int\n  '1': str\n")
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(NODES)
    assert main(["plan", str(plan), "--nodes", str(nodes), "-q", "-o", "json"]) == 0, capsys.readouterr().err


# --- the property: any key of any mapping, given twice ------------------------------------------

EXAMPLES = {
    "plan": yaml.safe_load((REPO / "examples" / "image-fence.yaml").read_text()),
    "nodes": yaml.safe_load((REPO / "examples" / "nodes.yaml").read_text()),
    "pods": yaml.safe_load((REPO / "examples" / "pods.yaml").read_text()),
}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_key_given_twice_anywhere_exits_2_with_one_line(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    option = data.draw(st.sampled_from(sorted(EXAMPLES)), label="option")
    doc = EXAMPLES[option]
    path = data.draw(st.sampled_from(mappings(doc)), label="mapping")
    target = doc
    for step in path:
        target = target[step]
    key = data.draw(st.sampled_from(sorted(target, key=str)), label="key")
    value = data.draw(st.none() | st.integers() | st.text(max_size=5) | st.just({"P4": 1}), label="value")
    at = data.draw(st.integers(0, len(target)), label="at")
    fmt = data.draw(st.sampled_from(["block", "flow", "json", "json-indented"]), label="format")
    dup = with_duplicate(doc, path, key, value, at)
    if fmt.startswith("json"):
        text = to_json(dup, 4 if fmt == "json-indented" else 0)
    else:
        text = to_yaml(dup, flow=fmt == "flow")
    tmp = tmp_path_factory.mktemp("dup")
    files = {"plan": tmp / "plan.txt", "nodes": tmp / "nodes.txt", "pods": tmp / "pods.txt"}
    files["plan"].write_text(PLAN)
    files["nodes"].write_text(NODES)
    files["pods"].write_text(yaml.safe_dump(EXAMPLES["pods"]))
    files[option].write_text(text)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(
            ["plan", str(files["plan"]), "--nodes", str(files["nodes"]), "--pods", str(files["pods"]), "-q"]
        )
    message = err.getvalue()
    assert code == 2, message
    assert "Traceback" not in message
    prefix = f"gpuplan: invalid input: {option}: {files[option]}: line "
    assert message.startswith(prefix) and message.count("\n") == 1, message
    assert f"mapping key {quote(key)} already defined at line " in message, message
    second, first = (int(w) for w in message[len(prefix) :].replace(":", " ").split() if w.isdigit())
    lines = text.splitlines()
    assert first <= second <= len(lines)
    if fmt != "flow":  # one pair a line: both lines hold the key
        assert str(key) in lines[first - 1] and str(key) in lines[second - 1], (first, second, text)


def test_the_json_scan_finds_nothing_in_a_document_without_duplicates() -> None:
    text = json.dumps({"a": {"a": [{"a": 1}, {"b": 'a\\"a'}]}, "b": {"a": 2}}, indent=2)
    assert json_duplicate(text) is None

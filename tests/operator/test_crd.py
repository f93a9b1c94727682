"""The CRD file agrees with the resource's documented shape and with the code that fills it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuplan_operator import status as st

from planner.base.errors import InvalidInput
from planner.base.strategies import KEY_STRATEGIES, SCORINGS, Topology
from planner.base.vocab import GROUP, KIND, PLURAL, VERSION
from planner.model.catalog import BUILTIN_OPERATORS
from planner.model.spec import ResourceKind
from planner.read.parse import parse_spec
from planner.share.outcome import Admission, BelowMax

CRD = Path(__file__).resolve().parents[2] / "crds" / "gpuallocationplans.yaml"
POLICY = CRD.with_name("plans-admission-policy.yaml")


def crd() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(CRD.read_text())
    return doc


def version() -> dict[str, Any]:
    (v,) = crd()["spec"]["versions"]
    return dict(v)


def test_names_scope_and_status_subresource() -> None:
    spec = crd()["spec"]
    assert crd()["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    assert spec["group"] == GROUP and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == KIND and spec["names"]["plural"] == PLURAL
    assert spec["names"]["shortNames"] == ["gpuplan", "gpuplans"]
    assert version()["name"] == VERSION and version()["subresources"] == {"status": {}}


def test_printer_columns() -> None:
    cols = {c["name"]: c["jsonPath"] for c in version()["additionalPrinterColumns"] if not c.get("priority")}
    assert cols == {
        "Phase": ".status.phase",
        "Priority": ".spec.priority",
        "Score": ".status.score",
        "Cards": ".status.cards",
        "Optimal": ".status.optimal",
        "Age": ".metadata.creationTimestamp",
    }


def test_status_schema_holds_every_field_the_operator_writes() -> None:
    props = version()["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert set(st.OUR_KEYS) <= set(props)
    assert props["phase"]["enum"] == [p.value for p in st.Phase]


def test_the_policys_catalog_list_is_the_builtin_catalog() -> None:
    policy = next(
        d for d in yaml.safe_load_all(POLICY.read_text()) if d["kind"] == "ValidatingAdmissionPolicy"
    )
    (rule,) = [v["expression"] for v in policy["spec"]["variables"] if v["name"] == "newOperators"]
    names = set(re.findall(r"'([a-z0-9_]+)'", rule))
    assert names == {op.name for op in BUILTIN_OPERATORS}


def test_no_rule_of_the_schema_runs_on_status_writes() -> None:
    """A CEL rule of the schema is evaluated on every write of the object, status patches
    included (for a thousand operators, a fifth of a status patch's cost to the API server):
    such checks belong to the admission policy, which matches the plan's own writes only."""
    assert "x-kubernetes-validations" not in CRD.read_text()
    policy = next(
        d for d in yaml.safe_load_all(POLICY.read_text()) if d["kind"] == "ValidatingAdmissionPolicy"
    )
    assert [r["resources"] for r in policy["spec"]["matchConstraints"]["resourceRules"]] == [[PLURAL]]


def test_every_schema_node_has_a_type_or_preserves_unknown_fields() -> None:
    def walk(node: dict[str, Any], path: str) -> None:
        assert (
            "type" in node
            or node.get("x-kubernetes-preserve-unknown-fields")
            or node.get("x-kubernetes-int-or-string")  # a quantity: 4 or "3500m"
        ), path
        for name, child in (node.get("properties") or {}).items():
            walk(child, f"{path}.{name}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    walk(version()["schema"]["openAPIV3Schema"], "")


def test_the_enums_are_the_codes_tables() -> None:
    """Strategies, scorings and resource kinds: the API server admits exactly what the planner knows."""
    spec = version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    key_strategy = spec["operators"]["items"]["properties"]["keyStrategy"]
    assert key_strategy["enum"] == [s.value for s in KEY_STRATEGIES]
    assert spec["scoring"]["enum"] == list(SCORINGS)
    assert spec["resources"]["items"]["properties"]["kind"]["enum"] == [k.value for k in ResourceKind]


def test_admission_and_below_max_reasons_are_the_planners() -> None:
    """What status may say of a plan planned with others is exactly what the planner answers."""
    status = version()["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["admission"]["enum"] == [a.value for a in Admission]
    assert status["elastic"]["items"]["properties"]["reason"]["enum"] == [b.value for b in BelowMax]


def test_priority_is_bounded_and_defaults_as_the_parser() -> None:
    spec = version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert (spec["priority"]["minimum"], spec["priority"]["maximum"], spec["priority"]["default"]) == (
        0,
        1000,
        0,
    )
    assert parse_spec({"requests": {}}, name="p", namespace="ns").priority == spec["priority"]["default"]


def test_every_property_is_described_for_kubectl_explain() -> None:
    missing: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        if path not in ("", ".metadata") and not node.get("description"):
            missing.append(path)
        for name, child in (node.get("properties") or {}).items():
            walk(child, f"{path}.{name}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    walk(version()["schema"]["openAPIV3Schema"], "")
    assert missing == []


def test_conditions_have_the_metav1_condition_shape() -> None:
    props = version()["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    item = props["conditions"]["items"]
    assert set(item["required"]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    }
    assert set(props["conflicts"]["items"]["properties"]) == {
        "resource",
        "kind",
        "requests",
        "detail",
        "minimal",
    }
    assert props["conflicts"]["items"]["properties"]["kind"]["description"].count("TimedOut") == 1


def test_defaults_match_the_parser() -> None:
    spec = version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    parsed = parse_spec({"requests": {}}, name="x", namespace="y")
    assert spec["scoring"]["default"] == parsed.scoring
    assert spec["deploy"]["default"] is parsed.deploy and spec["dryRun"]["default"] is parsed.dry_run
    assert spec["image"]["default"] == parsed.image
    assert spec["resources"]["items"]["properties"]["kind"]["default"] == "GPU"


def test_a_wide_column_shows_the_message() -> None:
    (wide,) = [c for c in version()["additionalPrinterColumns"] if c.get("priority") == 1]
    assert wide["jsonPath"] == ".status.message"


def test_the_topology_enum_is_the_planners() -> None:
    spec = version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["operators"]["items"]["properties"]["topology"]["enum"] == [t.value for t in Topology]
    assert "topologyAttribute" in spec


@pytest.mark.parametrize(
    ("value", "admitted"),
    [
        pytest.param("numaShare", True, id="numaShare is the share of the NUMA node"),
        pytest.param("4", True, id="whole CPUs as a string"),
        pytest.param("3500m", True, id="millicores"),
        pytest.param("2.5", True, id="a decimal number of CPUs"),
        pytest.param("numashare", False, id="numaShare is spelt with a capital S"),
        pytest.param("-1", False, id="a negative amount"),
        pytest.param("4 cpus", False, id="words after the number"),
        pytest.param("1Ki", False, id="a binary suffix is not a CPU amount"),
    ],
)
def test_the_cpu_request_pattern_admits_what_the_parser_reads(value: str, admitted: bool) -> None:
    """The schema's pattern and the parser agree on the strings; the parser also refuses zero."""
    field = version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["operators"]["items"][
        "properties"
    ]["cpuRequest"]
    assert bool(re.match(field["pattern"], value)) is admitted
    spec = {"requests": {}, "operators": [{"name": "face_1vn", "cpuRequest": value}]}
    if admitted:
        parse_spec(spec, name="x", namespace="y")
    else:
        with pytest.raises(InvalidInput, match=r"operators\[0\]\.cpuRequest"):
            parse_spec(spec, name="x", namespace="y")


def test_what_a_plan_holds_is_one_field_to_the_field_manager() -> None:
    """``applied`` has a key per node: tracked key by key, the operator's managed fields of a
    1,000-node plan were 37 KB, sent back with every status patch and watch event."""
    props = version()["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert props["applied"]["x-kubernetes-map-type"] == "atomic"
    assert "x-kubernetes-list-type" not in props["allocations"]  # a list is atomic unless it says


def test_a_plans_requests_and_operators_are_one_field_each_to_the_field_manager() -> None:
    """Tracked key by key, the spec of a plan of a thousand requests and operators left 68 KB of
    managed fields, read and rewritten by the API server with every status patch (a status patch
    of that plan cost it 300-350 ms of CPU; with both atomic, 190-220 ms)."""
    spec = version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["requests"]["x-kubernetes-map-type"] == "atomic"
    assert spec["operators"]["x-kubernetes-list-type"] == "atomic"
    with pytest.raises(InvalidInput, match=r"operators\[1\]\.name: operator 'face_1vn' is listed twice"):
        parse_spec({"requests": {}, "operators": [{"name": "face_1vn"}, {"name": "face_1vn"}]}, "p", "ns")

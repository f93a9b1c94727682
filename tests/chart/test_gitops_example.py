"""The GitOps example (examples/gitops): what it lists exists, its plans are valid, its copy is current."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.read.parse import parse_spec
from tests.chart.helm import REPO

GITOPS = REPO / "examples" / "gitops"


def _load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _resources() -> list[Path]:
    kustomization = yaml.safe_load((GITOPS / "kustomization.yaml").read_text())
    return [GITOPS / r for r in kustomization["resources"]]


def test_every_resource_of_the_kustomization_exists() -> None:
    paths = _resources()
    assert paths and all(p.is_file() for p in paths), paths
    kinds = sorted(d["kind"] for p in paths for d in _load(p))
    assert kinds == ["GpuAllocationPlan", "GpuAllocationPlan", "Namespace"]


def test_the_image_fence_plan_is_the_sample_plan() -> None:
    assert (GITOPS / "plans" / "image-fence.yaml").read_bytes() == (
        REPO / "examples" / "image-fence.yaml"
    ).read_bytes()


@pytest.mark.parametrize("name", ["image-fence", "vehicle-search"])
def test_the_plans_are_valid_and_in_the_kustomization_namespace(name: str) -> None:
    (plan,) = _load(GITOPS / "plans" / f"{name}.yaml")
    namespace = yaml.safe_load((GITOPS / "kustomization.yaml").read_text())["namespace"]
    assert plan["metadata"] == {"name": name, "namespace": namespace}
    parse_spec(plan["spec"], name=name, namespace=namespace)  # raises InvalidInput when invalid

"""The helm binary and the chart, for the chart's unit tests and the e2e tests that install it.

Notes
-----
helm is not a Python package: ``hack/install-helm.sh`` builds it once from the Go module proxy and
prints the cached binary's path (instantly when cached). ``$HELM`` overrides it. Where helm cannot
be had the tests fail under ``CI=true`` and skip elsewhere, so CI can never pass by skipping.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpuplan-operator"
INSTALL_HELM = REPO / "hack" / "install-helm.sh"
RELEASE = "gpuplan"
NAMESPACE = "gpuplan-system"

Doc = dict[str, Any]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def find_helm() -> str:
    """``$HELM``, else the binary ``hack/install-helm.sh`` prints (it builds helm if needed)."""
    if os.environ.get("HELM"):
        return os.environ["HELM"]
    problem = None
    try:
        proc = subprocess.run(
            ["bash", str(INSTALL_HELM)], capture_output=True, text=True, timeout=1200, cwd=REPO
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        problem = f"hack/install-helm.sh did not finish: {e}"
    else:
        path = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        if proc.returncode != 0 or not path or not os.access(path, os.X_OK):
            problem = f"hack/install-helm.sh failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}"
        else:
            return path
    if in_ci():
        pytest.fail(f"the chart tests need helm and CI=true: {problem}", pytrace=False)
    pytest.skip(problem)


def run_helm(helm: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([helm, *args], capture_output=True, text=True, timeout=120, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def set_args(values: Mapping[str, Any]) -> list[str]:
    """``--set-json key=value`` for each top-level or dotted key (values stay typed)."""
    out: list[str] = []
    for key, value in values.items():
        out += ["--set-json", f"{key}={json.dumps(value)}"]
    return out


def template_text(
    helm: str,
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    extra: Sequence[str] = (),
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    args = ["template", release, str(CHART), "--namespace", namespace, *set_args(values or {}), *extra]
    return run_helm(helm, *args, check=check)


def render(
    helm: str,
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    extra: Sequence[str] = (),
) -> list[Doc]:
    """``helm template`` as a list of objects (empty documents dropped)."""
    text = template_text(helm, values, release=release, namespace=namespace, extra=extra).stdout
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(docs: Sequence[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: Sequence[Doc], kind: str) -> Doc:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]

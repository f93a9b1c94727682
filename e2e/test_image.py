"""The operator image: built from the Dockerfile with podman, run read-only as non-root, and run
against the local cluster until a plan is Applied.

Notes
-----
``hack/build-image.sh`` makes everything without an outside registry: a Python base image from
Debian packages (mmdebstrap + ``podman import``, cached in ``$GPUPLAN_CACHE/podman``), wheels
downloaded on the host, and a ``podman build --network=none`` that installs them offline. The
build is part of this suite, so CI pays for it (``pytest -s`` shows how long it took). Where
podman, runc or mmdebstrap is missing the suite fails under ``CI=true`` (``.ci/run`` installs
them) and skips elsewhere.

The container runs as the chart runs the pod: UID 10001, read-only root filesystem with a tmpfs
at ``/tmp``, all capabilities dropped, no privilege escalation. It reaches the local API server
through the host's network with a copy of the admin kubeconfig.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.support import (
    REPO,
    Api,
    Kubectl,
    OperatorProcess,
    free_port,
    label_key,
    labelled_nodes,
    live_pods,
    one_type,
    operator_entry,
    plan_manifest,
    settled,
    wait_for,
)

BUILD = REPO / "hack" / "build-image.sh"
PODMAN_ENV = REPO / "hack" / "podman-env.sh"
TOOLS = ("podman", "mmdebstrap", "runc")
UID = "10001"
# what the chart's securityContext amounts to, in podman's words
LOCKED_DOWN = (
    "--read-only",
    "--read-only-tmpfs=false",
    "--tmpfs=/tmp:rw,size=64m,mode=1777",
    f"--user={UID}:{UID}",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
)


def _podman_env() -> dict[str, str]:
    """The environment ``hack/podman-env.sh`` sets up (storage and configuration of our own)."""
    out = subprocess.run(
        ["bash", "-c", f'source "{PODMAN_ENV}" && env -0'], capture_output=True, check=True, cwd=REPO
    ).stdout.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


class Podman:
    def __init__(self) -> None:
        self.env = _podman_env()

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["podman", *args], capture_output=True, text=True, env=self.env, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc


@pytest.fixture(scope="module")
def podman() -> Podman:
    missing = [tool for tool in TOOLS if not shutil.which(tool)]
    if missing:
        problem = f"{', '.join(missing)} missing (bash hack/install-image-tools.sh installs them)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"the image tests need {problem} and CI=true", pytrace=False)
        pytest.skip(problem)
    return Podman()


@pytest.fixture(scope="module")
def image(podman: Podman) -> str:
    """Build the image (the base and the wheels come from the cache when present)."""
    started = time.monotonic()
    proc = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=1800, cwd=REPO)
    assert proc.returncode == 0, f"hack/build-image.sh failed:\n{proc.stderr[-6000:]}"
    print(f"\nhack/build-image.sh: {time.monotonic() - started:.0f}s\n{proc.stderr.strip()}")
    name = proc.stdout.strip().splitlines()[-1]
    assert name.startswith("localhost/gpuplan-operator:"), proc.stdout
    return name


def test_the_image_runs_as_uid_10001_by_default(podman: Podman, image: str) -> None:
    config = json.loads(podman.run("image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["python", "-m", "gpuplan_operator"]


def test_the_image_holds_the_package_and_nothing_to_install_more_with(podman: Podman, image: str) -> None:
    script = (
        "python -c 'import gpuplan_operator, planner, kopf, ortools; print(gpuplan_operator.__file__)';"
        " test -e /wheels && echo wheels-present;"
        " python -m pip --version >/dev/null 2>&1 && echo pip-present; true"
    )
    out = podman.run("run", "--rm", "--network=none", "--entrypoint=sh", image, "-c", script).stdout
    assert out.strip() == "/opt/gpuplan/lib/python3.11/site-packages/gpuplan_operator/__init__.py", out


def test_the_image_runs_read_only_as_non_root(podman: Podman, image: str) -> None:
    script = (
        "id -u; id -g;"
        " touch /opt/gpuplan/probe 2>/dev/null && echo root-fs-writable || echo root-fs-read-only;"
        " touch /tmp/probe && echo tmp-writable;"
        " python -m gpuplan_operator --help >/dev/null && echo operator-help"
    )
    proc = podman.run("run", "--rm", "--network=none", *LOCKED_DOWN, "--entrypoint=sh", image, "-c", script)
    assert proc.stdout.split() == [UID, UID, "root-fs-read-only", "tmp-writable", "operator-help"], (
        proc.stdout + proc.stderr
    )


@pytest.fixture
def container(podman: Podman, image: str, kubeconfig: str, tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start the operator from the image (detached, host network); removed afterwards."""
    started: list[str] = []
    readable = tmp_path / "kubeconfig"  # the admin kubeconfig is 0600 root: UID 10001 reads a copy
    readable.write_text(Path(kubeconfig).read_text())
    readable.chmod(0o644)

    def start(args: Sequence[str]) -> str:
        name = f"gpuplan-e2e-{uuid.uuid4().hex[:8]}"
        podman.run(
            "run", "--detach", f"--name={name}", "--network=host", *LOCKED_DOWN,
            f"--volume={readable}:/etc/gpuplan/kubeconfig:ro", "--env=KUBECONFIG=/etc/gpuplan/kubeconfig",
            image, *args,
        )  # fmt: skip
        started.append(name)
        return name

    yield start
    for name in started:
        podman.run("rm", "--force", "--time=10", name, check=False)


def _healthy(url: str, podman: Podman, name: str) -> bool:
    state = podman.run("inspect", "--format={{.State.Status}}", name).stdout.strip()
    assert state == "running", f"the container is {state}: {podman.run('logs', name).stderr[-3000:]}"
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def test_the_operator_from_the_image_applies_a_plan(
    podman: Podman,
    container: Callable[..., str],
    api: Api,
    kubectl: Kubectl,
    operator: OperatorProcess,
    ns: str,
    make_nodes: Callable[..., list[str]],
) -> None:
    """Locked down as in the chart, JSON logs, host network: a plan goes to Applied and Ready."""
    nodes = make_nodes("image", 2)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    name = "from-image"
    request: dict[str, Any] = {"resourceNum": {"G": 7}, "machineNum": {"G": 1}}
    spec = one_type(gpu_type, {"image_probe": request}, [operator_entry("image_probe")], deploy=True)

    operator.stop()  # the session's operator must not do the work
    try:
        health = f"http://127.0.0.1:{free_port()}/healthz"
        box = container(["--liveness", health, "--log-format", "json", *OperatorProcess.ARGS])
        wait_for("the image's operator to be healthy", lambda: _healthy(health, podman, box), timeout=90)
        kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(plan_manifest(ns, name, spec)))
        status = wait_for("the plan Applied by the image's operator", settled(api, ns, name), timeout=120)
        assert status and status["cards"] == "7/7"
        assert labelled_nodes(api, label_key(ns, name))
        assert api.configmap(ns, f"{name}-flamewakers") is not None
        wait_for(
            "the plan's pod scheduled", lambda: [p for p in live_pods(api, ns) if p["spec"].get("nodeName")]
        )

        kubectl.run("delete", "gpuallocationplans", name, "-n", ns, "--timeout=90s")
        assert labelled_nodes(api, label_key(ns, name)) == {}

        logs = podman.run("logs", box)
        lines = [line for line in (logs.stdout + logs.stderr).splitlines() if line.strip()]
        records = [json.loads(line) for line in lines]  # every line is one JSON object
        assert all({"message", "severity", "timestamp"} <= r.keys() for r in records), lines[:5]
        assert any(f"{ns}/{name}: applied" in r["message"] for r in records), lines[-20:]
        assert not [r for r in records if r["severity"] in ("error", "critical")], lines[-20:]
    finally:
        operator.start()

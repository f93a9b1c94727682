"""The distributions: ``python -m build`` makes a wheel and an sdist, a fresh virtual environment
installs the wheel, and the ``gpuplan`` it gets plans the example as the development tree does.

Notes
-----
The build runs in pip's isolated build environment (setuptools from the index, as a user's build
would); the fresh environment installs the wheel's dependencies at the versions of ``.venv``
(constraints from ``pip freeze``), from pip's cache when warm. Everything runs outside the
repository (``cwd`` is a temporary directory), so nothing is imported from the source tree.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
NAME, VERSION = PROJECT["name"], PROJECT["version"]
EXAMPLE = (
    "plan",
    str(REPO / "examples" / "image-fence.yaml"),
    "--nodes",
    str(REPO / "examples" / "nodes.yaml"),
)


def _run(*cmd: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=timeout)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(REPO), cwd=out)
    return out


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob(f"{NAME}-{VERSION}-py3-none-any.whl")
    return wheel


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return sorted(z.namelist())


def _sdist(dist: Path) -> Path:
    (sdist,) = dist.glob(f"{NAME}-{VERSION}.tar.gz")
    return sdist


def test_the_wheel_holds_the_four_packages_and_the_commands(dist: Path) -> None:
    names = set(_names(_wheel(dist)))
    for path in ("planner/planning.py", "planner/py.typed", "gpuplan/cli.py", "gpuplan/py.typed",
                 "gpuplan_operator/__main__.py", "gpuplan_operator/py.typed",
                 "loadtest/cli.py", "loadtest/py.typed", "planner/output/templates/plan.html.j2"):  # fmt: skip
        assert path in names, path
    with zipfile.ZipFile(_wheel(dist)) as wheel:
        entry_points = wheel.read(f"{NAME}-{VERSION}.dist-info/entry_points.txt").decode()
    assert "gpuplan = gpuplan.cli:main" in entry_points
    assert "kubectl-gpuplan = gpuplan.kubectl:main" in entry_points
    assert not [n for n in names if n.startswith(("tests/", "e2e/", "operator/", ".venv"))], names


def test_the_sdist_builds_the_same_wheel(dist: Path, tmp_path: Path) -> None:
    """Everything the wheel needs is in the sdist: a wheel built from it has the same files."""
    with tarfile.open(_sdist(dist)) as sdist:
        members = sdist.getnames()
    root = f"{NAME}-{VERSION}"
    for path in ("pyproject.toml", "README.md", "gpuplan/cli.py", "operator/gpuplan_operator/__main__.py"):
        assert f"{root}/{path}" in members, path
    assert not [m for m in members if "/.venv/" in m or "/.cluster/" in m or "__pycache__" in m]
    rebuilt = tmp_path / "rebuilt"
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--wheel-dir",
        str(rebuilt),
        str(_sdist(dist)),
        cwd=tmp_path,
    )
    (wheel,) = rebuilt.glob("*.whl")
    assert _names(wheel) == _names(_wheel(dist))


def _without_timings(text: str) -> str:
    return re.sub(r" in \d+\.\d+s", " in _s", text)


def test_a_fresh_venv_installs_the_wheel_and_plans_the_example(dist: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python, gpuplan = env_dir / "bin" / "python", env_dir / "bin" / "gpuplan"
    constraints = tmp_path / "constraints.txt"
    freeze = _run(sys.executable, "-m", "pip", "freeze", "--exclude-editable", cwd=tmp_path).stdout
    constraints.write_text(freeze)
    _run(str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--constraint", str(constraints), str(_wheel(dist)), cwd=tmp_path)  # fmt: skip

    where = _run(str(python), "-c", "import planner; print(planner.__file__)", cwd=tmp_path).stdout
    assert where.startswith(str(env_dir)), where  # the installed copy, not the source tree
    fresh = _run(str(gpuplan), *EXAMPLE, cwd=tmp_path)
    assert fresh.stdout.startswith("Plan ragnaros/image-fence"), fresh.stdout
    assert "cards placed 32/32" in fresh.stdout
    here = _run(
        sys.executable,
        "-c",
        "import sys; from gpuplan.cli import main; sys.exit(main())",
        *EXAMPLE,
        cwd=tmp_path,
    )
    assert _without_timings(fresh.stdout) == _without_timings(here.stdout)
    page = _run(str(gpuplan), *EXAMPLE, "-o", "html", cwd=tmp_path).stdout  # the template is package data
    assert page.startswith("<!DOCTYPE html>") and 'data-node="p4-000"' in page

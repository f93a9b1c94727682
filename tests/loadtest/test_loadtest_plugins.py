"""Tasks: the pluggable request body and response check, found by name, path or entry point."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from loadtest import plugins
from loadtest.plugins import (
    HttpGet,
    Request,
    Response,
    SampleWork,
    TaskError,
    load_task,
    parse_task_args,
)

pytestmark = pytest.mark.timeout(10)

EXAMPLE_TASK = Path(__file__).resolve().parents[2] / "loadtest" / "examples" / "my_task.py"


class NotATask:
    def build(self, i: int) -> Request:
        return Request()


def test_built_ins_and_module_paths() -> None:
    assert isinstance(load_task("http-get"), HttpGet)
    assert isinstance(load_task("loadtest.plugins:SampleWork"), SampleWork)
    post = load_task("http-post", {"body": "hi", "content_type": "text/plain"})
    req = post.build(0)
    assert (req.method, req.body, req.headers["content-type"]) == ("POST", b"hi", "text/plain")


def test_a_task_from_a_file_with_arguments() -> None:
    task = load_task(f"{EXAMPLE_TASK}:FeatureTask", {"dim": "3"})
    req = task.build(17)
    assert req.method == "POST" and req.path == "/v1/feature"
    assert task.check(Response(200, b'{"feature": [0.1, 0.2, 0.3]}'))
    assert not task.check(Response(200, b'{"feature": [0.1]}'))
    assert not task.check(Response(500, b""))
    assert not task.check(Response(200, b"not json"))


def test_a_task_from_an_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = importlib.metadata.EntryPoint(
        name="sample", value="loadtest.plugins:SampleWork", group=plugins.ENTRY_POINT_GROUP
    )
    broken = importlib.metadata.EntryPoint(
        name="broken", value="no_such_module_xyz:Task", group=plugins.ENTRY_POINT_GROUP
    )

    def fake_entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
        return [ep, broken] if group == plugins.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    assert isinstance(load_task("sample"), SampleWork)
    with pytest.raises(TaskError, match="failed to load"):
        load_task("broken")
    with pytest.raises(TaskError, match=r"one of .*sample"):
        load_task("nonesuch")


@pytest.mark.parametrize(
    ("spec", "args", "message"),
    [
        pytest.param("nonesuch", {}, "unknown task", id="an unknown name"),
        pytest.param("no_such_module_xyz:Task", {}, "failed to import", id="a missing module"),
        pytest.param("loadtest.plugins:Nope", {}, "no attribute 'Nope'", id="a missing class"),
        pytest.param("/nowhere/task.py:T", {}, "does not exist", id="a missing file"),
        pytest.param(":Task", {}, "must look like", id="no module"),
        pytest.param(f"{__name__}:NotATask", {}, "no build", id="no check method"),
        pytest.param(
            "http-get", {"colour": "red"}, "could not be created", id="an argument the class does not take"
        ),
    ],
)
def test_task_errors_are_one_line(spec: str, args: dict[str, str], message: str) -> None:
    with pytest.raises(TaskError, match=message) as info:
        load_task(spec, args)
    assert "\n" not in str(info.value)


def test_task_args() -> None:
    assert parse_task_args(["dim=512", "body-file=x.bin", "empty="]) == {
        "dim": "512",
        "body_file": "x.bin",
        "empty": "",
    }
    with pytest.raises(TaskError, match="key=value"):
        parse_task_args(["novalue"])


def test_sample_work_checks_the_body_not_just_the_status() -> None:
    task = SampleWork()
    assert task.build(5) == Request.json({"i": 5}, path="/work")
    assert task.check(Response(200, b'{"ok": true}'))
    assert not task.check(Response(200, b'{"ok": false}'))
    assert not task.check(Response(200, b"[]"))
    assert not task.check(Response(503, b'{"ok": true}'))

"""What one request looks like and what counts as a good answer: the pluggable "main task".

The original performance-test framework had one base class and, per service, a "main task"
that built the request and judged the reply; everything else (pressure control, counters,
statistics) was shared. Here the
shared part is the runner, and the per-service part is a *task*: any object with

* ``build(i: int) -> Request`` - the i-th request of a run (``i`` counts from 0 over the whole run,
  so a task can cycle through a corpus of images or ids deterministically), and
* ``check(response: Response) -> bool`` - whether the reply is a success. A reply that arrives but
  fails the check is an error just like a refused connection: a server that answers fast with
  garbage must not look like a server with capacity.

A task is named on the command line as

* ``module:Class`` - imported from ``sys.path`` (``mypkg.tasks:FaceFeature``);
* ``path/to/file.py:Class`` - loaded from a file, handy for a one-off task next to the results;
* ``NAME`` - an entry point in the group ``gpuplan.loadtest.tasks`` (how a service package ships
  its task), or one of the built-in names below.

The class is called with the ``--task-arg key=value`` pairs as keyword arguments (strings), so a
task can take a corpus path or an id range without a config format of its own.

For gRPC targets the request ``body`` is the serialized request message and ``path`` is unused (the
method comes from the URL); the response ``status`` is the gRPC status code (0 is OK).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadtest.messages import Request, Response, Task, TaskError

__all__ = [
    "BUILTIN_TASKS",
    "ENTRY_POINT_GROUP",
    "Request",
    "Response",
    "Task",
    "TaskError",
    "load_task",
    "parse_task_args",
]

ENTRY_POINT_GROUP = "gpuplan.loadtest.tasks"


class HttpGet:
    """``GET`` the target URL; success is any 2xx status. The default task."""

    def __init__(self, path: str = "") -> None:
        self._request = Request(method="GET", path=path)

    def build(self, i: int) -> Request:
        return self._request

    def check(self, response: Response) -> bool:
        return 200 <= response.status < 300


class HttpPost:
    """``POST`` a fixed body (``body=...`` or ``body_file=...``); success is any 2xx status."""

    def __init__(
        self,
        body: str = "",
        body_file: str = "",
        content_type: str = "application/octet-stream",
        path: str = "",
    ) -> None:
        data = Path(body_file).read_bytes() if body_file else body.encode()
        self._request = Request(method="POST", path=path, headers={"content-type": content_type}, body=data)

    def build(self, i: int) -> Request:
        return self._request

    def check(self, response: Response) -> bool:
        return 200 <= response.status < 300


class HttpRequest:
    """Any method with an optional body (``body=...`` or ``body_file=...``); success is 2xx.

    What ``--method``, ``--body`` and ``--body-file`` on the command line build.
    """

    def __init__(
        self,
        method: str = "GET",
        body: str = "",
        body_file: str = "",
        content_type: str = "",
        path: str = "",
    ) -> None:
        try:
            data = Path(body_file).read_bytes() if body_file else body.encode()
        except OSError as exc:
            raise TaskError(f"body file {body_file!r}: {exc.strerror}") from None
        headers = {"content-type": content_type} if content_type else {}
        self._request = Request(method=method.upper(), path=path, headers=headers, body=data or None)

    def build(self, i: int) -> Request:
        return self._request

    def check(self, response: Response) -> bool:
        return 200 <= response.status < 300


class SampleWork:
    """The task for :mod:`loadtest.sample_server`: POST ``{"i": i}``, expect ``{"ok": true}``.

    It checks the body, not only the status, to show what a real task does: a feature-extraction
    task would check that a vector of the right length came back.
    """

    def __init__(self, path: str = "/work") -> None:
        self._path = path

    def build(self, i: int) -> Request:
        return Request.json({"i": i}, path=self._path)

    def check(self, response: Response) -> bool:
        if response.status != 200:
            return False
        try:
            return response.json().get("ok") is True
        except (ValueError, AttributeError):
            return False


class GrpcRaw:
    """Send fixed bytes (``body_hex=...``, default empty) to a gRPC method; success is status OK.

    An empty message is a valid encoding of any protobuf message whose fields all have defaults,
    so this probes a gRPC method without generated code.
    """

    def __init__(self, body_hex: str = "") -> None:
        self._request = Request(method="POST", body=bytes.fromhex(body_hex))

    def build(self, i: int) -> Request:
        return self._request

    def check(self, response: Response) -> bool:
        return response.status == 0


BUILTIN_TASKS: Mapping[str, type[Any]] = {
    "http-get": HttpGet,
    "http-post": HttpPost,
    "http-request": HttpRequest,
    "sample-work": SampleWork,
    "grpc-raw": GrpcRaw,
}


def _load_class(spec: str) -> Any:
    """Resolve ``module:Class``, ``file.py:Class`` or an entry point / built-in name."""
    if spec in BUILTIN_TASKS:
        return BUILTIN_TASKS[spec]
    if spec == "targets":
        from loadtest.targets import Targets

        return Targets
    if ":" not in spec:
        eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        for ep in eps:
            if ep.name == spec:
                try:
                    return ep.load()
                except Exception as exc:  # a broken plugin must not crash with a traceback
                    raise TaskError(f"task entry point {spec!r} failed to load: {exc}") from exc
        known = sorted({*BUILTIN_TASKS, "targets", *(ep.name for ep in eps)})
        raise TaskError(
            f"unknown task {spec!r}: use module:Class, file.py:Class or one of {', '.join(known)}"
        )
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise TaskError(f"task {spec!r} must look like module:Class or file.py:Class")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise TaskError(f"task file {target!r} does not exist")
        name = f"_loadtest_task_{abs(hash(path.resolve()))}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise TaskError(f"task file {target!r} cannot be imported")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            raise TaskError(f"task file {target!r} failed to import: {exc}") from exc
    else:
        try:
            module = importlib.import_module(target)
        except Exception as exc:
            raise TaskError(f"task module {target!r} failed to import: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise TaskError(f"task module {target!r} has no attribute {attr!r}") from None


def load_task(spec: str, args: Mapping[str, str] | None = None) -> Task:
    """Build the task named by ``spec`` with ``args`` as keyword arguments.

    Raises :class:`TaskError` with one readable line for every way this can go wrong, because the
    command line turns it into exit status 2 rather than a traceback.
    """
    factory = _load_class(spec)
    try:
        task = factory(**dict(args or {}))
    except TaskError:
        raise
    except Exception as exc:
        raise TaskError(f"task {spec!r} could not be created: {exc}") from exc
    if not isinstance(task, Task):
        raise TaskError(f"task {spec!r} has no build(i) and check(response) methods")
    return task


def parse_task_args(pairs: list[str]) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``; a pair without ``=`` is an error."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise TaskError(f"--task-arg {pair!r} must look like key=value")
        out[key.replace("-", "_")] = value
    return out

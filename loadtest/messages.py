"""The values a load test passes around: a request, its response, the task that builds and judges
them, and the error a task reports. They sit below the task plugins (:mod:`loadtest.plugins`), the
targets file (:mod:`loadtest.targets`) and the transports, which all speak them; plugin authors
import them from :mod:`loadtest.plugins`, which re-exports them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Request:
    """One request, independent of the transport that sends it.

    ``path`` is joined to the target URL (empty means the URL itself; a leading ``/`` replaces the
    URL's path, as a browser would resolve it).
    """

    method: str = "GET"
    path: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None

    @classmethod
    def json(cls, obj: Any, *, method: str = "POST", path: str = "") -> Request:
        """A request with a JSON body and the matching content type."""
        return cls(
            method=method,
            path=path,
            headers={"content-type": "application/json"},
            body=json.dumps(obj, separators=(",", ":")).encode(),
        )


@dataclass(frozen=True)
class Response:
    """What came back: HTTP status (or gRPC code), headers and the body bytes."""

    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        """The body parsed as JSON (raises ``ValueError`` when it is not)."""
        return json.loads(self.body)


@runtime_checkable
class Task(Protocol):
    """The per-service part of a load test (see the module docstring)."""

    def build(self, i: int) -> Request: ...

    def check(self, response: Response) -> bool: ...


class TaskError(ValueError):
    """A task could not be found or built; the message names what and why."""

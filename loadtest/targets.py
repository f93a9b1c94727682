"""A targets file: many different requests in one run, in vegeta's plain-text format.

A real service is rarely measured with one request repeated: a face search wants different
images, an API several endpoints. The format is vegeta's ``http`` targets format, so files written
for vegeta work as they are::

    # comment
    GET http://127.0.0.1:8080/search?q=1
    X-Account: 42

    POST http://127.0.0.1:8080/features
    Content-Type: application/json
    @bodies/face-001.json

A target is a method and a URL, then header lines, then optionally ``@FILE`` for the body (relative
to the targets file); blank lines separate targets. Request ``i`` of a run is target
``i mod n``, so every shard and every sender process takes the same targets in the same order
(``--task targets --task-arg file=...``, or ``--targets FILE``). URLs on the run's host and port
share its connections; a URL on another host or port gets connections of its own, so a file that
lists every instance of a service spreads the load over them round-robin, as a load balancer
would. Paths and queries are used as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from loadtest.messages import Request, Response, TaskError

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@dataclass
class _Target:
    """One target while its lines are read: ``METHOD URL``, then headers and an ``@body`` file."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None

    def request(self) -> Request:
        return Request(method=self.method, path=self.url, headers=self.headers, body=self.body)


def parse_targets(text: str, base: Path | None = None) -> list[Request]:
    """The requests of a targets file; :class:`TaskError` naming the line for anything else."""
    out: list[Request] = []
    current: _Target | None = None
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("#"):
            continue
        if not line:
            if current is not None:
                out.append(current.request())
            current = None
            continue
        if current is None:
            method, _, url = line.partition(" ")
            if method.upper() not in METHODS or not url.strip():
                raise TaskError(f"targets line {n}: expected 'METHOD URL', got {line[:80]!r}")
            current = _Target(method.upper(), url.strip())
        elif line.startswith("@"):
            path = Path(line[1:].strip())
            if base is not None and not path.is_absolute():
                path = base / path
            try:
                current.body = path.read_bytes()
            except OSError as exc:
                raise TaskError(f"targets line {n}: body file {str(path)!r}: {exc.strerror}") from None
        else:
            key, sep, value = line.partition(":")
            if not sep or not key.strip():
                raise TaskError(f"targets line {n}: expected 'Header: value' or '@file', got {line[:80]!r}")
            current.headers[key.strip()] = value.strip()
    if current is not None:
        out.append(current.request())
    if not out:
        raise TaskError("the targets file has no target")
    return out


class Targets:
    """Request ``i`` is target ``i mod n`` of ``file``; success is any 2xx status."""

    def __init__(self, file: str) -> None:
        path = Path(file)
        try:
            text = path.read_text()
        except OSError as exc:
            raise TaskError(f"targets file {file!r}: {exc.strerror}") from None
        self.requests = parse_targets(text, path.parent)

    def build(self, i: int) -> Request:
        return self.requests[i % len(self.requests)]

    def check(self, response: Response) -> bool:
        return 200 <= response.status < 300

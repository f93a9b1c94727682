"""kube.py: the JSON transport sends what the API server expects (paths, content types, auth)."""

from __future__ import annotations

import itertools
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from gpuplan_operator.kube import APPLY_PATCH, Kube, api_error_message, path_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException


class Response:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.reason = "Reason"
        self.data = json.dumps(body).encode()
        self.headers: dict[str, str] = {}

    def read(self) -> bytes:
        return self.data


def kube_with(status: int = 200, body: Any = None) -> tuple[Kube, list[dict[str, Any]]]:
    cfg = client.Configuration(host="https://api.example:6443")
    cfg.api_key = {"BearerToken": "t0ken"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    api = client.ApiClient(cfg)
    calls: list[dict[str, Any]] = []

    def request(method: str, url: str, headers: dict[str, str], body: Any = None, **_: Any) -> Response:
        calls.append({"method": method, "url": url, "headers": headers, "body": body})
        return Response(status, {} if body is None and status < 300 else (body or {}))

    api.rest_client.request = request  # type: ignore[method-assign,assignment]
    kube = Kube(api)
    if status >= 300:
        api.rest_client.request = lambda *a, **k: Response(status, body)  # type: ignore[method-assign]
    return kube, calls


@pytest.mark.parametrize(
    ("args", "path"),
    [
        pytest.param(("v1", "nodes", "n1"), "/api/v1/nodes/n1", id="core, cluster-scoped"),
        pytest.param(("apps/v1", "deployments", None, "ns"), "/apis/apps/v1/namespaces/ns/deployments",
                     id="group, namespaced list"),
    ],
)  # fmt: skip
def test_paths(args: tuple[Any, ...], path: str) -> None:
    assert path_for(*args) == path


def test_apply_is_a_forced_server_side_apply_with_our_field_manager_and_auth() -> None:
    kube, calls = kube_with()
    kube.apply("/api/v1/namespaces/ns/configmaps/x", {"kind": "ConfigMap"}, "gpuplan-operator")
    (call,) = calls
    assert call["method"] == "PATCH"
    assert call["url"].endswith("/configmaps/x?fieldManager=gpuplan-operator&force=true")
    assert call["headers"]["Content-Type"] == APPLY_PATCH
    assert call["headers"]["authorization"] == "Bearer t0ken"
    assert call["body"] == {"kind": "ConfigMap"}
    assert kube.writes == 1


def test_errors_raise_with_the_servers_message() -> None:
    kube, _ = kube_with(422, {"kind": "Status", "reason": "Invalid", "message": "spec.x: bad"})
    with pytest.raises(ApiException) as err:
        kube.get("/api/v1/nodes")
    assert err.value.status == 422
    assert api_error_message(err.value) == "422 Invalid: spec.x: bad"


def test_delete_of_something_gone_is_not_an_error() -> None:
    kube, _ = kube_with(404, {"kind": "Status", "reason": "NotFound"})
    assert kube.delete("/api/v1/nodes/gone") is False


def test_no_answer_at_all_is_an_api_error_too() -> None:
    """A restarting API server (refused, reset) takes the retry path of a 5xx, not a urllib3 crash."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = client.Configuration(host=f"http://127.0.0.1:{port}")
    cfg.retries = False  # fail at once; urllib3 would otherwise retry connecting
    kube = Kube(client.ApiClient(cfg), timeout=2)
    with pytest.raises(ApiException) as err:
        kube.merge_patch("/api/v1/nodes/n1", {"metadata": {}}, "gpuplan-operator")
    assert err.value.status == 0
    assert api_error_message(err.value).startswith("PATCH /api/v1/nodes/n1: no answer from the API server")
    assert kube.writes == 0


def test_a_watch_yields_each_event_whole_wherever_the_chunks_cut_the_lines() -> None:
    """Events of any size, several in one chunk or one across several, blank lines between."""
    events = [{"type": "ADDED", "object": {"metadata": {"name": f"p{i}"}, "data": "x" * size}}
              for i, size in enumerate((10, 70_000, 5, 200_000, 1, 3))]  # fmt: skip
    text = b"\n".join(json.dumps(e).encode() for e in events[:3]) + b"\n\n"
    text += b"\n".join(json.dumps(e).encode() for e in events[3:]) + b"\n"
    cuts = [0, 7, 8, 70_030, 70_031, 140_000, 280_000, len(text)]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for a, b in itertools.pairwise(cuts):
                piece = text[a:b]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True  # the server serves one connection at a time

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        kube = Kube(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{server.server_port}")))
        assert list(kube.stream("/api/v1/pods", {"watch": "true"}, read_timeout=5)) == events
    finally:
        server.shutdown()
        server.server_close()

"""The keep-alive HTTP/1.1 client against a scripted loopback server: framing, reuse, failures.

The server below answers by path with exactly the bytes a case needs (a chunked body split
across writes, a close-delimited body, a 100 Continue, a connection closed while idle), and
records what it received, so each case checks both what the client sent and what it made of the
answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from loadtest.http import HttpClient, HttpError
from loadtest.plugins import Request

pytestmark = pytest.mark.timeout(20)

OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
SCRIPTS: dict[str, list[bytes]] = {
    "/ok": [OK],
    "/chunked": [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhel",
        b"lo\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n",
    ],
    "/close": [b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 3\r\n\r\nbye"],
    "/until-close": [b"HTTP/1.0 200 OK\r\n\r\nall of it", b""],
    "/no-content": [b"HTTP/1.1 204 No Content\r\n\r\n"],
    "/continue": [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n"],
    "/garbage": [b"SMTP ready\r\n\r\n"],
    "/head": [b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n"],
}

Scenario = Callable[[HttpClient, list[dict[str, Any]], dict[str, int]], Awaitable[None]]


def run_against_server(scenario: Scenario, **client_kwargs: Any) -> None:
    async def main() -> None:
        seen: list[dict[str, Any]] = []
        counters = {"connections": 0}

        writers: list[asyncio.StreamWriter] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            counters["connections"] += 1
            writers.append(writer)
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    lines = head.decode().split("\r\n")
                    method, path, _ = lines[0].split(" ")
                    headers = dict(line.split(": ", 1) for line in lines[1:] if line)
                    body = await reader.readexactly(int(headers.get("content-length", "0")))
                    seen.append({"method": method, "path": path, "headers": headers, "body": body})
                    if path == "/idle-close":  # answer, then close as an idle keep-alive timeout would
                        writer.write(OK)
                        await writer.drain()
                        writer.close()
                        return
                    for part in SCRIPTS.get(path.split("?")[0], [OK]):
                        if part == b"":
                            writer.close()
                            return
                        writer.write(part)
                        await writer.drain()
                        await asyncio.sleep(0.01)
                    if path == "/close":
                        writer.close()
                        return
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = HttpClient(f"http://127.0.0.1:{port}/base/index?x=1", **client_kwargs)
        try:
            await scenario(client, seen, counters)
        finally:
            await client.aclose()
            server.close()
            for w in writers:
                w.close()
                with contextlib.suppress(ConnectionError):
                    await w.wait_closed()
            await server.wait_closed()
            await asyncio.sleep(0.01)

    asyncio.run(main())


def test_keep_alive_reuses_one_connection_and_sends_the_headers() -> None:
    async def scenario(c: HttpClient, seen: list[dict[str, Any]], n: dict[str, int]) -> None:
        for _ in range(3):
            r = await c.send(Request(path="/ok"))
            assert (r.status, r.body) == (200, b"ok")
        post = await c.send(Request(method="POST", path="/ok", headers={"X-Req": "2"}, body=b"abc"))
        assert post.status == 200
        assert n["connections"] == 1
        assert seen[0]["headers"]["host"].startswith("127.0.0.1:")
        assert seen[0]["headers"]["x-run"] == "7"  # a --header on every request
        assert seen[3]["headers"]["x-req"] == "2" and seen[3]["body"] == b"abc"
        assert seen[3]["headers"]["content-length"] == "3"

    run_against_server(scenario, default_headers={"X-Run": "7"})


@pytest.mark.parametrize(
    ("path", "status", "body"),
    [
        pytest.param("/chunked", 200, b"hello world", id="a chunked body split across writes"),
        pytest.param("/until-close", 200, b"all of it", id="a body that ends with the connection"),
        pytest.param("/no-content", 204, b"", id="204 has no body"),
        pytest.param("/continue", 201, b"", id="100 Continue is skipped for the real answer"),
        pytest.param("/close", 200, b"bye", id="connection: close after a sized body"),
    ],
)
def test_response_framing(path: str, status: int, body: bytes) -> None:
    async def scenario(c: HttpClient, seen: list[dict[str, Any]], n: dict[str, int]) -> None:
        r = await c.send(Request(path=path))
        assert (r.status, r.body) == (status, body)
        again = await c.send(Request(path="/ok"))  # the connection state is right afterwards
        assert again.body == b"ok"

    run_against_server(scenario)


def test_a_head_request_reads_no_body() -> None:
    async def scenario(c: HttpClient, seen: list[dict[str, Any]], n: dict[str, int]) -> None:
        r = await c.send(Request(method="HEAD", path="/head"))
        assert (r.status, r.body, r.headers["content-length"]) == (200, b"", "1000")
        assert (await c.send(Request(path="/ok"))).body == b"ok"
        assert n["connections"] == 1

    run_against_server(scenario)


def test_a_connection_closed_while_idle_is_replaced_once() -> None:
    async def scenario(c: HttpClient, seen: list[dict[str, Any]], n: dict[str, int]) -> None:
        assert (await c.send(Request(path="/idle-close"))).status == 200
        await asyncio.sleep(0.05)  # the server's close reaches the client while the connection idles
        assert (await c.send(Request(path="/ok"))).body == b"ok"
        assert n["connections"] == 2

    run_against_server(scenario)


def test_a_response_that_is_not_http_is_a_network_error() -> None:
    async def scenario(c: HttpClient, seen: list[dict[str, Any]], n: dict[str, int]) -> None:
        with pytest.raises(HttpError) as info:
            await c.send(Request(path="/garbage"))
        assert info.value.kind == "network" and "status line" in str(info.value)

    run_against_server(scenario)


@pytest.mark.parametrize(
    ("path", "target"),
    [
        pytest.param("", "/base/index?x=1", id="no path: the URL itself"),
        pytest.param("other", "/base/other", id="a relative path joins like a browser"),
        pytest.param("/abs?q=2", "/abs?q=2", id="an absolute path replaces the URL's"),
        pytest.param("http://127.0.0.1:{port}/full", "/full", id="a full URL on the same origin"),
    ],
)
def test_request_targets(path: str, target: str) -> None:
    c = HttpClient("http://127.0.0.1:8081/base/index?x=1")
    assert c.target_path(path.format(port=8081)) == target


def test_a_url_on_another_origin_is_refused() -> None:
    with pytest.raises(ValueError, match=r"is not on 127\.0\.0\.1:8081"):
        HttpClient("http://127.0.0.1:8081/").target_path("http://example.com/x")


def test_a_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def main() -> None:
        c = HttpClient(f"http://127.0.0.1:{port}/")
        with pytest.raises(HttpError) as info:
            await c.send(Request())
        assert info.value.kind == "connect"

    asyncio.run(main())

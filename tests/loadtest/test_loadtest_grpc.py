"""gRPC targets: raw-bytes unary calls against an in-process grpc.aio server on loopback.

grpcio is a declared dependency of the ``loadtest`` extra, so it is imported plainly: where it is
missing these tests fail (a skip would hide a broken install in CI).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import grpc
import pytest

from loadtest.plugins import GrpcRaw, Request
from loadtest.record import judge
from loadtest.sender import Sender, StepPlan
from loadtest.stats import HeldRule
from loadtest.transport import GrpcTransport, TransportError, make_transport

pytestmark = pytest.mark.timeout(30)


async def _start_server() -> tuple[Any, int]:
    async def call(request: bytes, context: Any) -> bytes:
        if request == b"bad":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad request")
        if dict(context.invocation_metadata()).get("x-run") != "test":  # --header is metadata
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "no x-run metadata")
        return request[::-1]

    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "test.Echo", {"Call": grpc.unary_unary_rpc_method_handler(call)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


def test_a_fixed_rate_step_over_grpc() -> None:
    async def run() -> tuple[Any, Any, Any]:
        server, port = await _start_server()
        try:
            url = f"grpc://127.0.0.1:{port}/test.Echo/Call"
            transport = make_transport(url, timeout=2.0, headers={"x-run": "test"})
            try:
                direct = await transport.send(Request(body=b"abc"))
                sender = Sender(transport, GrpcRaw(body_hex="6f6b"), concurrency=8, timeout=2.0)

                def plan() -> StepPlan:
                    return StepPlan(30.0, time.monotonic() + 0.05, 0.2, 1.0, drain=2.5)

                good = judge(await sender.run_step(plan()), index=0, rule=HeldRule())
                sender.task = GrpcRaw(body_hex=b"bad".hex())
                bad = judge(await sender.run_step(plan()), index=1, rule=HeldRule())
            finally:
                await transport.aclose()
        finally:
            await server.stop(None)
        return direct, good, bad

    direct, good, bad = asyncio.run(run())
    assert direct.status == 0 and direct.body == b"cba"
    assert good.held and good.errors == 0 and good.completed >= 25
    assert not bad.held and bad.errors_by_kind == {"check": bad.completed}
    assert "bad request" in bad.error_examples["check"]


def test_an_unreachable_grpc_target_is_a_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def run() -> None:
        transport = GrpcTransport(f"grpc://127.0.0.1:{port}/test.Echo/Call", timeout=2.0)
        try:
            with pytest.raises(TransportError) as info:
                await transport.send(Request(body=b""))
            assert info.value.kind == "connect"
        finally:
            await transport.aclose()

    asyncio.run(run())


def test_a_grpc_run_from_a_sender_process(capsys: pytest.CaptureFixture[str]) -> None:
    """The command line, one sender process, a synchronous gRPC server in this process."""
    from concurrent.futures import ThreadPoolExecutor

    from loadtest.cli import main

    def call(request: bytes, context: Any) -> bytes:
        if dict(context.invocation_metadata()).get("x-run") != "test":
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "no x-run metadata")
        return request

    server = grpc.server(ThreadPoolExecutor(max_workers=8))
    handler = grpc.method_handlers_generic_handler(
        "test.Echo", {"Call": grpc.unary_unary_rpc_method_handler(call)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        rc = main(
            [
                f"grpc://127.0.0.1:{port}/test.Echo/Call",
                "--task",
                "grpc-raw",
                "-H",
                "x-run: test",
                "--rate",
                "30",
                "--warmup",
                "0.2",
                "--window",
                "1",
                "--processes",
                "1",
                "--quiet",
                "--json",
                "-",
            ]
        )
    finally:
        server.stop(None)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    step = json.loads(captured.out)["steps"][0]
    assert step["held"] and step["errors"] == 0 and step["completed"] >= 25, step["reasons"]
    assert step["statuses"] == {"0": step["completed"]}

"""gRPC targets: raw-bytes unary calls against an in-process grpc.aio server on loopback.

grpcio is optional (only ``grpc://`` URLs need it), so these tests skip - visibly, with ``-ra`` -
where it is not installed.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from loadtest.plugins import GrpcRaw, Request
from loadtest.runner import RunConfig, Runner
from loadtest.transport import GrpcTransport, TransportError, make_transport

grpc: Any = pytest.importorskip("grpc")

pytestmark = pytest.mark.timeout(30)


async def _start_server() -> tuple[Any, int]:
    async def call(request: bytes, context: Any) -> bytes:
        if request == b"bad":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad request")
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
            transport = make_transport(url, concurrency=8, timeout=2.0)
            try:
                direct = await transport.send(Request(body=b"abc"))
                runner = Runner(
                    transport, GrpcRaw(body_hex="6f6b"), RunConfig(concurrency=8, warmup=0.2, window=1.0)
                )
                good = await runner.run_step(0, 30.0)
                runner.task = GrpcRaw(body_hex=b"bad".hex())
                bad = await runner.run_step(1, 30.0)
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

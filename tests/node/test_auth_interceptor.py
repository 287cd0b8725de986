"""The auth interceptor on a real grpc.aio server, for all four RPC shapes (new streaming RPCs of other issues get
the same treatment), including an RPC missing from node.auth.ACCESS: admins only."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from raftmq.client.security import signed_headers
from raftmq.node.auth import Authenticator, AuthInterceptor, check_rule
from raftmq.node.config import SecuritySection
from raftmq.replication.acl_table import AclTable

SERVICE = "raftmq.test.Echo"


def _identity(b: bytes) -> bytes:
    return b


async def _uu(request, context):
    return request


async def _us(request, context):
    for _ in range(2):
        yield request


async def _su(requests, context):
    return b"".join([r async for r in requests])


async def _ss(requests, context):
    async for r in requests:
        yield r


def _handlers() -> grpc.GenericRpcHandler:
    kw = {"request_deserializer": _identity, "response_serializer": _identity}
    return grpc.method_handlers_generic_handler(SERVICE, {
        "UU": grpc.unary_unary_rpc_method_handler(_uu, **kw),
        "US": grpc.unary_stream_rpc_method_handler(_us, **kw),
        "SU": grpc.stream_unary_rpc_method_handler(_su, **kw),
        "SS": grpc.stream_stream_rpc_method_handler(_ss, **kw),
    })


async def _calls(metadata, writes: int = 2) -> dict[str, object]:
    table = AclTable(None)
    auth = Authenticator(SecuritySection(auth_enabled=True, auth_admin_access_key="root",
                                         auth_admin_secret_key="root-secret-1"), lambda: table)
    table.apply({"op": "user_put", "user": "alice", "secret": auth.box.seal("alice-secret-1")})
    table.apply({"op": "rule_add", "user": "alice",
                 "rule": check_rule({"effect": "allow", "actions": ["PUB", "SUB"], "resources": ["topic:*"]})})
    server = grpc.aio.server(interceptors=[AuthInterceptor(auth)])
    server.add_generic_rpc_handlers((_handlers(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    out: dict[str, object] = {}
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            kw = {"request_serializer": _identity, "response_deserializer": _identity}
            calls = {
                "UU": lambda: ch.unary_unary(f"/{SERVICE}/UU", **kw)(b"x", metadata=metadata, timeout=10),
                "US": lambda: _collect(ch.unary_stream(f"/{SERVICE}/US", **kw)(b"x", metadata=metadata, timeout=10)),
                "SU": lambda: _streamed(ch.stream_unary(f"/{SERVICE}/SU", **kw)(metadata=metadata, timeout=10), writes),
                "SS": lambda: _streamed(ch.stream_stream(f"/{SERVICE}/SS", **kw)(metadata=metadata, timeout=10),
                                        writes),
            }
            for name, call in calls.items():
                try:
                    out[name] = await call()
                except grpc.aio.AioRpcError as e:
                    out[name] = e.code()
    finally:
        await server.stop(0)
    return out


async def _streamed(call, writes: int):
    """Write ``writes`` requests (and close the stream after two), then read. A refused client writes nothing:
    every refusal here (bad credentials, an admins-only method) is decided when the stream opens, before a
    request is read, and a write racing the server's status makes the aio client report its own failed write as
    INTERNAL instead (the SDK's streams map that race back to the server's status; this bare client does not)."""
    for chunk in (b"a", b"b")[:writes]:
        await call.write(chunk)
    if writes == 2:
        await call.done_writing()
    if isinstance(call, grpc.aio.StreamStreamCall):
        got = [r async for r in _responses(call)]
    else:
        try:
            got = await call
        except grpc.aio.AioRpcError:
            got = None
    code = await call.code()
    return got if code == grpc.StatusCode.OK else code


async def _responses(call):
    while True:
        try:
            r = await call.read()
        except grpc.aio.AioRpcError:
            return
        if r is grpc.aio.EOF:
            return
        yield r


async def _collect(call) -> list[bytes]:
    return [r async for r in call]


def test_admin_passes_every_shape():
    got = asyncio.run(_calls(signed_headers("root", "root-secret-1")))
    assert got == {"UU": b"x", "US": [b"x", b"x"], "SU": b"ab", "SS": [b"a", b"b"]}


@pytest.mark.parametrize("metadata,code", [
    (lambda: [], grpc.StatusCode.UNAUTHENTICATED),
    (lambda: signed_headers("root", "wrong-secret-1"), grpc.StatusCode.UNAUTHENTICATED),
    (lambda: signed_headers("alice", "alice-secret-1"), grpc.StatusCode.PERMISSION_DENIED),  # unlisted: admins
])
def test_every_shape_is_refused(metadata, code):
    got = asyncio.run(_calls(metadata(), writes=0))
    assert got == {"UU": code, "US": code, "SU": code, "SS": code}

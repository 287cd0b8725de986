"""What every gRPC handler shares: the readiness gate, status translation, timing, and off-loop store calls.

Why a decorator: handlers stay the happy path; any exception they raise becomes the status the proto's header
comment promises (see node.errors), every call is timed by method and code, and an unexpected exception is logged
with its traceback and answered INTERNAL instead of killing the stream.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import grpc

from raftmq.node.errors import LEADER_METADATA_KEY, RpcError, to_rpc_error
from raftmq.node.log_format import REQUEST_ID_METADATA_KEY, request_id
from raftmq.node.metrics import BrokerMetrics
from raftmq.store.integrity import CorruptReadError

log = logging.getLogger(__name__)


class ServingState(Protocol):
    metrics: BrokerMetrics
    rpcs_in_flight: int
    last_rpc_started: float  # time.monotonic()

    def check_serving(self) -> None:
        """Raise RpcError(UNAVAILABLE) when the node cannot answer yet (starting) or any more (stopping)."""


def _request_id(context: grpc.aio.ServicerContext) -> str:
    """The caller's ``x-request-id``, else a new one (sent back with an error so a user can quote it)."""
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_METADATA_KEY and value:
            return str(value)[:64]
    return uuid.uuid4().hex[:16]


def rpc_handler(method: str, *, needs_ready: bool = True):
    """Wrap an ``async def handler(self, request, context)`` of a servicer holding ``self.node: ServingState``."""

    def deco(fn: Callable[..., Awaitable[Any]]):
        @functools.wraps(fn)
        async def wrapper(self, request, context: grpc.aio.ServicerContext):
            node: ServingState = self.node
            t0 = time.perf_counter()
            code = "OK"
            rid = _request_id(context)
            request_id.set(rid)  # this call's task only: log lines inside it carry the id
            node.rpcs_in_flight += 1  # event-loop thread only: no lock needed
            node.last_rpc_started = time.monotonic()
            try:
                if needs_ready:
                    node.check_serving()
                return await fn(self, request, context)
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except Exception as exc:
                if isinstance(exc, grpc.aio.AbortError):
                    raise
                err = to_rpc_error(exc)
                if err is None:
                    log.exception("%s failed unexpectedly", method)
                    err = RpcError(grpc.StatusCode.INTERNAL,
                                   f"internal error in {method}: {type(exc).__name__}: {exc} (see the node log)")
                forwarder = getattr(node, "forwarder", None)  # issue 11: a follower relays to the leader
                if forwarder is not None and forwarder.should_forward(method, err, context):
                    try:
                        response = await forwarder.forward(method, request, context, err.leader)
                    except RpcError as relayed:
                        err = relayed
                    else:
                        code = "FORWARDED"
                        return response
                code = err.code.name
                if isinstance(exc, CorruptReadError):  # a replicated member repairs the record from a peer
                    hook = getattr(node, "on_corrupt_read", None)
                    hint = hook(exc.record) if hook is not None else ""
                    if hint:
                        err = RpcError(err.code, f"{err.message}; {hint}")
                metadata = ((LEADER_METADATA_KEY, err.leader),) if err.leader else ()
                await context.abort(err.code, err.message, metadata + ((REQUEST_ID_METADATA_KEY, rid),))
            finally:
                node.rpcs_in_flight -= 1
                elapsed = time.perf_counter() - t0
                node.metrics.record_rpc(method, code, elapsed)
                log.debug("rpc %s %s in %.1f ms", method, code, elapsed * 1000)

        return wrapper

    return deco

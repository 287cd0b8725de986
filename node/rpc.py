"""The one RPC scope: what every gRPC handler of both protocols shares, unary and streaming alike.

Why one: each call must count itself in and out (the graceful stop drains in-flight calls), be timed by method and
outcome, carry a request id into its log lines, be refused while the node is not serving, turn any exception into
the status the protocol promises (node/errors.py; an unexpected one is logged with its traceback and answered
INTERNAL), relay a not-the-leader refusal to the leader (node/forwarding.py), and add the repair hint to an
answer about a damaged record. Five hand-written copies of that drifted apart (a stream without metrics, a
protocol without the hint); here it is written once and a handler is only its happy path:

    @rpc_handler("PullMessage")                       # raftmq.v1, unary: returns its response
    @rpc_handler("PullStream", long_lived=True)       # raftmq.v1, server streaming: an async generator
    @v2_rpc("ReceiveMessage")                         # apache.rocketmq.v2 (node/rocketmq5/calls.py)

What differs by protocol is a ``Protocol``: how a failure is answered (raftmq aborts the call with the status
and the leader hint in trailing metadata; RocketMQ 5 answers with a response carrying a ``Status``, as the
official clients expect), under which key the forwarder relays it, and whether a unary call waits out an
election. ``long_lived``: a stream that lasts as long as its client wants (PullStream, SendStream,
CheckTransactions, Telemetry) is not an in-flight call the graceful stop waits for; it ends when the node stops
serving.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from raftmq.node.errors import LEADER_METADATA_KEY, RpcError, to_rpc_error
from raftmq.node.log_format import REQUEST_ID_METADATA_KEY, request_id
from raftmq.store.integrity import CorruptReadError

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)

RETRY_PAUSE_S = 0.1  # between tries while no leader can take a call (Protocol.waits_out_elections)
ANSWER_MARGIN_S = 0.5  # stop retrying this long before the caller's deadline, so it reads our answer


class Protocol:
    """raftmq's own API: a failure aborts the call with its status, the leader hint and the request id."""

    metric_prefix = ""  # prepended to the method in the rpc metrics' label
    waits_out_elections = False  # a unary call refused UNAVAILABLE is tried again while its deadline allows

    def forward_key(self, method: str) -> str:
        """The name node.forwarding knows the method by."""
        return method

    def direct_answer(self, method: str, exc: BaseException) -> tuple[str, Any] | None:
        """(metric code, response) for an exception of the protocol's own that is its answer as it is."""
        return None

    def answer(self, method: str, err: RpcError) -> tuple[str, Any] | None:
        """(metric code, response) answering ``err``; None: abort the call with its status."""
        return None


RAFTMQ = Protocol()


class RpcScope:
    """One call (or one request of a stream) on one node: counted in flight, timed, with a request id, answered
    the way its protocol answers."""

    def __init__(self, node: BrokerCore, method: str, *, protocol: Protocol = RAFTMQ, in_flight: bool = True):
        self.node = node
        self.method = method
        self.protocol = protocol
        self.label = protocol.metric_prefix + method  # the rpc metrics' method label
        self._in_flight = in_flight
        self.code = "OK"
        self.request_id = ""
        self._t0 = 0.0

    def enter(self, context: grpc.aio.ServicerContext | None = None) -> None:
        self.request_id = _request_id(context) if context is not None else uuid.uuid4().hex[:16]
        request_id.set(self.request_id)  # this call's task only: log lines inside it carry the id
        self._t0 = time.perf_counter()
        node = self.node
        node.last_rpc_started = time.monotonic()
        if self._in_flight:
            node.rpcs_in_flight += 1  # event-loop thread only: no lock needed

    def leave(self) -> None:
        node = self.node
        if self._in_flight:
            node.rpcs_in_flight -= 1
        elapsed = time.perf_counter() - self._t0
        node.metrics.record_rpc(self.label, self.code, elapsed)
        log.debug("rpc %s %s in %.1f ms", self.label, self.code, elapsed * 1000)

    def failure(self, exc: BaseException) -> RpcError:
        """What ``exc`` means to the caller: its status, INTERNAL (logged) for a bug, with the repair hint for
        a damaged record."""
        err = to_rpc_error(exc)
        if err is None:
            log.exception("%s failed unexpectedly", self.label, exc_info=exc)
            err = RpcError(grpc.StatusCode.INTERNAL,
                           f"internal error in {self.label}: {type(exc).__name__}: {exc} (see the node log)")
        if isinstance(exc, CorruptReadError):  # a replicated member repairs the record from a peer
            hint = self.node.on_corrupt_read(exc.record)
            if hint:
                err = RpcError(err.code, f"{err.message}; {hint}")
        return err

    def refusal(self, exc: BaseException) -> tuple[Any, RpcError | None]:
        """(the protocol's answer, None) for an exception that is its answer as it is (a RocketMQ 5 status),
        else (None, what the exception means: ``failure``)."""
        direct = self.protocol.direct_answer(self.method, exc)
        if direct is not None:
            self.code, response = direct
            return response, None
        return None, self.failure(exc)

    async def answer(self, err: RpcError, context: grpc.aio.ServicerContext) -> Any:
        """The protocol's answer to ``err``, or (raftmq) the call aborted with its status, the leader hint and the
        request id (raises)."""
        answered = self.protocol.answer(self.method, err)
        if answered is not None:
            self.code, response = answered
            return response
        self.code = err.code.name
        metadata = ((LEADER_METADATA_KEY, err.leader),) if err.leader else ()
        await context.abort(err.code, err.message, metadata + ((REQUEST_ID_METADATA_KEY, self.request_id),))


def _request_id(context: grpc.aio.ServicerContext) -> str:
    """The caller's ``x-request-id``, else a new one (sent back with an error so a user can quote it)."""
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_METADATA_KEY and value:
            return str(value)[:64]
    return uuid.uuid4().hex[:16]


def _retry_later(err: RpcError, context: grpc.aio.ServicerContext) -> bool:
    """Retry here while the caller's deadline allows, when the failure means "no leader to take it right now"
    (an election; nothing was done). The official RocketMQ 5 clients retry at once, without a pause, on the next
    queue of the same endpoints: three immediate refusals during an election would fail the send, one wait here
    does not."""
    if err.code != grpc.StatusCode.UNAVAILABLE:
        return False
    remaining = context.time_remaining()
    return remaining is not None and remaining > RETRY_PAUSE_S + ANSWER_MARGIN_S


def rpc_handler(method: str, *, protocol: Protocol = RAFTMQ, needs_ready: bool = True, long_lived: bool = False):
    """Wrap ``async def handler(self, request, context)`` (unary: returns its response) or an async generator
    handler (server or bidirectional streaming: yields its responses) of a servicer holding ``self.node``, a
    BrokerCore. ``request`` is the request iterator of a client-streaming method."""

    def deco(fn: Callable[..., Any]):
        if inspect.isasyncgenfunction(fn):
            return _streaming(fn, method, protocol, needs_ready, long_lived)
        return _unary(fn, method, protocol, needs_ready)

    return deco


def _unary(fn: Callable[..., Awaitable[Any]], method: str, protocol: Protocol, needs_ready: bool):
    key = protocol.forward_key(method)

    @functools.wraps(fn)
    async def wrapper(self, request, context: grpc.aio.ServicerContext):
        node: BrokerCore = self.node
        scope = RpcScope(node, method, protocol=protocol)
        scope.enter(context)
        try:
            while True:
                try:
                    if needs_ready:
                        node.check_serving()
                    return await fn(self, request, context)
                except asyncio.CancelledError:
                    scope.code = "CANCELLED"
                    raise
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:
                    response, err = scope.refusal(exc)
                    if err is None:
                        return response
                forwarder = node.forwarder  # issue 11: a follower relays to the leader
                if forwarder.should_forward(key, err, context):
                    try:
                        response = await forwarder.forward(key, request, context, err.leader)
                    except RpcError as relayed:
                        err = relayed
                    else:
                        scope.code = "FORWARDED"
                        return response
                if protocol.waits_out_elections and not node.stopping and _retry_later(err, context):
                    await asyncio.sleep(RETRY_PAUSE_S)
                    continue
                return await scope.answer(err, context)
        finally:
            scope.leave()

    return wrapper


def _streaming(fn: Callable[..., Any], method: str, protocol: Protocol, needs_ready: bool, long_lived: bool):
    key = protocol.forward_key(method)

    @functools.wraps(fn)
    async def wrapper(self, request, context: grpc.aio.ServicerContext):
        node: BrokerCore = self.node
        scope = RpcScope(node, method, protocol=protocol, in_flight=not long_lived)
        scope.enter(context)
        started = False
        try:
            try:
                if needs_ready:
                    node.check_serving()
                async for response in fn(self, request, context):
                    started = True
                    yield response
                return
            except asyncio.CancelledError:
                scope.code = "CANCELLED"
                raise
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                response, err = scope.refusal(exc)
                if err is None:
                    yield response
                    return
            forwarder = node.forwarder
            if not started and forwarder.should_forward(key, err, context):  # the whole stream, to the leader
                try:
                    async for response in forwarder.forward_stream(key, request, context, err.leader):
                        started = True
                        yield response
                    scope.code = "FORWARDED"
                    return
                except RpcError as relayed:
                    err = relayed
            yield await scope.answer(err, context)
        finally:
            scope.leave()

    return wrapper

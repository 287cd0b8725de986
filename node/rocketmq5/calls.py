"""How every unary v2 RPC is run: readiness, the answer's ``Status`` (never a gRPC error), metrics, and relaying
to the leader when this member cannot serve the call (the same node.forwarding machinery raftmq's own API uses).

A follower that is asked for a write answers "not the leader" internally; ``v2_rpc`` then relays the request to
the leader over the cluster's channel and passes the leader's answer back unchanged, so a client that only knows
its access point (a Kubernetes Service, or a list of members) keeps working through a failover.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from raftmq.node.errors import RpcError, to_rpc_error
from raftmq.node.rocketmq5.status import V2Error, from_rpc_error
from raftmq.rocketmq.v2 import definition_pb2 as v2
from raftmq.rocketmq.v2 import service_pb2

SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
SERVICE_PATH = f"/{SERVICE.full_name}/"
CLIENT_ID_KEY = "x-mq-client-id"
RETRY_PAUSE_S = 0.1  # between tries while no leader can take a call
ANSWER_MARGIN_S = 0.5  # answer this long before the caller's deadline, so it reads our status, not a timeout
METRIC_PREFIX = "rmq5."  # rpc metric label of the v2 methods (raftmq's own methods share names with them)

log = logging.getLogger(__name__)


def method_path(name: str) -> str:
    """``/apache.rocketmq.v2.MessagingService/<name>``: the key node.forwarding and node.auth use."""
    return SERVICE_PATH + name


def response_class(name: str) -> Any:
    return getattr(service_pb2, SERVICE.methods_by_name[name].output_type.name)


def metadata_value(context: grpc.aio.ServicerContext, key: str) -> str:
    for k, v in context.invocation_metadata() or ():
        if k == key and isinstance(v, str):
            return v
    return ""


def client_id(context: grpc.aio.ServicerContext) -> str:
    """The official clients' identity (``x-mq-client-id``: host@pid@index@time); "" when absent."""
    return metadata_value(context, CLIENT_ID_KEY)[:256]


async def _attempt(fn, servicer, request, context, node, path: str, needs_ready: bool):
    """One try: (response, metric code), or the RpcError it failed with (after relaying to the leader)."""
    try:
        if needs_ready:
            node.check_serving()
        return await fn(servicer, request, context), "OK"
    except (asyncio.CancelledError, V2Error):
        raise
    except Exception as exc:
        if isinstance(exc, grpc.aio.AbortError):
            raise
        err = to_rpc_error(exc)
        if err is None:
            log.exception("%s (RocketMQ 5 API) failed unexpectedly", path)
            err = RpcError(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc} (see the node log)")
        forwarder = getattr(node, "forwarder", None)
        if forwarder is not None and forwarder.should_forward(path, err, context):
            try:
                return await forwarder.forward(path, request, context, err.leader), "FORWARDED"
            except RpcError as relayed:
                err = relayed
        return err


def _retry_later(err: RpcError, context: grpc.aio.ServicerContext) -> bool:
    """Retry here while the caller's deadline allows, when the failure means "no leader to take it right now"
    (an election; nothing was done). The official clients retry at once, without a pause, on the next queue of
    the same endpoints: three immediate refusals during an election would fail the send, one wait here does not."""
    if err.code != grpc.StatusCode.UNAVAILABLE:
        return False
    remaining = context.time_remaining()
    return remaining is not None and remaining > RETRY_PAUSE_S + ANSWER_MARGIN_S


def v2_rpc(name: str, *, needs_ready: bool = True):
    """Wrap ``async def handler(self, request, context)`` of a servicer holding ``self.node`` (the BrokerCore).

    The handler returns its response; a ``V2Error`` or any raftmq error becomes the response's ``Status``."""
    path = method_path(name)
    response_cls = response_class(name)
    metric = METRIC_PREFIX + name

    def deco(fn: Callable[..., Awaitable[Any]]):
        @functools.wraps(fn)
        async def wrapper(self, request, context: grpc.aio.ServicerContext):
            node = self.node
            t0 = time.perf_counter()
            code = "OK"
            node.rpcs_in_flight += 1  # event-loop thread only
            node.last_rpc_started = time.monotonic()
            try:
                while True:
                    outcome = await _attempt(fn, self, request, context, node, path, needs_ready)
                    if isinstance(outcome, RpcError):
                        if not node.stopping and _retry_later(outcome, context):
                            await asyncio.sleep(RETRY_PAUSE_S)
                            continue
                        status = from_rpc_error(outcome)
                        code = v2.Code.Name(status.code)
                        return response_cls(status=status)
                    response, code = outcome
                    return response
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except V2Error as e:
                code = v2.Code.Name(e.code)
                return response_cls(status=e.status())
            finally:
                node.rpcs_in_flight -= 1
                node.metrics.record_rpc(metric, code, time.perf_counter() - t0)

        return wrapper

    return deco


def v2_stream(name: str, *, needs_ready: bool = True):
    """``v2_rpc`` for a server-streaming handler (an async generator, e.g. ReceiveMessage): a refusal becomes
    one response carrying the ``Status``; a not-the-leader refusal before the first response relays the whole
    call to the leader and streams its responses back."""
    path = method_path(name)
    response_cls = response_class(name)
    metric = METRIC_PREFIX + name

    def deco(fn: Callable[..., Any]):
        @functools.wraps(fn)
        async def wrapper(self, request, context: grpc.aio.ServicerContext):
            node = self.node
            t0 = time.perf_counter()
            code = "OK"
            started = False
            node.rpcs_in_flight += 1
            node.last_rpc_started = time.monotonic()
            try:
                try:
                    if needs_ready:
                        node.check_serving()
                    async for response in fn(self, request, context):
                        started = True
                        yield response
                    return
                except asyncio.CancelledError:
                    code = "CANCELLED"
                    raise
                except V2Error as e:
                    code = v2.Code.Name(e.code)
                    yield response_cls(status=e.status())
                    return
                except Exception as exc:
                    if isinstance(exc, grpc.aio.AbortError):
                        raise
                    err = to_rpc_error(exc)
                    if err is None:
                        log.exception("%s (RocketMQ 5 API) failed unexpectedly", name)
                        err = RpcError(grpc.StatusCode.INTERNAL,
                                       f"internal error: {type(exc).__name__}: {exc} (see the node log)")
                forwarder = getattr(node, "forwarder", None)
                if not started and forwarder is not None and forwarder.should_forward(path, err, context):
                    try:
                        async for response in forwarder.forward_stream(path, request, context, err.leader):
                            started = True
                            yield response
                        code = "FORWARDED"
                        return
                    except RpcError as relayed:
                        err = relayed
                status = from_rpc_error(err)
                code = v2.Code.Name(status.code)
                yield response_cls(status=status)
            finally:
                node.rpcs_in_flight -= 1
                node.metrics.record_rpc(metric, code, time.perf_counter() - t0)

        return wrapper

    return deco

"""The gRPC interceptor: authenticates every call (UNAUTHENTICATED) and checks each request message against the
rules (PERMISSION_DENIED) before the handler runs; RocketMQ 5 methods get their refusal in the answer's Status."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from typing import Any

import grpc

from raftmq.node.auth.audit import audit
from raftmq.node.auth.authenticator import Authenticator
from raftmq.node.auth.rules import EXEMPT_PREFIXES, AccessDenied, Principal
from raftmq.node.auth.signing import AuthError
from raftmq.node.errors import RpcError
from raftmq.node.networks import NetworkRefused, peer_ip

log = logging.getLogger(__name__)

current_principal: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("raftmq_principal",
                                                                                     default=None)


# Streams whose handler authorizes each item itself (``authorize_item``) and answers a refusal in that item's
# outcome: aborting the stream instead would leave every other send in flight on it with an unknown outcome.
AUTHORIZED_BY_HANDLER = frozenset({"/raftmq.v1.MessagingService/SendStream"})


def authorize_item(auth: Authenticator | None, method: str, request: Any, peer: str) -> None:
    """For AUTHORIZED_BY_HANDLER streams: PERMISSION_DENIED (audited) unless the caller may make ``request``."""
    if auth is None:
        return
    principal = current_principal.get()
    if principal is None:  # the interceptor authenticated the stream: a principal is always set then
        raise RpcError(grpc.StatusCode.UNAUTHENTICATED, "unauthenticated: no credentials were checked")
    try:
        auth.authorize(principal, method, request)
    except AccessDenied as e:
        audit("denied", user=e.user, action=e.action, resource=e.resource, method=method, peer=peer)
        raise RpcError(grpc.StatusCode.PERMISSION_DENIED, str(e)) from None


def _peer(context: Any) -> str:
    try:
        return str(context.peer())
    except Exception:  # noqa: BLE001 - only for the audit line
        return "?"


# The caller of the RPC being handled, set by the interceptor: it runs in the same task as the handler, so the
# wrapped handlers (built once per method) read it instead of closing over it (no objects built per call).
_call_auth: contextvars.ContextVar[tuple[Principal | None, str | None]] = contextvars.ContextVar(
    "raftmq_call_auth", default=(None, "no credentials were checked"))


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates every call (UNAUTHENTICATED) and checks each request message against the rules
    (PERMISSION_DENIED), before the handler runs. Streaming requests are checked message by message."""

    def __init__(self, authenticator: Authenticator, client_address: Callable[[Any], str] | None = None):
        """``client_address(context)``: the real client's IP (a trusted relay's forwarded-for), for users'
        allowed networks."""
        self.auth = authenticator
        self._client_address = client_address or (lambda context: peer_ip(context.peer()))
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(EXEMPT_PREFIXES):
            return handler
        _call_auth.set(await self._authenticate(method, handler_call_details.invocation_metadata))
        cached = self._wrapped.get(method)
        if cached is None or cached[0] is not handler:
            cached = self._wrapped[method] = (handler, _wrap(handler, method, self.auth, self._client_address))
        return cached[1]

    def _verdict(self, method: str, metadata: Any) -> tuple[Principal | None, AuthError | None]:
        try:
            return self.auth.authenticate(metadata), None
        except AuthError as e:
            return None, e
        except Exception as e:  # noqa: BLE001 - a bug in parsing must still answer UNAUTHENTICATED
            log.exception("authentication of %s failed unexpectedly", method)
            return None, AuthError(f"malformed credentials ({type(e).__name__})")

    async def _authenticate(self, method: str, metadata: Any) -> tuple[Principal | None, str | None]:
        """(caller, None) or (None, why not). A verdict on this member's copy of the users is taken again after
        catching up with the leader (a user just added through another member)."""
        principal, error = self._verdict(method, metadata)
        if error is not None and error.about_user and await self.auth.caught_up():
            principal, error = self._verdict(method, metadata)
        return principal, None if error is None else str(error)

V2_SERVICE_PREFIX = "/apache.rocketmq.v2.MessagingService/"


def _v2_refusal(method: str) -> Callable[[bool, str], Any] | None:
    """RocketMQ 5 clients read refusals from the answer's Status (gRPC status OK), as from RocketMQ's proxy:
    for a v2 method, (authenticated?, message) -> the answer carrying UNAUTHORIZED / FORBIDDEN."""
    if not method.startswith(V2_SERVICE_PREFIX):
        return None
    from raftmq.rocketmq.v2 import definition_pb2 as v2
    from raftmq.rocketmq.v2 import service_pb2 as v2s

    name = method[len(V2_SERVICE_PREFIX):]
    service = v2s.DESCRIPTOR.services_by_name["MessagingService"]
    response_cls = getattr(v2s, service.methods_by_name[name].output_type.name)

    def refusal(authenticated: bool, message: str) -> Any:
        return response_cls(status=v2.Status(code=v2.FORBIDDEN if authenticated else v2.UNAUTHORIZED,
                                             message=message))

    return refusal


def _wrap(handler: grpc.RpcMethodHandler, method: str, auth: Authenticator,
          client_address: Callable[[Any], str]) -> grpc.RpcMethodHandler:
    v2_refusal = _v2_refusal(method)

    def refusal(principal: Principal, request: Any, context: Any) -> tuple[str, dict, str] | None:
        """(audit event, its fields, message) when the user's networks or rules refuse the call, else None."""
        if auth.has_networks(principal):
            address = client_address(context)
            try:
                auth.check_network(principal, address)
            except NetworkRefused as e:
                return "refused_network", {"user": principal.access_key, "method": method, "peer": address,
                                           "port": "grpc", "reason": str(e)}, str(e)
        try:
            auth.authorize(principal, method, request)
        except AccessDenied as e:
            return "denied", {"user": e.user, "action": e.action, "resource": e.resource, "method": method,
                              "peer": _peer(context)}, str(e)
        return None

    async def check(request: Any, context: Any) -> Any:
        """None when the call may go on; else the refusal answer (RocketMQ 5 methods) or abort."""
        principal, failure = _call_auth.get()
        if principal is None:
            audit("unauthenticated", method=method, peer=_peer(context), reason=failure)
            if v2_refusal is not None:
                return v2_refusal(False, f"unauthenticated: {failure}")
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"unauthenticated: {failure}")
        try:
            refused = refusal(principal, request, context)
            if refused is not None and await auth.caught_up():  # a rule or network just changed elsewhere?
                refused = refusal(principal, request, context)
        except RpcError as e:  # a relay claim without the cluster secret
            await context.abort(e.code, e.message)
        if refused is not None:
            event, fields, message = refused
            audit(event, **fields)
            if v2_refusal is not None:
                return v2_refusal(True, message)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, message)
        current_principal.set(principal)
        return None

    async def checked_stream(requests, context):
        async for req in requests:
            refused = await check(req, context)
            if refused is not None:  # a RocketMQ 5 client's stream: it reads the refusal, then reconnects
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, refused.status.message)
            yield req

    if handler.unary_unary:
        inner = handler.unary_unary

        async def unary_unary(request, context):
            refused = await check(request, context)
            if refused is not None:
                return refused
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, handler.request_deserializer,
                                                   handler.response_serializer)
    if handler.unary_stream:
        inner_us = handler.unary_stream

        async def unary_stream(request, context):
            refused = await check(request, context)
            if refused is not None:
                yield refused
                return
            async for resp in _as_async_iter(inner_us(request, context)):
                yield resp

        return grpc.unary_stream_rpc_method_handler(unary_stream, handler.request_deserializer,
                                                    handler.response_serializer)
    if handler.stream_unary:
        inner_su = handler.stream_unary

        async def stream_unary(requests, context):
            refused = await check(None, context)  # credentials and network, before any request is read
            if refused is not None:
                return refused
            return await inner_su(checked_stream(requests, context), context)

        return grpc.stream_unary_rpc_method_handler(stream_unary, handler.request_deserializer,
                                                    handler.response_serializer)
    inner_ss = handler.stream_stream
    by_handler = method in AUTHORIZED_BY_HANDLER

    async def stream_stream(requests, context):
        refused = await check(None, context)  # credentials and network, before any request is read
        if refused is not None:  # RocketMQ 5's Telemetry: the refusal as the stream's one command
            yield refused
            return
        stream = requests if by_handler else checked_stream(requests, context)
        async for resp in _as_async_iter(inner_ss(stream, context)):
            yield resp

    return grpc.stream_stream_rpc_method_handler(stream_stream, handler.request_deserializer,
                                                 handler.response_serializer)


async def _as_async_iter(result):
    """A streaming handler may be an async generator or a coroutine returning an iterable."""
    if hasattr(result, "__aiter__"):
        async for item in result:
            yield item
    else:
        got = await result
        if got is not None:
            for item in got:
                yield item

"""Forwarding: any member accepts a write or admin call and hands it to the leader (issue 11).

Why: a client that can reach some members but not the leader (a cut link, a leader Service that still points at
an old pod) must still be able to write. Like the RocketMQ 5 proxy or a NATS JetStream server, a follower passes
the call on to the leader over the cluster's own gRPC channel; the leader runs it through its normal handler, so
there is still ONE write path. The follower only relays.

Outcome semantics are those of a direct call:
* the leader's answer (value or status, with its leader hint) is passed back unchanged;
* the leader could not be connected to: nothing was sent, so the client gets UNAVAILABLE ("retry"): not stored;
* the leader accepted the call but no answer came back in time (or the link broke): UNKNOWN, outcome unknown.

Trust: a forwarded call carries ``x-raftmq-forwarded-by`` and the cluster secret (the same header the replica
service checks). The leader never forwards a forwarded call again (no loops: it answers with its redirect, which
the relaying member passes back), and it believes the forwarded client address (``x-raftmq-forwarded-for``, used
as the messages' born host) only when the secret matches. The client's own metadata (e.g. credentials) travels
along, so the leader authorises the real caller.

A client that prefers to go to the leader itself sends ``x-raftmq-redirect: 1`` and gets the classic
FAILED_PRECONDITION + ``x-raftmq-leader`` hint instead (the raftmq SDK does, while it can reach the leader).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from raftmq.node.errors import LEADER_METADATA_KEY, RpcError
from raftmq.replication.peers import SECRET_METADATA_KEY
from raftmq.v1 import raftmq_pb2

log = logging.getLogger(__name__)

FORWARDED_BY_KEY = "x-raftmq-forwarded-by"
FORWARDED_FOR_KEY = "x-raftmq-forwarded-for"
REDIRECT_KEY = "x-raftmq-redirect"  # "1": the client wants the leader hint, not forwarding
LEADER_WAIT_S = 5.0  # at most this long for a live leader (an election) before answering "retry"
_ANSWER_MARGIN_S = 0.2  # answer UNKNOWN ourselves a little before the client's own deadline cuts the call
# Hop-by-hop or ours: never copied from the client's call onto the forwarded one.
_NOT_COPIED = frozenset({SECRET_METADATA_KEY, FORWARDED_BY_KEY, FORWARDED_FOR_KEY, REDIRECT_KEY, "user-agent",
                         "content-type", "te", "grpc-timeout", "grpc-accept-encoding", "grpc-encoding",
                         ":authority"})
_NOT_SENT_MARKERS = ("failed to connect to all addresses", "connection refused", "dns resolution failed",
                     "errors resolving", "name resolution failure")
_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20),
                    ("grpc.initial_reconnect_backoff_ms", 200), ("grpc.min_reconnect_backoff_ms", 200),
                    ("grpc.max_reconnect_backoff_ms", 1000)]


class NotSent(RpcError):
    """The member to relay to could not be connected to: nothing was sent (UNAVAILABLE, retry elsewhere)."""

    def __init__(self, message: str):
        super().__init__(grpc.StatusCode.UNAVAILABLE, message)


def _methods() -> dict[str, tuple[str, Any]]:
    """Unary method name -> (full path, response class), for every service of raftmq.proto; RocketMQ 5's
    methods by full path."""
    out: dict[str, tuple[str, Any]] = {}
    for service in raftmq_pb2.DESCRIPTOR.services_by_name.values():
        for m in service.methods:
            if m.client_streaming or m.server_streaming:
                continue
            if m.name in out:
                raise RuntimeError(f"method name {m.name} is not unique across services; key forwarding by service")
            out[m.name] = (f"/{service.full_name}/{m.name}", getattr(raftmq_pb2, m.output_type.name))
    # issue 13: the RocketMQ 5 service's unary methods, keyed by their full path (their names repeat raftmq's)
    from raftmq.rocketmq.v2 import service_pb2

    for service in service_pb2.DESCRIPTOR.services_by_name.values():
        for m in service.methods:
            if not m.client_streaming:  # unary (forward) and server-streaming (forward_stream) ones
                path = f"/{service.full_name}/{m.name}"
                out[path] = (path, getattr(service_pb2, m.output_type.name))
    return out


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


class Forwarder:
    """Relays calls that this member cannot serve (it is not the leader) to the leader's gRPC endpoint."""

    def __init__(self, member_id: str, secret: str, enabled: bool = True,
                 leader_contact: Callable[[], tuple[str | None, float]] | None = None, fresh_s: float = 0.75,
                 own_address: str | None = None,
                 channel_credentials: Callable[[], grpc.ChannelCredentials | None] | None = None,
                 channel_options: Callable[[], list[tuple[str, Any]]] | None = None):
        """``leader_contact()``: (leader's gRPC address or None, seconds since this member heard from it);
        a call is relayed only to a leader heard within ``fresh_s``, else it waits (up to the call's deadline)
        for one: a stopped leader would only swallow the call and leave its outcome unknown.
        ``channel_credentials()``: TLS credentials for the members' gRPC ports (None: plaintext);
        ``channel_options()``: extra channel options (the TLS server-name override)."""
        self.member_id = member_id
        self.enabled = enabled
        self._leader_contact = leader_contact
        self._own_address = own_address  # this member's advertised gRPC address
        self._fresh_s = fresh_s
        self._secret = secret
        self._credentials = channel_credentials
        self._extra_options = channel_options
        self._methods = _methods()
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._calls: dict[tuple[str, str], Any] = {}
        self.forwarded = 0  # calls relayed (metrics)
        # set when this member shuts down: it relays nothing more, so its callers learn to go elsewhere (the
        # refusal names the leader) before it stops listening, instead of keeping its drain busy
        self.stopping = False

    # ------------------------------------------------------------------ the leader's side
    def is_trusted_forward(self, context: grpc.aio.ServicerContext) -> bool:
        """True when this call was relayed by a member that knows the cluster secret.

        Raises PERMISSION_DENIED for a call that claims to be forwarded without the right secret."""
        md = _metadata(context)
        if FORWARDED_BY_KEY not in md:
            return False
        if self._secret and not hmac.compare_digest(md.get(SECRET_METADATA_KEY, ""), self._secret):
            raise RpcError(grpc.StatusCode.PERMISSION_DENIED, "forwarded call without the right cluster secret: set "
                           "the same cluster.secret on every member")
        return True

    def forwarded_for(self, context: grpc.aio.ServicerContext) -> str | None:
        """The original client's gRPC peer of a trusted relayed call; None for a direct call."""
        if self.is_trusted_forward(context):
            return _metadata(context).get(FORWARDED_FOR_KEY) or None
        return None

    def client_peer(self, context: grpc.aio.ServicerContext) -> str:
        """The address of the real client: the relaying member's word for it, when the relay is trusted."""
        return self.forwarded_for(context) or context.peer()

    # ------------------------------------------------------------------ the relaying member's side
    def should_forward(self, method: str, err: RpcError, context: grpc.aio.ServicerContext) -> bool:
        """Forward a not-the-leader refusal when it names the leader and neither the client nor a relay said no."""
        if self.stopping or not self.enabled or not err.leader or err.code != grpc.StatusCode.FAILED_PRECONDITION:
            return False
        if method not in self._methods:
            return False
        md = _metadata(context)
        return md.get(REDIRECT_KEY) != "1" and FORWARDED_BY_KEY not in md

    async def forward(self, method: str, request: Any, context: grpc.aio.ServicerContext, leader: str) -> Any:
        """Send ``request`` to the leader at ``leader`` and return its response; failures become ``RpcError``s
        with the outcome semantics of the module docstring."""
        return await self.relay(await self._live_leader(leader, context), method, request, context)

    async def relay(self, address: str, method: str, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """Send ``request`` to the member at ``address`` on the client's behalf (this group's leader, or a member
        of another group: node/groups.py) and return its response; failures as in ``forward``. The member that
        gets it never relays it again: a member that is not the leader answers with its hint."""
        path, response_cls = self._methods[method]
        call = self._call(address, path, response_cls)
        md = self.relay_metadata(_metadata(context)) + [(FORWARDED_FOR_KEY, self.client_peer(context))]
        remaining = context.time_remaining()
        timeout = None if remaining is None else max(0.05, remaining - _ANSWER_MARGIN_S)
        self.forwarded += 1
        try:
            return await call(request, timeout=timeout, metadata=tuple(md))
        except grpc.aio.AioRpcError as e:
            raise self._translate(e, address) from None

    async def forward_stream(self, method: str, request: Any, context: grpc.aio.ServicerContext, leader: str):
        """A server-streaming call relayed to the leader (issue 13: RocketMQ 5's ReceiveMessage): the leader's
        responses as they come; failures as in ``forward``."""
        async for response in self.relay_stream(await self._live_leader(leader, context), method, request, context):
            yield response

    async def relay_stream(self, address: str, method: str, request: Any, context: grpc.aio.ServicerContext):
        """``relay`` for a server-streaming call: the responses of the member at ``address`` as they come."""
        path, response_cls = self._methods[method]
        call = self.channel(address).unary_stream(path, request_serializer=lambda m: m.SerializeToString(),
                                                  response_deserializer=response_cls.FromString)
        md = self.relay_metadata(_metadata(context)) + [(FORWARDED_FOR_KEY, self.client_peer(context))]
        remaining = context.time_remaining()
        timeout = None if remaining is None else max(0.05, remaining - _ANSWER_MARGIN_S)
        self.forwarded += 1
        try:
            async for response in call(request, timeout=timeout, metadata=tuple(md)):
                yield response
        except grpc.aio.AioRpcError as e:
            raise self._translate(e, address) from None

    async def _live_leader(self, leader: str, context: grpc.aio.ServicerContext) -> str:
        """The leader to relay to: one this member heard from lately (waiting for it, or for a new one, while the
        call's deadline allows). Nothing is sent before, so giving up is a clean "not stored, retry"."""
        if self._leader_contact is None:
            return leader
        remaining = context.time_remaining()
        give_up = time.monotonic() + (LEADER_WAIT_S if remaining is None else
                                      min(LEADER_WAIT_S, max(0.0, remaining - _ANSWER_MARGIN_S)))
        while True:
            address, age = self._leader_contact()
            if address is not None and age <= self._fresh_s:
                if address == self._own_address:
                    raise RpcError(grpc.StatusCode.UNAVAILABLE, f"member {self.member_id} just became the leader; "
                                   "retry (nothing was stored)")
                return address
            if time.monotonic() >= give_up:
                raise RpcError(grpc.StatusCode.UNAVAILABLE, f"member {self.member_id} has no live leader to forward "
                               f"to (last known {address or 'none'}, not heard for {age:.1f}s): election in progress, "
                               "not stored; retry in a second")
            await asyncio.sleep(0.02)

    def _translate(self, e: grpc.aio.AioRpcError, leader: str) -> RpcError:
        code, details = e.code(), e.details() or e.code().name
        hint = next((v for k, v in (e.trailing_metadata() or ()) if k == LEADER_METADATA_KEY and v), None)
        if code == grpc.StatusCode.UNAVAILABLE and any(m in details.lower() for m in _NOT_SENT_MARKERS):
            return NotSent(f"member {self.member_id} cannot reach the leader at {leader} to forward the call (not "
                           "stored); retry in a second")
        if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
            return RpcError(grpc.StatusCode.UNKNOWN, f"forwarded by member {self.member_id} to the leader at {leader}, "
                            f"no answer in time ({code.name}): outcome unknown, the write may or may not be stored")
        return RpcError(code, details, leader=hint)  # the leader's own answer (or a broken link: the client decides)

    def channel(self, address: str) -> grpc.aio.Channel:
        """The cluster's channel to a member's gRPC port (TLS when the members use it), shared and cached."""
        channel = self._channels.get(address)
        if channel is None:
            creds = self._credentials() if self._credentials is not None else None
            options = _CHANNEL_OPTIONS + (self._extra_options() if self._extra_options is not None else [])
            channel = self._channels[address] = (
                grpc.aio.secure_channel(address, creds, options=options) if creds is not None
                else grpc.aio.insecure_channel(address, options=options))
        return channel

    def relay_metadata(self, context_metadata: dict[str, str]) -> list[tuple[str, str]]:
        """Metadata of a call this member makes on a client's behalf: the client's own (its credentials) plus
        the relay marker and the cluster secret."""
        md = [(k, v) for k, v in context_metadata.items() if k not in _NOT_COPIED and not k.startswith("grpc-")]
        md.append((FORWARDED_BY_KEY, self.member_id))
        if self._secret:
            md.append((SECRET_METADATA_KEY, self._secret))
        return md

    def _call(self, leader: str, path: str, response_cls: Any) -> Any:
        key = (leader, path)
        call = self._calls.get(key)
        if call is None:
            channel = self.channel(leader)
            call = self._calls[key] = channel.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                                                          response_deserializer=response_cls.FromString)
        return call

    async def close(self) -> None:
        channels, self._channels, self._calls = list(self._channels.values()), {}, {}
        for ch in channels:
            await ch.close()

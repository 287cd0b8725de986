"""``apache.rocketmq.v2.MessagingService`` on raftmq's gRPC port: what the official RocketMQ 5 clients call.

Composed of mixins, one per concern: node.rocketmq5.producer (sends, transactions), node.rocketmq5.consumer
(receive/ack over pop), and here the client lifecycle every client goes through: QueryRoute, Telemetry
(settings, pushed commands), Heartbeat, NotifyClientTermination. See docs/design/rocketmq5-protocol.md for
what the clients require of each answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from raftmq.node.errors import RpcError
from raftmq.node.rocketmq5 import route
from raftmq.node.rocketmq5.calls import client_id, method_path, v2_rpc
from raftmq.node.rocketmq5.check_relay import CheckRelay
from raftmq.node.rocketmq5.consumer import ConsumerRpcs
from raftmq.node.rocketmq5.producer import ProducerRpcs, as_topic_not_found
from raftmq.node.rocketmq5.renewer import Renewer
from raftmq.node.rocketmq5.status import V2Error, ok, status
from raftmq.node.rocketmq5.telemetry import ClientRegistry, TelemetryStream, settings_reply
from raftmq.node.validation import ValidationError, check_topic_name, is_system_topic
from raftmq.rocketmq.v2 import definition_pb2 as v2
from raftmq.rocketmq.v2 import service_pb2 as v2s
from raftmq.rocketmq.v2 import service_pb2_grpc as v2_grpc

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore
    from raftmq.node.read_path import ReadPath
    from raftmq.node.receive_path import ReceivePath
    from raftmq.node.send_path import SendPath
    from raftmq.node.transaction_service import TransactionService

log = logging.getLogger(__name__)

STOP_POLL_SECONDS = 0.1
PRUNE_INTERVAL_S = 60.0


class RocketMQ5Service(ProducerRpcs, ConsumerRpcs, v2_grpc.MessagingServiceServicer):
    """One per node; it shares the node's one write, read and receive paths (``sends``, ``reads``,
    ``receives``) and raftmq's TransactionService (``transactions``) with raftmq's own API."""

    def __init__(self, node: BrokerCore, sends: SendPath, reads: ReadPath, receives: ReceivePath,
                 transactions: TransactionService):
        self.node = node
        self.sends = sends
        self.reads = reads
        self.receives = receives
        self.transactions = transactions  # half messages and their outcomes (producer.py)
        self.clients = ClientRegistry()
        self._checkers: dict[int, list] = {}  # Telemetry stream id -> its transaction checkers (producer.py)
        self.check_relay = CheckRelay(node, self.clients)  # checks for producers connected to a follower
        self.renewer = Renewer(node, lambda cid: self.clients.get(cid) is not None)  # auto-renewals (consumer.py)
        loop = asyncio.get_running_loop()
        self._housekeeping = loop.create_task(self._keep_house())
        self._renewals = loop.create_task(self.renewer.run())

    # ------------------------------------------------------------------ route
    @v2_rpc("QueryRoute")
    async def QueryRoute(self, request: v2s.QueryRouteRequest, context) -> v2s.QueryRouteResponse:  # noqa: N802
        node = self.node
        name = request.topic.name
        try:
            check_topic_name(name)
        except ValidationError as e:
            raise V2Error(v2.ILLEGAL_TOPIC, str(e)) from None
        cfg = node.topic_config(name)
        if cfg is None and node.config.node.auto_create_topics and not is_system_topic(name) \
                and self._may_publish(name):
            try:
                cfg = await node.writable_topic(name)  # auto-creates, as a first send through raftmq's API would
            except RpcError as e:
                raise as_topic_not_found(e, name, node) from None
        if cfg is None:
            try:
                cfg = node.existing_topic(name)  # a follower's lagging table: relayed to the leader
            except RpcError as e:
                raise as_topic_not_found(e, name, node) from None
        members = [m.grpc for m in node.config.members] or [node.config.advertised_address]
        endpoints = route.route_endpoints(request.endpoints, members)
        if not endpoints.addresses:
            raise V2Error(v2.ILLEGAL_ACCESS_POINT, "no endpoints to route to: the request names none and this node "
                          "has no advertised address (node.advertised_address)")
        return v2s.QueryRouteResponse(status=ok(), message_queues=route.message_queues(
            request.topic, cfg, node.config.cluster.name, endpoints))

    def _may_publish(self, topic: str) -> bool:
        """Whether the caller could send to ``topic`` (a route auto-creates a topic only for such a caller, as a
        first send through raftmq's own API would)."""
        auth = self.node.auth
        if auth is None:
            return True
        from raftmq.node.auth import AccessDenied, current_principal

        principal = current_principal.get()
        if principal is None:
            return False
        try:
            auth.authorize(principal, method_path("SendMessage"),
                           v2s.SendMessageRequest(messages=[v2.Message(topic=v2.Resource(name=topic))]))
        except AccessDenied:
            return False
        return True

    # ------------------------------------------------------------------ client lifecycle
    @v2_rpc("Heartbeat")
    async def Heartbeat(self, request: v2s.HeartbeatRequest, context) -> v2s.HeartbeatResponse:  # noqa: N802
        cid = client_id(context)
        if not cid:
            raise V2Error(v2.CLIENT_ID_REQUIRED, "the client id header (x-mq-client-id) is missing")
        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        self.clients.heartbeat(cid, request.client_type, request.group.name if request.HasField("group") else "",
                               metadata)
        return v2s.HeartbeatResponse(status=ok())

    @v2_rpc("NotifyClientTermination", needs_ready=False)
    async def NotifyClientTermination(self, request, context):  # noqa: N802
        cid = client_id(context)
        if cid:
            self.renewer.forget_client(cid)
            info = self.clients.terminate(cid)
            for stream in info.streams if info is not None else ():
                self.producer_stream_closed(stream)
        return v2s.NotifyClientTerminationResponse(status=ok())

    @v2_rpc("RecallMessage")
    async def RecallMessage(self, request, context):  # noqa: N802
        raise V2Error(v2.UNSUPPORTED, "recalling a delayed message is not supported by raftmq")

    @v2_rpc("SyncLiteSubscription")
    async def SyncLiteSubscription(self, request, context):  # noqa: N802
        raise V2Error(v2.UNSUPPORTED, "lite topics are not supported by raftmq")

    @v2_rpc("Telemetry", needs_ready=False, long_lived=True)
    async def Telemetry(self, request_iterator, context):  # noqa: N802
        """The client's settings in, the server's settings and commands out; never completed by the server
        (only when the client ends it, or the node stops). Open while the node starts: its settings answer
        says when consumers must wait."""
        cid = client_id(context)
        if not cid:
            raise V2Error(v2.CLIENT_ID_REQUIRED, "the client id header (x-mq-client-id) is missing")
        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        stream = self.clients.open_stream(cid, context.peer(), metadata)
        reader = asyncio.get_running_loop().create_task(self._read_telemetry(request_iterator, stream))
        try:
            while True:
                command = await stream.outbox.get()
                if command is None:
                    break
                yield command
        finally:
            reader.cancel()
            self.producer_stream_closed(stream)
            self.clients.close_stream(stream)

    async def _keep_house(self) -> None:
        """Forget clients that vanished; on SIGTERM end every Telemetry stream (the clients reconnect
        elsewhere), or the node's graceful stop would wait its whole grace period for streams that never end by
        themselves."""
        last_prune = time.monotonic()
        while not self.node.stopping:
            await asyncio.sleep(STOP_POLL_SECONDS)
            if time.monotonic() - last_prune > PRUNE_INTERVAL_S:
                last_prune = time.monotonic()
                self.clients.prune()
        for info in self.clients.clients():
            for stream in info.streams:
                stream.push(None)

    async def _read_telemetry(self, request_iterator, stream: TelemetryStream) -> None:
        try:
            async for command in request_iterator:
                kind = command.WhichOneof("command")
                if kind == "settings":
                    stream.push(self._settings(stream, command.settings))
                # thread stack traces / message verification results: the server never asks for them
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the client's side broke: its stream ends
            log.debug("telemetry stream of %s ended: %s", stream.client_id, e)
        stream.push(None)  # the client finished its side: finish ours

    def _settings(self, stream: TelemetryStream, settings: v2.Settings) -> v2s.TelemetryCommand:
        if not settings.HasField("publishing") and not settings.HasField("subscription"):
            return v2s.TelemetryCommand(status=status(v2.UNRECOGNIZED_CLIENT_TYPE, "settings name neither "
                                                      "publishing (a producer) nor a subscription (a consumer)"))
        if stream.settings is None:
            log.info("RocketMQ 5 %s %s (%s %s) connected from %s", v2.ClientType.Name(settings.client_type),
                     stream.client_id, v2.Language.Name(settings.user_agent.language), settings.user_agent.version,
                     stream.peer)
        self.clients.apply_settings(stream, settings)
        node = self.node
        kw = {}
        if settings.HasField("subscription"):
            pop = node.pop
            group = settings.subscription.group.name
            if pop is None:  # still opening the store: the client sends its settings again shortly
                return v2s.TelemetryCommand(status=status(v2.HA_NOT_AVAILABLE, f"node {node.node_id} is starting; "
                                                          "its consumer settings follow once it serves"))
            if group:
                policy = pop.policy(group)
                kw = {"max_attempts": policy.max_delivery_attempts, "backoff_ms": policy.retry_backoff_ms,
                      "fifo": policy.fifo}
        else:
            self.producer_settings_applied(stream)
        return settings_reply(settings, max_body_size=node.store_config.max_message_size, **kw)

"""Transaction checks for RocketMQ 5 producers connected to a member that does not lead.

The leader's check loop (node.transaction_service) hands due checks to the checkers registered with IT. A v2
producer keeps its Telemetry stream on whichever member its access point reached; on the leader it is a checker
directly (node.rocketmq5.producer), on a follower this relay stands in: per topic with producers here, it keeps
raftmq's own check stream (TransactionService.CheckTransactions, producer group = the topic) open to the leader
over the cluster's channel, and pushes each check it receives to one of the producers' Telemetry streams. The
producer answers with an end-transaction call to this member, which relays it to the leader like any write.

The relayed stream carries a producer's own credentials (those of its latest call here: heartbeats come every
10 s), so with authentication on, the leader authorises the producer itself; should the leader refuse them, the
relay retries with the next fresh ones.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING

import grpc

from raftmq.node.rocketmq5.telemetry import ClientRegistry
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2  # how soon a new producer topic or a leader change is noticed
RETRY_SECONDS = 1.0
CHECK_STREAM_PATH = "/raftmq.v1.TransactionService/CheckTransactions"


class CheckRelay:
    """One relay task per topic published by producers connected here, while another member leads."""

    def __init__(self, node: BrokerCore, clients: ClientRegistry):
        self.node = node
        self.clients = clients
        self._relays: dict[str, tuple[str, asyncio.Task]] = {}  # topic -> (leader address, task)
        self._pick = itertools.count()
        self.relayed = 0  # checks pushed to producers through this relay
        self._task = asyncio.get_running_loop().create_task(self._run())

    def _leader_address(self) -> str | None:
        wp = self.node.write_path
        leader = wp.leader() if wp is not None and self.node.serving else None
        if leader is None or leader.id == self.node.node_id or not leader.grpc_address:
            return None
        return leader.grpc_address

    async def _run(self) -> None:
        try:
            while not self.node.stopping:
                await asyncio.sleep(POLL_SECONDS)
                leader = self._leader_address()
                topics = self.clients.published_topics() if leader is not None else set()
                for topic, (address, task) in list(self._relays.items()):
                    if topic not in topics or address != leader or task.done():
                        task.cancel()
                        del self._relays[topic]
                for topic in topics - set(self._relays):
                    assert leader is not None
                    self._relays[topic] = (leader, asyncio.get_running_loop().create_task(
                        self._relay(topic, leader)))
        finally:
            for _, task in self._relays.values():
                task.cancel()

    async def _relay(self, topic: str, leader: str) -> None:
        streams = self.clients.producer_streams(topic)
        if not streams:
            return
        call = self.node.forwarder.channel(leader).stream_stream(
            CHECK_STREAM_PATH, request_serializer=pb.TransactionStreamRequest.SerializeToString,
            response_deserializer=pb.TransactionCheck.FromString)

        async def register():
            yield pb.TransactionStreamRequest(register_group=topic)
            await asyncio.Event().wait()  # the stream stays open until this relay is cancelled

        from raftmq.node.rocketmq5.producer import _TelemetryCheckSink

        try:
            metadata = self.node.forwarder.relay_metadata(self.clients.freshest_metadata(streams))
            async for check in call(register(), metadata=metadata):
                here = self.clients.producer_streams(topic)
                if not here:
                    continue  # the producers left; the leader checks again later
                _TelemetryCheckSink(here[next(self._pick) % len(here)], topic).put_nowait(check)
                self.relayed += 1
        except asyncio.CancelledError:
            raise
        except grpc.aio.AioRpcError as e:
            log.info("transaction-check relay for topic %s to the leader at %s ended: %s %s", topic, leader,
                     e.code().name, e.details())
        await asyncio.sleep(RETRY_SECONDS)  # then the run loop starts it again (with the newest credentials)

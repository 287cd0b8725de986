"""The consumer half of the RocketMQ 5 API (QueryAssignment, ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue and the offset RPCs), over node.pop_core.

Skeleton (issue 13, producer half): every consumer RPC answers NOT_IMPLEMENTED in its Status until the
consumer side lands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftmq.node.rocketmq5.calls import v2_rpc, v2_stream
from raftmq.node.rocketmq5.status import V2Error, status
from raftmq.rocketmq.v2 import definition_pb2 as v2
from raftmq.rocketmq.v2 import service_pb2 as v2s

if TYPE_CHECKING:
    from raftmq.node.broker import Broker

_NOT_YET = "consuming through the RocketMQ 5 API is not available on this node yet; use raftmq's own consumer"


class ConsumerRpcs:
    """Mixin of RocketMQ5Service: the consumers' RPCs."""

    node: Broker

    @v2_rpc("QueryAssignment")
    async def QueryAssignment(self, request, context):  # noqa: N802
        raise V2Error(v2.NOT_IMPLEMENTED, _NOT_YET)

    @v2_stream("ReceiveMessage")
    async def ReceiveMessage(self, request, context):  # noqa: N802
        self.node.check_leader()  # pops happen on the leader: a follower relays the whole stream (calls.v2_stream)
        yield v2s.ReceiveMessageResponse(status=status(v2.NOT_IMPLEMENTED, _NOT_YET))

    @v2_rpc("AckMessage")
    async def AckMessage(self, request, context):  # noqa: N802
        raise V2Error(v2.NOT_IMPLEMENTED, _NOT_YET)

    @v2_rpc("ChangeInvisibleDuration")
    async def ChangeInvisibleDuration(self, request, context):  # noqa: N802
        raise V2Error(v2.NOT_IMPLEMENTED, _NOT_YET)

    @v2_rpc("ForwardMessageToDeadLetterQueue")
    async def ForwardMessageToDeadLetterQueue(self, request, context):  # noqa: N802
        raise V2Error(v2.NOT_IMPLEMENTED, _NOT_YET)

    @v2_stream("PullMessage")
    async def PullMessage(self, request, context):  # noqa: N802
        yield v2s.PullMessageResponse(status=status(v2.NOT_IMPLEMENTED, _NOT_YET))

    @v2_rpc("UpdateOffset")
    async def UpdateOffset(self, request, context):  # noqa: N802
        raise V2Error(v2.NOT_IMPLEMENTED, _NOT_YET)

    @v2_rpc("GetOffset")
    async def GetOffset(self, request, context):  # noqa: N802
        raise V2Error(v2.NOT_IMPLEMENTED, _NOT_YET)

    @v2_rpc("QueryOffset")
    async def QueryOffset(self, request, context):  # noqa: N802
        raise V2Error(v2.NOT_IMPLEMENTED, _NOT_YET)

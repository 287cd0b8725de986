"""The node tests' raw-stub helper on the session's shared node (tests/support/shared.py)."""

from __future__ import annotations

import pytest

from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.support.processes import NodeProcess
from tests.support.shared import unique_name


class Api:
    """Raw generated stubs for one node, plus tiny helpers the tests share."""

    def __init__(self, node: NodeProcess):
        self.node = node
        channel = node.channel()
        self.msg = pb_grpc.MessagingServiceStub(channel)
        self.admin = pb_grpc.AdminServiceStub(channel)

    def topic(self, prefix: str = "t", queues: int = 4, perm: int = 0, message_type: str = "") -> str:
        """A new topic; ``message_type`` "" is the server's default (NORMAL)."""
        name = unique_name(prefix)
        self.admin.CreateTopic(pb.CreateTopicRequest(
            topic=pb.TopicConfig(name=name, read_queue_nums=queues, write_queue_nums=queues, perm=perm,
                                 message_type=message_type)), timeout=10)
        return name

    def send(self, topic: str, body: bytes, queue_id: int | None = 0, **fields) -> pb.SendResult:
        m = pb.Message(topic=topic, body=body, **fields)
        if queue_id is not None:
            m.queue_id = queue_id
        return self.msg.SendMessage(pb.SendMessageRequest(message=m), timeout=10).result

    def pull(self, topic: str, queue_id: int = 0, offset: int = 0, **fields) -> pb.PullMessageResponse:
        """Pull; by default long-polls 10 s, since an acknowledged message reaches its queue asynchronously."""
        fields.setdefault("long_poll_timeout_ms", 10_000)
        return self.msg.PullMessage(pb.PullMessageRequest(topic=topic, queue_id=queue_id, offset=offset, **fields),
                                    timeout=30)

    def settle(self, topic: str, queue_id: int, count: int) -> None:
        """Wait until the first ``count`` messages of a queue are dispatched (consume queue and index)."""
        offset = 0
        while offset < count:  # in order: an offset beyond the dispatched end is OFFSET_OVERFLOW, not a wait
            r = self.pull(topic, queue_id, offset)
            assert r.status == pb.FOUND, r
            offset = r.next_offset


@pytest.fixture
def api(shared_node) -> Api:
    return Api(shared_node)

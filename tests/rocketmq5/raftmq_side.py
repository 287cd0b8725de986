"""The raftmq side of the RocketMQ 5 tests: topics and reading messages back through raftmq's own API."""

from __future__ import annotations

import grpc

from raftmq.client.security import signed_headers
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.support.processes import NodeProcess
from tests.support.waiting import wait_for


def leader_of(nodes: list[NodeProcess], credentials: tuple[str, str] | None = None) -> NodeProcess:
    def find():
        for n in nodes:
            if not n.alive:
                continue
            try:
                status = pb_grpc.AdminServiceStub(n.channel()).ClusterStatus(pb.ClusterStatusRequest(), timeout=5,
                                                                              metadata=_md(credentials))
            except grpc.RpcError:
                continue
            if status.leader_id:
                return next((x for x in nodes if x.spec.id == status.leader_id and x.alive), None)
        return None

    return wait_for(find, "a leader", timeout=60)


def _md(credentials: tuple[str, str] | None):
    return signed_headers(*credentials) if credentials else None


def create_topic(node: NodeProcess, name: str, queues: int = 4, credentials: tuple[str, str] | None = None,
                 message_type: str = "") -> None:
    """``message_type`` "" is the server's default (NORMAL); the official clients refuse other kinds themselves."""
    stub = pb_grpc.AdminServiceStub(node.channel())
    stub.CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(name=name, read_queue_nums=queues,
                                                                write_queue_nums=queues, message_type=message_type)),
                     timeout=30, metadata=_md(credentials))


def read_all(node: NodeProcess, topic: str, credentials: tuple[str, str] | None = None) -> list[pb.MessageView]:
    """Every message of ``topic`` from offset 0 of each queue, through raftmq's own pull (any member)."""
    stub = pb_grpc.MessagingServiceStub(node.channel())
    out = []
    for q in stub.GetQueueOffsets(pb.GetQueueOffsetsRequest(topic=topic), timeout=10,
                                  metadata=_md(credentials)).queues:
        offset = q.min_offset
        while offset < q.max_offset:
            r = stub.PullMessage(pb.PullMessageRequest(topic=topic, queue_id=q.queue_id, offset=offset,
                                                       max_count=256), timeout=10, metadata=_md(credentials))
            if not r.messages:
                break
            out.extend(r.messages)
            offset = r.next_offset
    return out


def read_keys(node: NodeProcess, topic: str, uniq_keys, timeout: float = 30.0,
              credentials: tuple[str, str] | None = None) -> dict[str, pb.MessageView]:
    """The stored messages of ``topic`` by UNIQ_KEY once every one of ``uniq_keys`` is readable on ``node`` (its
    reput may lag the acknowledgement by a moment)."""
    want = set(uniq_keys)

    def found():
        got = {m.uniq_key: m for m in read_all(node, topic, credentials)}
        return got if want <= set(got) else None

    return wait_for(found, f"{len(want)} message(s) readable on {node.spec.id}", timeout=timeout)

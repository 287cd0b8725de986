"""Rotten consume-queue units never make a read skip a message (issue 33 item 2), on every read API.

Real 3-member cluster; 64 random bytes are written into a member's consume-queue file while it runs (the file is
mapped shared, so the member reads the rotten units at once). Each API then reads the queue from that member:
every acknowledged message must come back, in queue-offset order, none missing, and the member's queue file must
end byte-identical to a healthy peer's (the units were rebuilt from the commit log before the answer). The old
read path returned queue offset 3715 followed by 3719. Pulls are served by any member (a follower is damaged);
receive (pop) is decided by the leader (its file is damaged).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from google.protobuf.duration_pb2 import Duration

from raftmq.client import Admin, Message, Producer
from raftmq.rocketmq.v2 import definition_pb2 as v2
from raftmq.rocketmq.v2 import service_pb2 as v2s
from raftmq.rocketmq.v2 import service_pb2_grpc as v2_grpc
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.client.test_cluster_check_e2e import converged
from tests.support.metrics import metric_sum
from tests.support.processes import NodeProcess, running_nodes

pytestmark = pytest.mark.slow
COUNT = 360  # two consume-queue files of 200 units (TINY_STORE)
V2_CLIENT = (("x-mq-client-id", "cq-damage@1@0@abc"), ("x-mq-protocol", "GRPC_V2"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_nodes(tmp_path_factory.mktemp("cqdmg"), 3) as nodes:
        servers = [n.grpc_address for n in nodes]
        with Admin(servers) as admin:
            for topic in ("Pull", "Stream", "V2Pull", "Receive", "V2Receive"):
                admin.create_topic(topic, queues=1)
        with Producer(servers) as p:
            for topic in ("Pull", "Stream", "V2Pull", "Receive", "V2Receive"):
                for i in range(0, COUNT, 40):
                    p.send_batch(topic, [Message(b"%s-%05d" % (topic.encode(), n), tags="AB"[n % 2])
                                         for n in range(i, i + 40)], queue_id=0)
        converged(servers)
        with Admin(servers) as admin:
            leader_id = admin.cluster_status().leader_id
        leader = next(n for n in nodes if n.spec.id == leader_id)
        follower = next(n for n in nodes if n.spec.id != leader_id)
        yield leader, follower


def _queue_file(node: NodeProcess, topic: str) -> Path:
    return node.spec.data_dir / "consumequeue" / topic / "0" / f"{0:020d}"


def _rot(node: NodeProcess, topic: str, unit: int, seed: int) -> bytes:
    """64 random bytes over units ``unit``..``unit + 3`` of the member's first queue file; returns the file's
    right bytes (as they were)."""
    path = _queue_file(node, topic)
    right = path.read_bytes()
    with open(path, "r+b") as f:
        f.seek(unit * 20 + 7)
        f.write(random.Random(seed).randbytes(64))
    assert path.read_bytes() != right
    return right


def _healed(node: NodeProcess, topic: str, right: bytes, got: list[int], every: int = 1) -> None:
    want = list(range(0, COUNT, every))
    assert got == want, [o for o in want if o not in got][:10] or got[:10]
    assert _queue_file(node, topic).read_bytes() == right  # rebuilt in place from the commit log


def _offsets(messages, topic: str) -> list[int]:
    out = []
    for m in messages:
        assert m.body == b"%s-%05d" % (topic.encode(), m.queue_offset)  # the message of that offset, not another
        out.append(m.queue_offset)
    return out


def test_pull_message(cluster):
    _leader, follower = cluster
    before = metric_sum(follower, "rocketmq_storage_corruption_total", kind="consumequeue")
    right = _rot(follower, "Pull", 120, 1)
    stub = pb_grpc.MessagingServiceStub(follower.channel())
    got, offset = [], 0
    while offset < COUNT:
        r = stub.PullMessage(pb.PullMessageRequest(topic="Pull", queue_id=0, offset=offset, max_count=32), timeout=30)
        got += _offsets(r.messages, "Pull")
        offset = r.next_offset
    _healed(follower, "Pull", right, got)
    assert metric_sum(follower, "rocketmq_storage_corruption_total", kind="consumequeue") == before + 1


def test_pull_stream(cluster):
    _leader, follower = cluster
    right = _rot(follower, "Stream", 57, 2)
    stub = pb_grpc.MessagingServiceStub(follower.channel())
    call = stub.PullStream(pb.PullStreamRequest(topic="Stream", offsets={0: 0}, max_count=16), timeout=60)
    got: list[int] = []
    for r in call:
        got += _offsets(r.pull.messages, "Stream")
        if len(got) >= COUNT:
            call.cancel()
            break
    _healed(follower, "Stream", right, got)


def test_rocketmq5_pull_with_a_tag_filter(cluster):
    _leader, follower = cluster
    right = _rot(follower, "V2Pull", 195, 3)  # up to the end of the first file
    stub = v2_grpc.MessagingServiceStub(follower.channel())
    got, offset = [], 0
    while offset < COUNT:
        req = v2s.PullMessageRequest(message_queue=v2.MessageQueue(topic=v2.Resource(name="V2Pull"), id=0),
                                     offset=offset, batch_size=32,
                                     filter_expression=v2.FilterExpression(type=v2.TAG, expression="A"))
        answers = list(stub.PullMessage(req, metadata=V2_CLIENT, timeout=30))
        assert answers[0].status.code == v2.OK, answers[0]
        for a in answers[1:]:
            if a.HasField("message"):
                m = a.message
                assert m.body == b"V2Pull-%05d" % m.system_properties.queue_offset
                got.append(m.system_properties.queue_offset)
            elif a.WhichOneof("content") == "next_offset":
                offset = a.next_offset
    _healed(follower, "V2Pull", right, got, every=2)  # tag A: the even ones; B units are skipped by tags code


def test_receive(cluster):
    leader, _follower = cluster
    right = _rot(leader, "Receive", 150, 4)
    stub = pb_grpc.MessagingServiceStub(leader.channel())
    got: list[int] = []
    while True:
        r = stub.ReceiveMessage(pb.ReceiveMessageRequest(group="g-cq", topic="Receive", max_messages=32,
                                                         invisible_duration_ms=600_000), timeout=30)
        if not r.messages:
            break
        got += _offsets([m.message for m in r.messages], "Receive")
    _healed(leader, "Receive", right, sorted(got))


def test_rocketmq5_receive(cluster):
    leader, _follower = cluster
    right = _rot(leader, "V2Receive", 10, 5)
    stub = v2_grpc.MessagingServiceStub(leader.channel())
    got: list[int] = []
    while True:
        req = v2s.ReceiveMessageRequest(group=v2.Resource(name="g-cq5"),
                                        message_queue=v2.MessageQueue(topic=v2.Resource(name="V2Receive"), id=-1),
                                        batch_size=32, invisible_duration=Duration(seconds=600),
                                        filter_expression=v2.FilterExpression(type=v2.TAG, expression="*"))
        answers = list(stub.ReceiveMessage(req, metadata=V2_CLIENT, timeout=30))
        assert answers[0].status.code in (v2.OK, v2.MESSAGE_NOT_FOUND), answers[0]
        msgs = [a.message for a in answers if a.HasField("message")]
        if not msgs:
            break
        for m in msgs:
            assert m.body == b"V2Receive-%05d" % m.system_properties.queue_offset
            got.append(m.system_properties.queue_offset)
    _healed(leader, "V2Receive", right, sorted(got))

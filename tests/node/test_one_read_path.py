"""Issue 36: every pull API reads through the one read path (node/read_path.py) and every receive API through the
one receive path (node/receive_path.py), so the same request gets the same answer whichever API asks: a system
topic, a write-only topic and a damaged record, pulled with raftmq's PullMessage and PullStream and RocketMQ 5's
PullMessage, received with raftmq's ReceiveMessage and RocketMQ 5's ReceiveMessage. Each protocol says it in its
own code (a gRPC status for raftmq, the answer's Status for RocketMQ 5), with the same words.

Before, the RocketMQ 5 pull read a write-only topic and a system topic's internal messages, and its receive
answered "no new message" for a write-only topic while raftmq's refused it; the RocketMQ 5 pull counted no pull
metrics.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from raftmq.client import Admin, Producer
from raftmq.rocketmq.v2 import definition_pb2 as v2
from raftmq.rocketmq.v2 import service_pb2 as v2s
from raftmq.rocketmq.v2 import service_pb2_grpc as v2_grpc
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.store.store_helpers import segment_files
from tests.support.metrics import metric_sum
from tests.support.processes import running_nodes

pytestmark = pytest.mark.slow

CLIENT = (("x-mq-client-id", "test@1@0@one-read-path"), ("x-mq-protocol", "GRPC_V2"))
BODY = b"D" * 1000
PERM_WRITE_ONLY = 2


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with running_nodes(tmp_path_factory.mktemp("one-read-path"), 1, store={"scrub_rate_bytes_per_s": 0}) as [n]:
        with Admin([n.grpc_address]) as admin:
            admin.create_topic("readable", queues=1)
            admin.create_topic("write-only", queues=1, perm=PERM_WRITE_ONLY)
            admin.create_topic("damaged", queues=1)
            admin.create_topic("later", queues=1, message_type="DELAY")
        with Producer([n.grpc_address]) as p:
            p.send("readable", b"fine", queue_id=0)
            p.send("write-only", b"secret", queue_id=0)
            p.send("readable", b"second", queue_id=0)
            p.send_batch("damaged", [BODY + b"%05d" % i for i in range(4)], queue_id=0)
            p.send("later", b"delayed", queue_id=0, delay_level=18)  # waits in SCHEDULE_TOPIC_XXXX for 2 h
        _flip(n.spec.data_dir, BODY + b"00000")  # the first record: every API meets it at once
        yield n


def _flip(store_dir: Path, needle: bytes) -> None:
    seg = segment_files(store_dir / "commitlog")[0]
    data = seg.read_bytes()
    at = data.index(needle) + 500
    with open(seg, "r+b") as f:  # the node's mapping sees the write (same page cache)
        f.seek(at)
        f.write(bytes([data[at] ^ 0x04]))


def _pull_message(node, topic: str, offset: int) -> tuple[grpc.StatusCode, str]:
    try:
        pb_grpc.MessagingServiceStub(node.channel()).PullMessage(
            pb.PullMessageRequest(topic=topic, queue_id=0, offset=offset, max_count=4), timeout=30)
    except grpc.RpcError as e:
        return e.code(), e.details()
    return grpc.StatusCode.OK, ""


def _pull_stream(node, topic: str, offset: int) -> tuple[grpc.StatusCode, str]:
    stream = pb_grpc.MessagingServiceStub(node.channel()).PullStream(
        pb.PullStreamRequest(topic=topic, offsets={0: offset}, max_count=4), timeout=30)
    try:
        next(iter(stream))
    except grpc.RpcError as e:
        return e.code(), e.details()
    finally:
        stream.cancel()
    return grpc.StatusCode.OK, ""


def _v2_pull(node, topic: str, offset: int) -> v2.Status:
    answers = list(v2_grpc.MessagingServiceStub(node.channel()).PullMessage(v2s.PullMessageRequest(
        group=v2.Resource(name="g"), message_queue=v2.MessageQueue(topic=v2.Resource(name=topic), id=0),
        offset=offset, batch_size=4, filter_expression=v2.FilterExpression(type=v2.TAG, expression="*")),
        metadata=CLIENT, timeout=30))
    return answers[0].status


def _receive(node, topic: str) -> tuple[grpc.StatusCode, str]:
    try:
        pb_grpc.MessagingServiceStub(node.channel()).ReceiveMessage(
            pb.ReceiveMessageRequest(group="g", topic=topic, max_messages=4), timeout=30)
    except grpc.RpcError as e:
        return e.code(), e.details()
    return grpc.StatusCode.OK, ""


def _v2_receive(node, topic: str) -> v2.Status:
    answers = list(v2_grpc.MessagingServiceStub(node.channel()).ReceiveMessage(v2s.ReceiveMessageRequest(
        group=v2.Resource(name="g"), message_queue=v2.MessageQueue(topic=v2.Resource(name=topic), id=-1),
        batch_size=4, invisible_duration=Duration(seconds=30),
        filter_expression=v2.FilterExpression(type=v2.TAG, expression="*")), metadata=CLIENT, timeout=30))
    return answers[0].status


@pytest.mark.parametrize(("topic", "offset", "code", "v2_code", "says"), [
    ("SCHEDULE_TOPIC_XXXX", 0, grpc.StatusCode.INVALID_ARGUMENT, v2.ILLEGAL_TOPIC, "cannot be consumed"),
    ("write-only", 0, grpc.StatusCode.PERMISSION_DENIED, v2.FORBIDDEN, "is not readable"),
    ("damaged", 0, grpc.StatusCode.DATA_LOSS, v2.INTERNAL_SERVER_ERROR, "damaged"),
], ids=["system-topic", "write-only-topic", "damaged-record"])
def test_every_pull_api_gives_the_same_answer(node, topic, offset, code, v2_code, says):
    unary = _pull_message(node, topic, offset)
    stream = _pull_stream(node, topic, offset)
    v2_status = _v2_pull(node, topic, offset)
    assert unary[0] == code and says in unary[1], unary
    assert stream == unary
    assert (v2_status.code, v2_status.message) == (v2_code, unary[1])


@pytest.mark.parametrize(("topic", "code", "v2_code", "says"), [
    ("SCHEDULE_TOPIC_XXXX", grpc.StatusCode.INVALID_ARGUMENT, v2.ILLEGAL_TOPIC, "cannot be consumed"),
    ("write-only", grpc.StatusCode.PERMISSION_DENIED, v2.FORBIDDEN, "is not readable"),
], ids=["system-topic", "write-only-topic"])
def test_every_receive_api_gives_the_same_answer(node, topic, code, v2_code, says):
    raftmq = _receive(node, topic)
    v2_status = _v2_receive(node, topic)
    assert raftmq[0] == code and says in raftmq[1], raftmq
    assert (v2_status.code, v2_status.message) == (v2_code, raftmq[1])


def test_a_damaged_record_received_is_refused_by_both_receive_apis(node):
    raftmq = _receive(node, "damaged")
    v2_status = _v2_receive(node, "damaged")
    assert raftmq[0] == grpc.StatusCode.DATA_LOSS and "damaged" in raftmq[1], raftmq
    assert (v2_status.code, v2_status.message) == (v2.INTERNAL_SERVER_ERROR, raftmq[1])


def test_every_pull_api_counts_what_it_hands_out(node):
    before = metric_sum(node, "rocketmq_messages_out_total", topic="readable")
    assert _pull_message(node, "readable", 0)[0] == grpc.StatusCode.OK
    assert _v2_pull(node, "readable", 0).code == v2.OK
    after = metric_sum(node, "rocketmq_messages_out_total", topic="readable")
    assert after - before == 4, "both pulls of the two messages are counted"

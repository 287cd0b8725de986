"""The consumer RPCs of the RocketMQ 5 API through raftmq's own v2 stubs against a real node: auto-renew keeps a
PushConsumer-style receipt invisible under its first handle, the offset RPCs (PullMessage, UpdateOffset, GetOffset,
QueryOffset) work over raftmq's queues, and bad input gets a v2 code with a message saying what to fix."""

from __future__ import annotations

import uuid

import pytest
from google.protobuf.duration_pb2 import Duration

from raftmq.client import Producer
from raftmq.rocketmq.v2 import definition_pb2 as v2
from raftmq.rocketmq.v2 import service_pb2 as v2s
from raftmq.rocketmq.v2 import service_pb2_grpc as v2_grpc
from tests.rocketmq5.raftmq_side import create_topic
from tests.support.metrics import metric_sum
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for

pytestmark = pytest.mark.rocketmq5

CLIENT = (("x-mq-client-id", "test@2@0@abc"), ("x-mq-protocol", "GRPC_V2"))
RENEW_S = 6


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with running_nodes(tmp_path_factory.mktemp("v2c"), node={"rocketmq5_auto_renew_seconds": RENEW_S}) as nodes:
        create_topic(nodes[0], "c", queues=2)
        with Producer(nodes[0].grpc_address) as p:
            for i in range(4):
                p.send("c", f"m{i}", tags="T", queue_id=0)
        yield nodes[0]


@pytest.fixture
def stub(node):
    return v2_grpc.MessagingServiceStub(node.channel())


def _queue(qid: int = -1, topic: str = "c") -> v2.MessageQueue:
    return v2.MessageQueue(topic=v2.Resource(name=topic), id=qid)


def _receive(stub, group: str, *, batch=16, invisible_s=None, auto_renew=False, expr="*", kind=v2.TAG,
             poll_s=0) -> list[v2s.ReceiveMessageResponse]:
    req = v2s.ReceiveMessageRequest(group=v2.Resource(name=group), message_queue=_queue(), batch_size=batch,
                                    auto_renew=auto_renew, filter_expression=v2.FilterExpression(type=kind,
                                                                                                 expression=expr),
                                    long_polling_timeout=Duration(seconds=poll_s))
    if invisible_s is not None:
        req.invisible_duration.CopyFrom(Duration(seconds=invisible_s))
    return list(stub.ReceiveMessage(req, metadata=CLIENT, timeout=30))


def _renewals(node) -> float:
    return metric_sum(node, "raftmq_rocketmq5_receipt_renewals_total")


def test_an_auto_renewed_receipt_stays_invisible_under_its_first_handle(node, stub):
    # renewals are for live clients (connected or heartbeating), as a PushConsumer is
    assert stub.Heartbeat(v2s.HeartbeatRequest(client_type=v2.PUSH_CONSUMER, group=v2.Resource(name="g-renew")),
                          metadata=CLIENT, timeout=10).status.code == v2.OK
    # a long poll: the fixture's sends were acknowledged before reput made them receivable
    first = _receive(stub, "g-renew", batch=1, auto_renew=True, poll_s=20)
    assert first[0].status.code == v2.OK, first
    msg = first[1].message
    assert msg.system_properties.invisible_duration.seconds == RENEW_S
    before = _renewals(node)
    # renewed at least twice: the message has been held longer than its invisible time
    wait_for(lambda: _renewals(node) >= before + 2, "two renewals", timeout=4 * RENEW_S)
    others = [r.message.body for r in _receive(stub, "g-renew") if r.HasField("message")]
    assert msg.body not in others  # still invisible to the group
    ack = stub.AckMessage(v2s.AckMessageRequest(group=v2.Resource(name="g-renew"), topic=v2.Resource(name="c"),
                                                entries=[v2s.AckMessageEntry(
                                                    message_id=msg.system_properties.message_id,
                                                    receipt_handle=msg.system_properties.receipt_handle)]),
                          metadata=CLIENT, timeout=10)
    assert ack.status.code == v2.OK, ack  # the handle the client holds is still the valid one


def test_an_empty_receive_says_message_not_found_and_ends(stub):
    got = _receive(stub, "g-empty", expr="NoSuchTag", invisible_s=10)
    assert [r.WhichOneof("content") for r in got] == ["status", "delivery_timestamp"]
    assert got[0].status.code == v2.MESSAGE_NOT_FOUND


@pytest.mark.parametrize(("kwargs", "code", "words"), [
    ({"invisible_s": 0}, v2.ILLEGAL_INVISIBLE_TIME, "invisible duration"),
    ({"batch": 0, "invisible_s": 10}, v2.BAD_REQUEST, "batch size"),
    ({"expr": "a >>", "kind": v2.SQL, "invisible_s": 10}, v2.ILLEGAL_FILTER_EXPRESSION, "filter expression"),
    ({"expr": "||", "invisible_s": 10}, v2.ILLEGAL_FILTER_EXPRESSION, "filter expression"),
])
def test_bad_receives_are_refused_with_the_code_a_client_expects(stub, kwargs, code, words):
    got = _receive(stub, "g-bad", **kwargs)
    assert got[0].status.code == code and words in got[0].status.message, got


def test_bad_handles_and_unknown_topics(stub):
    g, t = v2.Resource(name="g-h"), v2.Resource(name="c")
    ack = stub.AckMessage(v2s.AckMessageRequest(group=g, topic=t, entries=[
        v2s.AckMessageEntry(message_id="x", receipt_handle="forged")]), metadata=CLIENT, timeout=10)
    assert ack.status.code == v2.INVALID_RECEIPT_HANDLE and "not issued by this cluster" in ack.status.message
    change = stub.ChangeInvisibleDuration(v2s.ChangeInvisibleDurationRequest(
        group=g, topic=t, receipt_handle="forged", invisible_duration=Duration(seconds=5)), metadata=CLIENT,
        timeout=10)
    assert change.status.code == v2.INVALID_RECEIPT_HANDLE and change.receipt_handle == "forged"
    missing = stub.QueryAssignment(v2s.QueryAssignmentRequest(topic=v2.Resource(name="nope-" + uuid.uuid4().hex[:6]),
                                                              group=g), metadata=CLIENT, timeout=10)
    assert missing.status.code == v2.TOPIC_NOT_FOUND and "does not exist" in missing.status.message
    assignment = stub.QueryAssignment(v2s.QueryAssignmentRequest(topic=t, group=g), metadata=CLIENT, timeout=10)
    assert assignment.status.code == v2.OK and [a.message_queue.id for a in assignment.assignments] == [-1]
    assert assignment.assignments[0].message_queue.broker.endpoints.addresses  # a client can dial it


def test_offset_rpcs_over_raftmqs_queues(stub):
    g = v2.Resource(name="g-off")
    q0 = _queue(0)
    begin = stub.QueryOffset(v2s.QueryOffsetRequest(message_queue=q0, query_offset_policy=v2.BEGINNING),
                             metadata=CLIENT, timeout=10)
    end = stub.QueryOffset(v2s.QueryOffsetRequest(message_queue=q0, query_offset_policy=v2.END), metadata=CLIENT,
                           timeout=10)
    assert (begin.offset, end.offset) == (0, 4)
    pulled = list(stub.PullMessage(v2s.PullMessageRequest(group=g, message_queue=q0, offset=1, batch_size=2,
                                                          filter_expression=v2.FilterExpression(type=v2.TAG,
                                                                                                expression="*")),
                                   metadata=CLIENT, timeout=10))
    assert pulled[0].status.code == v2.OK
    assert [r.message.body for r in pulled if r.HasField("message")] == [b"m1", b"m2"]
    assert pulled[-1].next_offset == 3
    missing = stub.GetOffset(v2s.GetOffsetRequest(group=g, message_queue=q0), metadata=CLIENT, timeout=10)
    assert missing.status.code == v2.OFFSET_NOT_FOUND
    assert stub.UpdateOffset(v2s.UpdateOffsetRequest(group=g, message_queue=q0, offset=3), metadata=CLIENT,
                             timeout=10).status.code == v2.OK
    assert stub.GetOffset(v2s.GetOffsetRequest(group=g, message_queue=q0), metadata=CLIENT, timeout=10).offset == 3
    bad = stub.UpdateOffset(v2s.UpdateOffsetRequest(group=g, message_queue=_queue(7), offset=1), metadata=CLIENT,
                            timeout=10)
    assert bad.status.code == v2.BAD_REQUEST and "read queues 0..1" in bad.status.message

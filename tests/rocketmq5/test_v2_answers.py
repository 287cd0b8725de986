"""The server's answers to RocketMQ 5 requests a real client would not send (bad input, unknown ids), through
raftmq's own copy of the v2 stubs: every refusal is a v2 Status code in the answer (gRPC OK) with a message that
says what to fix, never a crash or a gRPC error."""

from __future__ import annotations

import gzip
import time
import uuid

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from raftmq.rocketmq.v2 import definition_pb2 as v2
from raftmq.rocketmq.v2 import service_pb2 as v2s
from raftmq.rocketmq.v2 import service_pb2_grpc as v2_grpc
from tests.rocketmq5.raftmq_side import create_topic, read_keys
from tests.support.processes import running_nodes

pytestmark = pytest.mark.rocketmq5

CLIENT = (("x-mq-client-id", "test@1@0@abc"), ("x-mq-protocol", "GRPC_V2"))


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    policies = {"ordered": {"fifo": True, "max_delivery_attempts": 3, "retry_backoff": "1s 2s"}}
    with running_nodes(tmp_path_factory.mktemp("v2"), node={"group_policies": policies}) as nodes:
        create_topic(nodes[0], "t", message_type="MIXED")  # takes every kind: the checks below come first
        for kind in ("NORMAL", "FIFO", "DELAY", "TRANSACTION"):
            create_topic(nodes[0], kind.lower(), message_type=kind)
        yield nodes[0]


@pytest.fixture
def stub(node):
    return v2_grpc.MessagingServiceStub(node.channel())


def _msg(body: bytes = b"x", *, mtype=v2.NORMAL, topic="t", **sp) -> v2.Message:
    sp = {"message_id": uuid.uuid4().hex.upper(), "message_type": mtype, "body_encoding": v2.IDENTITY, **sp}
    return v2.Message(topic=v2.Resource(name=topic), body=body, system_properties=v2.SystemProperties(**sp))


def _send(stub, *messages) -> v2s.SendMessageResponse:
    return stub.SendMessage(v2s.SendMessageRequest(messages=list(messages)), metadata=CLIENT, timeout=10)


def _in(seconds: float) -> Timestamp:
    t = Timestamp()
    t.FromMilliseconds(int((time.time() + seconds) * 1000))
    return t


@pytest.mark.parametrize(("message", "code", "says"), [
    (_msg(b""), v2.MESSAGE_BODY_EMPTY, "empty"),
    (_msg(b"x" * (64 * 1024 + 1)), v2.MESSAGE_BODY_TOO_LARGE, "limit is 65536"),
    (_msg(topic="nope"), v2.TOPIC_NOT_FOUND, "raftmq topic create nope"),
    (_msg(topic="bad topic!"), v2.ILLEGAL_TOPIC, "topic"),
    (_msg(mtype=v2.FIFO), v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "message group"),
    (_msg(message_group="g"), v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "only FIFO"),
    (_msg(mtype=v2.DELAY), v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "delivery timestamp"),
    (_msg(mtype=v2.DELAY, delivery_timestamp=_in(2 * 86400)), v2.ILLEGAL_DELIVERY_TIME, "at most 86400 s"),
    # issue 34: milliseconds where seconds belong (beyond a Timestamp's range) was INTERNAL_ERROR with a traceback
    (_msg(mtype=v2.DELAY, delivery_timestamp=Timestamp(seconds=int(time.time() * 1000))), v2.ILLEGAL_DELIVERY_TIME,
     "milliseconds where seconds are expected?): give a time between now and"),
    (_msg(mtype=v2.DELAY, delivery_timestamp=Timestamp(seconds=int(time.time()), nanos=-1)),
     v2.ILLEGAL_DELIVERY_TIME, "not a valid time"),
    (_msg(tag="a|b"), v2.ILLEGAL_MESSAGE_TAG, "without '|'"),
    (_msg(keys=["ok", " "]), v2.ILLEGAL_MESSAGE_KEY, "blank"),
    (_msg(body_encoding=v2.GZIP), v2.MESSAGE_CORRUPTED, "not valid gzip"),
    (_msg(mtype=v2.PRIORITY), v2.UNSUPPORTED, "not supported"),
])
def test_bad_sends_are_refused_with_the_v2_code_and_what_to_fix(stub, message, code, says):
    r = _send(stub, message)
    assert r.status.code == code, r
    assert says in r.status.message
    assert not r.entries


def _typed(kind: str, topic: str) -> v2.Message:
    """A message of ``kind`` as an official client builds it."""
    extra = {"FIFO": {"message_group": "g"}, "DELAY": {"delivery_timestamp": _in(60)}}.get(kind, {})
    return _msg(b"typed", mtype=v2.MessageType.Value(kind), topic=topic, **extra)


@pytest.mark.parametrize("topic", ["normal", "fifo", "delay", "transaction"])
def test_a_topic_takes_only_its_message_type_as_apache_rocketmq_5_refuses_the_others(stub, topic):
    """issue 34: FIFO, DELAY and TRANSACTION messages were accepted on a NORMAL topic and NORMAL ones on an ordered
    one. Apache's proxy answers MESSAGE_PROPERTY_CONFLICT_WITH_TYPE naming the expected and the actual type."""
    expected = topic.upper()
    for kind in ("NORMAL", "FIFO", "DELAY", "TRANSACTION"):
        r = _send(stub, _typed(kind, topic))
        if kind == expected:
            assert r.status.code == v2.OK, (kind, r)
            continue
        assert r.status.code == v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, (kind, r)
        assert f"takes {expected} messages, and this is a {kind} message" in r.status.message, r.status.message
        assert not r.entries
    route = stub.QueryRoute(v2s.QueryRouteRequest(topic=v2.Resource(name=topic)), metadata=CLIENT, timeout=10)
    assert route.status.code == v2.OK
    assert {tuple(q.accept_message_types) for q in route.message_queues} == {(v2.MessageType.Value(expected),)}


def test_reserved_property_names_and_empty_ids_are_refused(stub):
    m = _msg()
    m.user_properties["UNIQ_KEY"] = "mine"
    r = _send(stub, m)
    assert r.status.code == v2.ILLEGAL_MESSAGE_PROPERTY_KEY and "reserved" in r.status.message
    m = _msg()
    m.system_properties.message_id = ""
    assert _send(stub, m).status.code == v2.ILLEGAL_MESSAGE_ID
    assert stub.SendMessage(v2s.SendMessageRequest(), metadata=CLIENT, timeout=10).status.code == v2.BAD_REQUEST


def test_a_gzip_body_is_stored_plain_and_a_trace_context_is_kept(node, stub):
    m = _msg(gzip.compress(b"compressed hello"), body_encoding=v2.GZIP, trace_context="00-abc-def-01")
    r = _send(stub, m)
    assert r.status.code == v2.OK and r.entries[0].message_id == m.system_properties.message_id
    stored = read_keys(node, "t", [m.system_properties.message_id])[m.system_properties.message_id]
    assert stored.body == b"compressed hello"
    assert stored.properties["TRACE_CONTEXT"] == "00-abc-def-01"


def test_end_transaction_with_unknown_or_malformed_ids_is_invalid_transaction_id(stub):
    for tx in ("", "not-an-id", "7F00000100002A9F00000000DEADBEEF"):
        r = stub.EndTransaction(v2s.EndTransactionRequest(topic=v2.Resource(name="t"), message_id="X",
                                                          transaction_id=tx, resolution=v2.COMMIT),
                                metadata=CLIENT, timeout=10)
        assert r.status.code == v2.INVALID_TRANSACTION_ID, (tx, r)
        assert r.status.message


def test_a_transaction_ends_once(stub):
    r = _send(stub, _msg(b"half", mtype=v2.TRANSACTION))
    assert r.status.code == v2.OK and r.entries[0].transaction_id
    end = v2s.EndTransactionRequest(topic=v2.Resource(name="t"), message_id=r.entries[0].message_id,
                                    transaction_id=r.entries[0].transaction_id, resolution=v2.ROLLBACK)
    assert stub.EndTransaction(end, metadata=CLIENT, timeout=10).status.code == v2.OK
    end.resolution = v2.COMMIT
    again = stub.EndTransaction(end, metadata=CLIENT, timeout=10)
    assert again.status.code == v2.INVALID_TRANSACTION_ID and "rolled back" in again.status.message.lower()


def test_route_of_an_unknown_topic_and_the_echoed_endpoints(node, stub):
    r = stub.QueryRoute(v2s.QueryRouteRequest(topic=v2.Resource(name="nope")), metadata=CLIENT, timeout=10)
    assert r.status.code == v2.TOPIC_NOT_FOUND and "nope" in r.status.message
    asked = v2.Endpoints(scheme=v2.DOMAIN_NAME, addresses=[v2.Address(host="raftmq.example.svc", port=8081)])
    r = stub.QueryRoute(v2s.QueryRouteRequest(topic=v2.Resource(name="t"), endpoints=asked), metadata=CLIENT,
                        timeout=10)
    assert r.status.code == v2.OK and len(r.message_queues) == 4
    for q in r.message_queues:
        assert q.broker.id == 0 and q.broker.endpoints == asked and q.permission == v2.READ_WRITE
        assert set(q.accept_message_types) == {v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION}
    r = stub.QueryRoute(v2s.QueryRouteRequest(topic=v2.Resource(name="t")), metadata=CLIENT, timeout=10)
    assert r.message_queues[0].broker.endpoints.addresses[0].port == int(node.grpc_address.rpartition(":")[2])


def test_telemetry_answers_settings_with_ok_and_the_body_limit_and_stays_open(stub):
    settings = v2.Settings(client_type=v2.PRODUCER, publishing=v2.Publishing(topics=[v2.Resource(name="t")]))
    requests = iter([v2s.TelemetryCommand(settings=settings)])

    def commands():
        yield from requests
        time.sleep(1.5)  # keep our side open a moment: the server must not end the stream by itself

    call = stub.Telemetry(commands(), metadata=CLIENT, timeout=10)
    first = next(call)
    assert first.status.code == v2.OK
    assert first.settings.publishing.max_body_size == 64 * 1024
    assert not first.settings.metric.on
    # no client id: refused with the code the Java proxy uses
    bare = next(stub.Telemetry(iter([v2s.TelemetryCommand(settings=settings)]), timeout=10))
    assert bare.status.code == v2.CLIENT_ID_REQUIRED
    call.cancel()


@pytest.mark.parametrize(("group", "fifo", "attempts", "backoff_s"), [
    ("ordered", True, 3, [1, 2]),
    ("anyone", False, 16, [1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200]),
])
def test_consumer_settings_carry_the_groups_policy(stub, group, fifo, attempts, backoff_s):
    settings = v2.Settings(client_type=v2.PUSH_CONSUMER, subscription=v2.Subscription(group=v2.Resource(name=group)))
    call = stub.Telemetry(iter([v2s.TelemetryCommand(settings=settings)]), metadata=CLIENT, timeout=10)
    reply = next(call)
    call.cancel()
    assert reply.status.code == v2.OK
    sub = reply.settings.subscription
    assert sub.fifo is fifo and sub.long_polling_timeout.seconds == 20 and sub.group.name == group
    policy = reply.settings.backoff_policy
    assert policy.max_attempts == attempts
    assert [d.seconds for d in policy.customized_backoff.next] == backoff_s


def test_group_settings_changed_at_runtime_reach_the_clients_next_settings(node, stub):
    """issue 34: `raftmq group update` (AdminService.UpdateConsumerGroup) changes what a RocketMQ 5 consumer is
    told in its settings from then on, without restarting any member."""
    from raftmq.v1 import raftmq_pb2 as pb
    from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

    pb_grpc.AdminServiceStub(node.channel()).UpdateConsumerGroup(pb.UpdateConsumerGroupRequest(
        group="changed", fifo=True, max_delivery_attempts=4, retry_backoff="2s 1m"), timeout=10)
    settings = v2.Settings(client_type=v2.PUSH_CONSUMER,
                           subscription=v2.Subscription(group=v2.Resource(name="changed")))
    call = stub.Telemetry(iter([v2s.TelemetryCommand(settings=settings)]), metadata=CLIENT, timeout=10)
    reply = next(call)
    call.cancel()
    assert reply.settings.subscription.fifo is True
    assert reply.settings.backoff_policy.max_attempts == 4
    assert [d.seconds for d in reply.settings.backoff_policy.customized_backoff.next] == [2, 60]

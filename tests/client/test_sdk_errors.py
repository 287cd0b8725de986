"""How the SDK maps real gRPC statuses to typed errors, routes writes to the leader and decides what to
re-send, against a real gRPC server on loopback (tests.client.scripted_server)."""

import socket
import threading
import time

import grpc
import pytest

from raftmq.client import (
    Admin,
    AlreadyExistsError,
    BusyError,
    ConnectionError,
    InvalidArgumentError,
    NotFoundError,
    NotLeaderError,
    PermissionDeniedError,
    Producer,
    RaftmqError,
    StorageFullError,
    TopicNotFoundError,
    UnavailableError,
    UnknownOutcomeError,
)
from raftmq.v1 import raftmq_pb2 as pb
from tests.client.scripted_server import Abort, Sleep

C = grpc.StatusCode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ok_send(request):
    m = request.message
    return pb.SendMessageResponse(result=pb.SendResult(msg_id="7F00000100002A9F0000000000000000",
                                                       uniq_key=m.uniq_key, topic=m.topic, queue_id=1))


@pytest.mark.parametrize("code,message,cls", [
    (C.INVALID_ARGUMENT, "topic name 'a b' has illegal characters", InvalidArgumentError),
    (C.NOT_FOUND, "topic 'nope' does not exist", TopicNotFoundError),
    (C.ALREADY_EXISTS, "topic 'T' exists", AlreadyExistsError),
    (C.PERMISSION_DENIED, "topic 'T' is read-only (perm r-)", PermissionDeniedError),
    (C.INTERNAL, "internal error in SendMessage", RaftmqError),
    (C.FAILED_PRECONDITION, "cannot transfer leadership: unknown member n9", RaftmqError),
    (C.RESOURCE_EXHAUSTED, "disk full on n0: /data/store, 4096 bytes free", StorageFullError),
])
def test_write_status_maps_to_typed_error(scripted, code, message, cls):
    s = scripted()
    s.push("SendMessage", Abort(code, message))
    with Producer(s.address, retry_timeout=0.5) as p, pytest.raises(RaftmqError) as exc_info:
        p.send("T", b"x")
    assert type(exc_info.value) is cls
    assert message in str(exc_info.value)
    assert exc_info.value.code == code and exc_info.value.address == s.address
    assert len(s.received["SendMessage"]) == 1, "a rejected write must not be re-sent"


def test_not_found_for_a_queue_is_not_a_topic_error(scripted):
    s = scripted()
    s.push("SendMessage", Abort(C.NOT_FOUND, "topic 'T' has 4 write queues (0..3); queue 9 does not exist"))
    with Producer(s.address) as p, pytest.raises(NotFoundError) as exc_info:
        p.send("T", "x", queue_id=9)
    assert not isinstance(exc_info.value, TopicNotFoundError)


def test_not_found_for_a_message_is_not_a_topic_error(scripted):
    s = scripted()
    s.push("ViewMessage", Abort(C.NOT_FOUND, "no message with id 7F00000100002A9F0000000000001234"))
    with Admin(s.address) as a, pytest.raises(NotFoundError) as exc_info:
        a.view_message("7F00000100002A9F0000000000001234")
    assert not isinstance(exc_info.value, TopicNotFoundError)
    assert exc_info.value.exit_code == 3


def test_follows_leader_hint_and_sticks_to_the_leader(scripted):
    follower, leader = scripted(), scripted()
    follower.defaults["SendMessage"] = Abort(C.FAILED_PRECONDITION, "this node is not the leader",
                                             (("x-raftmq-leader", leader.address),))
    leader.defaults["SendMessage"] = ok_send
    with Producer([follower.address]) as p:
        r1 = p.send("T", "one", keys=["k1", "k2"], tags="A", properties={"p": "v"})
        r2 = p.send("T", "two")
    assert len(follower.received["SendMessage"]) == 1, "second send must go straight to the leader"
    assert len(leader.received["SendMessage"]) == 2
    first_try = follower.received["SendMessage"][0].message
    at_leader = leader.received["SendMessage"][0].message
    assert first_try.uniq_key == at_leader.uniq_key == r1.uniq_key, "a resend keeps its UNIQ_KEY"
    assert list(at_leader.keys) == ["k1", "k2"] and at_leader.tags == "A" and at_leader.properties["p"] == "v"
    assert r1.uniq_key != r2.uniq_key


def test_not_leader_without_hint_tries_the_other_addresses(scripted):
    a, b = scripted(), scripted()
    a.defaults["SendMessage"] = Abort(C.FAILED_PRECONDITION, "this node is not the leader and does not know it")
    b.defaults["SendMessage"] = ok_send
    with Producer([a.address, b.address]) as p:
        p.send("T", "x")
    assert len(b.received["SendMessage"]) == 1


def test_redirect_loop_ends_in_not_leader_error(scripted):
    a, b = scripted(), scripted()
    a.defaults["SendMessage"] = Abort(C.FAILED_PRECONDITION, "not the leader", (("x-raftmq-leader", b.address),))
    b.defaults["SendMessage"] = Abort(C.FAILED_PRECONDITION, "not the leader", (("x-raftmq-leader", a.address),))
    with Producer([a.address], retry_timeout=0.3) as p, pytest.raises(NotLeaderError) as exc_info:
        p.send("T", "x")
    assert exc_info.value.leader in (a.address, b.address)


def test_unavailable_from_server_is_retried_with_same_uniq_key(scripted):
    s = scripted()
    s.push("SendMessage", Abort(C.UNAVAILABLE, "no leader right now"), Abort(C.RESOURCE_EXHAUSTED, "busy"))
    s.defaults["SendMessage"] = ok_send
    with Producer(s.address) as p:
        r = p.send("T", "x")
    keys = {req.message.uniq_key for req in s.received["SendMessage"]}
    assert len(s.received["SendMessage"]) == 3 and keys == {r.uniq_key}


def test_unavailable_and_busy_give_up_after_retry_timeout(scripted):
    s = scripted()
    s.defaults["SendMessage"] = Abort(C.RESOURCE_EXHAUSTED, "the write path is overloaded")
    with Producer(s.address, retry_timeout=0.3) as p, pytest.raises(BusyError) as exc_info:
        p.send("T", "x")
    assert exc_info.value.exit_code == 5
    s.defaults["ListTopics"] = Abort(C.UNAVAILABLE, "node is starting")
    with Admin(s.address, retry_timeout=0.3) as a, pytest.raises(UnavailableError, match="node is starting"):
        a.list_topics()


def test_deadline_on_write_is_unknown_outcome_and_not_resent(scripted):
    s = scripted()
    s.push("SendMessage", Sleep(1.0, None))
    with Producer(s.address, timeout=0.2, unknown_outcome_retries=0) as p, \
            pytest.raises(UnknownOutcomeError) as exc_info:
        p.send("T", "x")
    sent = s.received["SendMessage"]
    assert len(sent) == 1
    assert exc_info.value.uniq_keys == [sent[0].message.uniq_key]
    assert sent[0].message.uniq_key in str(exc_info.value), "the user can look the message up"
    assert exc_info.value.exit_code == 7


def test_unknown_outcome_retries_resend_the_same_uniq_key(scripted):
    s = scripted()
    s.push("SendMessage", Abort(C.UNKNOWN, "outcome unknown: leadership changed"))
    s.defaults["SendMessage"] = ok_send
    with Producer(s.address, unknown_outcome_retries=1) as p:
        r = p.send("T", "x")
    sent = s.received["SendMessage"]
    assert len(sent) == 2 and sent[0].message.uniq_key == sent[1].message.uniq_key == r.uniq_key


def test_by_default_an_unknown_outcome_is_resent_with_the_same_uniq_key_until_retry_timeout(scripted):
    s = scripted()
    s.push("SendMessage", Abort(C.UNKNOWN, "outcome unknown: leadership changed"),
           Abort(C.UNKNOWN, "outcome unknown: leadership changed"))
    s.defaults["SendMessage"] = ok_send
    with Producer(s.address) as p:
        r = p.send("T", "x")
    sent = s.received["SendMessage"]
    assert len(sent) == 3 and {m.message.uniq_key for m in sent} == {r.uniq_key}
    s.defaults["SendMessage"] = Abort(C.UNKNOWN, "outcome unknown: leadership changed")
    with Producer(s.address, retry_timeout=0.5) as p, pytest.raises(UnknownOutcomeError) as exc_info:
        p.send("T", "y")
    later = s.received["SendMessage"][3:]
    assert len(later) >= 2 and {m.message.uniq_key for m in later} == set(exc_info.value.uniq_keys)


def test_connection_broken_mid_write_is_unknown_outcome(scripted):
    s = scripted()
    s.push("SendMessage", Sleep(2.0, None))
    threading.Timer(0.3, lambda: s.server.stop(grace=None)).start()
    with Producer(s.address, timeout=5, unknown_outcome_retries=0) as p, pytest.raises(UnknownOutcomeError):
        p.send("T", "x")


def test_deadline_on_read_fails_over_to_another_replica(scripted):
    slow, fast = scripted(), scripted()
    slow.push("ListTopics", Sleep(1.0, None))
    fast.defaults["ListTopics"] = pb.ListTopicsResponse(topics=[pb.TopicConfig(name="T", read_queue_nums=4)])
    with Admin([slow.address, fast.address], timeout=0.2) as a:
        assert [t.name for t in a.list_topics()] == ["T"]


def test_unreachable_server_names_the_address():
    addr = f"127.0.0.1:{free_port()}"
    with Producer(addr) as p, pytest.raises(ConnectionError) as exc_info:
        p.send("T", "x")
    assert addr in str(exc_info.value) and exc_info.value.exit_code == 5


def test_all_unreachable_names_every_address():
    a, b = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with Admin([a, b]) as adm, pytest.raises(ConnectionError) as exc_info:
        adm.cluster_status()
    assert a in str(exc_info.value) and b in str(exc_info.value)
    assert time.monotonic() - t0 < 60  # it gives up instead of hanging (pytest-timeout is the real guard)


def test_unreachable_first_address_falls_over_to_the_next_for_writes(scripted):
    s = scripted()
    s.defaults["SendMessage"] = ok_send
    with Producer([f"127.0.0.1:{free_port()}", s.address]) as p:
        p.send("T", "x")
    assert len(s.received["SendMessage"]) == 1


def test_batch_gives_every_message_its_own_uniq_key(scripted):
    s = scripted()
    s.defaults["SendBatch"] = lambda req: pb.SendBatchResponse(
        results=[pb.SendResult(uniq_key=m.uniq_key, queue_id=2, queue_offset=i) for i, m in enumerate(req.messages)])
    with Producer(s.address) as p:
        results = p.send_batch("T", [b"a", "b", b"c"], queue_id=2)
    req = s.received["SendBatch"][0]
    assert [m.queue_id for m in req.messages] == [2, 2, 2]
    assert len({m.uniq_key for m in req.messages}) == 3
    assert [r.uniq_key for r in results] == [m.uniq_key for m in req.messages]


def test_bad_server_address_is_rejected_before_any_call():
    for bad in ("localhost", "host:0", "host:70000", "::1:8081", ":8081", ""):
        with pytest.raises(InvalidArgumentError):
            Producer(bad)


def test_unrecognised_unavailable_on_write_is_unknown_outcome_not_resent(scripted):
    s = scripted()
    s.push("SendMessage", Abort(C.UNAVAILABLE, "something went away"))
    s.defaults["SendMessage"] = ok_send
    with Producer(s.address, unknown_outcome_retries=0) as p, pytest.raises(UnknownOutcomeError):
        p.send("T", "x")
    assert len(s.received["SendMessage"]) == 1


def test_wrong_python_types_are_type_errors_before_sending(scripted):
    s = scripted()
    with Producer(s.address) as p:
        for kw in (dict(body=5), dict(body="x", tags=5), dict(body="x", properties={"a": 1})):
            with pytest.raises(TypeError):
                p.send("T", **kw)
    assert s.received["SendMessage"] == []

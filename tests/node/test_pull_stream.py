"""PullStream (issue 17, streaming consume) through a real node: what is stored flows, what arrives later flows
without a new request (long-poll wake-up across queues), tag filters, bad input, and the same answers as
PullMessage."""

from __future__ import annotations

import queue
import threading

import grpc
import pytest

from raftmq.v1 import raftmq_pb2 as pb


class Reader:
    """A PullStream call read on a thread into a queue, so the test can wait for responses with a timeout."""

    def __init__(self, api, request: pb.PullStreamRequest):
        self.call = api.msg.PullStream(request, timeout=60)
        self.responses: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for r in self.call:
                self.responses.put(r)
        except grpc.RpcError as e:
            self.responses.put(e)

    def messages(self, n: int) -> list[tuple[int, pb.MessageView]]:
        out = []
        while len(out) < n:
            r = self.responses.get(timeout=30)
            assert not isinstance(r, grpc.RpcError), r
            assert r.pull.status == pb.FOUND, r
            out += [(r.queue_id, m) for m in r.pull.messages]
        return out

    def cancel(self) -> None:
        self.call.cancel()


def test_stored_and_later_messages_flow_on_one_call(api):
    topic = api.topic("ps", queues=3)
    for i in range(5):
        api.send(topic, f"a{i}".encode(), queue_id=0)
    for i in range(3):
        api.send(topic, f"b{i}".encode(), queue_id=1)
    api.settle(topic, 0, 5)
    api.settle(topic, 1, 3)
    reader = Reader(api, pb.PullStreamRequest(topic=topic, offsets={0: 1, 1: 0, 2: 0}, max_count=2))
    try:
        got = reader.messages(7)
        assert [m.body for q, m in got if q == 0] == [b"a1", b"a2", b"a3", b"a4"]
        assert [m.body for q, m in got if q == 1] == [b"b0", b"b1", b"b2"]
        assert all(m.queue_id == q for q, m in got)
        # the stream is caught up and parked: new messages on any queue arrive without a new request
        api.send(topic, b"c0", queue_id=2)
        api.send(topic, b"b3", queue_id=1)
        later = reader.messages(2)
        assert sorted((q, m.body) for q, m in later) == [(1, b"b3"), (2, b"c0")]
        assert [m.queue_offset for q, m in later if q == 1] == [3]
    finally:
        reader.cancel()


def test_tag_filter_and_offset_correction(api):
    topic = api.topic("pst", queues=1)
    for i, tag in enumerate("ABAB"):
        api.send(topic, f"{tag}{i}".encode(), queue_id=0, tags=tag)
    api.settle(topic, 0, 4)
    reader = Reader(api, pb.PullStreamRequest(topic=topic, offsets={0: 0}, tag_expression="B"))
    try:
        assert [m.body for _, m in reader.messages(2)] == [b"B1", b"B3"]
    finally:
        reader.cancel()
    # an offset past the end answers as PullMessage does (OFFSET_OVERFLOW) and the stream continues from the end
    reader = Reader(api, pb.PullStreamRequest(topic=topic, offsets={0: 99}))
    try:
        r = reader.responses.get(timeout=30)
        unary = api.msg.PullMessage(pb.PullMessageRequest(topic=topic, queue_id=0, offset=99), timeout=10)
        assert r.queue_id == 0 and r.pull == unary and r.pull.status == pb.OFFSET_OVERFLOW
        api.send(topic, b"A4", queue_id=0, tags="A")
        assert [m.body for _, m in reader.messages(1)] == [b"A4"]
    finally:
        reader.cancel()


@pytest.mark.parametrize("request_fields, code, text", [
    ({"offsets": {}}, grpc.StatusCode.INVALID_ARGUMENT, "offsets is empty"),
    ({"offsets": {0: -1}}, grpc.StatusCode.INVALID_ARGUMENT, "negative"),
    ({"offsets": {9: 0}}, grpc.StatusCode.NOT_FOUND, "queue"),
    ({"offsets": {0: 0}, "max_count": -1}, grpc.StatusCode.INVALID_ARGUMENT, "max_count"),
    ({"offsets": {0: 0}, "tag_expression": "a ||| b"}, grpc.StatusCode.INVALID_ARGUMENT, ""),
])
def test_bad_requests_get_a_status_that_says_what_to_fix(api, request_fields, code, text):
    topic = api.topic("psb", queues=2)
    with pytest.raises(grpc.RpcError) as e:
        list(api.msg.PullStream(pb.PullStreamRequest(topic=topic, **request_fields), timeout=10))
    assert e.value.code() == code and text in e.value.details()


def test_unknown_topic_is_not_found(api):
    with pytest.raises(grpc.RpcError) as e:
        list(api.msg.PullStream(pb.PullStreamRequest(topic="no-such-topic-ps", offsets={0: 0}), timeout=10))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_caught_up_stream_ends_cleanly_before_its_deadline(api):
    topic = api.topic("psd", queues=1)
    api.send(topic, b"only", queue_id=0)
    api.settle(topic, 0, 1)
    responses = list(api.msg.PullStream(pb.PullStreamRequest(topic=topic, offsets={0: 0}), timeout=1.5))
    assert [m.body for r in responses for m in r.pull.messages] == [b"only"]

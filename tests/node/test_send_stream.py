"""SendStream (issue 17) through a real node: ordered acks, per-send outcomes equal to the unary calls', one
write path (the same checks and results as SendMessage / SendBatch), and the group-commit metric."""

from __future__ import annotations

import grpc
import pytest

from raftmq.v1 import raftmq_pb2 as pb
from tests.support.metrics import metric_sum, samples


def _stream(api, requests: list[pb.SendStreamRequest]) -> list[pb.SendStreamResponse]:
    return list(api.msg.SendStream(iter(requests), timeout=30))


def _messages_in(api, topic: str) -> float:
    return metric_sum(api.node, "rocketmq_messages_in_total", topic=topic)


def test_acks_come_in_request_order_and_messages_are_stored(api):
    topic = api.topic("ss")
    requests = [pb.SendStreamRequest(id=100 + r, sends=[
        pb.SendStreamItem(messages=[pb.Message(topic=topic, queue_id=r % 2, body=f"r{r}s{s}".encode(),
                                               keys=[f"k{r}-{s}"])])
        for s in range(5)]) for r in range(20)]
    responses = _stream(api, requests)
    assert [r.id for r in responses] == [100 + r for r in range(20)]
    for resp in responses:
        assert len(resp.outcomes) == 5
        for o in resp.outcomes:
            assert o.code == 0 and not o.error and len(o.results) == 1
    # per queue, offsets follow request order (each request's sends are submitted back to back)
    q0 = [o.results[0].queue_offset for resp in responses[0::2] for o in resp.outcomes]
    assert q0 == list(range(50))
    api.settle(topic, 0, 50)
    got = api.pull(topic, 0, 0, max_count=64)
    assert [m.body for m in got.messages] == [f"r{r}s{s}".encode() for r in range(0, 20, 2) for s in range(5)]
    [m] = api.msg.ViewMessage(pb.ViewMessageRequest(msg_id=responses[3].outcomes[2].results[0].msg_id),
                              timeout=10).message,
    assert m.body == b"r3s2" and list(m.keys) == ["k3-2"]


def test_a_batch_send_is_atomic_and_contiguous(api):
    topic = api.topic("ssb")
    batch = [pb.Message(topic=topic, body=f"b{i}".encode()) for i in range(10)]
    [resp] = _stream(api, [pb.SendStreamRequest(id=1, sends=[pb.SendStreamItem(messages=batch)])])
    [o] = resp.outcomes
    assert o.code == 0 and len(o.results) == 10
    assert len({r.queue_id for r in o.results}) == 1
    assert [r.queue_offset for r in o.results] == list(range(10))


def test_each_send_fails_alone_with_the_unary_status(api):
    topic = api.topic("sse")
    ok = pb.SendStreamItem(messages=[pb.Message(topic=topic, queue_id=0, body=b"ok")])
    bad_tags = pb.SendStreamItem(messages=[pb.Message(topic=topic, body=b"x", tags="a||b")])
    missing = pb.SendStreamItem(messages=[pb.Message(topic="no-such-topic-ss", body=b"x")])
    bad_queue = pb.SendStreamItem(messages=[pb.Message(topic=topic, queue_id=99, body=b"x")])
    mixed = pb.SendStreamItem(messages=[pb.Message(topic=topic, body=b"x"), pb.Message(topic="other", body=b"y")])
    before = _messages_in(api, topic)
    # the topic checks run once per topic per request: a second send to the missing topic fails the same way
    [resp] = _stream(api, [pb.SendStreamRequest(id=7, sends=[ok, bad_tags, missing, bad_queue, mixed, ok,
                                                             missing])])
    codes = [o.code for o in resp.outcomes]
    assert codes[6] == codes[2] and resp.outcomes[6].error == resp.outcomes[2].error
    assert _messages_in(api, topic) - before == 2  # only the stored sends are counted
    for item, code in zip([bad_tags, missing, bad_queue, mixed], codes[1:5], strict=True):
        with pytest.raises(grpc.RpcError) as e:
            if len(item.messages) == 1:
                api.msg.SendMessage(pb.SendMessageRequest(message=item.messages[0]), timeout=10)
            else:
                api.msg.SendBatch(pb.SendBatchRequest(messages=item.messages), timeout=10)
        assert code == e.value.code().value[0]
    assert resp.outcomes[2].error and "does not exist" in resp.outcomes[2].error
    assert codes[0] == 0 and codes[5] == 0
    assert resp.outcomes[5].results[0].queue_offset == resp.outcomes[0].results[0].queue_offset + 1


def test_an_empty_request_ends_the_stream_with_invalid_argument_after_earlier_answers(api):
    topic = api.topic("ss0")
    good = pb.SendStreamRequest(id=1, sends=[pb.SendStreamItem(messages=[pb.Message(topic=topic, body=b"x")])])
    call = api.msg.SendStream(iter([good, pb.SendStreamRequest(id=2)]), timeout=30)
    first = next(call)
    assert first.id == 1 and first.outcomes[0].code == 0
    with pytest.raises(grpc.RpcError) as e:
        next(call)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "no sends" in e.value.details()


def test_group_commit_metric_counts_messages_and_requests(api):
    def counters() -> dict[str, float]:
        return {s.name: s.value for s in samples(api.node) if s.name.startswith("raftmq_group_commit")}

    before = counters()
    topic = api.topic("ssm")
    _stream(api, [pb.SendStreamRequest(id=1, sends=[
        pb.SendStreamItem(messages=[pb.Message(topic=topic, body=b"x")]) for _ in range(8)])])
    after = counters()
    assert after["raftmq_group_commit_messages_total"] - before.get("raftmq_group_commit_messages_total", 0) >= 8
    assert after["raftmq_group_commit_requests_total"] - before.get("raftmq_group_commit_requests_total", 0) >= 8
    assert after["raftmq_group_commits_total"] > before.get("raftmq_group_commits_total", 0)

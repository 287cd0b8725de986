"""Every bad input gets its gRPC status and a message that says what to fix (real node process)."""

from __future__ import annotations

import grpc
import pytest

from raftmq.v1 import raftmq_pb2 as pb

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND


def _status(call, *args, **kwargs) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as e:
        call(*args, timeout=10, **kwargs)
    return e.value.code(), e.value.details()


def _send(api, message: pb.Message):
    return _status(api.msg.SendMessage, pb.SendMessageRequest(message=message))


@pytest.mark.parametrize("name, hint", [
    ("", "empty"),
    ("has space", "use only letters"),
    ("x" * 128, "limit is 127"),
    ("SCHEDULE_TOPIC_XXXX", "system topic"),
])
def test_invalid_topic_names(api, name, hint):
    code, details = _send(api, pb.Message(topic=name, body=b"x"))
    assert code == INVALID and hint in details
    code, details = _status(api.admin.CreateTopic, pb.CreateTopicRequest(topic=pb.TopicConfig(name=name)))
    assert code == INVALID and hint in details


def test_unknown_topic(api):
    code, details = _send(api, pb.Message(topic="never-created", body=b"x"))
    assert code == NOT_FOUND and "create it first" in details
    for call, req in [
        (api.msg.PullMessage, pb.PullMessageRequest(topic="never-created")),
        (api.msg.QueryMessageByKey, pb.QueryMessageByKeyRequest(topic="never-created", key="k")),
        (api.msg.GetQueueOffsets, pb.GetQueueOffsetsRequest(topic="never-created")),
        (api.msg.CommitOffset, pb.CommitOffsetRequest(group="g", topic="never-created", offsets={0: 1})),
        (api.admin.UpdateTopic, pb.UpdateTopicRequest(topic=pb.TopicConfig(name="never-created", perm=6))),
        (api.admin.DeleteTopic, pb.DeleteTopicRequest(name="never-created")),
    ]:
        assert _status(call, req)[0] == NOT_FOUND


def test_unknown_queue(api):
    topic = api.topic("uq", queues=2)
    code, details = _send(api, pb.Message(topic=topic, body=b"x", queue_id=5))
    assert code == NOT_FOUND and "2 write queues" in details
    code, details = _status(api.msg.PullMessage, pb.PullMessageRequest(topic=topic, queue_id=2))
    assert code == NOT_FOUND and "2 read queues" in details
    assert _status(api.msg.SearchOffset, pb.SearchOffsetRequest(topic=topic, queue_id=-1))[0] == NOT_FOUND


def test_topic_exists(api):
    topic = api.topic("dup")
    code, details = _status(api.admin.CreateTopic, pb.CreateTopicRequest(topic=pb.TopicConfig(name=topic)))
    assert code == grpc.StatusCode.ALREADY_EXISTS and "raftmq topic update" in details


def test_bad_topic_settings(api):
    for cfg in (pb.TopicConfig(name="qq", read_queue_nums=5000), pb.TopicConfig(name="qq", perm=9)):
        assert _status(api.admin.CreateTopic, pb.CreateTopicRequest(topic=cfg))[0] == INVALID


def test_oversized_bodies(api):
    topic = api.topic("big")
    limit = 64 * 1024  # TINY_STORE max_message_size
    code, details = _send(api, pb.Message(topic=topic, body=b"x" * (limit + 1), queue_id=0))
    assert code == INVALID and "limit is 65536" in details
    batch = [pb.Message(topic=topic, body=b"x" * (limit // 2), queue_id=0) for _ in range(3)]
    code, details = _status(api.msg.SendBatch, pb.SendBatchRequest(messages=batch))
    assert code == INVALID and "send smaller batches" in details
    api.send(topic, b"x" * limit)  # exactly the limit is fine


def test_bad_batches(api):
    topic, other = api.topic("bb"), api.topic("bb")
    assert _status(api.msg.SendBatch, pb.SendBatchRequest())[0] == INVALID
    two_topics = [pb.Message(topic=topic, body=b"a"), pb.Message(topic=other, body=b"b")]
    code, details = _status(api.msg.SendBatch, pb.SendBatchRequest(messages=two_topics))
    assert code == INVALID and "one topic" in details
    two_queues = [pb.Message(topic=topic, body=b"a", queue_id=0), pb.Message(topic=topic, body=b"b", queue_id=1)]
    assert _status(api.msg.SendBatch, pb.SendBatchRequest(messages=two_queues))[0] == INVALID


def test_bad_offsets(api):
    topic = api.topic("bo")
    code, details = _status(api.msg.PullMessage, pb.PullMessageRequest(topic=topic, offset=-1))
    assert code == INVALID and "negative" in details
    code, _ = _status(api.msg.CommitOffset, pb.CommitOffsetRequest(group="g", topic=topic, offsets={0: -5}))
    assert code == INVALID
    assert _status(api.msg.PullMessage, pb.PullMessageRequest(topic=topic, max_count=-1))[0] == INVALID
    assert _status(api.msg.PullMessage, pb.PullMessageRequest(topic=topic, long_poll_timeout_ms=-1))[0] == INVALID
    assert _status(api.msg.SearchOffset, pb.SearchOffsetRequest(topic=topic, timestamp=-1))[0] == INVALID
    req = pb.QueryMessageByKeyRequest(topic=topic, key="k", begin_timestamp=10, end_timestamp=5)
    assert _status(api.msg.QueryMessageByKey, req)[0] == INVALID


@pytest.mark.parametrize("expr", ["A |", "A | B", "|| A", "A || ", "* || A", "A && B"])
def test_malformed_tag_expressions(api, expr):
    topic = api.topic("tagexpr")
    code, details = _status(api.msg.PullMessage, pb.PullMessageRequest(topic=topic, tag_expression=expr))
    assert code == INVALID and "tag expression" in details


@pytest.mark.parametrize("props, hint", [
    ({"UNIQ_KEY": "x"}, "reserved"),
    ({"TAGS": "x"}, "reserved"),
    ({"DELAY": "3"}, "reserved"),
    ({"__RMQ.TRANSIENT.X": "1"}, "reserved"),
    ({"ok": ""}, "empty value"),
    ({"bad\x01name": "v"}, "separator"),
])
def test_reserved_and_broken_properties(api, props, hint):
    topic = api.topic("props")
    code, details = _send(api, pb.Message(topic=topic, body=b"x", properties=props))
    assert code == INVALID and hint in details


def test_bad_tags_keys_and_hosts(api):
    topic = api.topic("misc")
    for m, hint in [
        (pb.Message(topic=topic, body=b"x", tags="A||B"), "one tag"),
        (pb.Message(topic=topic, body=b"x", keys=["two words"]), "space"),
        (pb.Message(topic=topic, body=b"x", keys=[""]), "empty"),
        (pb.Message(topic=topic, body=b"x", born_host="not-a-host"), "born_host"),
    ]:
        code, details = _send(api, m)
        assert code == INVALID and hint in details, (m, details)


def test_a_negative_delay_level_is_invalid(api):
    topic = api.topic("delay")
    code, details = _send(api, pb.Message(topic=topic, body=b"later", delay_level=-3))
    assert code == INVALID and "delay_level -3 is negative" in details


def test_bad_message_ids_and_groups(api):
    topic = api.topic("ids")
    assert _status(api.msg.ViewMessage, pb.ViewMessageRequest(msg_id=""))[0] == INVALID
    code, details = _status(api.msg.ViewMessage, pb.ViewMessageRequest(msg_id="nothex"))
    assert code == INVALID and "--topic TOPIC" in details
    missing = "7F00000100002A9F00000000FFFFFF00"
    assert _status(api.msg.ViewMessage, pb.ViewMessageRequest(msg_id=missing))[0] == NOT_FOUND
    assert _status(api.msg.ViewMessage, pb.ViewMessageRequest(msg_id="no-such-uniq", topic=topic))[0] == NOT_FOUND
    assert _status(api.msg.FetchOffset, pb.FetchOffsetRequest(group="", topic=topic))[0] == INVALID
    assert _status(api.msg.FetchOffset, pb.FetchOffsetRequest(group="bad group", topic=topic))[0] == INVALID

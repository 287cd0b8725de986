"""Issue 34: a topic's message type (RocketMQ 5's topic attribute ``message.type``) on raftmq's own API.

A send of a kind the topic does not take is refused (INVALID_ARGUMENT naming both kinds) on every send path:
unary SendMessage / SendBatch, the SDK's SendStream and transactional half messages. The type is stored in
topics.json as RocketMQ 5 stores it, and a topic from before message types keeps taking every kind.
"""

from __future__ import annotations

import json
import subprocess
import sys

import grpc
import pytest

from raftmq.client import Admin, Producer, TransactionProducer
from raftmq.client.errors import InvalidArgumentError
from raftmq.v1 import raftmq_pb2 as pb
from tests.support.processes import REPO_ROOT, node_specs, running_nodes, start_nodes, stop_all

KINDS = {  # kind -> the fields that make a raftmq Message that kind
    "NORMAL": {},
    "FIFO": {"message_group": "g"},
    "DELAY": {"delay_level": 1},
}


def _refusal(api, topic: str, **fields) -> str:
    with pytest.raises(grpc.RpcError) as e:
        api.send(topic, b"x", **fields)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
    return e.value.details()


@pytest.mark.parametrize("kind", ["NORMAL", "FIFO", "DELAY", "TRANSACTION"])
def test_a_topic_refuses_every_other_kind_on_unary_sends(api, kind):
    topic = api.topic("typed", message_type=kind)
    for other, fields in KINDS.items():
        if other == kind:
            assert api.send(topic, b"ok", **fields).topic == topic
            continue
        why = _refusal(api, topic, **fields)
        assert f"takes {kind} messages, and this is a {other} message" in why, why
        assert f"raftmq topic update {topic} --message-type {other}" in why, why
    batch = [pb.Message(topic=topic, body=b"a", queue_id=0), pb.Message(topic=topic, body=b"b", queue_id=0,
                                                                         delay_level=2)]
    with pytest.raises(grpc.RpcError) as e:  # one message of the wrong kind refuses the whole batch
        api.msg.SendBatch(pb.SendBatchRequest(messages=batch), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "this is a" in e.value.details()


def test_mixed_takes_every_kind_and_the_default_is_normal(api):
    mixed = api.topic("mixed", message_type="mixed")  # any case
    for fields in KINDS.values():
        assert api.send(mixed, b"x", **fields).topic == mixed
    plain = api.topic("plain")
    listed = {t.name: t for t in api.admin.ListTopics(pb.ListTopicsRequest(), timeout=10).topics}
    assert listed[mixed].message_type == "MIXED" and listed[plain].message_type == "NORMAL"
    assert "takes NORMAL messages" in _refusal(api, plain, delay_level=1)
    with pytest.raises(grpc.RpcError) as e:
        api.admin.CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(name="bad-kind", message_type="URGENT")),
                              timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "NORMAL, FIFO, DELAY, TRANSACTION, MIXED" in \
        e.value.details()


def test_streamed_and_transactional_sends_are_checked_too(shared_node):
    server = [shared_node.grpc_address]
    with Admin(server) as admin:
        admin.create_topic("StreamNormal", queues=2)
        admin.create_topic("StreamFifo", queues=2, message_type="FIFO")
    with Producer(server) as p:  # the SDK streams its sends (SendStream)
        assert p.send("StreamNormal", "ok").topic == "StreamNormal"
        with pytest.raises(InvalidArgumentError, match="takes NORMAL messages, and this is a FIFO message"):
            p.send("StreamNormal", "grouped", message_group="g")
        with pytest.raises(InvalidArgumentError, match="takes FIFO messages, and this is a NORMAL message"):
            p.send("StreamFifo", "plain")
        assert p.send("StreamFifo", "grouped", message_group="g").topic == "StreamFifo"
    tp = TransactionProducer(server, group="tx-group")
    try:
        with pytest.raises(InvalidArgumentError, match="takes NORMAL messages, and this is a TRANSACTION message"):
            tp.send_half("StreamNormal", "half")
    finally:
        tp.close()


def _cli(node, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args, "--server", node.grpc_address],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)


def test_cli_sets_shows_and_changes_the_type_stored_as_rocketmq_5_stores_it(tmp_path):
    with running_nodes(tmp_path, 1) as [node]:
        r = _cli(node, "topic", "create", "Orders", "--message-type", "fifo")
        assert r.returncode == 0 and "message type FIFO" in r.stdout, r.stderr
        r = _cli(node, "topic", "create", "Bad", "--message-type", "urgent")
        assert r.returncode == 2 and "bad message type 'urgent'" in r.stderr, r.stderr
        r = _cli(node, "topic", "describe", "Orders")
        assert r.returncode == 0 and "message type:  FIFO" in r.stdout, r.stderr
        r = _cli(node, "topic", "describe", "Orders", "--json")
        assert json.loads(r.stdout)["message_type"] == "FIFO"
        r = _cli(node, "topic", "describe", "Nope")
        assert r.returncode == 3 and "does not exist" in r.stderr
        r = _cli(node, "produce", "Orders", "--body", "x")
        assert r.returncode == 4 and "takes FIFO messages, and this is a NORMAL message" in r.stderr, r.stderr
        r = _cli(node, "topic", "update", "Orders", "--message-type", "MIXED")
        assert r.returncode == 0 and "message type MIXED" in r.stdout, r.stderr
        r = _cli(node, "produce", "Orders", "--body", "x")
        assert r.returncode == 0, r.stderr
        r = _cli(node, "topic", "list")
        assert "Message type" in r.stdout and "MIXED" in r.stdout
        assert node.stop() == 0  # a clean stop folds the change log into topics.json
        topics = json.loads((node.spec.data_dir / "config" / "topics.json").read_text())["topicConfigTable"]
        assert topics["Orders"]["attributes"] == {"message.type": "MIXED"}  # RocketMQ 5's key, without the "+"


def test_a_topic_from_before_message_types_takes_every_kind_and_auto_create_takes_the_first(tmp_path):
    specs = node_specs(tmp_path, 1, node={"auto_create_topics": True})
    nodes = start_nodes(specs)
    try:
        [node] = nodes
        server = [node.grpc_address]
        with Admin(server) as admin:
            admin.create_topic("Old")
        assert node.stop() == 0
        path = node.spec.data_dir / "config" / "topics.json"
        table = json.loads(path.read_text())
        del table["topicConfigTable"]["Old"]["attributes"]  # as raftmq before issue 34 (and RocketMQ 4.9) wrote it
        path.write_text(json.dumps(table))
        node.start().wait_ready()
        with Admin(server) as admin, Producer(server) as p:
            assert admin.get_topic("Old").message_type == "MIXED"
            for fields in ({}, {"message_group": "g"}, {"delay_level": 1}):
                assert p.send("Old", "x", **fields).topic == "Old"
            assert p.send("Auto", "first", delay_level=1).topic == "Auto"  # auto-created as a DELAY topic
            assert admin.get_topic("Auto").message_type == "DELAY"
            with pytest.raises(InvalidArgumentError, match="takes DELAY messages"):
                p.send("Auto", "plain")
    finally:
        stop_all(nodes)

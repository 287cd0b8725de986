"""Issue 40 on raftmq's own API, one node process: a retried send (same UNIQ_KEY) is answered with the original's
result flagged ``duplicate`` and not stored again, on unary, batch and streamed sends, each message judged alone;
a topic's own window (``raftmq topic create/update --dedup-window``) turns it off or on."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from raftmq.v1 import raftmq_pb2 as pb
from tests.support.processes import REPO_ROOT

pytestmark = pytest.mark.slow

_ids = iter(range(1, 1 << 30))


def new_uniq() -> str:
    return f"0A0000020002000000000001{next(_ids):08X}"


def message(topic: str, uniq: str, body: bytes = b"x", **fields) -> pb.Message:
    return pb.Message(topic=topic, body=body, queue_id=0, uniq_key=uniq, **fields)


def stored_keys(api, topic: str, queues: int = 4) -> list[str]:
    out = []
    for q in range(queues):
        r = api.pull(topic, q, 0, long_poll_timeout_ms=0)
        out += [m.uniq_key for m in r.messages]
    return out


def same_place(a: pb.SendResult, b: pb.SendResult) -> bool:
    return (a.msg_id, a.uniq_key, a.topic, a.queue_id, a.queue_offset, a.physical_offset, a.store_timestamp) == (
        b.msg_id, b.uniq_key, b.topic, b.queue_id, b.queue_offset, b.physical_offset, b.store_timestamp)


def test_unary_and_batch_retries_get_the_originals_result_and_store_nothing(api):
    topic = api.topic("dedup")
    k1, k2, k3 = new_uniq(), new_uniq(), new_uniq()
    first = api.msg.SendMessage(pb.SendMessageRequest(message=message(topic, k1)), timeout=10).result
    again = api.msg.SendMessage(pb.SendMessageRequest(message=message(topic, k1)), timeout=10).result
    assert not first.duplicate and again.duplicate and same_place(first, again)
    batch = [message(topic, k2), message(topic, k1), message(topic, k3)]
    rs = api.msg.SendBatch(pb.SendBatchRequest(messages=batch), timeout=10).results
    assert [r.duplicate for r in rs] == [False, True, False] and same_place(rs[1], first)
    assert rs[2].queue_offset == rs[0].queue_offset + 1      # the new ones stay contiguous
    api.settle(topic, 0, 3)
    assert sorted(stored_keys(api, topic)) == sorted([k1, k2, k3])


def test_streamed_sends_are_judged_each_alone(api):
    topic = api.topic("dedup-stream")
    k1, k2 = new_uniq(), new_uniq()
    req = pb.SendStreamRequest(id=1, sends=[pb.SendStreamItem(messages=[message(topic, k1)]),
                                            pb.SendStreamItem(messages=[message(topic, k1), message(topic, k2)]),
                                            pb.SendStreamItem(messages=[message(topic, k2)])])
    [resp] = list(api.msg.SendStream(iter([req]), timeout=10))
    outcomes = [[r.duplicate for r in o.results] for o in resp.outcomes]
    assert all(o.code == 0 for o in resp.outcomes), resp
    assert outcomes == [[False], [True, False], [True]]
    api.settle(topic, 0, 2)
    assert sorted(stored_keys(api, topic)) == sorted([k1, k2])


def _cli(node, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args, "--server", node.grpc_address],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)


def test_a_topic_window_turns_it_off_and_on(api):
    node = api.node
    r = _cli(node, "topic", "create", "DedupOff", "--dedup-window", "0")
    assert r.returncode == 0 and "de-duplication window off" in r.stdout, r.stderr
    k = new_uniq()
    rs = [api.msg.SendMessage(pb.SendMessageRequest(message=message("DedupOff", k)), timeout=10).result
          for _ in range(2)]
    assert [r.duplicate for r in rs] == [False, False] and rs[0].physical_offset != rs[1].physical_offset
    r = _cli(node, "topic", "update", "DedupOff", "--dedup-window", "30")
    assert r.returncode == 0 and "de-duplication window 30 s" in r.stdout, r.stderr
    k2 = new_uniq()   # sends stored from now on are judged
    rs = [api.msg.SendMessage(pb.SendMessageRequest(message=message("DedupOff", k2)), timeout=10).result
          for _ in range(2)]
    assert [r.duplicate for r in rs] == [False, True] and same_place(rs[0], rs[1])
    r = _cli(node, "topic", "describe", "DedupOff", "--json")
    assert json.loads(r.stdout)["dedup_window_seconds"] == 30
    r = _cli(node, "topic", "update", "DedupOff", "--dedup-window", "node")
    assert r.returncode == 0 and "de-duplication window the node's" in r.stdout, r.stderr
    r = _cli(node, "topic", "update", "DedupOff", "--dedup-window", "-5")
    assert r.returncode == 2 and "must be 0 (off) to 86400" in r.stderr, r.stderr
    with pytest.raises(Exception) as e:
        api.admin.UpdateTopic(pb.UpdateTopicRequest(topic=pb.TopicConfig(name="DedupOff",
                                                                         dedup_window_seconds=10**6)), timeout=10)
    assert "dedup_window_seconds 1000000 must be 0 (off) to 86400" in str(e.value)

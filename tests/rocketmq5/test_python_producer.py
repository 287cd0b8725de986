"""The official RocketMQ 5 Python Producer against real raftmq nodes: what it sends is stored through raftmq's
write path and read back through raftmq's own API (issue 13)."""

from __future__ import annotations

import pytest

from tests.rocketmq5.raftmq_side import create_topic, read_all
from tests.support.processes import running_nodes

pytestmark = [pytest.mark.slow, pytest.mark.rocketmq5]


def _plan(nodes, topics, steps, **kw):
    return {"endpoints": ";".join(n.grpc_address for n in nodes), "topics": topics, "steps": steps, **kw}


def test_normal_sends_are_stored_with_tag_keys_properties_and_the_clients_id(tmp_path, run_driver):
    with running_nodes(tmp_path) as nodes:
        create_topic(nodes[0], "demo")
        steps = [{"op": "send", "topic": "demo", "body": f"hello-{i}", "tag": "TagA", "keys": [f"k{i}", "common"],
                  "props": {"color": "red"}} for i in range(5)]
        lines = run_driver("producer.py", _plan(nodes, ["demo"], steps)).all()
        sends = [x for x in lines if x["op"] == "send"]
        assert [s["ok"] for s in sends] == [True] * 5, sends
        stored = {m.uniq_key: m for m in read_all(nodes[0], "demo")}
        assert set(stored) == {s["message_id"] for s in sends}
        for i, s in enumerate(sends):
            m = stored[s["message_id"]]
            assert m.body == f"hello-{i}".encode()
            assert m.tags == "TagA"
            assert sorted(m.keys) == sorted([f"k{i}", "common"])
            assert m.properties["color"] == "red"
            assert m.queue_offset == s["offset"]  # the queue is the server's choice (the request names none)

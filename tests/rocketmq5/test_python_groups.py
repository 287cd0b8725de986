"""The official RocketMQ 5 Python client against a cluster of two Raft groups (issue 37,
docs/design/scale-out.md#routes): its route names one broker per group with that group's endpoints, its sends
land in both groups, a FIFO message group stays on one queue of one group, and a SimpleConsumer receives every
message of both groups, acked once each."""

from __future__ import annotations

import pytest

from tests.replication.cluster_util import wait_leader
from tests.rocketmq5.raftmq_side import create_topic, read_all
from tests.support.processes import group_specs, start_nodes, stop_all
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.rocketmq5]


@pytest.fixture
def two_groups(tmp_path):
    nodes = start_nodes([s for group in group_specs(tmp_path, groups=2, members=1) for s in group])
    try:
        for n in nodes:
            wait_leader([n])
        create_topic(nodes[0], "orders", message_type="MIXED")  # in every group
        yield nodes
    finally:
        stop_all(nodes)


def test_produce_and_consume_across_two_groups(two_groups, run_driver):
    g0, g1 = two_groups
    steps = [{"op": "send", "topic": "orders", "body": f"m-{i}"} for i in range(16)]
    steps += [{"op": "send", "topic": "orders", "body": f"fifo-{i}", "group": "customer-1"} for i in range(4)]
    lines = run_driver("producer.py", {"endpoints": g0.grpc_address, "topics": ["orders"], "steps": steps}).all()
    sent = [x for x in lines if x["op"] == "send"]
    assert len(sent) == 20 and all(x["ok"] for x in sent), lines
    bodies = {f"m-{i}" for i in range(16)} | {f"fifo-{i}" for i in range(4)}

    def stored():
        return {n.spec.id: {m.body.decode(): m.queue_id for m in read_all(n, "orders")} for n in two_groups}

    where = wait_for(lambda: (s := stored()) and set(s["g0-n0"]) | set(s["g1-n0"]) == bodies and s, "all 20 stored")
    assert where["g0-n0"] and where["g1-n0"], where  # the client's sends went to both groups
    assert not set(where["g0-n0"]) & set(where["g1-n0"])  # each message once
    fifo = {(gid, q) for gid, held in where.items() for b, q in held.items() if b.startswith("fifo-")}
    assert len(fifo) == 1, fifo  # one message group: one queue of one group

    drain = [{"op": "drain", "count": 20, "max": 16, "invisible": 30, "timeout": 90}]
    lines = run_driver("consumer.py", {"endpoints": g1.grpc_address, "group": "cg", "topic": "orders",
                                       "mode": "simple", "await_s": 2, "steps": drain}).all(timeout=150)
    got = [x["body"] for x in lines if x["op"] == "got"]
    assert sorted(set(got)) == sorted(bodies), lines[-3:]
    assert lines[-1] == {"op": "drained", "ok": True, "acked": 20}, lines[-3:]

"""The official RocketMQ 5 Python Producer against real raftmq nodes: what it sends is stored through raftmq's
write path and read back through raftmq's own API (issue 13)."""

from __future__ import annotations

import time

import pytest

from tests.rocketmq5.raftmq_side import create_topic, read_all, read_keys
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.rocketmq5]


def _plan(nodes, topics, steps, **kw):
    return {"endpoints": ";".join(n.grpc_address for n in nodes), "topics": topics, "steps": steps, **kw}


def test_normal_sends_sync_and_async_are_stored_with_tag_keys_properties_and_the_clients_id(shared_node, run_driver):
    nodes = [shared_node]
    create_topic(nodes[0], "py-demo")
    steps = [{"op": "send", "topic": "py-demo", "body": f"hello-{i}", "tag": "TagA", "keys": [f"k{i}", "common"],
              "props": {"color": "red"}, "async": i % 2 == 1} for i in range(5)]
    lines = run_driver("producer.py", _plan(nodes, ["py-demo"], steps)).all()
    sends = [x for x in lines if x["op"] == "send"]
    assert [s["ok"] for s in sends] == [True] * 5, sends
    stored = read_keys(nodes[0], "py-demo", [s["message_id"] for s in sends])
    assert len(stored) == 5
    for i, s in enumerate(sends):
        m = stored[s["message_id"]]
        assert m.body == f"hello-{i}".encode()
        assert m.tags == "TagA"
        assert sorted(m.keys) == sorted([f"k{i}", "common"])
        assert m.properties["color"] == "red"
        assert m.queue_offset == s["offset"]  # the queue is the server's choice (the request names none)


def test_fifo_messages_of_a_group_share_the_queue_our_own_api_picks(shared_node, run_driver):
    from raftmq.node.send_path import queue_for_message_group

    nodes = [shared_node]
    create_topic(nodes[0], "py-orders", message_type="FIFO")
    steps = [{"op": "send", "topic": "py-orders", "body": f"{g}-{i}", "group": g}
             for i in range(4) for g in ("order-1", "order-22")]
    lines = run_driver("producer.py", _plan(nodes, ["py-orders"], steps)).all()
    sent = [x for x in lines if x["op"] == "send"]
    assert all(x["ok"] for x in sent), lines
    stored = list(read_keys(nodes[0], "py-orders", [x["message_id"] for x in sent]).values())
    for g in ("order-1", "order-22"):
        mine = [m for m in stored if m.properties.get("__SHARDINGKEY") == g]
        assert [m.body.decode() for m in sorted(mine, key=lambda m: m.queue_offset)] == [f"{g}-{i}" for i in range(4)]
        assert {m.queue_id for m in mine} == {queue_for_message_group(g, 4)}


def test_delay_messages_carry_their_delivery_time(shared_node, run_driver):
    nodes = [shared_node]
    create_topic(nodes[0], "py-later", message_type="DELAY")
    before = int(time.time())
    steps = [{"op": "send", "topic": "py-later", "body": "in-a-while", "delay_s": 3600},
             {"op": "send", "topic": "py-later", "body": "too-late", "delay_s": 3 * 86400}]
    lines = run_driver("producer.py", _plan(nodes, ["py-later"], steps)).all()
    ok, late = [x for x in lines if x["op"] == "send"]
    assert ok["ok"], ok
    assert not late["ok"] and late["message"].startswith("40012") and "86400 s" in late["message"], late
    stored = _stored_or_held(nodes[0], "py-later", ok["message_id"])
    deliver_ms = int(stored.properties["TIMER_DELIVER_MS"])
    assert (before + 3600) * 1000 <= deliver_ms <= (int(time.time()) + 3600) * 1000


def _stored_or_held(node, topic, uniq_key):
    """The stored record of a delayed message: in its topic, or held in the store's timer topic."""
    from raftmq.v1 import raftmq_pb2 as pb
    from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

    try:
        return read_keys(node, topic, [uniq_key], timeout=5)[uniq_key]
    except AssertionError:
        pass
    found = pb_grpc.MessagingServiceStub(node.channel()).ViewMessage(
        pb.ViewMessageRequest(msg_id=uniq_key, topic="rmq_sys_wheel_timer"), timeout=10)
    return found.message


def test_a_delay_message_is_delivered_at_its_time_never_before(shared_node, run_driver):
    nodes = [shared_node]
    create_topic(nodes[0], "py-soon", message_type="DELAY")
    lines = run_driver("producer.py", _plan(nodes, ["py-soon"], [
        {"op": "send", "topic": "py-soon", "body": "wait-for-it", "delay_s": 4}])).all()
    sent = next(x for x in lines if x["op"] == "send")
    assert sent["ok"], sent
    delivered = wait_for(lambda: [m for m in read_all(nodes[0], "py-soon") if m.uniq_key == sent["message_id"]],
                         "the delayed message to arrive", timeout=60)
    (m,) = delivered
    due = int(m.properties["TIMER_DELIVER_MS"])
    # held by the store's timer: the record in the topic was written at its time, not at the send
    assert m.store_timestamp >= due, (m.store_timestamp, due)
    assert m.body == b"wait-for-it"


def test_transactions_commit_rollback_and_an_orphan_answered_by_the_checker(tmp_path, run_driver):
    store = {"transaction_timeout_ms": 1000, "transaction_check_interval_ms": 300}
    with running_nodes(tmp_path, store=store) as nodes:
        create_topic(nodes[0], "tx", message_type="TRANSACTION")
        steps = [{"op": "tx", "topic": "tx", "body": "committed", "end": "commit"},
                 {"op": "tx", "topic": "tx", "body": "rolled-back", "end": "rollback"},
                 {"op": "tx", "topic": "tx", "body": "orphan", "end": "none"},
                 {"op": "wait_checks", "body": "orphan", "timeout": 60},
                 {"op": "sleep", "seconds": 1}]
        # the checker answers as the client itself does: on a loaded box a check may overtake the client's own
        # commit/rollback (both are then the same outcome, the second one answered as already done)
        checker = {"committed": "commit", "rolled-back": "rollback", "orphan": "commit"}
        d = run_driver("producer.py", _plan(nodes, ["tx"], steps, checker=checker))
        lines = d.all()
        txs = [x for x in lines if x["op"] == "tx"]
        assert all(t["ok"] and t["transaction_id"] for t in txs), txs
        orphan_checks = [x for x in lines if x["op"] == "check" and x["body"] == "orphan"]
        assert orphan_checks and orphan_checks[0]["message_id"] == txs[2]["message_id"], lines
        assert orphan_checks[0]["topic"] == "tx"
        assert next(x for x in lines if x["op"] == "wait_checks")["ok"]
        # committed by the client, and by the checker's answer; the rolled-back one never appears
        visible = wait_for(lambda: (lambda ms: ms if len(ms) >= 2 else None)(read_all(nodes[0], "tx")),
                           "both committed messages", timeout=30)
        assert sorted(m.body.decode() for m in visible) == ["committed", "orphan"]
        assert {m.uniq_key for m in visible} == {txs[0]["message_id"], txs[2]["message_id"]}


def test_a_node_stops_promptly_with_clients_connected(tmp_path, run_driver):
    """Telemetry streams never end by themselves: SIGTERM must end them, or the stop would wait out the whole
    grace period (set far beyond the stop's own timeout here)."""
    with running_nodes(tmp_path, node={"shutdown_grace_seconds": 300}) as nodes:
        create_topic(nodes[0], "demo")
        d = run_driver("producer.py", _plan(nodes, ["demo"], [{"op": "send", "topic": "demo", "body": "x"},
                                                              {"op": "sleep", "seconds": 120}]))
        assert d.until("send")["ok"]
        assert nodes[0].stop(timeout=60) == 0


def test_bad_sends_fail_in_the_client_with_the_reason(shared_node, run_driver):
    nodes = [shared_node]
    create_topic(nodes[0], "py-bad")
    steps = [{"op": "send", "topic": "py-bad", "body_size": 64 * 1024 + 1},  # our limit, from the settings
             {"op": "send", "topic": "py-missing", "body": "x"},
             {"op": "send", "topic": "py-bad", "body": "fine"}]
    lines = run_driver("producer.py", _plan(nodes, ["py-bad", "py-missing"], steps)).all()
    big, missing, fine = [x for x in lines if x["op"] == "send"]
    assert not big["ok"] and "65536" in big["message"], big
    assert not missing["ok"] and "py-missing" in missing["message"], missing
    assert fine["ok"], fine


def test_a_host_name_access_point_like_a_kubernetes_service(shared_node, run_driver):
    """A client configured with one name (a Service) keeps using that name: the route echoes it."""
    nodes = [shared_node]
    create_topic(nodes[0], "py-named")
    port = nodes[0].grpc_address.rpartition(":")[2]
    lines = run_driver("producer.py", {"endpoints": f"localhost:{port}", "topics": ["py-named"],
                                       "steps": [{"op": "send", "topic": "py-named", "body": "via a name"}]}).all()
    sent = next(x for x in lines if x["op"] == "send")
    assert sent["ok"], lines
    assert read_keys(nodes[0], "py-named", [sent["message_id"]])[sent["message_id"]].body == b"via a name"

"""The official RocketMQ 5 Python SimpleConsumer and PushConsumer against real raftmq nodes (issue 13).

Messages are produced through raftmq's own SDK (so these are also the cross-API tests: what raftmq's tools write,
the official clients read) and consumed by the real client in its own venv; acks, retries and dead letters are the
same PopCore decisions raftmq's own receive/ack make, and dead letters are read back through raftmq's own API.
"""

from __future__ import annotations

import grpc
import pytest

from raftmq.client import Producer
from tests.rocketmq5.raftmq_side import create_topic, leader_of, read_all
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.rocketmq5]


def _endpoints(nodes) -> str:
    return ";".join(n.grpc_address for n in nodes)


def _produce(nodes, topic: str, bodies_tags: list[tuple[str, str, dict]], group: str = "") -> None:
    with Producer([n.grpc_address for n in nodes]) as p:
        for body, tag, props in bodies_tags:
            p.send(topic, body, tags=tag or None, keys=[f"key-{body}"], properties=props, message_group=group)


def test_simple_consumer_receives_acks_changes_and_gets_redeliveries(shared_node, run_driver):
    nodes = [shared_node]
    create_topic(nodes[0], "shop")
    _produce(nodes, "shop", [(f"a{i}", "A", {"n": str(i)}) for i in range(4)] + [("b0", "B", {"n": "9"})])
    steps = [{"op": "receive", "max": 16, "invisible": 3},
             {"op": "ack", "body": "a0"},
             {"op": "change", "body": "a1", "invisible": 30},
             {"op": "ack", "body": "a1", "handle": "first"},  # the handle before the change: stale
             {"op": "ack", "body": "a1", "handle": "latest"},
             {"op": "drain", "count": 2, "max": 16, "invisible": 10, "timeout": 60}]  # a2, a3 come back
    lines = run_driver("consumer.py", {"endpoints": _endpoints(nodes), "group": "g-simple", "topic": "shop",
                                       "mode": "simple", "filter": {"type": "TAG", "expression": "A"},
                                       "await_s": 5, "steps": steps}).all()
    first = lines[0]
    assert first["op"] == "receive" and first["ok"], lines
    got = {m["body"]: m for m in first["messages"]}
    assert set(got) == {"a0", "a1", "a2", "a3"}  # b0 has tag B: filtered out
    for i in range(4):
        m = got[f"a{i}"]
        assert (m["tag"], m["keys"], m["props"], m["attempt"], m["topic"]) == \
            ("A", [f"key-a{i}"], {"n": str(i)}, 1, "shop")
        assert not m["corrupted"] and m["message_id"]  # the uppercase MD5 digest checked out
    assert [x["ok"] for x in lines[1:3]] == [True, True] and lines[2]["new_handle"], lines
    stale = lines[3]
    assert stale["ok"] is False and stale["message"].startswith("40013, receipt handle is stale"), stale
    assert lines[4]["ok"], lines[4]
    again = [x for x in lines if x["op"] == "got"]
    assert sorted(x["body"] for x in again) == ["a2", "a3"]  # a1 was acked, a0 too: never again
    assert {x["attempt"] for x in again} == {2}
    assert lines[-1] == {"op": "drained", "ok": True, "acked": 2}


def test_simple_consumer_sql_filter_and_messages_from_raftmq_produce(shared_node, run_driver):
    nodes = [shared_node]
    create_topic(nodes[0], "sq")
    _produce(nodes, "sq", [(f"m{i}", "T", {"n": str(i)}) for i in range(6)])
    lines = run_driver("consumer.py", {
        "endpoints": _endpoints(nodes), "group": "g-sql", "topic": "sq", "mode": "simple",
        "filter": {"type": "SQL", "expression": "n >= 2 AND n < 4"}, "await_s": 3,
        "steps": [{"op": "drain", "count": 2, "timeout": 30},
                  {"op": "receive", "max": 16, "invisible": 10}]}).all()
    assert sorted(x["body"] for x in lines if x["op"] == "got") == ["m2", "m3"]
    assert lines[-1]["op"] == "receive" and lines[-1]["messages"] == []  # nothing else matches
    bad = run_driver("consumer.py", {
        "endpoints": _endpoints(nodes), "group": "g-sql2", "topic": "sq", "mode": "simple",
        "filter": {"type": "SQL", "expression": "n >>> 2"}, "await_s": 1,
        "steps": [{"op": "receive", "max": 1, "invisible": 10}]}).all()
    assert bad[0]["ok"] is False and "filter expression" in bad[0]["message"], bad


def _push_until(driver, stop_file, done) -> list[dict]:
    events: list[dict] = []

    def enough():
        while not driver.lines.empty():
            line = driver.lines.get_nowait()
            if line is None:
                raise AssertionError(f"push driver ended early:\n{driver.diagnostics()}")
            events.append(line)
        return done(events)

    try:
        wait_for(enough, "the push consumer's expected deliveries", timeout=90, interval=0.2)
    except AssertionError:
        seen = [(e.get("body"), e.get("result"), e.get("attempt")) for e in events]
        raise AssertionError(f"the push consumer saw only {seen}:\n{driver.diagnostics()}") from None
    stop_file.write_text("stop")
    events.extend(driver.all())
    return events


def test_push_consumer_retries_failures_with_backoff_then_dead_letters_them(tmp_path, run_driver):
    policies = {"g-push": {"max_delivery_attempts": 3, "retry_backoff": "1s 1s"}}
    with running_nodes(tmp_path, node={"group_policies": policies}) as nodes:
        create_topic(nodes[0], "jobs")
        _produce(nodes, "jobs", [(f"ok{i}", "", {}) for i in range(5)] + [("poison", "", {"kind": "bad"})])
        stop = tmp_path / "stop-push"
        driver = run_driver("consumer.py", {"endpoints": _endpoints(nodes), "group": "g-push", "topic": "jobs",
                                            "mode": "push", "fail": ["poison"], "stop_file": str(stop)})

        def done(events):
            ok = {e["body"] for e in events if e.get("op") == "consume" and e["result"] == "SUCCESS"}
            try:
                dead = read_all(nodes[0], "%DLQ%g-push")
            except grpc.RpcError:  # no dead letter yet: the DLQ topic is created with the first
                dead = []
            return ok == {f"ok{i}" for i in range(5)} and dead

        events = _push_until(driver, stop, done)
        poison = [e["attempt"] for e in events if e.get("op") == "consume" and e["body"] == "poison"]
        assert poison == [1, 2, 3], poison  # delivered max_delivery_attempts times, each attempt one more
        dead = read_all(nodes[0], "%DLQ%g-push")
        assert [m.body for m in dead] == [b"poison"]
        assert dead[0].properties["kind"] == "bad" and dead[0].properties["RETRY_TOPIC"] == "jobs"


def test_fifo_push_consumer_keeps_group_order_and_forwards_its_poison_to_the_dlq(tmp_path, run_driver):
    policies = {"g-fifo": {"max_delivery_attempts": 2, "retry_backoff": "1s", "fifo": True}}
    with running_nodes(tmp_path, node={"group_policies": policies}) as nodes:
        create_topic(nodes[0], "orders", message_type="FIFO")
        _produce(nodes, "orders", [(f"o-{i}", "", {}) for i in range(6)], group="order-7")
        stop = tmp_path / "stop-fifo"
        driver = run_driver("consumer.py", {"endpoints": _endpoints(nodes), "group": "g-fifo", "topic": "orders",
                                            "mode": "push", "fail": ["o-2"], "stop_file": str(stop)})

        def done(events):
            ok = [e["body"] for e in events if e.get("op") == "consume" and e["result"] == "SUCCESS"]
            return len(ok) >= 5

        events = _push_until(driver, stop, done)
        ok = [e["body"] for e in events if e.get("op") == "consume" and e["result"] == "SUCCESS"]
        assert ok == ["o-0", "o-1", "o-3", "o-4", "o-5"], ok  # in group order, o-2 given up in between
        calls = [e["body"] for e in events if e.get("op") == "consume"]
        assert calls.index("o-3") > max(i for i, b in enumerate(calls) if b == "o-2")  # nothing overtook o-2
        # forwarded before the client could receive o-3 (its reput may lag the acknowledgement by a moment)
        dead = wait_for(lambda: read_all(nodes[0], "%DLQ%g-fifo"), "o-2 readable in the DLQ", timeout=30)
        assert [m.body for m in dead] == [b"o-2"]


def test_consuming_through_any_member_survives_a_leader_sigkill(tmp_path, run_driver):
    with running_nodes(tmp_path, 3) as nodes:
        leader = leader_of(nodes)
        create_topic(leader, "flow")
        total = 120
        _produce(nodes, "flow", [(f"f{i}", "", {}) for i in range(total)])
        driver = run_driver("consumer.py", {"endpoints": _endpoints(nodes), "group": "g-flow", "topic": "flow",
                                            "mode": "simple", "await_s": 3,
                                            "steps": [{"op": "drain", "count": total, "max": 8, "invisible": 15,
                                                       "timeout": 150}]})
        seen: list[dict] = []
        wait_for(lambda: seen.append(driver.next(60)) or sum(x["op"] == "got" for x in seen) >= 30,
                 "30 messages consumed before the kill", timeout=90)
        leader.kill()
        rest = driver.all(timeout=180)
        lines = seen + rest
        assert lines[-1]["op"] == "drained" and lines[-1]["ok"], lines[-5:]
        consumed = {x["body"] for x in lines if x["op"] == "got"}
        assert consumed == {f"f{i}" for i in range(total)}  # every message was delivered; none lost

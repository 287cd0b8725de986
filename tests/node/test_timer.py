"""Timer messages end to end: SDK/CLI against real nodes, a 3-member Raft group whose leader is SIGKILLed while
timers wait, restart of every member, and the bad inputs (issue 13)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from raftmq.client import Admin, Producer
from raftmq.client.errors import InvalidArgumentError
from tests.node.test_delay import collect, raftmq
from tests.support.metrics import metric_sum
from tests.support.processes import TINY_STORE, node_specs, start_nodes, stop_all
from tests.support.waiting import wait_for

STORE = {**TINY_STORE, "timer_max_delay_seconds": 3600}
RESTART_WAIT_S = 20  # the timer that waits across a stop of every member
WAIT_S = 10  # timers are due this long after the sends: the leader is killed right after the sends


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def timer_progress(node) -> dict:
    return json.loads((node.spec.data_dir / "config" / "timerProgress.json").read_text())


def assert_delivered_as_sent(got: list, sent: dict) -> None:
    for m in got:
        deliver_ms, i = sent[m.uniq_key]
        assert int(m.properties["TIMER_DELIVER_MS"]) == deliver_ms
        # never before its time: the delivering leader stamps the new record with its clock, which read at least
        # the delivery time when it re-put the message
        assert m.store_timestamp >= deliver_ms, f"{m.uniq_key} delivered before its time"
        assert int(m.properties["TIMER_DEQUEUE_MS"]) >= deliver_ms
        assert m.properties["KEYS"] == f"k{i}" and m.properties["TAGS"] == "timer" and m.properties["n"] == str(i)
        assert m.body == f"t{i}".encode() and m.queue_id == i % 2


def test_leader_killed_before_timers_fire_delivers_all_once_and_never_early(tmp_path):
    specs = node_specs(tmp_path, 3, store=STORE)
    nodes = start_nodes(specs)
    try:
        everyone = [n.grpc_address for n in nodes]
        with Admin(everyone) as admin:
            admin.create_topic("Tick", queues=2, message_type="DELAY")
            leader_id = admin.cluster_status().leader_id
        leader = next(n for n in nodes if n.spec.id == leader_id)
        sent: dict[str, tuple[int, int]] = {}
        base = _now_ms() + WAIT_S * 1000
        with Producer(everyone) as p:
            for i in range(30):
                # arrival order is not delivery order: later sends are due earlier
                deliver_ms = base + (29 - i) * 100
                r = p.send("Tick", f"t{i}", tags="timer", keys=f"k{i}", properties={"n": str(i)}, queue_id=i % 2,
                           deliver_at=deliver_ms)
                assert "rmq_sys_wheel_timer" in r.note and r.topic == "Tick"
                sent[r.uniq_key] = (deliver_ms, i)
        kill_ms = _now_ms()
        leader.kill()
        survivors = [n for n in nodes if n is not leader]
        got = collect([n.grpc_address for n in survivors], "Tick", set(sent), timeout=120)
        assert {m.uniq_key for m in got} == set(sent), "a timer message was lost in the failover"
        assert_delivered_as_sent(got, sent)
        delivered_after_kill = [m for m in got if m.store_timestamp > kill_ms]
        assert delivered_after_kill, "nothing was pending at the kill: the test proves nothing"
        seen: dict[str, list] = {}
        for m in got:
            seen.setdefault(m.uniq_key, []).append(m)
        for uniq, copies in seen.items():
            if len(copies) > 1:  # documented window: the dead leader's re-put committed, its progress did not
                assert min(c.store_timestamp for c in copies) <= kill_ms, f"{uniq} duplicated by the new leader"
                assert len(copies) == 2
        if min(d for d, _ in sent.values()) > kill_ms:  # the usual case: nothing was due before the kill
            assert all(len(c) == 1 for c in seen.values())
        for q in (0, 1):  # each queue is in delivery-time order (the new leader delivered them all)
            times = [int(m.properties["TIMER_DELIVER_MS"]) for m in got if m.queue_id == q]
            assert times == sorted(times)
        count = len(got)

        # a timer pending across a restart of all members (the killed one included) is delivered once, on time,
        # and nothing delivered before is delivered again
        leader.start().wait_ready()
        with Producer(everyone) as p:
            r = p.send("Tick", "t30", tags="timer", keys="k30", properties={"n": "30"}, queue_id=0,
                       deliver_at=datetime.now(UTC) + timedelta(seconds=RESTART_WAIT_S))
        for n in nodes:
            assert n.stop() == 0
        stopped_ms = _now_ms()
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_ready()
        got = collect(everyone, "Tick", {*sent, r.uniq_key}, timeout=90)
        assert len(got) == count + 1 and r.uniq_key in {m.uniq_key for m in got}
        late = next(m for m in got if m.uniq_key == r.uniq_key)
        deliver_ms = int(late.properties["TIMER_DELIVER_MS"])
        assert stopped_ms < deliver_ms, "every member was stopped only after the timer was due: proves nothing"
        assert late.store_timestamp >= deliver_ms and late.store_timestamp > stopped_ms
        wait_for(lambda: timer_progress(nodes[0]) == timer_progress(nodes[1]) == timer_progress(nodes[2]),
                 "every member's timerProgress.json agrees", timeout=30)
        assert timer_progress(nodes[0])["low"] == 31
        assert all(n.stop() == 0 for n in nodes)
        assert all(timer_progress(n)["low"] == 31 for n in nodes)  # persisted at stop on every member
    finally:
        stop_all(nodes)


def test_single_node_timers_bad_inputs_cli_metrics_and_restart(tmp_path):
    specs = node_specs(tmp_path, 1, store={**TINY_STORE, "timer_max_delay_seconds": 60})
    nodes = start_nodes(specs)
    node = nodes[0]
    try:
        addr = [node.grpc_address]
        with Admin(addr) as admin:
            admin.create_topic("Late", queues=1, message_type="DELAY")
        with Producer(addr) as p:
            with pytest.raises(InvalidArgumentError, match=r"maximum timer delay of 60 s.*timer_max_delay_seconds"):
                p.send("Late", "x", deliver_at=_now_ms() + 3_600_000)
            with pytest.raises(ValueError, match="no time zone"):
                p.send("Late", "x", deliver_at=datetime(2030, 1, 1))
            with pytest.raises(ValueError, match="milliseconds since the epoch"):
                p.send("Late", "x", deliver_at=-5)
            with pytest.raises(InvalidArgumentError, match="both delay_level and deliver_at_ms"):
                p.send("Late", "x", delay_level=1, deliver_at=_now_ms() + 1000)
            # a time in the past is stored at once, in its topic
            past = p.send("Late", "past", deliver_at=_now_ms() - 10_000)
            assert past.note == "" and past.queue_offset == 0
            waiting = p.send("Late", "soon", deliver_at=_now_ms() + 50_000)
            assert "rmq_sys_wheel_timer" in waiting.note
        # the user property route is closed: the field is the way in
        with Producer(addr) as p, pytest.raises(InvalidArgumentError, match="TIMER_DELIVER_MS"):
            p.send("Late", "x", properties={"TIMER_DELIVER_MS": str(_now_ms() + 1000)})

        # CLI: bad times are one-line usage errors; a good one is held
        for bad in (["--deliver-at", "tomorrow"], ["--deliver-at", "2030-01-01T00:00:00"],
                    ["--delay-seconds", "-3"], ["--delay-seconds", "5", "--deliver-at", "1"]):
            r = raftmq("produce", "--server", addr[0], "Late", "--body", "x", *bad)
            assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, (bad, r.stderr)
        r = raftmq("produce", "--server", addr[0], "Late", "--body", "far", "--delay-seconds", "7200")
        assert r.returncode != 0 and "maximum timer delay of 60 s" in r.stderr, r.stderr
        r = raftmq("produce", "--server", addr[0], "Late", "--body", "cli", "--delay-seconds", "1")
        assert r.returncode == 0, r.stderr

        got = collect(addr, "Late", {past.uniq_key}, timeout=30)
        wait_for(lambda: metric_sum(node, "raftmq_timer_messages_delivered") >= 1, "the CLI's 1 s timer is delivered",
                 timeout=60)
        assert metric_sum(node, "rocketmq_timing_messages") == 1  # "soon" is still waiting
        got = collect(addr, "Late", {past.uniq_key}, timeout=10)
        assert waiting.uniq_key not in {m.uniq_key for m in got}

        # a restart keeps the pending timer
        assert node.stop() == 0
        node.start().wait_ready()
        wait_for(lambda: metric_sum(node, "rocketmq_timing_messages") == 1, "the pending timer is counted after restart",
                 timeout=30)
    finally:
        stop_all(nodes)


def test_timer_progress_travels_with_catch_up_metadata(tmp_path):
    """A wiped replica gets the timer progress with the topics and offsets (snapshot install, catch-up)."""
    from raftmq.replication.applier import StoreApplier
    from raftmq.store import MessageStore, StoreConfig

    stores = []
    try:
        for name in ("a", "b"):
            st = MessageStore(StoreConfig(root_dir=str(tmp_path / name), preallocate=False,
                                          mapped_file_size_commit_log=64 * 1024))
            st.open()
            stores.append(st)
        a, b = (StoreApplier(st) for st in stores)
        a.apply_timer_progress({"low": 3, "scanned": 9, "deliveredUpTo": 1_700_000_000_000})
        meta = json.loads(json.dumps(a.export_metadata()))  # travels as JSON
        b.import_metadata(meta)
        assert stores[1].timer_progress.get() == (3, 9, 1_700_000_000_000)
        del meta["timer_progress"]  # a peer from before timer messages: progress left as it is
        b.import_metadata(meta)
        assert stores[1].timer_progress.get() == (3, 9, 1_700_000_000_000)
    finally:
        for st in stores:
            st.shutdown()
    assert json.loads((tmp_path / "b" / "config" / "timerProgress.json").read_text()) == {
        "low": 3, "scanned": 9, "deliveredUpTo": 1_700_000_000_000}

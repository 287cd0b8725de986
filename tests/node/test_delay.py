"""Delayed messages end to end: SDK/CLI, a real node, a 3-member Raft group with a leader SIGKILLed while
messages wait, and restarts. Short levels ("1s 2s 3s") keep it quick.

What "on time" means here: a delivered message's store timestamp (set by the leader that re-put it) is at or after
its schedule record's store timestamp + the level's delay (strict), and within a generous bound after it."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from raftmq.client import Admin, Producer, PullConsumer
from raftmq.client.errors import InvalidArgumentError
from raftmq.replication import RaftSettings, RaftWritePath
from raftmq.replication.write_path import MemberInfo
from raftmq.store import Message, MessageStore, StoreConfig
from raftmq.store.schedule import ScheduleMessageService
from tests.support.processes import REPO_ROOT, TINY_STORE, free_ports, node_specs, start_nodes, stop_all

LEVELS = "1s 2s 3s"
DELAY_MS = {1: 1000, 2: 2000, 3: 3000}
STORE = {**TINY_STORE, "message_delay_level": LEVELS}
LATE_BOUND_MS = 30_000  # "within a tolerance after": generous, the box is shared


def _env() -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")])
    return env


def raftmq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args], capture_output=True, text=True, timeout=60,
                          env=_env(), cwd=REPO_ROOT)


def collect(servers, topic: str, want: set[str], timeout: float = 60.0) -> list:
    """Every message of ``topic`` from the first offset until all uniq keys in ``want`` were seen (or timeout)."""
    got: list = []
    deadline = time.monotonic() + timeout
    with PullConsumer("delay-checker", topic, servers, start_from="first", auto_commit=False) as c:
        while time.monotonic() < deadline and not want <= {m.uniq_key for m in got}:
            got += c.poll(timeout=0.5)
        got += c.poll(timeout=0.3)
    return got


def schedule_records(admin: Admin, sent: dict) -> dict:
    """uniq key -> (schedule record store timestamp, level) from the msgIds the sends returned."""
    out = {}
    for uniq, r in sent.items():
        v = admin.view_message(r.msg_id)
        assert v.topic == "SCHEDULE_TOPIC_XXXX"
        out[uniq] = (v.store_timestamp, int(v.properties["DELAY"]))
    return out


def assert_on_time(delivered: list, sched: dict) -> None:
    for m in delivered:
        ts, level = sched[m.uniq_key]
        assert m.store_timestamp >= ts + DELAY_MS[level], f"{m.uniq_key} delivered before its time"
        assert m.store_timestamp < ts + DELAY_MS[level] + LATE_BOUND_MS, f"{m.uniq_key} delivered far too late"
        assert m.properties["REAL_TOPIC"] == m.topic and int(m.properties["REAL_QID"]) == m.queue_id


def delay_offsets(node) -> dict:
    from raftmq.store import json_file

    return json_file.loads((node.spec.data_dir / "config" / "delayOffset.json").read_text())["offsetTable"]


# ------------------------------------------------------------------------------------------------ in process
def test_raft_write_path_replicates_delay_progress_and_replays_it(tmp_path):
    """RaftWritePath.update_delay_offsets goes through the log: applied, persisted, in snapshots' metadata."""
    raft, grpc_port = free_ports(2)
    members = [MemberInfo("n0", f"127.0.0.1:{raft}", f"127.0.0.1:{grpc_port}")]
    cfg = StoreConfig(root_dir=str(tmp_path / "s"), mapped_file_size_commit_log=64 * 1024,
                      message_delay_level=LEVELS, preallocate=False)
    settings = RaftSettings(raft_min_timeout=0.4, raft_max_timeout=0.8, leader_fallback_timeout=0.3,
                            append_entries_period=0.05, put_timeout_s=5.0)

    def run(check):
        st = MessageStore(cfg)
        st.open()
        wp = RaftWritePath(st, node_id="n0", members=members, settings=settings)
        wp.start()
        try:
            deadline = time.monotonic() + 20
            while not wp.is_writable():
                assert time.monotonic() < deadline
                time.sleep(0.02)
            check(st, wp)
        finally:
            wp.stop()
            st.shutdown()

    def first(st, wp):
        rs = wp.put([Message(topic="T", body=b"d%d" % i, properties={"DELAY": "1"}) for i in range(3)]).result(10)
        assert {r.topic for r in rs} == {"SCHEDULE_TOPIC_XXXX"}
        deadline = time.monotonic() + 10
        while st.max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        svc = ScheduleMessageService(st, wp.put, wp.update_delay_offsets, wp.is_writable)
        assert svc.run_once(now_ms=rs[-1].store_timestamp + 1000) == 3
        assert st.delay_offsets.all() == {1: 3}
        assert json.loads(wp.machine.applier.export_metadata()["delay_offsets"].replace("{1:", '{"1":')) \
            == {"offsetTable": {"1": 3}}

    def second(st, wp):
        assert st.delay_offsets.all() == {1: 3}  # from delayOffset.json and the replayed journal
        svc = ScheduleMessageService(st, wp.put, wp.update_delay_offsets, wp.is_writable)
        assert svc.run_once(now_ms=int(time.time() * 1000) + 10_000) == 0  # nothing delivered twice
        deadline = time.monotonic() + 10
        while st.max_offset_in_queue("T", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert st.max_offset_in_queue("T", 0) == 3

    run(first)
    run(second)


def test_delay_progress_travels_with_catch_up_metadata(tmp_path):
    """A wiped replica gets the delay progress with the topics and offsets (snapshot install, catch-up)."""
    from raftmq.replication.applier import StoreApplier

    stores = []
    try:
        for name in ("a", "b"):
            st = MessageStore(StoreConfig(root_dir=str(tmp_path / name), message_delay_level=LEVELS,
                                          preallocate=False, mapped_file_size_commit_log=64 * 1024))
            st.open()
            stores.append(st)
        a, b = (StoreApplier(st) for st in stores)
        a.apply_delay_offsets({1: 7, 3: 2})
        meta = json.loads(json.dumps(a.export_metadata()))  # travels as JSON
        b.import_metadata(meta)
        assert stores[1].delay_offsets.all() == {1: 7, 3: 2}
        assert (tmp_path / "b" / "config" / "delayOffset.json").read_text() == '{\n\t"offsetTable":{1:7,3:2\n\t}\n}'
        del meta["delay_offsets"]  # a peer from before delayed messages: progress left as it is
        b.import_metadata(meta)
        assert stores[1].delay_offsets.all() == {1: 7, 3: 2}
    finally:
        for st in stores:
            st.shutdown()


# ------------------------------------------------------------------------------------------------ processes
def test_single_node_delays_clamps_rejects_and_survives_restart(tmp_path):
    specs = node_specs(tmp_path, 1, store=STORE)
    nodes = start_nodes(specs)
    try:
        [n0] = nodes
        server = [n0.grpc_address]
        with Admin(server) as admin, Producer(server) as p:
            admin.create_topic("Delayed", queues=2, message_type="MIXED")  # delayed and immediate sends
            sent = {}
            for i, level in enumerate([1, 2, 3, 1, 2, 3]):
                r = p.send("Delayed", f"m{i}", queue_id=i % 2, delay_level=level)
                assert r.topic == "Delayed" and r.queue_id == i % 2 and "SCHEDULE_TOPIC_XXXX" in r.note
                assert "clamped" not in r.note
                sent[r.uniq_key] = r
            r = p.send("Delayed", "too-far", queue_id=0, delay_level=40)
            assert "delay level 40 clamped to 3" in r.note
            sent[r.uniq_key] = r
            now = p.send("Delayed", "now", queue_id=1)
            assert now.note == ""
            with pytest.raises(InvalidArgumentError, match="delay_level -1 is negative"):
                p.send("Delayed", "bad", delay_level=-1)
            sched = schedule_records(admin, sent)
            assert sched[r.uniq_key][1] == 3
            # nobody consumes the waiting room: that would hand out messages before their time
            with PullConsumer("peek", "SCHEDULE_TOPIC_XXXX", server) as peek, \
                    pytest.raises(InvalidArgumentError, match="cannot be consumed: delayed messages wait there"):
                peek.poll(timeout=1)

            # the CLI: clamping note in --json output; a negative level is a usage error
            out = raftmq("produce", "Delayed", "--body", "cli", "--delay-level", "9", "--json", "-s", server[0])
            assert out.returncode == 0, out.stderr
            cli = json.loads(out.stdout)
            assert "clamped to 3" in cli["note"]
            bad = raftmq("produce", "Delayed", "--body", "x", "--delay-level", "-2", "-s", server[0])
            assert bad.returncode == 2 and "delay-level" in bad.stderr
            sched[cli["uniq_key"]] = (admin.view_message(cli["msg_id"]).store_timestamp, 3)

            want = set(sched) | {now.uniq_key}
            got = collect(server, "Delayed", want)
            assert {m.uniq_key for m in got} == want
            assert len(got) == len(want), "no duplicates on a single node"
            assert_on_time([m for m in got if m.uniq_key != now.uniq_key], sched)

            # pending across a restart: a level-3 message sent right before a clean stop
            late = p.send("Delayed", "across-restart", queue_id=0, delay_level=3)
        assert n0.stop() == 0
        assert delay_offsets(n0) == {"1": 2, "2": 2, "3": 4}  # the late one still waits  # persisted in the fastjson shape
        n0.start().wait_ready()
        with Admin(server) as admin:
            sched[late.uniq_key] = (admin.view_message(late.msg_id).store_timestamp, 3)
        want.add(late.uniq_key)
        got = collect(server, "Delayed", want)
        assert {m.uniq_key for m in got} == want and len(got) == len(want)
        assert_on_time([m for m in got if m.uniq_key != now.uniq_key], sched)
    finally:
        stop_all(nodes)


def test_single_node_sigkill_while_messages_wait_loses_none(tmp_path):
    specs = node_specs(tmp_path, 1, store=STORE)
    nodes = start_nodes(specs)
    try:
        [n0] = nodes
        server = [n0.grpc_address]
        sent = {}
        with Admin(server) as admin, Producer(server) as p:
            admin.create_topic("Crash", queues=1, message_type="DELAY")
            for i in range(12):
                r = p.send("Crash", f"c{i}", delay_level=1 + i % 3)
                sent[r.uniq_key] = r
            sched = schedule_records(admin, sent)
        time.sleep(1.2)  # level 1 delivered (or being delivered), levels 2 and 3 still waiting
        kill_ms = int(time.time() * 1000)
        n0.kill()
        n0.start().wait_ready()
        got = collect(server, "Crash", set(sent))
        assert {m.uniq_key for m in got} == set(sent)
        assert_on_time(got, sched)
        assert any(m.store_timestamp > kill_ms for m in got)
        copies: dict[str, list] = {}
        for m in got:
            copies.setdefault(m.uniq_key, []).append(m.store_timestamp)
        for uniq, ts in copies.items():  # only the batch whose progress was not yet persisted may come twice
            assert len(ts) == 1 or (len(ts) == 2 and min(ts) <= kill_ms), (uniq, ts)
    finally:
        stop_all(nodes)


def test_leader_failover_while_messages_wait_loses_none(tmp_path):
    specs = node_specs(tmp_path, 3, store=STORE)
    nodes = start_nodes(specs)
    try:
        everyone = [n.grpc_address for n in nodes]
        with Admin(everyone) as admin:
            admin.create_topic("Fail", queues=2, message_type="DELAY")
            leader_id = admin.cluster_status().leader_id
        leader = next(n for n in nodes if n.spec.id == leader_id)
        sent = {}
        with Producer(everyone) as p:
            for i in range(30):
                r = p.send("Fail", f"f{i}", queue_id=i % 2, delay_level=1 + i % 3)
                sent[r.uniq_key] = r
        with Admin(everyone) as admin:
            sched = schedule_records(admin, sent)
        # let the leader deliver some (level 1 is due after 1 s), with levels 2 and 3 still waiting
        time.sleep(1.2)
        kill_ms = int(time.time() * 1000)
        leader.kill()
        survivors = [n for n in nodes if n is not leader]
        got = collect([n.grpc_address for n in survivors], "Fail", set(sent), timeout=90)
        assert {m.uniq_key for m in got} == set(sent), "a delayed message was lost in the failover"
        assert_on_time(got, sched)
        assert any(m.store_timestamp > kill_ms for m in got), "nothing was pending at the kill: test proves nothing"
        seen: dict[str, list] = {}
        for m in got:
            seen.setdefault(m.uniq_key, []).append(m)
        for uniq, copies in seen.items():
            if len(copies) > 1:  # documented window: the dead leader's re-put committed, its progress did not
                assert min(c.store_timestamp for c in copies) <= kill_ms, f"{uniq} duplicated by the new leader"
                assert len(copies) == 2
        count = len(got)

        # everything survives a restart of all members (the killed one included); nothing is delivered again
        leader.start().wait_ready()
        for n in nodes:
            assert n.stop() == 0
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_ready()
        time.sleep(1.0)  # delivery passes run every 100 ms: a replay would re-deliver now
        got = collect(everyone, "Fail", set(sent), timeout=60)
        assert {m.uniq_key for m in got} == set(sent) and len(got) == count
        offsets = [delay_offsets(n) for n in nodes]
        assert offsets[0] == offsets[1] == offsets[2] == {"1": 10, "2": 10, "3": 10}
    finally:
        stop_all(nodes)


def test_restored_progress_past_the_queue_end_is_corrected_and_later_messages_arrive(tmp_path):
    """delayOffset.json ahead of the schedule queues (a store restored from an older backup with a newer progress
    file, or an edited one): the node corrects it to the queues' max offsets (RocketMQ's correctDelayOffset), logs
    it, and delayed messages sent afterwards are delivered rather than skipped."""
    nodes = start_nodes(node_specs(tmp_path, 1, store=STORE))
    try:
        [n0] = nodes
        server = [n0.grpc_address]
        with Admin(server) as admin, Producer(server) as p:
            admin.create_topic("Restored", queues=1, message_type="DELAY")
            first = {p.send("Restored", f"m{i}", queue_id=0, delay_level=1).uniq_key for i in range(2)}
        assert {m.uniq_key for m in collect(server, "Restored", first)} == first
        assert n0.stop() == 0
        assert delay_offsets(n0) == {"1": 2}
        (n0.spec.data_dir / "config" / "delayOffset.json").write_text('{\n\t"offsetTable":{1:40,2:9\n\t}\n}')
        n0.start().wait_ready()
        with Producer(server) as p:
            later = {p.send("Restored", f"later{i}", queue_id=0, delay_level=level).uniq_key
                     for i, level in enumerate((1, 2))}
        got = collect(server, "Restored", first | later)
        assert {m.uniq_key for m in got} == first | later and len(got) == 4
        assert delay_offsets(n0) == {"1": 3, "2": 1}
        logged = [line for line in n0.spec.log_path.read_text(errors="replace").splitlines()
                  if "delay level 1: delivery progress 40 is above the schedule queue's max offset" in line]
        assert len(logged) == 1 and "corrected to 2 (the queue's end at start-up)" in logged[0], logged
    finally:
        stop_all(nodes)

"""A member with no Raft state joins at once only when the group provably holds no term or vote from before its
process (replication/fresh_start.py, docs/design/fresh-start.md); otherwise it waits one election timeout.

In-process: real stores, real RaftWritePaths on pysyncobj and the real ReplicaServicer on a grpc.aio server per
member, all on loopback."""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from raftmq.replication import RaftSettings, RaftWritePath, fresh_start
from raftmq.replication.peers import Peers
from raftmq.replication.replica_service import ReplicaServicer
from raftmq.replication.write_path import MemberInfo
from raftmq.store import Message
from raftmq.store.topic_config import TopicConfig
from raftmq.v1 import replica_pb2_grpc as rpb_grpc
from tests.replication.in_process_members import running_members
from tests.replication.test_raft_single import FAST, open_store
from tests.support.processes import free_ports
from tests.support.waiting import wait_for


class _Server:
    """A member's gRPC port: a grpc.aio server on its own event loop thread (as the node runs it), serving the
    ReplicaServicer for whatever ``get()`` returns (the write path, once there is one), or nothing at all."""

    def __init__(self, get, port: int, replica_service: bool = True):
        self.port = port
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(get, replica_service), self.loop).result(10)

    async def _start(self, get, replica_service: bool) -> None:
        self.server = grpc.aio.server()
        if replica_service:
            rpb_grpc.add_ReplicaServiceServicer_to_server(ReplicaServicer(get), self.server)
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        await self.server.start()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class Group:
    """Three members, each a store and a RaftWritePath behind its own gRPC server (started like a node: the
    server first, then the write path in its own thread)."""

    def __init__(self, root: Path, **settings):
        ports = free_ports(6)
        self.members = [MemberInfo(f"n{i}", f"127.0.0.1:{ports[2 * i]}", f"127.0.0.1:{ports[2 * i + 1]}")
                        for i in range(3)]
        self.root = root
        self.settings = {**FAST, **settings}
        self.paths: dict[str, RaftWritePath | None] = {m.id: None for m in self.members}
        self.stores: dict[str, object] = {}
        self.executor = ThreadPoolExecutor(max_workers=3)
        self.servers = {m.id: _Server(lambda mid=m.id: self.paths[mid], int(m.grpc_address.rsplit(":", 1)[1]))
                        for m in self.members}

    def start(self, *ids: str) -> None:
        """Start these members' write paths at the same moment and wait until each start() has returned. On the
        group's executor threads, which live as long as the group: pysyncobj's tick thread ends with the thread
        that created it (a node starts its write path on its executor, too)."""

        def run(mid: str) -> None:
            st = self.stores[mid] = open_store(self.root / mid)
            wp = RaftWritePath(st, node_id=mid, members=self.members, settings=RaftSettings(**self.settings))
            self.paths[mid] = wp
            wp.start()

        for f in [self.executor.submit(run, mid) for mid in ids or self.paths]:
            f.result(60)

    def stop(self, mid: str) -> None:
        wp, self.paths[mid] = self.paths[mid], None
        if wp is not None:
            wp.stop()
            self.stores.pop(mid).shutdown()

    def leader(self) -> RaftWritePath:
        return wait_for(lambda: next((w for w in self.paths.values() if w is not None and w.is_writable()), None),
                        "a writable leader", timeout=30)

    def close(self) -> None:
        for mid in list(self.paths):
            self.stop(mid)
        for s in self.servers.values():
            s.stop()
        self.executor.shutdown()


@pytest.fixture
def group(tmp_path):
    g = Group(tmp_path)
    yield g
    g.close()


def _joined(caplog, how: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"joining Raft {how}")]


def test_a_new_group_started_together_joins_at_once_and_a_wiped_member_waits(group, caplog):
    caplog.set_level(logging.INFO, logger="raftmq.replication.raft_write_path")
    group.start()
    assert len(_joined(caplog, "at once")) == 3, caplog.text
    assert not _joined(caplog, "after")
    leader = group.leader()
    leader.create_topic(TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1))
    leader.put([Message(topic="T", queue_id=0, body=b"before the wipe")]).result(10)

    # a follower loses its disk: its peers joined Raft long before this process of it existed
    victim = next(mid for mid, w in group.paths.items() if w is not leader)
    group.stop(victim)
    shutil.rmtree(group.root / victim)
    caplog.clear()
    group.start(victim)
    waited = _joined(caplog, "after one election timeout")
    assert len(waited) == 1 and "joined Raft before it heard us" in waited[0], caplog.text
    assert not _joined(caplog, "at once")
    wp = group.paths[victim]
    wait_for(lambda: wp.store.commit_log_max_offset == leader.store.commit_log_max_offset, "the copy")


def test_a_member_that_kept_its_raft_state_proves_nothing_and_the_new_one_waits(group, caplog):
    """Members restarted with their journals (not fresh) hold terms and votes of their own: a wiped member waits."""
    caplog.set_level(logging.INFO, logger="raftmq.replication.raft_write_path")
    group.start()
    group.leader()
    for mid in ("n0", "n1", "n2"):
        group.stop(mid)
    shutil.rmtree(group.root / "n2")
    caplog.clear()
    group.start()
    waited = _joined(caplog, "after one election timeout")
    assert len(waited) == 1 and "restarted with its Raft state" in waited[0], caplog.text
    group.leader()


def _peers(members: list[MemberInfo]) -> Peers:
    return Peers([MemberInfo("me", "127.0.0.1:1", "127.0.0.1:1"), *members], "me")


def _answering(record: fresh_start.StartupRecord | None, replica_service: bool = True) -> tuple[_Server, MemberInfo]:
    port = free_ports(1)[0]
    server = _Server(lambda: None if record is None else SimpleNamespace(startup=record, machine=None), port,
                     replica_service)
    return server, MemberInfo(record.member_id if record else f"m{port}", "127.0.0.1:1", f"127.0.0.1:{port}")


@pytest.mark.parametrize("case", ["starting", "heard-before-raft", "joined-before-hearing", "kept-raft-state",
                                  "no-such-call", "no-answer"])
def test_the_probe_proves_or_refuses_per_answer(case):
    me = fresh_start.StartupRecord("me")
    me.set_fresh(True)
    peer = fresh_start.StartupRecord("p")
    peer.set_fresh(case != "kept-raft-state")
    servers = []
    try:
        if case == "heard-before-raft":
            peer.answer(me.incarnation)  # this member asked it before it joined Raft
        if case in ("heard-before-raft", "joined-before-hearing"):
            peer.mark_raft_started()
        server, member = _answering(None if case == "no-answer" else peer, replica_service=case != "no-such-call")
        servers.append(server)
        began = time.monotonic()
        proof = fresh_start.prove_group_younger(_peers([member]), me, began + 1.0)
        expected = {"starting": (True, True, "new too"), "heard-before-raft": (True, False, "started new after"),
                    "joined-before-hearing": (False, False, "joined Raft before it heard us"),
                    "kept-raft-state": (False, False, "restarted with its Raft state"),
                    "no-such-call": (False, False, "UNIMPLEMENTED"), "no-answer": (False, False, "UNAVAILABLE")}[case]
        assert (proof.proven, proof.all_starting) == expected[:2] and expected[2] in proof.reason, proof
        if case != "no-answer":  # an answer decides at once; only silence is waited out
            assert time.monotonic() - began < 1.0
    finally:
        for s in servers:
            s.stop()


def test_a_starting_member_records_whom_it_heard_only_until_it_joins_raft():
    record = fresh_start.StartupRecord("n0")
    assert record.answer("a") is None  # not known yet whether it is fresh: the caller answers UNAVAILABLE
    record.set_fresh(True)
    first = record.answer("a")
    assert (first.raft_started, first.fresh, first.heard_asker_before_raft) == (False, True, True)
    record.mark_raft_started()
    assert record.answer("a").heard_asker_before_raft
    late = record.answer("b")
    assert (late.raft_started, late.heard_asker_before_raft) == (True, False)
    kept = fresh_start.StartupRecord("n1")
    kept.set_fresh(False)
    assert not kept.answer("a").heard_asker_before_raft
    assert record.incarnation != fresh_start.StartupRecord("n0").incarnation  # new at every start


def test_campaign_now_elects_that_member_without_waiting_for_an_election_timeout():
    """Election timers of a minute: without campaign_now nobody stands for election within the deadline."""
    with running_members(raft_timeouts=(60.0, 120.0)) as members:
        first = members[1]
        first.campaign_now()
        wait_for(first.is_leader, "the member that campaigned to lead", timeout=30)


def test_a_retiring_member_votes_but_never_stands_for_election():
    """A member stopping gracefully (``retiring``, set by RaftWritePath.hand_off_leadership) lets the others elect
    a leader among themselves: it asks for no pre-vote and starts no election, even when told to campaign."""
    with running_members() as members:
        leader = wait_for(lambda: next((m for m in members if m.is_leader()), None), "a leader", timeout=60)
        retiring, other = [m for m in members if m is not leader]
        retiring.retiring = True
        asked, stood = retiring.pre_votes_started, retiring.elections_started
        leader.destroy()
        retiring.campaign_now()  # its election timer fired at once: without the flag it would stand first
        wait_for(other.is_leader, "the member that is not retiring to lead", timeout=60)
        assert not retiring.is_leader()
        assert (retiring.pre_votes_started, retiring.elections_started) == (asked, stood)

"""Raft messages per entry (issue 17): a leader sends each follower one append_entries for all the commands it
added in a tick, not one per command, and the commit index rides on a later message instead of one of its own,
which still reaches an idle follower.

Three in-process ReplicatedLog members on loopback sockets. The leader's tick thread is held while five commands
queue up, so they are all added in one tick: stock pysyncobj sent five append_entries to each follower there.
"""

from __future__ import annotations

import threading

from pysyncobj import FAIL_REASON, SyncObjConf

from raftmq.replication.raft_log import ReplicatedLog
from tests.support.processes import free_ports
from tests.support.tick_hold import tick_thread_held
from tests.support.waiting import wait_for


class _Machine:
    """Records what was applied; what StateMachine would do with it does not matter here."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []

    def apply_batch(self, index: int, blob: bytes):
        self.applied.append((index, blob))
        return index, None, []


class _CountingLog(ReplicatedLog):
    """Counts the append_entries messages that carry entries, and the entries in them."""

    def __init__(self, *args, **kwargs) -> None:
        self.entry_messages = 0
        self.entries_received = 0
        super().__init__(*args, **kwargs)

    def _SyncObj__onMessageReceived(self, node, message) -> None:  # noqa: N802 - pysyncobj's name
        if message.get("type") == "append_entries" and message.get("entries"):
            self.entry_messages += 1
            self.entries_received += len(message["entries"])
        super()._SyncObj__onMessageReceived(node, message)


def test_commands_added_in_one_tick_reach_each_follower_in_one_message():
    ports = free_ports(3)
    addresses = [f"127.0.0.1:{p}" for p in ports]
    members = []
    for address in addresses:
        conf = SyncObjConf(autoTick=True, raftMinTimeout=2.0, raftMaxTimeout=4.0, connectionTimeout=5.0,
                           appendEntriesPeriod=0.05,
                           appendEntriesUseBatch=False, logCompactionMinEntries=10**9, logCompactionMinTime=10**9)
        members.append(_CountingLog(address, [a for a in addresses if a != address], conf, machine=_Machine()))
    try:
        leader = wait_for(lambda: next((m for m in members if m.is_leader()), None), what="a leader", timeout=60)
        followers = [m for m in members if m is not leader]
        done = threading.Event()
        leader.apply_batch(b"warm-up", callback=lambda res, err: done.set())
        assert done.wait(30), "the warm-up command was not committed"
        # a majority is the leader and one follower: wait until the other one has every entry too
        wait_for(lambda: all(f.last_log_index() == leader.last_log_index() for f in followers),
                 what="both followers hold the leader's log", timeout=30)
        before = [(f.entry_messages, f.entries_received) for f in followers]

        outcomes: list[int] = []
        all_done = threading.Event()

        def on_done(res, err) -> None:
            outcomes.append(err)
            if len(outcomes) == 5:
                all_done.set()

        with tick_thread_held(leader):  # five commands queue up while the leader's tick thread waits
            for i in range(5):
                leader.apply_batch(f"command {i}".encode(), callback=on_done)
        assert all_done.wait(30), "the five commands were not committed"
        assert outcomes == [FAIL_REASON.SUCCESS] * 5

        last = leader.last_log_index()
        for f, (messages, entries) in zip(followers, before, strict=True):
            # the commit of the five reaches an idle follower without a further command
            wait_for(lambda f=f: f.raftCommitIndex >= last and f.raftLastApplied >= last,
                     what="an idle follower learns the commit index and applies", timeout=30)
            assert f.entries_received - entries == 5
            assert f.entry_messages - messages == 1, (
                f"{f.entry_messages - messages} append_entries carried the five commands added in one tick")
            assert [b for _, b in f._machine.applied[-5:]] == [f"command {i}".encode() for i in range(5)]
    finally:
        for m in members:
            m.destroy()

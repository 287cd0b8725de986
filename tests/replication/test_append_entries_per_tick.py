"""Raft messages per entry (issue 17): a leader sends each follower one append_entries for all the commands it
added in a tick, not one per command, and the commit index rides on a later message instead of one of its own,
which still reaches an idle follower.

Three in-process ReplicatedLog members on loopback sockets. The leader's tick thread is held while five commands
queue up, so they are all added in one tick: stock pysyncobj sent five append_entries to each follower there.
"""

from __future__ import annotations

from pysyncobj import FAIL_REASON

from raftmq.replication.raft_log import ReplicatedLog
from tests.replication.in_process_members import Outcomes, commit_everywhere, leader_of, running_members
from tests.support.tick_hold import tick_thread_held
from tests.support.waiting import wait_for


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
    with running_members(_CountingLog) as members:
        leader = leader_of(members)
        followers = [m for m in members if m is not leader]
        # warm-up; a majority is the leader and one follower, so this also waits until the other has every entry
        commit_everywhere(members, leader, 1)
        before = [(f.entry_messages, f.entries_received) for f in followers]

        outcomes = Outcomes(5)
        with tick_thread_held(leader):  # five commands queue up while the leader's tick thread waits
            for i in range(5):
                leader.apply_batch(f"command {i}".encode(), callback=outcomes)
        assert outcomes.wait(30), "the five commands were not committed"
        assert outcomes.errors == [FAIL_REASON.SUCCESS] * 5

        last = leader.last_log_index()
        for f, (messages, entries) in zip(followers, before, strict=True):
            # the commit of the five reaches an idle follower without a further command
            wait_for(lambda f=f: f.raftCommitIndex >= last and f.raftLastApplied >= last,
                     what="an idle follower learns the commit index and applies", timeout=30)
            assert f.entries_received - entries == 5
            assert f.entry_messages - messages == 1, (
                f"{f.entry_messages - messages} append_entries carried the five commands added in one tick")
            assert [b for _, b in f._machine.applied[-5:]] == [f"command {i}".encode() for i in range(5)]

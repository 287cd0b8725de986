"""``sync`` durability without a round trip per batch: a follower syncs its Raft journal before it acknowledges
entries, and says so in the acknowledgement, so the leader knows a commit is already durable on the followers
that made it (replication.raft_log, durable acks; the cluster-level proof is tests/replication/
test_sync_durability.py and the kill-all tests of test_raft_cluster.py).

Three in-process ReplicatedLog members on loopback sockets, each with a journal file.
"""

from __future__ import annotations

import os

import pytest

from raftmq.replication import raft_log
from raftmq.replication.raft_log import DURABLE_KEY, ReplicatedLog
from tests.replication.in_process_members import commit_everywhere, leader_of, running_members
from tests.support.waiting import wait_for


class _WatchedLog(ReplicatedLog):
    """Records, for every acknowledgement it sends, how far its journal had been synced at that moment."""

    def __init__(self, *args, **kwargs) -> None:
        self.flushed_up_to = 0
        self.acks: list[tuple[dict, int]] = []
        super().__init__(*args, **kwargs)
        transport = self._SyncObj__transport
        send = transport.send

        def watched_send(node, message):
            if message.get("type") == "next_node_idx" and message.get("success"):
                self.acks.append((dict(message), self.flushed_up_to))
            return send(node, message)

        transport.send = watched_send

    def flush_journal(self) -> None:
        index = self._SyncObj__getCurrentLogIndex()
        super().flush_journal()
        self.flushed_up_to = index


@pytest.mark.parametrize("durable", [True, False], ids=["sync", "async"])
def test_followers_acknowledge_only_entries_their_journal_holds_on_disk(tmp_path, monkeypatch, durable):
    synced_files: set[int] = set()  # inodes fdatasynced by flush_journal
    real_sync = raft_log.sync_fd

    def recording_sync(fd: int) -> None:
        synced_files.add(os.fstat(fd).st_ino)
        real_sync(fd)

    monkeypatch.setattr(raft_log, "sync_fd", recording_sync)
    with running_members(_WatchedLog, tmp_path, durable_acks=durable) as members:
        leader = leader_of(members)
        followers = [m for m in members if m is not leader]
        last = commit_everywhere(members, leader, 20)
        wait_for(lambda: leader.peers_ack_durably() is durable, what=f"the leader seeing durable acks={durable}",
                 timeout=30)
        # the leader synced what it sent, in its term, right after sending it (RaftWritePath.sync_local's fast path)
        if durable:
            assert leader.journal_synced == (last, leader.raftCurrentTerm)
            assert os.stat(tmp_path / f"m{members.index(leader)}.journal").st_ino in synced_files
        else:
            assert leader.journal_synced == (0, -1)
        for f in followers:
            acks = [(m, flushed) for m, flushed in f.acks if m["next_node_idx"] - 1 > 0]
            assert acks, "no acknowledgement was sent"
            if durable:
                late = [(m["next_node_idx"] - 1, flushed) for m, flushed in acks if flushed < m["next_node_idx"] - 1]
                assert not late, f"acknowledged entries beyond the synced journal: (acked, synced) {late[:3]}"
                assert all(m.get(DURABLE_KEY) for m, _ in acks)
                journal = tmp_path / f"m{members.index(f)}.journal"
                assert os.stat(journal).st_ino in synced_files, "the follower's own journal file was never synced"
            else:
                assert not any(m.get(DURABLE_KEY) for m, _ in acks)


def test_a_journal_the_disk_refuses_to_sync_is_never_claimed_durable(tmp_path, monkeypatch):
    """A failed sync still lets Raft commit, but no acknowledgement says durable and the leader records nothing
    synced, so sync_local and the SyncJournal round decide (and fail the write if the disk keeps refusing)."""
    def failing_sync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(raft_log, "sync_fd", failing_sync)
    with running_members(_WatchedLog, tmp_path, durable_acks=True) as members:
        leader = leader_of(members)
        followers = [m for m in members if m is not leader]
        commit_everywhere(members, leader, 5)
        assert not leader.peers_ack_durably()
        assert leader.journal_synced == (0, -1)
        for f in followers:
            acks = [m for m, _ in f.acks if m["next_node_idx"] - 1 > 0]
            assert acks and not any(m.get(DURABLE_KEY) for m in acks)

"""ReplicatedLog: the pysyncobj SyncObj subclass. It holds no state of its own; every replicated function hands
the command to the StateMachine (the store beside it), on every replica, in Raft log order, on the tick thread.

Why so thin: pysyncobj snapshots a SyncObj's attributes; ours has none worth snapshotting (a custom serializer
writes the tiny dump instead), and keeping the logic in StateMachine keeps it testable without a cluster.
"""

from __future__ import annotations

import time
from typing import Any

from pysyncobj import SyncObj, SyncObjConf, replicated


class ReplicatedLog(SyncObj):
    def __init__(self, self_address: str, peer_addresses: list[str], conf: SyncObjConf, machine: Any):
        self._machine = machine  # set before SyncObj.__init__ so pysyncobj never treats it as replicated state
        self.leader_heard_at = 0.0  # time.monotonic() of the last append_entries from a current leader
        self.resent_applied_entries = 0  # entries a leader re-sent that this member had applied (metrics)
        super().__init__(self_address, peer_addresses, conf)

    # pysyncobj binds its message handler by this (mangled) name in SyncObj.__init__, so this override sees every
    # message from a peer first; it runs on the tick thread, like the original.
    def _SyncObj__onMessageReceived(self, node: Any, message: dict) -> None:  # noqa: N802
        if message.get("type") == "append_entries" and message.get("term", -1) >= self.raftCurrentTerm:
            self.leader_heard_at = time.monotonic()
            if "prevLogIdx" in message and "transmission" not in message:
                message = self._skip_applied_entries(message)
        SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _skip_applied_entries(self, message: dict) -> dict:
        """Drop the part of an append_entries that re-sends entries this member already applied, when they match.

        Why: pysyncobj truncates the follower's log after ``prevLogIdx`` whenever the follower has more entries,
        even matching ones (Raft truncates only on a conflict), and then logs CRITICAL "truncating already-applied
        log entries ... state machine may have diverged". Leaders re-send ranges routinely (a follower stalled for a
        moment, a reconnect, a next-index reset), so the alarm fired with no fault at all.

        Why this is safe: an applied entry is committed, and by Raft's log-matching and leader-completeness
        properties the leader holds the very same entries up to our last applied index. If every re-sent entry at
        or below ``lastApplied`` has the term ours has at that index (same index and term = same entry), the
        message is equivalent to one with ``prevLogIdx = lastApplied`` carrying only the entries after it; that is
        what pysyncobj gets, so it never truncates an applied entry. A re-sent entry whose term differs from
        the applied one is a real divergence: the message is left alone and pysyncobj's CRITICAL stands.
        """
        applied = self.raftLastApplied
        prev = message["prevLogIdx"]
        if prev >= applied:
            return message  # nothing applied is touched
        ours = self._SyncObj__getEntries(prev, applied - prev + 1)
        if len(ours) != applied - prev + 1 or ours[0][1] != prev or ours[0][2] != message["prevLogTerm"]:
            return message  # compacted away, or a conflict at prevLogIdx: pysyncobj's own handling applies
        term_at = {e[1]: e[2] for e in ours}
        entries = message.get("entries") or []
        for entry in entries:
            if entry[1] > applied:
                break
            if term_at.get(entry[1]) != entry[2]:
                return message  # differs from an applied entry: a real conflict, keep pysyncobj's alarm
        kept = [e for e in entries if e[1] > applied]
        self.resent_applied_entries += len(entries) - len(kept)
        return {**message, "prevLogIdx": applied, "prevLogTerm": term_at[applied], "entries": kept}

    @replicated
    def apply_batch(self, blob: bytes) -> Any:
        return self._machine.apply_batch(self.raftLastApplied + 1, blob)

    @replicated
    def apply_meta(self, kind: str, payload: bytes) -> Any:
        return self._machine.apply_meta(self.raftLastApplied + 1, kind, payload)

    # pysyncobj internals we need, behind names that say what they are ----------------------------------
    def entry_term(self, index: int) -> int | None:
        """Term of log entry ``index`` if it is still in the (uncompacted) log."""
        entries = self._SyncObj__getEntries(index, 1)
        if not entries or entries[0][1] != index:
            return None
        return entries[0][2]

    def last_log_index(self) -> int:
        return self._SyncObj__getCurrentLogIndex()

    def flush_journal(self) -> None:
        """msync the journal mmap (pysyncobj never does outside destroy)."""
        journal = self._SyncObj__raftLog
        if hasattr(journal, "flush"):
            journal.flush()

    def leader_address(self) -> str | None:
        node = self._getLeader()
        return node.address if node is not None else None

    def is_leader(self) -> bool:
        return self._isLeader()

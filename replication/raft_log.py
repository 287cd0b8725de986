"""ReplicatedLog: the pysyncobj SyncObj subclass. It holds no state of its own; every replicated function hands
the command to the StateMachine (the store beside it), on every replica, in Raft log order, on the tick thread.

Why so thin: pysyncobj snapshots a SyncObj's attributes; ours has none worth snapshotting (a custom serializer
writes the tiny dump instead), and keeping the logic in StateMachine keeps it testable without a cluster.
"""

from __future__ import annotations

from typing import Any

from pysyncobj import SyncObj, SyncObjConf, replicated


class ReplicatedLog(SyncObj):
    def __init__(self, self_address: str, peer_addresses: list[str], conf: SyncObjConf, machine: Any):
        self._machine = machine  # set before SyncObj.__init__ so pysyncobj never treats it as replicated state
        super().__init__(self_address, peer_addresses, conf)

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

"""Three in-process ReplicatedLog members on loopback sockets: tests of the Raft layer without node processes."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pysyncobj import FAIL_REASON, SyncObjConf

from raftmq.replication.raft_log import ReplicatedLog
from tests.support.processes import free_ports
from tests.support.waiting import wait_for


class RecordingMachine:
    """Records what was applied; what StateMachine would do with it does not matter here."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []

    def apply_batch(self, index: int, blob: bytes):
        self.applied.append((index, blob))
        return index, None, []

    def applied_index(self) -> int:
        return self.applied[-1][0] if self.applied else 0

    def rewind(self, index: int) -> None:
        self.applied = [a for a in self.applied if a[0] <= index]


@contextlib.contextmanager
def running_members(log_class: type[ReplicatedLog] = ReplicatedLog, journal_dir: Path | None = None,
                    raft_timeouts: tuple[float, float] = (2.0, 4.0), **log_kwargs: Any) -> Iterator[list[Any]]:
    """Three members of ``log_class`` (journals ``m<i>.journal`` in ``journal_dir``, else in memory), destroyed on
    leaving. Election timers fire after ``raft_timeouts`` (2-4 s), compaction never runs."""
    addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
    members: list[Any] = []
    try:
        for i, address in enumerate(addresses):
            conf = SyncObjConf(autoTick=True, raftMinTimeout=raft_timeouts[0], raftMaxTimeout=raft_timeouts[1],
                               connectionTimeout=max(5.0, raft_timeouts[1]),
                               appendEntriesPeriod=0.05, appendEntriesUseBatch=False,
                               journalFile=None if journal_dir is None else str(journal_dir / f"m{i}.journal"),
                               logCompactionMinEntries=10**9, logCompactionMinTime=10**9)
            members.append(log_class(address, [a for a in addresses if a != address], conf,
                                     machine=RecordingMachine(), **log_kwargs))
        yield members
    finally:
        for m in members:
            m.destroy()


def leader_of(members: list[Any]) -> Any:
    return wait_for(lambda: next((m for m in members if m.is_leader()), None), what="a leader", timeout=60)


class Outcomes:
    """The callback of ``count`` proposed commands: collects their outcomes (pysyncobj FAIL_REASON values)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.errors: list[int] = []
        self._all = threading.Event()

    def __call__(self, result: Any, error: int) -> None:
        self.errors.append(error)
        if len(self.errors) == self.count:
            self._all.set()

    def wait(self, timeout: float = 30.0) -> bool:
        """True once every command's outcome arrived."""
        return self._all.wait(timeout)


def commit_everywhere(members: list[Any], leader: Any, count: int) -> int:
    """Propose ``count`` commands on ``leader``; once all committed and every member holds them, the last index."""
    outcomes = Outcomes(count)
    for i in range(count):
        leader.apply_batch(f"command {i}".encode(), callback=outcomes)
    assert outcomes.wait(30), "the commands were not committed"
    assert outcomes.errors == [FAIL_REASON.SUCCESS] * count
    last = leader.last_log_index()
    wait_for(lambda: all(m.last_log_index() == last for m in members), what="every member holds the log", timeout=30)
    return last

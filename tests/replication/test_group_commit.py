"""GroupCommitter: coalescing, per-caller results, back-pressure, stop."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from raftmq.replication.errors import BusyError, WritePathStoppedError
from raftmq.replication.group_commit import GroupCommitter


@dataclass
class Msg:
    topic: str
    body: bytes
    properties: dict = field(default_factory=dict)


def test_concurrent_puts_are_coalesced_and_each_caller_gets_its_own_results():
    batches: list[int] = []
    gate = threading.Event()

    def commit(batch):
        gate.wait(5)  # hold the first batch so the rest pile up behind it
        batches.append(len(batch))
        for p in batch:
            p.resolve([m.body for m in p.msgs])

    gc = GroupCommitter(commit, name="t", linger_s=0.001)
    gc.start()
    try:
        futs = [gc.submit([Msg("T", f"{i}-{j}".encode()) for j in range(3)]) for i in range(50)]
        gate.set()
        for i, f in enumerate(futs):
            assert f.result(5) == [f"{i}-{j}".encode() for j in range(3)]
        assert sum(batches) == 50
        assert len(batches) < 50  # at least some puts shared a batch
    finally:
        gc.stop()


def test_batches_respect_the_byte_bound():
    sizes: list[int] = []
    gate = threading.Event()

    def commit(batch):
        gate.wait(5)
        sizes.append(sum(p.nbytes for p in batch))
        for p in batch:
            p.resolve([])

    gc = GroupCommitter(commit, name="t", max_batch_bytes=10_000, linger_s=0.001)
    gc.start()
    try:
        futs = [gc.submit([Msg("T", b"x" * 3000)]) for _ in range(20)]
        gate.set()
        for f in futs:
            f.result(5)
        assert all(s <= 10_000 for s in sizes)
    finally:
        gc.stop()


def test_overload_fails_fast_with_busy_and_stop_fails_the_rest():
    gate = threading.Event()

    def commit(batch):
        gate.wait(5)
        for p in batch:
            p.resolve([])

    gc = GroupCommitter(commit, name="t", max_pending_puts=5, max_batch_msgs=1)
    gc.start()
    try:
        futs = [gc.submit([Msg("T", b"x")]) for _ in range(20)]
        busy = [f for f in futs if f.done() and isinstance(f.exception(), BusyError)]
        assert busy, "puts beyond the queue bound must fail with BusyError"
        assert "back off" in str(busy[0].exception())
    finally:
        gate.set()
        gc.stop()
    for f in futs:
        assert f.done()
    with pytest.raises(WritePathStoppedError):
        gc.submit([Msg("T", b"x")]).result(1)


def test_an_exception_in_commit_fails_that_batch_only():
    calls = []

    def commit(batch):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("disk gone")
        for p in batch:
            p.resolve(["ok"])

    gc = GroupCommitter(commit, name="t")
    gc.start()
    try:
        with pytest.raises(OSError):
            gc.submit([Msg("T", b"a")]).result(5)
        assert gc.submit([Msg("T", b"b")]).result(5) == ["ok"]
    finally:
        gc.stop()

"""StoreApplier: the one place that turns write-path commands into store calls.

Why one place: the single-node path and every Raft replica must apply the same command the same way (contract 1),
so encoding (leader only) and applying (everywhere) live together here and nowhere else.
"""

from __future__ import annotations

import logging
from typing import Any

from replication.group_commit import PendingPut

log = logging.getLogger(__name__)


class StoreApplier:
    """Wraps a store.MessageStore for the write path."""

    def __init__(self, store: Any):
        self.store = store

    # ------------------------------------------------------------------ messages
    def encode_isolating(self, batch: list[PendingPut], now_ms: int) -> tuple[bytes, list[PendingPut]] | None:
        """Encode every put of ``batch`` into one store batch.

        A put with invalid messages fails alone (its future gets the store's MessageIllegalError); the others
        are encoded together. Returns (blob, puts in blob order) or None when nothing is left.
        """
        from store.errors import StoreError

        msgs = [m for p in batch for m in p.msgs]
        try:
            return self.store.encode_batch(msgs, store_timestamp=now_ms), batch
        except StoreError:
            pass
        good: list[PendingPut] = []
        for p in batch:
            try:
                self.store.encode_batch(p.msgs, store_timestamp=now_ms)
                good.append(p)
            except StoreError as e:
                p.fail(e)
        if not good:
            return None
        return self.store.encode_batch([m for p in good for m in p.msgs], store_timestamp=now_ms), good

    def apply_batch(self, blob: bytes) -> list[Any]:
        return self.store.apply_batch(blob)

    def wait_durable(self, results: list[Any]) -> None:
        """In SYNC flush mode, return once the commit log is on disk up to the end of ``results``."""
        if not results or not self.store.config.sync_flush:
            return
        last = results[-1]
        self.store.wait_flushed(last.physical_offset + last.wrote_bytes)

    @staticmethod
    def resolve(puts: list[PendingPut], results: list[Any]) -> None:
        """Give each put its own slice of the batch's results (same order as encoded)."""
        i = 0
        for p in puts:
            n = len(p.msgs)
            p.resolve(results[i:i + n])
            i += n

    # ------------------------------------------------------------------ metadata
    def apply_topic(self, op: str, arg: Any) -> None:
        topics = self.store.topics
        if op == "create":
            topics.create(arg)
        elif op == "update":
            topics.update(arg)
        elif op == "delete":
            topics.delete(arg)
            self.store.delete_topic_files(arg)
        else:
            raise ValueError(f"unknown topic operation {op!r}")

    def apply_offsets(self, commits: list[tuple[str, str, dict[int, int]]]) -> None:
        table = self.store.consumer_offsets
        for group, topic, offsets in commits:
            for qid, off in offsets.items():
                table.commit(group, topic, int(qid), int(off))

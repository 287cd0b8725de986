"""SHA-256 of a consume queue's raw units over a range of queue offsets: what
``ReplicaService.ChecksumConsumeQueues`` answers, so ``raftmq cluster check`` can compare the queues each member
dispatched as well as its commit log. Units below the dispatched end never change, so they are read without a
lock, straight from the mapping (a view per file, released at once: retention can still unmap the file)."""

from __future__ import annotations

import hashlib

from raftmq.store.config import CQ_STORE_UNIT_SIZE
from raftmq.store.consume_queue import ConsumeQueue
from raftmq.store.errors import StoreError


def digest_consume_queue(cq: ConsumeQueue, start: int, stop: int) -> bytes:
    """SHA-256 of the 20-byte units [start, stop) of ``cq``; the caller checked the range is dispatched."""
    h = hashlib.sha256()
    index = start
    while index < stop:
        view = cq.get_index_buffer(index)
        if view is None:
            raise StoreError(f"consume queue {cq.topic}/{cq.queue_id} unreadable at queue offset {index} "
                             "(deleted by retention meanwhile?)")
        try:
            n = min(len(view) // CQ_STORE_UNIT_SIZE, stop - index)
            h.update(view[: n * CQ_STORE_UNIT_SIZE])
        finally:
            view.release()
        if n <= 0:
            raise StoreError(f"consume queue {cq.topic}/{cq.queue_id} has a partial unit at queue offset {index}")
        index += n
    return h.digest()

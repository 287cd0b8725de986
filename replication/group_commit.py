"""Group commit: coalesce concurrent puts into one batch, so the per-append cost (a store append, a Raft round,
an fsync) is paid per batch, not per message. Batching, not threads, is how Python gets throughput here.

One committer thread takes the first waiting put, keeps taking more until the batch reaches ``max_batch_bytes``
or no new put arrived within ``linger_s``, and hands the batch to ``commit_fn``. ``should_linger`` lets the owner
linger only while earlier batches are still in flight: an idle pipeline sends a lone put at once. ``commit_fn`` owns resolving the
futures (synchronously for a local store, from Raft callbacks when replicated). A bounded queue (bytes and puts)
turns overload into BusyError instead of unbounded memory.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from raftmq.replication.errors import BusyError, WritePathStoppedError
from raftmq.store.thread_name import name_native_thread

log = logging.getLogger(__name__)

# Record overhead besides body and properties (header, hosts, topic): RocketMQ's fixed part is 91 bytes (v4).
_RECORD_OVERHEAD = 128


def estimate_size(msg: Any) -> int:
    """Encoded size estimate of one message, cheap enough to compute per put."""
    n = len(msg.body or b"") + len(msg.topic) + _RECORD_OVERHEAD
    props = getattr(msg, "properties", None)
    if props:
        for k, v in props.items():
            n += len(k) + len(v) + 2
    return n


class PendingPut:
    """One caller's messages and the future it waits on.

    ``on_end(results or exception)``, when set, runs just before the future settles, on the thread that settles
    it: the de-duplicator's bookkeeping of the ids the put registered (replication/deduplicator.py). Cheaper than
    a done-callback per put, and it runs before the caller wakes, so a caller's retry never finds them stale."""

    __slots__ = ("msgs", "future", "nbytes", "enqueued_at", "on_end")

    def __init__(self, msgs: list[Any], nbytes: int):
        self.msgs = msgs
        self.future: Future = Future()
        self.nbytes = nbytes
        self.enqueued_at = time.monotonic()
        self.on_end: Callable[[Any], None] | None = None

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            if self.on_end is not None:
                self.on_end(exc)
            self.future.set_exception(exc)

    def resolve(self, results: list[Any]) -> None:
        if not self.future.done():
            if self.on_end is not None:
                self.on_end(results)
            self.future.set_result(results)


class GroupCommitter:
    """Queue + committer thread; see the module docstring."""

    def __init__(self, commit_fn: Callable[[list[PendingPut]], None], *, name: str,
                 max_batch_bytes: int = 256 * 1024, max_batch_msgs: int = 4096, linger_s: float = 0.001,
                 max_pending_bytes: int = 64 * 1024 * 1024, max_pending_puts: int = 20_000,
                 should_linger: Callable[[], bool] | None = None, size_of: Callable[[Any], int] = estimate_size):
        """``size_of(item)``: the bytes an item of a put counts for (default: an encoded message's)."""
        self._commit_fn = commit_fn
        self._size_of = size_of
        self._should_linger = should_linger or (lambda: True)
        self._name = name
        self.max_batch_bytes = max_batch_bytes
        self.max_batch_msgs = max_batch_msgs
        self.linger_s = linger_s
        self.max_pending_bytes = max_pending_bytes
        self.max_pending_puts = max_pending_puts
        self._queue: collections.deque[PendingPut] = collections.deque()
        self._cond = threading.Condition()
        self._pending_bytes = 0
        self._running = False
        self._thread: threading.Thread | None = None
        self.batches = 0  # counters for metrics and the benchmark: one batch = one Raft entry / one store append
        self.batched_msgs = 0
        self.batched_puts = 0  # requests (puts) that shared those batches

    def start(self) -> None:
        with self._cond:
            if self._running:
                return
            self._running = True
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, exc: BaseException | None = None) -> None:
        """Stop the thread; puts still queued fail with ``exc`` (default WritePathStoppedError)."""
        with self._cond:
            self._running = False
            left = list(self._queue)
            self._queue.clear()
            self._pending_bytes = 0
            self._cond.notify_all()
        for p in left:
            p.fail(exc or WritePathStoppedError())
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        self._thread = None

    def fail_queued(self, exc: BaseException) -> None:
        """Fail every put not yet handed to commit_fn (e.g. leadership lost)."""
        with self._cond:
            left = list(self._queue)
            self._queue.clear()
            self._pending_bytes = 0
        for p in left:
            p.fail(exc)

    def idle(self) -> bool:
        """Nothing waits in the queue (a hint read without the lock; a commit may still be running)."""
        return not self._queue

    def submit(self, msgs: list[Any]) -> Future:
        return self.submit_many([msgs])[0]

    def submit_many(self, puts: list[list[Any]]) -> list[Future]:
        """Queue several independent puts at once (one lock round, one wake-up): they land in the same batch
        unless it is full. Each has its own future and fails or succeeds on its own."""
        size_of = self._size_of
        pending = [PendingPut(msgs, sum(size_of(m) for m in msgs)) for msgs in puts]
        with self._cond:
            was_empty = not self._queue
            for p in pending:
                self._enqueue(p)
            if was_empty and self._queue:
                self._cond.notify()
        return [p.future for p in pending]

    def _enqueue(self, p: PendingPut) -> None:
        """Lock held: queue one put, or fail it (stopped, or the queue is full)."""
        if not self._running:
            p.fail(WritePathStoppedError())
            return
        if self._queue and (self._pending_bytes + p.nbytes > self.max_pending_bytes
                            or len(self._queue) >= self.max_pending_puts):
            p.fail(BusyError(f"{len(self._queue)} puts / {self._pending_bytes} bytes waiting"))
            return
        self._queue.append(p)
        self._pending_bytes += p.nbytes

    def _take_batch(self) -> list[PendingPut]:
        """Block for the first put, then linger for more until the batch is full."""
        q = self._queue
        with self._cond:
            while self._running and not q:
                self._cond.wait(0.5)
            if not self._running:
                return []
            batch: list[PendingPut] = []
            nbytes = nmsgs = 0
            deadline = time.monotonic() + self.linger_s
            while True:
                while q:
                    p = q[0]
                    if batch and (nbytes + p.nbytes > self.max_batch_bytes or nmsgs + len(p.msgs) > self.max_batch_msgs):
                        break
                    q.popleft()
                    self._pending_bytes -= p.nbytes
                    batch.append(p)
                    nbytes += p.nbytes
                    nmsgs += len(p.msgs)
                if q or nbytes >= self.max_batch_bytes or nmsgs >= self.max_batch_msgs or not self._should_linger():
                    break
                left = deadline - time.monotonic()
                if left <= 0 or not self._running:
                    break
                self._cond.wait(left)
            return batch

    def _run(self) -> None:
        name_native_thread(self._name.removeprefix("raftmq-"))
        while True:
            batch = self._take_batch()
            if not batch:
                with self._cond:
                    if not self._running:
                        return
                continue
            self.batches += 1
            self.batched_msgs += sum(len(p.msgs) for p in batch)
            self.batched_puts += len(batch)
            try:
                self._commit_fn(batch)
            except BaseException as e:  # the thread must survive; every caller gets the error
                log.exception("group commit failed")
                for p in batch:
                    p.fail(e)

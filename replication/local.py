"""LocalWritePath: the single-node write path (no Raft).

Why group commit here too: concurrent producers share one ``put_messages`` call (one lock round, one copy into
the mapped file, one fsync wait in SYNC mode) instead of one each.

Why a lone put is applied in the caller's thread: when nothing is queued or being committed there is nothing to
coalesce with, and the hand-off to the committer thread and back (two thread wake-ups, two GIL hand-overs, and a
self-pipe write to wake the event loop) cost more than the append itself (~15 us of CPU for 1 KiB). Only small puts in
ASYNC flush mode that fit in the current segment, while the flush keeps up, take this path, so the caller never
waits for an fsync, a new segment file or a lagging disk, and never copies more than ``max_inline_bytes``;
everything else, and every put that arrives while a commit runs, goes to the committer.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from typing import Any

from raftmq.replication.applier import StoreApplier
from raftmq.replication.deduplicator import Deduplicator
from raftmq.replication.group_commit import GroupCommitter, PendingPut, estimate_size
from raftmq.replication.write_path import MemberInfo, raise_refusal
from raftmq.store.errors import StoreError

log = logging.getLogger(__name__)

_ROLL_MARGIN = 4096  # slack for estimate_size's error and the end-of-segment blank record


class LocalWritePath:
    """Writes straight into the local store; always the leader of a group of one."""

    # replication.write_path.WritePath's Raft side, as a group of one has it
    peers = None
    catch_up_throttle = None
    leader_changes = 0
    term_changes = 0
    leaderless_seconds = 0.0
    snapshot_installs = 0
    catch_up_bytes = 0
    snapshot_bytes_kept = 0
    durable_ack_rounds = 0

    def __init__(self, store: Any, cluster_name: str = "DefaultCluster",
                 store_host: tuple[str, int] = ("127.0.0.1", 10911), *, node_id: str = "n0",
                 grpc_address: str = "", max_batch_bytes: int = 1 << 20, linger_s: float = 0.0,
                 max_pending_bytes: int = 64 << 20, max_inline_bytes: int = 64 << 10,
                 max_inline_flush_behind: int = 32 << 20, dedup: Deduplicator | None = None):
        """``dedup``: screens puts against the de-duplication window (docs/design/deduplication.md; None: off)."""
        self._store = store
        self.dedup = dedup
        self._applier = StoreApplier(store)
        self.cluster_name = cluster_name
        self.store_host = store_host
        self._me = MemberInfo(node_id, "", grpc_address)
        self._committer = GroupCommitter(self._commit, name="raftmq-local-commit", max_batch_bytes=max_batch_bytes,
                                         linger_s=linger_s, max_pending_bytes=max_pending_bytes)
        self._commit_lock = threading.Lock()  # one commit at a time: the committer thread's or an inline one
        store_cfg = getattr(store, "config", None)
        self._inline = not getattr(store_cfg, "sync_flush", True)
        self._segment_size = getattr(store_cfg, "mapped_file_size_commit_log", 0)
        self.max_inline_bytes = max_inline_bytes
        self.max_inline_flush_behind = max_inline_flush_behind
        self.inline_commits = 0  # puts applied in the caller's thread (the rest went through the committer)
        self.inline_msgs = 0
        self.inline_puts = 0
        self._meta_lock = threading.Lock()
        self._started = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self.dedup is not None:
            self.dedup.rebuild()
        self._committer.start()
        self._started = True

    def hand_off_leadership(self) -> None:
        """A single node has no member to hand leadership to."""

    def stop(self) -> None:
        self._started = False
        self._committer.stop()

    # ------------------------------------------------------------------ writes
    def put(self, msgs: list[Any]) -> Future:
        msgs = list(msgs)
        if self._inline and self._started and self._committer.idle():
            nbytes = sum(estimate_size(m) for m in msgs)
            if (nbytes <= self.max_inline_bytes and self._fits_in_segment(nbytes) and self._disk_keeps_up()
                    and self._commit_lock.acquire(blocking=False)):
                try:
                    return self._commit_inline(PendingPut(msgs, nbytes))
                finally:
                    self._commit_lock.release()
        return self._committer.submit(msgs)

    def put_many(self, puts: list[list[Any]]) -> list[Future]:
        """Independent puts that arrived together (a stream request's sends): one store append for all of
        them, inline under the same conditions as a lone put, else through the committer as one batch."""
        if len(puts) <= 1:
            return [self.put(m) for m in puts]
        pending = [PendingPut(list(msgs), sum(estimate_size(m) for m in msgs)) for msgs in puts]
        nbytes = sum(p.nbytes for p in pending)
        if (self._inline and self._started and self._committer.idle() and nbytes <= self.max_inline_bytes
                and self._fits_in_segment(nbytes) and self._disk_keeps_up()
                and self._commit_lock.acquire(blocking=False)):
            try:
                self.inline_commits += 1
                self.inline_msgs += sum(len(p.msgs) for p in pending)
                self.inline_puts += len(pending)
                try:
                    self._apply(pending)
                except BaseException as e:
                    log.exception("inline commit failed")
                    for p in pending:
                        p.fail(e)
                return [p.future for p in pending]
            finally:
                self._commit_lock.release()
        return self._committer.submit_many([p.msgs for p in pending])

    def write_stage_seconds(self) -> dict[str, tuple[int, float]]:
        return {}  # no Raft stages: a put is a store append (raftmq_put_latency_seconds)

    def group_commit_stats(self) -> tuple[int, int, int]:
        """(store appends, messages, requests) so far: an inline commit is one append of one request."""
        c = self._committer
        return (c.batches + self.inline_commits, c.batched_msgs + self.inline_msgs,
                c.batched_puts + self.inline_puts)

    def _fits_in_segment(self, nbytes: int) -> bool:
        """The put lands in the current commit-log segment: creating the next one (a file of up to 1 GiB,
        fallocated) is left to the committer thread, never to the caller (the event loop)."""
        size = self._segment_size
        return size > 0 and self._store.commit_log_max_offset % size + nbytes + _ROLL_MARGIN < size

    def _disk_keeps_up(self) -> bool:
        """The flush is not far behind: when the disk lags, writing to the mapped file can block in the kernel
        (dirty-page throttling), and that must stall the committer thread, not the caller."""
        st = self._store
        return st.commit_log_max_offset - st.flushed_offset <= self.max_inline_flush_behind

    def _commit_inline(self, put: PendingPut) -> Future:
        """Apply a lone put now (commit lock held); its future is already resolved when returned."""
        self.inline_commits += 1
        self.inline_msgs += len(put.msgs)
        self.inline_puts += 1
        try:
            self._apply([put])
        except BaseException as e:  # same contract as the committer: the caller's future carries the error
            log.exception("inline commit failed")
            put.fail(e)
        return put.future

    def _commit(self, batch: list[PendingPut]) -> None:
        """Committer thread: store all puts as one append (one flush wait in SYNC mode)."""
        with self._commit_lock:
            self._apply(batch)

    def _apply(self, batch: list[PendingPut]) -> None:
        """``put_messages``, not the replicated encode/apply pair: nothing leaves this process, so there is no
        frame to checksum and parse again (half the CPU of a 1 KiB put). A batch with an invalid message is
        retried put by put, so only the put holding it fails."""
        store = self._store
        dedup = self.dedup
        if dedup is not None:
            batch = dedup.screen(batch, int(time.time() * 1000))
            if not batch:
                return
        msgs = batch[0].msgs if len(batch) == 1 else [m for p in batch for m in p.msgs]
        try:
            results = store.put_messages(msgs)
        except StoreError as e:
            if len(batch) == 1:
                batch[0].fail(e)
                return
            for p in batch:
                try:
                    one = store.put_messages(p.msgs)
                except StoreError as e1:
                    p.fail(e1)
                    continue
                if dedup is not None:
                    dedup.applied(dedup.keys_of([p]), one)
                p.resolve(one)
            return
        if dedup is not None:
            dedup.applied(dedup.keys_of(batch), results)
        i = 0
        for p in batch:
            n = len(p.msgs)
            p.resolve(results[i:i + n])
            i += n

    # ------------------------------------------------------------------ metadata
    def change_topics(self, ops: list[tuple[str, Any]]) -> list[str | None]:
        with self._meta_lock:
            return self._applier.apply_topics(list(ops), int(time.time() * 1000))

    def create_topic(self, cfg: Any) -> None:
        raise_refusal(self.change_topics([("create", cfg)]))

    def update_topic(self, cfg: Any) -> None:
        raise_refusal(self.change_topics([("update", cfg)]))

    def delete_topic(self, name: str) -> None:
        raise_refusal(self.change_topics([("delete", name)]))

    def commit_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Applied at once; the store persists offsets on its own schedule (as RocketMQ does)."""
        self._applier.apply_offsets([(group, topic, dict(offsets))])

    def apply_pop(self, ops: list[list]) -> list[str | None]:
        """Pop-consumption changes (store.pop_state): applied at once, persisted every second by the store (a
        crash can forget the last second of receives and acks: those messages are delivered again)."""
        with self._meta_lock:
            return self._applier.apply_pop(ops)

    def update_delay_offsets(self, offsets: dict[int, int]) -> None:
        """Schedule progress: applied and persisted at once (a restart must not deliver again)."""
        with self._meta_lock:
            self._applier.apply_delay_offsets(offsets)
            self._applier.persist_metadata()

    def update_timer_progress(self, low: int, scanned: int, delivered_up_to: int) -> None:
        """Timer progress: applied and persisted at once (a restart must not deliver again)."""
        with self._meta_lock:
            self._applier.apply_timer_progress({"low": low, "scanned": scanned, "deliveredUpTo": delivered_up_to})
            self._applier.persist_metadata()

    def update_group_config(self, group: str, cfg: Any, mark_ms: int | None = None) -> None:
        with self._meta_lock:
            op = {"op": "delete", "group": group} if cfg is None else {"op": "put", "cfg": cfg.to_json()}
            marked = {} if mark_ms is None else {"mark": int(mark_ms)}
            self._applier.apply_group_config({**op, "ts": int(time.time() * 1000), **marked})

    def end_console_session(self, session: str, until_s: int) -> None:
        with self._meta_lock:
            self._applier.apply_console_logout({"session": session, "until": int(until_s), "now": int(time.time())})
            self._applier.persist_metadata()

    def update_acl(self, cmd: dict) -> None:
        """A user / access-rule change (replication.acl_table); StoreError when refused."""
        with self._meta_lock:
            refusal = self._applier.apply_acl(cmd)
            if refusal:
                raise StoreError(refusal)
            self._applier.persist_metadata()

    def acl_table(self) -> Any:
        return self._applier.acl

    def catch_up_with_leader(self, timeout: float) -> bool:
        return True  # one member: everything acknowledged is applied here

    # ------------------------------------------------------------------ status
    def is_writable(self) -> bool:
        return self._started

    def not_ready_reason(self) -> str:
        return "" if self._started else "the write path is not started"

    def leader(self) -> MemberInfo | None:
        return self._me

    def leader_contact(self) -> tuple[MemberInfo | None, float]:
        return self._me, 0.0

    def term(self) -> int:
        return 0

    def commit_index(self) -> int:
        return 0

    def raft_applied_index(self) -> int:
        return 0

    def election_counters(self) -> dict[str, int]:
        return {}

    def members_status(self) -> list[dict]:
        st = self._store
        end = st.commit_log_max_offset
        return [{
            "id": self._me.id, "address": self._me.grpc_address, "raft_address": "", "role": "leader",
            "term": 0, "commit_index": 0, "applied_index": 0, "applied_offset": end,
            "dispatch_behind_bytes": st.dispatch_behind_bytes(), "lag": 0,
            "health": "ok" if self._started else "stopped",
        }]

    def transfer_leadership(self, to_id: str | None) -> None:
        from raftmq.replication.errors import TransferLeadershipError
        raise TransferLeadershipError("a single-node write path has no other member to hand leadership to; "
                                      "configure cluster.members to run a replicated group")

"""LocalWritePath: the single-node write path (no Raft).

Why group commit here too: concurrent producers share one ``encode_batch`` + ``apply_batch`` call (one lock
round, one copy into the mapped file, one fsync wait in SYNC mode) instead of one each.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from typing import Any

from replication.applier import StoreApplier
from replication.group_commit import GroupCommitter, PendingPut
from replication.write_path import MemberInfo

log = logging.getLogger(__name__)


class LocalWritePath:
    """Writes straight into the local store; always the leader of a group of one."""

    def __init__(self, store: Any, cluster_name: str = "DefaultCluster",
                 store_host: tuple[str, int] = ("127.0.0.1", 10911), *, node_id: str = "n0",
                 grpc_address: str = "", max_batch_bytes: int = 1 << 20, linger_s: float = 0.0,
                 max_pending_bytes: int = 64 << 20):
        self._store = store
        self._applier = StoreApplier(store)
        self.cluster_name = cluster_name
        self.store_host = store_host
        self._me = MemberInfo(node_id, "", grpc_address)
        self._committer = GroupCommitter(self._commit, name="raftmq-local-commit", max_batch_bytes=max_batch_bytes,
                                         linger_s=linger_s, max_pending_bytes=max_pending_bytes)
        self._meta_lock = threading.Lock()
        self._started = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._committer.start()
        self._started = True

    def stop(self) -> None:
        self._started = False
        self._committer.stop()

    # ------------------------------------------------------------------ writes
    def put(self, msgs: list[Any]) -> Future:
        return self._committer.submit(list(msgs))

    def _commit(self, batch: list[PendingPut]) -> None:
        """Committer thread: encode all puts as one batch, apply it, wait for the flush in SYNC mode."""
        now_ms = int(time.time() * 1000)
        groups = self._applier.encode_isolating(batch, now_ms)
        if not groups:
            return
        blob, members = groups
        results = self._applier.apply_batch(blob)
        StoreApplier.resolve(members, results, self._applier.wait_durable(results))

    # ------------------------------------------------------------------ metadata
    def create_topic(self, cfg: Any) -> None:
        with self._meta_lock:
            self._applier.apply_topic("create", cfg, int(time.time() * 1000))

    def update_topic(self, cfg: Any) -> None:
        with self._meta_lock:
            self._applier.apply_topic("update", cfg, int(time.time() * 1000))

    def delete_topic(self, name: str) -> None:
        with self._meta_lock:
            self._applier.apply_topic("delete", name, int(time.time() * 1000))

    def commit_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Applied at once; the store persists offsets on its own schedule (as RocketMQ does)."""
        self._applier.apply_offsets([(group, topic, dict(offsets))])

    def update_delay_offsets(self, offsets: dict[int, int]) -> None:
        """Schedule progress: applied and persisted at once (a restart must not deliver again)."""
        with self._meta_lock:
            self._applier.apply_delay_offsets(offsets)
            self._applier.persist_metadata()

    # ------------------------------------------------------------------ status
    def is_writable(self) -> bool:
        return self._started

    def leader(self) -> MemberInfo | None:
        return self._me

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
        from replication.errors import TransferLeadershipError
        raise TransferLeadershipError("a single-node write path has no other member to hand leadership to; "
                                      "configure cluster.members to run a replicated group")

"""StoreApplier: the one place that turns write-path commands into store calls.

Why one place: the single-node path and every Raft replica must apply the same command the same way (docs/architecture.md#contracts, 1),
so encoding (leader only) and applying (everywhere) live together here and nowhere else.
"""

from __future__ import annotations

import logging
from typing import Any

from raftmq.replication.group_commit import PendingPut

log = logging.getLogger(__name__)

NAMED_TOPIC_OPS = ("delete", "mark")  # topic operations whose argument is no config (a name; a mark's name, time)


def _mark_from_json(arg: list) -> tuple[str, int | None]:
    name, at_ms = arg
    return str(name), None if at_ms is None else int(at_ms)


class StoreApplier:
    """Wraps a store.MessageStore for the write path."""

    def __init__(self, store: Any):
        self.store = store
        import os

        from raftmq.replication.acl_table import FILE_NAME, AclTable
        from raftmq.replication.membership import MembershipFile

        root = getattr(getattr(store, "config", None), "root_dir", None)
        self.acl = AclTable(os.path.join(root, "config", FILE_NAME) if root else None)
        self.membership = MembershipFile(os.path.join(root, "config") if root else None)  # replicated groups only

    # ------------------------------------------------------------------ messages
    def encode_isolating(self, batch: list[PendingPut], now_ms: int) -> tuple[bytes, list[PendingPut]] | None:
        """Encode every put of ``batch`` into one store batch.

        A put with invalid messages fails alone (its future gets the store's MessageIllegalError); the others
        are encoded together. Returns (blob, puts in blob order) or None when nothing is left.
        """
        from raftmq.store.errors import StoreError

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

    def wait_durable(self, results: list[Any]) -> bool:
        """In SYNC flush mode, wait until the commit log is on disk up to the end of ``results``.

        False when the flush did not make it within ``sync_flush_timeout`` (reported as FLUSH_DISK_TIMEOUT)."""
        if not results or not self.store.config.sync_flush:
            return True
        last = results[-1]
        return self.store.wait_flushed(last.physical_offset + last.wrote_bytes,
                                       self.store.config.sync_flush_timeout / 1000.0)

    @staticmethod
    def resolve(puts: list[PendingPut], results: list[Any], flushed: bool = True) -> None:
        """Give each put its own slice of the batch's results (same order as encoded).

        The store's AppendResult is its PutResult; apply leaves status PUT_OK and uniq_key None, so fill those
        in from the messages the leader encoded (encode_batch set every UNIQ_KEY)."""
        from raftmq.store import PutStatus

        i = 0
        for p in puts:
            n = len(p.msgs)
            out = results[i:i + n]
            for m, r in zip(p.msgs, out, strict=True):
                r.uniq_key = m.uniq_key
                if not flushed:
                    r.status = PutStatus.FLUSH_DISK_TIMEOUT
            p.resolve(out)
            i += n

    # ------------------------------------------------------------------ metadata
    def apply_topic(self, op: str, arg: Any, timestamp_ms: int) -> None:
        """One topic change of the commands from before batched topic changes (``topic_create`` /
        ``topic_update`` / ``topic_delete`` entries still in a journal): create and update replace the topic,
        a delete of a missing topic does nothing, as they did."""
        if op in ("create", "update"):
            self.store.topics.put(arg, timestamp_ms)
        elif op == "delete":
            self.apply_topics([("delete", arg)], timestamp_ms)
        else:
            raise ValueError(f"unknown topic operation {op!r}")

    def apply_topics(self, ops: list[tuple[str, Any]], timestamp_ms: int) -> list[str | None]:
        """Topic operations as ONE change of the table (one line of its change log, one sync): ``("create",
        TopicConfig)`` (refused when the topic exists), ``("update", TopicConfig)`` (replaces it),
        ``("delete", name)`` (also drops its consume queues, offsets and pop state) or ``("mark", (name,
        at_ms or None))`` (a cluster of groups: when this group created or deleted it,
        store.topic_config.TopicMark). Returns a refusal or None per operation, the same on every replica. ``timestamp_ms`` (the leader's clock) stamps topics.json's
        dataVersion, so replicas write the same file."""
        from raftmq.store.topic_config import CREATE, DELETE, MARK, PUT

        store = self.store
        table_ops = {"create": CREATE, "update": PUT, "delete": DELETE, "mark": MARK}
        try:
            refusals = store.topics.apply([(table_ops[op], arg) for op, arg in ops], timestamp_ms)
        except KeyError as e:
            raise ValueError(f"unknown topic operation {e}") from None
        for (op, arg), refusal in zip(ops, refusals, strict=True):
            if op == "delete" and refusal is None:
                store.delete_topic_files(arg)
                if store.consumer_offsets.delete_topic(arg):
                    store.consumer_offsets.persist()
                if store.pop_state.delete_topic(arg):
                    store.pop_state.persist()
        return refusals

    def apply_offsets(self, commits: list[tuple[str, str, dict[int, int]]]) -> list[str]:
        """Apply each group's commit on its own, so one invalid commit cannot sink the others coalesced with it;
        returns the refusals (the same on every replica)."""
        from raftmq.store.errors import StoreError

        table = self.store.consumer_offsets
        refusals = []
        for group, topic, offsets in commits:
            try:
                table.commit(group, topic, {int(q): int(o) for q, o in offsets.items()})
            except StoreError as e:
                refusals.append(str(e))
        return refusals

    def apply_delay_offsets(self, offsets: dict[int, int]) -> None:
        """Schedule-service progress ({delay level: next schedule-queue offset}); persisted with the metadata."""
        self.store.delay_offsets.update({int(level): int(o) for level, o in offsets.items()})

    def apply_timer_progress(self, progress: dict) -> None:
        """Timer-delivery progress (store.timer_progress); persisted with the metadata."""
        self.store.timer_progress.update(int(progress["low"]), int(progress["scanned"]),
                                         int(progress["deliveredUpTo"]))

    def apply_pop(self, ops: list[list], index: int = 0) -> list[str | None]:
        """Pop consumption state changes (store.pop_state); one refusal or None per op, the same everywhere. Not
        persisted here: the table is written periodically and replayed from the Raft journal after a crash."""
        out = self.store.pop_state.apply(ops, index)
        if any(op[0] == "key" for op in ops):
            self.store.pop_state.persist()  # handles signed with it must stay valid across any restart
        return out

    def apply_group_config(self, cmd: dict) -> None:
        """A consumer group's settings set (``op`` "put", ``cfg`` in subscriptionGroup.json's shape) or dropped
        ("delete"); ``ts`` (the leader's clock) stamps the file's data version; ``mark`` (ms, optional) is remembered
        as when it was set or dropped. StoreError when invalid."""
        from raftmq.store.subscription_groups import SubscriptionGroup

        table = self.store.subscription_groups
        mark = cmd.get("mark")  # a cluster of several groups: when the change was made (docs/design/scale-out.md)
        if cmd["op"] == "put":
            table.put(SubscriptionGroup.from_json(cmd["cfg"]), cmd["ts"], mark)
        elif cmd["op"] == "delete":
            table.delete(str(cmd["group"]), cmd["ts"], mark)
        else:
            raise ValueError(f"unknown consumer group operation {cmd['op']!r}")

    def apply_console_logout(self, cmd: dict) -> None:
        """A web-console session ended (replication.acl_table.AclTable.end_session)."""
        self.acl.end_session(cmd)

    def apply_acl(self, cmd: dict) -> str | None:
        """A user / access-rule change (replication.acl_table); the refusal reason, or None."""
        return self.acl.apply(cmd)

    def persist_metadata(self) -> None:
        """Make replicated metadata as durable as the applied index that will record it."""
        self.acl.persist(only_if_dirty=True)
        self.membership.persist()
        self.store.consumer_offsets.persist(only_if_dirty=True)
        self.store.delay_offsets.persist(only_if_dirty=True)
        self.store.timer_progress.persist(only_if_dirty=True)

    @staticmethod
    def topic_to_dict(cfg: Any) -> dict:
        return cfg.to_json()

    @classmethod
    def topic_ops_to_json(cls, ops: list[tuple[str, Any]]) -> list[list]:
        """Topic operations as a replicated command carries them (a config as topics.json holds it)."""
        return [[op, arg if op == "delete" else list(arg) if op == "mark" else cls.topic_to_dict(arg)]
                for op, arg in ops]

    @classmethod
    def topic_ops_from_json(cls, ops: list[list]) -> list[tuple[str, Any]]:
        return [(str(op), str(arg) if op == "delete" else _mark_from_json(arg) if op == "mark"
                 else cls.topic_from_dict(arg)) for op, arg in ops]

    @staticmethod
    def topic_from_dict(d: dict) -> Any:
        from raftmq.store.topic_config import TopicConfig

        return TopicConfig.from_json(d)

    def export_metadata(self) -> dict:
        return {"topics": self.store.topics.snapshot(), "offsets": self.store.consumer_offsets.snapshot(),
                "subscription_groups": self.store.subscription_groups.snapshot(),
                "delay_offsets": self.store.delay_offsets.snapshot(),
                "timer_progress": self.store.timer_progress.snapshot(), "pop_state": self.store.pop_state.snapshot(),
                "queue_offsets": self.store.queue_offset_table(), "acl": self.acl.snapshot(),
                "acl_marks": self.acl.snapshot_marks(),
                "ended_console_sessions": self.acl.snapshot_ended_sessions(),
                "membership": self.membership.snapshot()}

    def import_metadata(self, d: dict) -> None:
        """Replace topics and offsets with a peer's (catch-up, snapshot install); drops consume queues of topics
        that no longer exist."""
        store = self.store
        before = set(store.topics.names())
        store.topics.restore(d["topics"])
        store.consumer_offsets.restore(d["offsets"])
        if "delay_offsets" in d:  # absent in snapshots of members from before delayed messages
            store.delay_offsets.restore(d["delay_offsets"])
        if "timer_progress" in d:  # absent in snapshots of members from before timer messages
            store.timer_progress.restore(d["timer_progress"])
        if "pop_state" in d:  # absent in snapshots of members from before pop consumption
            store.pop_state.restore(d["pop_state"])
        if "subscription_groups" in d:  # absent in snapshots of members from before group settings (issue 34)
            store.subscription_groups.restore(d["subscription_groups"])
        if "acl" in d:  # absent in snapshots of members from before access control
            self.acl.restore(d["acl"])
        if "acl_marks" in d:  # absent in snapshots of members from before the settings reconcile pass
            self.acl.restore_marks(d["acl_marks"])
        if "ended_console_sessions" in d:  # absent in snapshots of members from before server-side log-outs
            self.acl.restore_ended_sessions(d["ended_console_sessions"])
        self.membership.restore(d.get("membership"))  # absent (None) from members before membership records
        if "queue_offsets" in d:  # absent before catch-up from a retained-away start; see merge_queue_offsets
            store.merge_queue_offsets(d["queue_offsets"])
        for gone in before - set(store.topics.names()):
            store.delete_topic_files(gone)

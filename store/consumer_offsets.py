"""ConsumerOffsetTable: ``config/consumerOffset.json`` (``{"offsetTable":{"topic@group":{0:250,...}}}``).

Commits are frequent, so the table is persisted by the store's periodic thread and at shutdown rather
than on every commit (RocketMQ's ``flushConsumerOffsetInterval``). No clock reads inside: replicated
commits apply identically on every node.
"""

from __future__ import annotations

from typing import Any

from raftmq.store import json_file
from raftmq.store.errors import StoreError

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetTable(json_file.PersistedTable):
    """Next offset to consume per (topic, group, queue)."""

    FILE_NAME = "consumerOffset.json"
    _table: dict[str, dict[int, int]]

    def _parse(self, data: Any) -> dict[str, dict[int, int]]:
        try:
            return {k: {int(q): int(o) for q, o in v.items()} for k, v in data.get("offsetTable", {}).items()}
        except (AttributeError, TypeError, ValueError) as e:
            raise StoreError(f"{self.path} does not have the consumerOffset.json shape: {e}") from None

    @staticmethod
    def _key(group: str, topic: str) -> str:
        if not group or TOPIC_GROUP_SEPARATOR in group or TOPIC_GROUP_SEPARATOR in topic:
            raise StoreError(f"consumer group {group!r} / topic {topic!r} must be non-empty and contain no '@'")
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    # ------------------------------------------------------------------ changes
    def commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Set the next offset to consume for each queue in ``offsets``."""
        key = self._key(group, topic)
        for q, o in offsets.items():
            if not isinstance(q, int) or q < 0 or not isinstance(o, int) or o < 0:
                raise StoreError(f"offset commit for {key}: queue ids and offsets must be ints >= 0, got {q}:{o}")
        with self._lock:
            self._table.setdefault(key, {}).update(offsets)
            self._dirty = True

    def delete_group(self, group: str) -> int:
        """Forget every offset of ``group``; returns how many topic entries were removed."""
        with self._lock:
            doomed = [k for k in self._table if k.rsplit(TOPIC_GROUP_SEPARATOR, 1)[1] == group]
            for k in doomed:
                del self._table[k]
            self._dirty = self._dirty or bool(doomed)
            return len(doomed)

    def delete_topic(self, topic: str) -> int:
        with self._lock:
            doomed = [k for k in self._table if k.rsplit(TOPIC_GROUP_SEPARATOR, 1)[0] == topic]
            for k in doomed:
                del self._table[k]
            self._dirty = self._dirty or bool(doomed)
            return len(doomed)

    # ------------------------------------------------------------------ reads
    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed for that queue."""
        return self._table.get(self._key(group, topic), {}).get(queue_id, -1)

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._table.get(self._key(group, topic), {}))

    def groups(self, topic: str | None = None) -> list[str]:
        out = set()
        for k in list(self._table):
            t, g = k.rsplit(TOPIC_GROUP_SEPARATOR, 1)
            if topic is None or t == topic:
                out.add(g)
        return sorted(out)

    def topics(self, group: str) -> list[str]:
        return sorted(k.rsplit(TOPIC_GROUP_SEPARATOR, 1)[0] for k in list(self._table)
                      if k.rsplit(TOPIC_GROUP_SEPARATOR, 1)[1] == group)

    def all(self) -> dict[str, dict[int, int]]:
        with self._lock:
            return {k: dict(v) for k, v in self._table.items()}

    # ------------------------------------------------------------------ persistence / snapshots
    def to_json(self) -> dict[str, Any]:
        return {"offsetTable": {k: dict(sorted(v.items())) for k, v in sorted(list(self._table.items()))}}

"""DelayOffsetTable: ``config/delayOffset.json`` (``{"offsetTable":{1:5,2:0,...}}``, docs/design/store-formats.md#config-files).

Per delay level, the next consume-queue offset of ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` the schedule service
has not delivered yet. The table is replicated metadata (the write path applies every change on every replica), so
a new leader continues where the old one stopped. No clock reads inside: applies are identical everywhere.
"""

from __future__ import annotations

from raftmq.store import json_file
from raftmq.store.errors import StoreError


class DelayOffsetTable(json_file.PersistedTable):
    """Next schedule-queue offset to deliver, per delay level (1-based)."""

    FILE_NAME = "delayOffset.json"
    _table: dict[int, int]

    def _parse(self, data: object) -> dict[int, int]:
        try:
            table = {int(k): int(v) for k, v in data.get("offsetTable", {}).items()}  # type: ignore[union-attr]
        except (AttributeError, TypeError, ValueError) as e:
            raise StoreError(f"{self.path} does not have the delayOffset.json shape "
                             f'{{"offsetTable":{{1:0,...}}}}: {e}') from None
        return table

    # ------------------------------------------------------------------ changes / reads
    def update(self, offsets: dict[int, int]) -> None:
        """Set the next offset to deliver for each level in ``offsets``."""
        for level, offset in offsets.items():
            if type(level) is not int or level < 1 or type(offset) is not int or offset < 0:
                raise StoreError(f"delay offsets: levels must be ints >= 1 and offsets ints >= 0, "
                                 f"got {level!r}:{offset!r}")
        with self._lock:
            self._table.update(offsets)
            self._dirty = True

    def get(self, level: int) -> int:
        """The next offset to deliver for ``level`` (0 when the level never delivered anything)."""
        return self._table.get(level, 0)

    def all(self) -> dict[int, int]:
        with self._lock:
            return dict(self._table)

    # ------------------------------------------------------------------ persistence / snapshots
    def to_json(self) -> dict:
        return {"offsetTable": dict(sorted(self._table.items()))}

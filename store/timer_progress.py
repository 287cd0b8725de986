"""TimerProgress: ``config/timerProgress.json``, the replicated delivery progress of timer messages (store.timer).

Timer messages wait in ``rmq_sys_wheel_timer`` queue 0 in arrival order but are delivered in time order, so one
queue offset cannot say what was delivered. Three numbers do:

* ``low``: every unit below this queue offset was delivered;
* ``scanned``: units in ``[low, scanned)`` whose delivery time (tagsCode) is at most ``deliveredUpTo`` were
  delivered, the others there are pending;
* units at ``scanned`` and above are all pending (the delivering leader had not looked at them yet).

The table is replicated metadata (the write path applies every change on every replica), so a new leader
rebuilds exactly the pending set. No clock reads inside: applies are identical everywhere.
"""

from __future__ import annotations

from raftmq.store import json_file
from raftmq.store.errors import StoreError

FIELDS = ("low", "scanned", "deliveredUpTo")


class TimerProgressTable(json_file.PersistedTable):
    """Delivery progress of the timer queue (see the module docstring)."""

    FILE_NAME = "timerProgress.json"
    _table: dict[str, int]

    def _parse(self, data: object) -> dict[str, int]:
        try:
            table = {k: int(data[k]) for k in FIELDS if k in data}  # type: ignore[index,operator]
        except (TypeError, ValueError, KeyError) as e:
            raise StoreError(f'{self.path} does not have the timerProgress.json shape {{"low":0,"scanned":0,'
                             f'"deliveredUpTo":0}}: {e}') from None
        return table

    def update(self, low: int, scanned: int, delivered_up_to: int) -> None:
        """Record a delivery pass's outcome (see the module docstring for the meaning)."""
        if not (type(low) is int and type(scanned) is int and type(delivered_up_to) is int and 0 <= low <= scanned):
            raise StoreError(f"timer progress: need ints with 0 <= low <= scanned, got low={low!r} "
                             f"scanned={scanned!r} deliveredUpTo={delivered_up_to!r}")
        with self._lock:
            self._table = {"low": low, "scanned": scanned, "deliveredUpTo": delivered_up_to}
            self._dirty = True

    def get(self) -> tuple[int, int, int]:
        """``(low, scanned, deliveredUpTo)``; zeros before the first delivery."""
        t = self._table
        return t.get("low", 0), t.get("scanned", 0), t.get("deliveredUpTo", 0)

    def to_json(self) -> dict:
        low, scanned, up_to = self.get()
        return {"low": low, "scanned": scanned, "deliveredUpTo": up_to}

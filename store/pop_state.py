"""PopStateTable: ``config/popState.json``, the replicated state of pop consumption (receive / ack / invisible time).

Design (compare RocketMQ's pop: a checkpoint per pop batch, an ack bitmap, a revive topic that rescans them): per
(consumer group, topic, queue) we keep

* ``next``: the first queue offset this group has never looked at, and
* ``inflight``: ``{offset: [attempt, visible_at_ms, epoch, message_group]}`` for every message handed out and not
  yet acked or dead-lettered (attempt 0 = held back for FIFO order, never delivered yet).

Everything below ``next`` that is not in ``inflight`` is done; the group's committed position is
``min(inflight) or next``. An ack deletes its entry, so the table holds only what is really outstanding and is
bounded by ``max_inflight`` per queue (the receive side stops taking new messages from a full queue). No revive
scan: a receive looks at the due entries of its queue first.

``epoch`` comes from the queue's ``seq``, bumped by every change: a receipt handle names (offset, epoch), so a
handle from before a redelivery or a ChangeInvisibleDuration no longer matches and is refused. ``key`` is the
cluster's receipt-handle HMAC key; it lives here so every member signs and checks with the same one.

Changes are replicated commands built by the leader (with the leader's clock) and applied identically everywhere;
no clock reads inside. The file is written periodically, not per command (a receive and an ack each change it): it
records the Raft index it includes, and after a crash the state machine re-applies the pop commands of the Raft
journal past that index (store.pop_state is the one table replayed that way), so every replica ends up identical. A ``take`` carries the ``seq`` it was computed from and is refused if the queue moved on
(a command from a deposed leader can then never hand out a message twice).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raftmq.store import json_file
from raftmq.store.errors import StoreError

SEPARATOR = "@"


@dataclass
class QueueState:
    next: int = 0
    seq: int = 0
    inflight: dict[int, list] = field(default_factory=dict)  # offset -> [attempt, visible_at_ms, epoch, group]

    def low_water(self) -> int:
        return min(self.inflight) if self.inflight else self.next

    def copy(self) -> QueueState:
        return QueueState(self.next, self.seq, {o: list(e) for o, e in self.inflight.items()})


def queue_key(group: str, topic: str, queue_id: int) -> str:
    if not group or SEPARATOR in group or SEPARATOR in topic:
        raise StoreError(f"consumer group {group!r} / topic {topic!r} must be non-empty and contain no '@'")
    return f"{group}{SEPARATOR}{topic}{SEPARATOR}{queue_id}"


def split_key(key: str) -> tuple[str, str, int]:
    group, topic, qid = key.rsplit(SEPARATOR, 2)
    return group, topic, int(qid)


class PopStateTable(json_file.PersistedTable):
    FILE_NAME = "popState.json"
    _table: dict[str, QueueState]

    def __init__(self, config_dir: str) -> None:
        super().__init__(config_dir)
        self.key = ""
        self.applied_index = 0  # Raft index of the last pop command in the table (0: single node / none yet)

    def _parse(self, data: Any) -> dict[str, QueueState]:
        try:
            self.key = str(data.get("hmacKey", ""))
            self.applied_index = int(data.get("appliedIndex", 0))
            return {k: QueueState(int(v["next"]), int(v["seq"]),
                                  {int(o): [int(e[0]), int(e[1]), int(e[2]), str(e[3])]
                                   for o, e in v.get("inflight", {}).items()})
                    for k, v in data.get("queues", {}).items()}
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as e:
            raise StoreError(f"{self.path} does not have the popState.json shape: {e}") from None

    def to_json(self) -> dict:
        return {"hmacKey": self.key, "appliedIndex": self.applied_index,
                "queues": {k: {"next": s.next, "seq": s.seq,
                               "inflight": {str(o): e for o, e in sorted(s.inflight.items())}}
                           for k, s in sorted(self._table.items())}}

    # ------------------------------------------------------------------ reads
    def get(self, key: str) -> QueueState:
        with self._lock:
            s = self._table.get(key)
            return s.copy() if s is not None else QueueState()

    def items(self) -> list[tuple[str, QueueState]]:
        with self._lock:
            return [(k, s.copy()) for k, s in self._table.items()]

    # ------------------------------------------------------------------ replicated changes
    def apply(self, ops: list[list], index: int = 0) -> list[str | None]:
        """Apply a batch of operations; one result per op: None, or the reason it was refused (same everywhere).
        ``index``: the Raft index of the command (recorded, so a restart replays the commands after it).

        ``["key", hex]`` set the HMAC key once; ``["take", key, expected_seq, new_next, {offset: entry}]`` hand
        out / hold back entries; ``["ack", key, offset, epoch]`` done (acked or dead-lettered);
        ``["change", key, offset, epoch, visible_at_ms]`` new invisible deadline and epoch;
        ``["renew", key, offset, epoch, visible_at_ms]`` later deadline, same epoch (the handle stays valid);
        ``["reset", key, offset]`` forget in-flight entries and restart the queue at ``offset``."""
        with self._lock:
            out = [self._apply_one(op) for op in ops]
            self.applied_index = max(self.applied_index, index)
            self._dirty = True
        return out

    def _apply_one(self, op: list) -> str | None:
        kind = op[0]
        if kind == "key":
            if not self.key:
                self.key = str(op[1])
            return None
        key = op[1]
        s = self._table.get(key)
        if kind == "take":
            _, _, expected_seq, new_next, entries = op
            s = s or QueueState()
            if s.seq != expected_seq:
                return f"stale take: queue {key} is at seq {s.seq}, the take was computed at {expected_seq}"
            s.next = max(s.next, int(new_next))
            for o, e in entries.items():
                s.inflight[int(o)] = [int(e[0]), int(e[1]), int(e[2]), str(e[3])]
            s.seq = max([s.seq + 1] + [int(e[2]) for e in entries.values()])
            self._table[key] = s
            return None
        if kind == "reset":
            s = s or QueueState()
            s.inflight.clear()
            s.next = int(op[2])
            s.seq += 1
            self._table[key] = s
            return None
        offset, epoch = int(op[2]), int(op[3])
        entry = s.inflight.get(offset) if s is not None else None
        if entry is None or entry[2] != epoch:
            return "stale receipt handle: the message was acked, redelivered or its invisible time changed since"
        s.seq += 1
        if kind == "ack":
            del s.inflight[offset]
        elif kind == "change":
            entry[1] = int(op[4])
            entry[2] = s.seq
        elif kind == "renew":  # same delivery, later deadline: the handle stays valid (server-side auto-renew)
            entry[1] = max(entry[1], int(op[4]))
        else:
            raise StoreError(f"unknown pop operation {kind!r}")
        return None

    def delete_topic(self, topic: str) -> bool:
        with self._lock:
            gone = [k for k in self._table if split_key(k)[1] == topic]
            for k in gone:
                del self._table[k]
            if gone:
                self._dirty = True
            return bool(gone)

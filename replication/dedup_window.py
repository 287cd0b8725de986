"""DedupWindow: the UNIQ_KEYs stored within their topic's de-duplication window, kept by every member.

Why every member: a new leader, a restarted member and one rebuilt from its peers must judge a retry at once
(docs/design/deduplication.md#the-window-on-every-member). The table is a function of the log: ids are added in
log order when their entry is applied, with the batch's store time (the leader's clock, the same everywhere); the
oldest are dropped while older than their topic's window (eager expiry) and, beyond the cap, oldest first (an
early eviction: counted, because a retry of such an id is stored again). It holds only where each id's record is;
the original's result is read back from the commit log when a retry needs it.
"""

from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from raftmq.store.message import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
)

# Where a delayed or timer send waits until the broker delivers it into REAL_TOPIC: judged by REAL_TOPIC. Only the
# send itself is stored there (delivery goes to REAL_TOPIC, nothing is re-put into these topics).
_WAITING_TOPICS = frozenset((SCHEDULE_TOPIC, TIMER_TOPIC))
# Topics only the broker writes (retries, dead letters, op logs, other system topics): never judged. Transaction
# halves (RMQ_SYS_TRANS_HALF_TOPIC) are among them: the broker appends the same half again, same UNIQ_KEY, each time
# it renews its check count, so a half record does not show a producer's send (docs/design/deduplication.md).
_BROKER_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_")
_SEP = "\x00"  # between topic and UNIQ_KEY in a key; no topic name contains it

# Bytes one id costs besides its key string: its OrderedDict slot and link, the (store time, offset) tuple and
# its two ints. Measured by bench/dedup_bench.py (tracemalloc over a million ids); see docs/design/deduplication.md.
ENTRY_OVERHEAD_BYTES = 200


def dedup_topic(topic: str, properties: dict[str, str] | None) -> str | None:
    """The topic a message or record is judged in, or None when it is not judged.

    The same rule for a message the leader is about to encode and for the record it became
    (docs/design/deduplication.md#the-guarantee-and-its-limits): a delayed or timer message by the topic the user
    named (REAL_TOPIC once stored); a record the broker wrote itself (it carries REAL_TOPIC in a user topic: a
    delivery or a transaction commit; or it is in a broker topic, transaction halves included) is never judged.
    Clients cannot set REAL_TOPIC (a reserved property), so a user's send never looks like a delivery."""
    if topic in _WAITING_TOPICS:
        real = properties.get(PROPERTY_REAL_TOPIC) if properties else None
        return real or None
    if topic.startswith(_BROKER_TOPIC_PREFIXES):
        return None
    if properties and PROPERTY_REAL_TOPIC in properties:
        return None
    return topic


class TopicWindows:
    """Each topic's window in ms: its attribute ``dedup.window.seconds`` (store.topic_config), else the node's."""

    def __init__(self, topics: Any, default_s: float):
        self.topics = topics
        self.default_ms = int(default_s * 1000)

    def __call__(self, topic: str) -> int:
        cfg = self.topics.get(topic)
        own = cfg.dedup_window_seconds if cfg is not None else None
        return self.default_ms if own is None else own * 1000

    def longest_ms(self) -> int:
        own = [cfg.dedup_window_seconds for cfg in self.topics.list()]
        return max([self.default_ms] + [s * 1000 for s in own if s is not None])


class DedupWindow:
    """Ids (topic + UNIQ_KEY) in log order with (store time, physical offset); thread-safe through ``lock``.

    ``window_ms(topic)``: the topic's window (0: the topic is not de-duplicated; a TopicWindows). ``max_entries``:
    the cap."""

    def __init__(self, window_ms: Callable[[str], int], max_entries: int):
        if max_entries < 1:
            raise ValueError("the de-duplication cap (node.dedup_max_entries) must be at least 1")
        self.window_ms = window_ms
        self.max_entries = max_entries
        self.lock = threading.RLock()
        self._ids: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()
        self._key_bytes = 0
        self.early_evictions = 0  # ids dropped by the cap before their window ended (metrics, alert)
        self.duplicates: dict[str, int] = collections.defaultdict(int)  # retries not stored again, per topic
        self.rebuilds = 0

    # ------------------------------------------------------------------ keys
    def key_of(self, topic: str, properties: dict[str, str] | None) -> str | None:
        """The id of a message or record, or None when it is not judged (its topic has no window, it has no
        UNIQ_KEY, or the broker wrote it)."""
        judged = dedup_topic(topic, properties)
        if judged is None or not properties:
            return None
        uniq = properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if not uniq or self.window_ms(judged) <= 0:
            return None
        return judged + _SEP + uniq

    @staticmethod
    def topic_of(key: str) -> str:
        return key.partition(_SEP)[0]

    # ------------------------------------------------------------------ reads
    def find(self, key: str, now_ms: int) -> tuple[int, int] | None:
        """(store time, physical offset) of the id's record when it was stored within its window before
        ``now_ms``; the caller holds ``lock`` when it must stay true (the leader's screening)."""
        hit = self._ids.get(key)
        if hit is None or hit[0] < now_ms - self.window_ms(self.topic_of(key)):
            return None
        return hit

    def __len__(self) -> int:
        return len(self._ids)

    def approx_bytes(self) -> int:
        """Memory the ids take, estimated from their key lengths (metrics)."""
        return self._key_bytes + len(self._ids) * ENTRY_OVERHEAD_BYTES

    # ------------------------------------------------------------------ changes (apply, in log order)
    def add(self, ids: Iterable[tuple[str, int, int]]) -> None:
        """Add (key, store time, physical offset) of applied records, then expire and cap."""
        newest = None
        with self.lock:
            table = self._ids
            for key, ts, offset in ids:
                old = table.pop(key, None)
                if old is None:
                    self._key_bytes += sys.getsizeof(key)
                table[key] = (ts, offset)
                newest = ts
            if newest is not None:
                self._expire(newest)

    def _expire(self, now_ms: int) -> None:
        table = self._ids
        while table:
            key, (ts, _offset) = next(iter(table.items()))
            expired = ts < now_ms - self.window_ms(self.topic_of(key))
            if not expired and len(table) <= self.max_entries:
                return
            table.popitem(last=False)
            self._key_bytes -= sys.getsizeof(key)
            if not expired:
                self.early_evictions += 1

    def clear(self) -> None:
        with self.lock:
            self._ids.clear()
            self._key_bytes = 0

    def rebuild(self, store: Any, longest_window_ms: int | None = None) -> int:
        """Start over from the commit log: the records applied within the longest window before the log's last
        store time (start, snapshot install, rewind, copy from peers). Returns the ids found."""
        if longest_window_ms is None:
            longest_window_ms = self.window_ms.longest_ms()
        end = store.confirm_offset
        if end is None:
            end = store.commit_log_max_offset
        newest = store.commit_log.last_store_timestamp
        with self.lock:
            self.clear()
            if longest_window_ms <= 0 or end <= 0:
                return 0
            batch: list[tuple[str, int, int]] = []
            for dr in store.records_since(newest - longest_window_ms, end):
                key = self.key_of(dr.topic, dr.properties_map)
                if key is not None:
                    batch.append((key, dr.store_timestamp, dr.commit_log_offset))
                    if len(batch) >= 4096:
                        self.add(batch)
                        batch = []
            self.add(batch)
            self.rebuilds += 1
            return len(self._ids)

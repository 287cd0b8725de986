"""DedupWindow: the UNIQ_KEYs stored within their topic's de-duplication window, kept by every member.

Why every member: a new leader, a restarted member and one rebuilt from its peers must judge a retry at once
(docs/design/deduplication.md#the-window-on-every-member). The table is a function of the log: ids are added in
log order when their entry is applied, with the batch's store time (the leader's clock, the same everywhere); the
oldest are dropped once older than the longest window (eager expiry) and, beyond the cap, oldest first (an early
eviction: counted, because a retry of such an id is stored again). A lookup checks the id's age against its own
topic's window.

Why so compact: a busy topic keeps millions of ids in a 2-minute window. An id is a 16-byte BLAKE2b digest of
topic and UNIQ_KEY (what the Raft command carries, too); the table maps it to one int, store time and physical
offset packed; the order of arrival is a deque of references plus one (store time, count) run per batch. The
original's result is read back from the commit log when a retry needs it.
"""

from __future__ import annotations

import collections
import hashlib
import threading
from collections.abc import Iterable
from typing import Any

from raftmq.store.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
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
KEY_SIZE = 16  # bytes of an id: BLAKE2b-128 of topic, NUL, UNIQ_KEY (no topic name contains a NUL)
_OFFSET_BITS = 64

# Bytes one id costs in the table: its 16-byte digest object, its dict slot, the packed int, its reference in the
# order deque. Measured by bench/dedup_bench.py (tracemalloc over a million ids); docs/design/deduplication.md.
ENTRY_BYTES = 140


def id_of(topic: str, uniq_key: str) -> bytes:
    """The id of a message in ``topic`` with ``uniq_key``."""
    return hashlib.blake2b(f"{topic}\x00{uniq_key}".encode(), digest_size=KEY_SIZE).digest()


def dedup_topic(topic: str, properties: dict[str, str] | None) -> str | None:
    """The topic a message or record is judged in, or None when it is not judged.

    The same rule for a message the leader is about to encode and for the record it became
    (docs/design/deduplication.md#the-guarantee-and-its-limits): a delayed or timer message by the topic the user
    named (REAL_TOPIC once stored); a record the broker wrote itself (it carries REAL_TOPIC in a user topic: a
    delivery or a transaction commit; or it is in a broker topic, transaction halves included) is never judged.
    Clients cannot set REAL_TOPIC (a reserved property), so a user's send never looks like a delivery."""
    if topic in _WAITING_TOPICS:  # a consumer's delayed send-back waits there too, for a %RETRY% topic
        real = properties.get(PROPERTY_REAL_TOPIC) if properties else None
        return real if real and not real.startswith(_BROKER_TOPIC_PREFIXES) else None
    if topic.startswith(_BROKER_TOPIC_PREFIXES):
        return None
    if properties and PROPERTY_REAL_TOPIC in properties:
        return None
    return topic


def _property(props: str, name: str) -> str | None:
    """One property of a stored properties string, without parsing the others (the rebuild's hot loop)."""
    tag = name + NAME_VALUE_SEPARATOR
    i = props.find(tag)
    while i > 0 and props[i - 1] != PROPERTY_SEPARATOR:
        i = props.find(tag, i + 1)
    if i < 0:
        return None
    start = i + len(tag)
    end = props.find(PROPERTY_SEPARATOR, start)
    return props[start:] if end < 0 else props[start:end]


class TopicWindows:
    """Each topic's window in ms: its attribute ``dedup.window.seconds`` (store.topic_config), else the node's."""

    def __init__(self, topics: Any, default_s: float):
        self.topics = topics
        self.default_ms = int(default_s * 1000)
        self._longest: tuple[Any, int] = (None, 0)  # (the topic table's data version, the longest window)

    def __call__(self, topic: str) -> int:
        cfg = self.topics.get(topic)
        own = cfg.dedup_window_seconds if cfg is not None else None
        return self.default_ms if own is None else own * 1000

    def longest_ms(self) -> int:
        """The longest window of any topic (how long the table keeps an id); recomputed when topics change."""
        version = dict(getattr(self.topics, "data_version", {}) or {})
        seen, longest = self._longest
        if version and seen == version:
            return longest
        own = [cfg.dedup_window_seconds for cfg in self.topics.list()]
        longest = max([self.default_ms] + [s * 1000 for s in own if s is not None])
        self._longest = (version, longest)
        return longest


class DedupWindow:
    """Ids in log order with their store time and physical offset; thread-safe through ``lock``.

    ``windows``: each topic's window in ms (0: the topic is not de-duplicated) and the longest
    (``TopicWindows``). ``max_entries``: the cap."""

    def __init__(self, windows: TopicWindows, max_entries: int):
        if max_entries < 1:
            raise ValueError("the de-duplication cap (node.dedup_max_entries) must be at least 1")
        self.windows = windows
        self.max_entries = max_entries
        self.lock = threading.RLock()
        self._ids: dict[bytes, int] = {}  # id -> store time << 64 | physical offset
        self._order: collections.deque[bytes] = collections.deque()  # ids as added (an id re-added: twice)
        self._runs: collections.deque[list[int]] = collections.deque()  # [store time, ids] per run in _order
        self.early_evictions = 0  # ids dropped by the cap before their window ended (metrics, alert)
        self.duplicates: dict[str, int] = collections.defaultdict(int)  # retries not stored again, per topic
        self.rebuilds = 0

    # ------------------------------------------------------------------ ids
    def judge(self, topic: str, properties: dict[str, str] | None) -> tuple[str, bytes, int] | None:
        """(topic judged in, id, its window in ms) of a message or record, or None when it is not judged (its
        topic has no window, it has no UNIQ_KEY, or the broker wrote it)."""
        if not properties:
            return None
        uniq = properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if not uniq:
            return None
        judged = dedup_topic(topic, properties)
        if judged is None:
            return None
        window = self.windows(judged)
        if window <= 0:
            return None
        return judged, id_of(judged, uniq), window

    def key_of(self, topic: str, properties: dict[str, str] | None) -> bytes | None:
        judged = self.judge(topic, properties)
        return None if judged is None else judged[1]

    # ------------------------------------------------------------------ reads
    def find(self, key: bytes, now_ms: int, window_ms: int) -> tuple[int, int] | None:
        """(store time, physical offset) of the id's record when it was stored less than ``window_ms`` before
        ``now_ms``; the caller holds ``lock`` when it must stay true (the leader's screening)."""
        packed = self._ids.get(key)
        if packed is None:
            return None
        ts = packed >> _OFFSET_BITS
        if ts < now_ms - window_ms:
            return None
        return ts, packed & ((1 << _OFFSET_BITS) - 1)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, key: bytes) -> bool:
        return key in self._ids

    def approx_bytes(self) -> int:
        """Memory the ids take (metrics)."""
        return len(self._ids) * ENTRY_BYTES + (len(self._order) - len(self._ids)) * 8

    # ------------------------------------------------------------------ changes (apply, in log order)
    def add(self, ids: Iterable[tuple[bytes, int, int]]) -> None:
        """Add (id, store time, physical offset) of applied records, then expire and cap."""
        newest = None
        with self.lock:
            table, order, runs = self._ids, self._order, self._runs
            for key, ts, offset in ids:
                table[key] = (ts << _OFFSET_BITS) | offset
                order.append(key)
                if runs and runs[-1][0] == ts:
                    runs[-1][1] += 1
                else:
                    runs.append([ts, 1])
                newest = ts
            if newest is not None:
                self._expire(newest)

    def add_batch(self, store_timestamp: int, keys: list[bytes], offsets: list[int]) -> None:
        """``add`` for the records of one applied batch (they share its store time): the apply's fast path."""
        with self.lock:
            base = store_timestamp << _OFFSET_BITS
            self._ids.update(zip(keys, [base | o for o in offsets], strict=True))
            self._order.extend(keys)
            runs = self._runs
            if runs and runs[-1][0] == store_timestamp:
                runs[-1][1] += len(keys)
            else:
                runs.append([store_timestamp, len(keys)])
            self._expire(store_timestamp)

    def _expire(self, now_ms: int) -> None:
        table, order, runs = self._ids, self._order, self._runs
        limit = now_ms - self.windows.longest_ms()
        while runs:
            run = runs[0]
            ts = run[0]
            if ts >= limit and len(table) <= self.max_entries:
                return
            key = order.popleft()
            run[1] -= 1
            if run[1] == 0:
                runs.popleft()
            packed = table.get(key)
            if packed is not None and packed >> _OFFSET_BITS == ts:  # not re-added since
                del table[key]
                if ts >= limit:
                    self.early_evictions += 1

    def clear(self) -> None:
        with self.lock:
            self._ids.clear()
            self._order.clear()
            self._runs.clear()

    def rebuild(self, store: Any) -> int:
        """Start over from the commit log: the records applied within the longest window before the log's last
        store time (start, snapshot install, rewind, copy from peers). Returns the ids found."""
        longest = self.windows.longest_ms()
        end = store.confirm_offset
        if end is None:
            end = store.commit_log_max_offset
        newest = store.commit_log.last_store_timestamp
        with self.lock:
            self.clear()
            if longest <= 0 or end <= 0:
                return 0
            batch: list[tuple[bytes, int, int]] = []
            for offset, ts, topic, props in store.records_since(newest - longest, end):
                found = {name: value for name in (PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, PROPERTY_REAL_TOPIC)
                         if (value := _property(props, name)) is not None}
                key = self.key_of(topic, found)
                if key is not None:
                    batch.append((key, ts, offset))
                    if len(batch) >= 4096:
                        self.add(batch)
                        batch = []
            self.add(batch)
            self.rebuilds += 1
            return len(self._ids)

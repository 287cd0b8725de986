"""SubscriptionGroupTable: consumer groups' own settings in ``config/subscriptionGroup.json``, RocketMQ's shape.

Why here: a group's settings are replicated metadata like topics (issue 34: FIFO, maximum delivery attempts and
retry back-off changed at runtime, as Apache's ``updateSubGroup`` changes a ``SubscriptionGroupConfig``). The
table holds only groups that were given settings; every other group follows the node configuration.

The file is what RocketMQ's ``SubscriptionGroupManager`` writes (``dataVersion`` + ``subscriptionGroupTable``),
so RocketMQ's tools read it. Mapping: ``consumeMessageOrderly`` is FIFO; RocketMQ counts retries, not deliveries,
so ``retryMaxTimes`` is the maximum delivery attempts minus one (its proxy tells clients ``retryMaxTimes + 1``
attempts); the back-off is a ``CUSTOMIZED`` ``groupRetryPolicy`` whose ``next`` lists the delays in ms. An
``EXPONENTIAL`` policy in a file written by RocketMQ is read as the delays it produces. Fields raftmq does not use
are kept as read (and written with RocketMQ's defaults for a group raftmq creates).

Changes take the timestamp from the caller (no clock reads), so every replica writes the same file.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from raftmq.store import json_file
from raftmq.store.errors import StoreError
from raftmq.store.topic_config import MARK_KEEP_MS, TopicMark

FILE_NAME = "subscriptionGroup.json"
MAX_DELIVERY_ATTEMPTS = 1000
MAX_BACKOFF_STEPS = 64
MAX_BACKOFF_MS = 24 * 3_600_000
# RocketMQ 5's SubscriptionGroupConfig defaults for the fields raftmq does not interpret
_ROCKETMQ_DEFAULTS: dict[str, Any] = {
    "brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True, "consumeFromMinEnable": True,
    "consumeTimeoutMinute": 15, "groupSysFlag": 0, "notifyConsumerIdsChangedEnable": True, "retryQueueNums": 1,
    "whichBrokerWhenConsumeSlowly": 1,
}
_OWN_FIELDS = ("groupName", "consumeMessageOrderly", "retryMaxTimes", "groupRetryPolicy")


def check_settings(fifo: Any, max_delivery_attempts: Any, retry_backoff_ms: Any) -> None:
    """StoreError naming the value to fix."""
    if not isinstance(fifo, bool):
        raise StoreError(f"fifo must be true or false, got {fifo!r}")
    if isinstance(max_delivery_attempts, bool) or not isinstance(max_delivery_attempts, int) or \
            not 1 <= max_delivery_attempts <= MAX_DELIVERY_ATTEMPTS:
        raise StoreError(f"max delivery attempts must be 1..{MAX_DELIVERY_ATTEMPTS}, got {max_delivery_attempts!r}")
    steps = list(retry_backoff_ms)
    if not 1 <= len(steps) <= MAX_BACKOFF_STEPS:
        raise StoreError(f"the retry back-off has {len(steps)} steps; give 1..{MAX_BACKOFF_STEPS} (e.g. '1s 5s 1m')")
    if any(isinstance(s, bool) or not isinstance(s, int) or not 0 < s <= MAX_BACKOFF_MS for s in steps):
        raise StoreError(f"every retry back-off step must be more than 0 and at most 24h, got {steps}")


@dataclass(frozen=True)
class SubscriptionGroup:
    """One group's settings (RocketMQ ``SubscriptionGroupConfig``)."""

    group_name: str
    fifo: bool
    max_delivery_attempts: int
    retry_backoff_ms: tuple[int, ...]
    # the other RocketMQ fields, as (name, JSON text) pairs: kept as read, written back unchanged
    other: tuple[tuple[str, str], ...] = field(
        default=tuple(sorted((k, json.dumps(v)) for k, v in _ROCKETMQ_DEFAULTS.items())))

    def validate(self) -> None:
        if not self.group_name or "@" in self.group_name:
            raise StoreError(f"consumer group {self.group_name!r} must be non-empty and contain no '@'")
        check_settings(self.fifo, self.max_delivery_attempts, self.retry_backoff_ms)

    def to_json(self) -> dict[str, Any]:
        d = {k: json.loads(v) for k, v in self.other}
        d.update({
            "consumeMessageOrderly": self.fifo,
            "groupName": self.group_name,
            "groupRetryPolicy": {"customizedRetryPolicy": {"next": list(self.retry_backoff_ms)},
                                 "type": "CUSTOMIZED"},
            "retryMaxTimes": self.max_delivery_attempts - 1,
        })
        return dict(sorted(d.items()))  # fastjson writes bean properties in alphabetical order

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubscriptionGroup:
        attempts = int(d.get("retryMaxTimes", 16)) + 1
        return cls(group_name=str(d["groupName"]), fifo=bool(d.get("consumeMessageOrderly", False)),
                   max_delivery_attempts=attempts,
                   retry_backoff_ms=_backoff_of(d.get("groupRetryPolicy") or {}, attempts),
                   other=tuple(sorted((k, json.dumps(v)) for k, v in d.items() if k not in _OWN_FIELDS)))


def _backoff_of(policy: dict[str, Any], attempts: int) -> tuple[int, ...]:
    """The delays (ms) of a RocketMQ ``groupRetryPolicy``; RocketMQ's own defaults for a missing part."""
    if policy.get("type") == "EXPONENTIAL":
        exp = policy.get("exponentialRetryPolicy") or {}
        initial, most, factor = int(exp.get("initial", 5000)), int(exp.get("max", 7_200_000)), \
            int(exp.get("multiplier", 2))
        out, delay = [], initial
        for _ in range(min(max(attempts - 1, 1), MAX_BACKOFF_STEPS)):
            out.append(min(delay, most))
            delay *= max(factor, 1)
        return tuple(out)
    custom = policy.get("customizedRetryPolicy") or {}
    steps = custom.get("next") or [1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000,
                                   420000, 480000, 540000, 600000, 1200000, 1800000, 3600000, 7200000]
    return tuple(int(s) for s in steps)


class SubscriptionGroupTable:
    """Groups with settings of their own, persisted to ``{config_dir}/subscriptionGroup.json`` on every change."""

    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, FILE_NAME)
        self._lock = threading.Lock()
        self._groups: dict[str, SubscriptionGroup] = {}
        # a cluster of several Raft groups: when this group last set or dropped each consumer group's settings in
        # a cluster-wide change (the settings reconcile pass compares them; docs/design/scale-out.md)
        self._marks: dict[str, TopicMark] = {}
        self.data_version = {"counter": 0, "timestamp": 0}

    def load(self) -> None:
        data = json_file.read_leniently(self.path)
        if data is None:
            return
        try:
            groups = {name: SubscriptionGroup.from_json(v)
                      for name, v in (data.get("subscriptionGroupTable") or {}).items()}
            marks = _marks_of(data)
            dv = data.get("dataVersion") or {}
            version = {"counter": int(dv.get("counter", 0)), "timestamp": int(dv.get("timestamp", 0))}
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise StoreError(f"{self.path} does not have the subscriptionGroup.json shape: {e}") from None
        with self._lock:
            self._groups = groups
            self._marks = marks
            self.data_version = version

    # ------------------------------------------------------------------ reads
    def get(self, group: str) -> SubscriptionGroup | None:
        return self._groups.get(group)

    def list(self) -> list[SubscriptionGroup]:
        return sorted(self._groups.values(), key=lambda g: g.group_name)

    def marks(self) -> dict[str, TopicMark]:
        """When this group last set (``deleted`` False) or dropped each consumer group's settings in a
        cluster-wide change (a copy)."""
        with self._lock:
            return dict(self._marks)

    # ------------------------------------------------------------------ deterministic changes
    def put(self, group: SubscriptionGroup, timestamp_ms: int, mark_ms: int | None = None) -> None:
        """Set a group's settings; ``mark_ms``: remember that time as when it was set (a cluster of groups)."""
        group.validate()
        with self._lock:
            self._groups[group.group_name] = group
            self._mark(group.group_name, False, mark_ms, timestamp_ms)
            self._changed(timestamp_ms)

    def delete(self, name: str, timestamp_ms: int, mark_ms: int | None = None) -> bool:
        """Drop a group's settings (False when it had none); ``mark_ms`` is remembered even then."""
        with self._lock:
            existed = self._groups.pop(name, None) is not None
            self._mark(name, True, mark_ms, timestamp_ms)
            if existed or mark_ms is not None:
                self._changed(timestamp_ms)
            return existed

    def _mark(self, name: str, deleted: bool, mark_ms: int | None, timestamp_ms: int) -> None:
        """Lock held: remember the mark, forget those older than MARK_KEEP_MS (by the change's timestamp)."""
        if mark_ms is None:
            return
        self._marks[name] = TopicMark(deleted=deleted, at_ms=int(mark_ms))
        for old in [n for n, m in self._marks.items() if int(timestamp_ms) - m.at_ms > MARK_KEEP_MS]:
            del self._marks[old]

    def _changed(self, timestamp_ms: int) -> None:
        """Lock held: bump the data version and write the file."""
        self.data_version = {"counter": self.data_version["counter"] + 1, "timestamp": int(timestamp_ms)}
        json_file.write_safely(self.path, json_file.dumps(self._to_json_locked()))

    # ------------------------------------------------------------------ persistence / snapshots
    def _to_json_locked(self) -> dict[str, Any]:
        data = {"dataVersion": dict(self.data_version),
                "subscriptionGroupTable": {n: self._groups[n].to_json() for n in sorted(self._groups)}}
        if self._marks:  # only in a cluster of several groups: a one-group cluster's file keeps its shape
            data[MARKS_KEY] = {n: self._marks[n].to_json() for n in sorted(self._marks)}
        return data

    def snapshot(self) -> str:
        with self._lock:
            return json_file.dumps(self._to_json_locked())

    def restore(self, text: str) -> None:
        """Replace the table with a ``snapshot`` (replica catch-up) and persist it."""
        data = json_file.loads(text)
        with self._lock:
            self._groups = {n: SubscriptionGroup.from_json(v)
                            for n, v in (data.get("subscriptionGroupTable") or {}).items()}
            self._marks = _marks_of(data)
            dv = data.get("dataVersion") or {}
            self.data_version = {"counter": int(dv.get("counter", 0)), "timestamp": int(dv.get("timestamp", 0))}
            json_file.write_safely(self.path, json_file.dumps(self._to_json_locked()))


MARKS_KEY = "raftmqGroupMarks"  # subscriptionGroup.json's key of the marks (absent when there are none)


def _marks_of(data: dict[str, Any]) -> dict[str, TopicMark]:
    return {str(n): TopicMark.from_json(v) for n, v in (data.get(MARKS_KEY) or {}).items()}

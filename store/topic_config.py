"""TopicConfigTable: ``config/topics.json`` in RocketMQ's shape (docs/design/store-formats.md#config-files).

Changes take the timestamp from the caller (no clock reads inside), so applying the same replicated
commands on every node yields the same table and the same ``dataVersion``.

Like RocketMQ's ``TopicConfigManager`` constructor, the table starts with the broker's built-in system topics
(``BUILTIN_TOPICS``) and a loaded file or snapshot is laid over them: they show in ``topics.json`` from its next
write on, without a ``dataVersion`` bump, identically on every member (a function of the code only, not of the
node's config). The transaction system topics are not built in: RocketMQ (and the transaction service) registers
them on first use, through a replicated command.

Changes go to the change log beside the file (store.topic_changes) and are folded into the file now and then
(docs/design/topic-table.md): a change costs the same with 10 topics or 10,000.

In a cluster of several Raft groups the table also keeps **marks**: when this group last created or deleted a
topic as part of a cluster-wide change (``MARK`` operations, kept for ``MARK_KEEP_MS``). They are replicated with
the topics, so every group's leader, a new one included, can tell a delete to complete from a create to copy
(docs/design/scale-out.md#topic-administration). ``topics.json`` holds them under ``raftmqTopicMarks`` only when
there are some (a one-group cluster never writes the key).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from raftmq.store import json_file
from raftmq.store.errors import StoreError, StoreLoadError
from raftmq.store.message import SCHEDULE_TOPIC, check_topic
from raftmq.store.topic_changes import Change, TopicChangeLog, Version

log = logging.getLogger("raftmq.store.topic_config")

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
MAX_QUEUE_NUMS = 1024
FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")

# The kind of message a topic takes (issue 34). Stored as RocketMQ 5 stores it: the topic attribute
# ``message.type`` in ``attributes`` (RocketMQ's TopicAttributes; its admin tools write "+message.type=FIFO", the
# "+" marking an added attribute, and keep the key without it). MIXED takes every kind.
MESSAGE_TYPE_ATTRIBUTE = "message.type"
NORMAL, FIFO, DELAY, TRANSACTION, MIXED = "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"
MESSAGE_TYPES = (NORMAL, FIFO, DELAY, TRANSACTION, MIXED)
# The topic's de-duplication window in seconds (issue 40, docs/design/deduplication.md), overriding the node's
# ``node.dedup_window_seconds``; 0 turns it off for the topic. Absent: the node's window.
DEDUP_WINDOW_ATTRIBUTE = "dedup.window.seconds"
MAX_DEDUP_WINDOW_SECONDS = 24 * 3600


@dataclass(frozen=True)
class TopicConfig:
    """One topic (RocketMQ ``TopicConfig``)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    # RocketMQ 5's topic attributes as (name, value) pairs, sorted; kept as read, so a file written by RocketMQ 5
    # keeps what raftmq does not use. Absent ``message.type``: a topic from before message types (RocketMQ 4.9's
    # files, raftmq before issue 34), which takes every kind as it always did.
    attributes: tuple[tuple[str, str], ...] = ()

    @cached_property  # checked on every send
    def message_type(self) -> str:
        """NORMAL, FIFO, DELAY, TRANSACTION or MIXED ("" when never set: every kind is taken)."""
        return dict(self.attributes).get(MESSAGE_TYPE_ATTRIBUTE, "")

    def with_message_type(self, message_type: str) -> TopicConfig:
        attrs = dict(self.attributes)
        attrs[MESSAGE_TYPE_ATTRIBUTE] = message_type
        return replace(self, attributes=tuple(sorted(attrs.items())))

    @cached_property  # read on every send when de-duplication is on
    def dedup_window_seconds(self) -> int | None:
        """The topic's own de-duplication window (None: the node's)."""
        value = dict(self.attributes).get(DEDUP_WINDOW_ATTRIBUTE)
        return int(value) if value is not None and value.isdigit() else None

    def with_dedup_window(self, seconds: int | None) -> TopicConfig:
        attrs = dict(self.attributes)
        if seconds is None:
            attrs.pop(DEDUP_WINDOW_ATTRIBUTE, None)
        else:
            attrs[DEDUP_WINDOW_ATTRIBUTE] = str(seconds)
        return replace(self, attributes=tuple(sorted(attrs.items())))

    def accepts(self, message_type: str) -> bool:
        """Whether a message of ``message_type`` (NORMAL, FIFO, DELAY, TRANSACTION) may be sent to this topic."""
        return self.message_type in ("", MIXED, message_type)

    def validate(self) -> None:
        try:
            check_topic(self.topic_name)
        except StoreError as e:
            raise StoreError(f"invalid topic name: {e}") from None
        for name in ("read_queue_nums", "write_queue_nums"):
            v = getattr(self, name)
            if not isinstance(v, int) or not 1 <= v <= MAX_QUEUE_NUMS:
                raise StoreError(f"topic {self.topic_name}: {name} must be between 1 and {MAX_QUEUE_NUMS}, got {v}")
        if not isinstance(self.perm, int) or self.perm & ~0x7:
            raise StoreError(f"topic {self.topic_name}: perm must combine READ=4, WRITE=2, INHERIT=1, got {self.perm}")
        if self.topic_filter_type not in FILTER_TYPES:
            raise StoreError(f"topic {self.topic_name}: topic_filter_type must be one of {FILTER_TYPES}")
        if self.message_type and self.message_type not in MESSAGE_TYPES:
            raise StoreError(f"topic {self.topic_name}: message type must be one of {', '.join(MESSAGE_TYPES)}, got "
                             f"{self.message_type!r}")
        window = dict(self.attributes).get(DEDUP_WINDOW_ATTRIBUTE)
        if window is not None and not (window.isdigit() and int(window) <= MAX_DEDUP_WINDOW_SECONDS):
            raise StoreError(f"topic {self.topic_name}: the de-duplication window must be whole seconds from 0 (off) "
                             f"to {MAX_DEDUP_WINDOW_SECONDS}, got {window!r}")

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    def to_json(self) -> dict[str, Any]:
        # fastjson writes bean properties in alphabetical order; RocketMQ 4.9's TopicConfig has no attributes (it
        # ignores the field), so a topic without any is written as 4.9 writes it
        attributes = {"attributes": dict(self.attributes)} if self.attributes else {}
        return {
            **attributes,
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicConfig:
        return cls(
            topic_name=d["topicName"],
            read_queue_nums=int(d.get("readQueueNums", 16)),
            write_queue_nums=int(d.get("writeQueueNums", 16)),
            perm=int(d.get("perm", PERM_READ | PERM_WRITE)),
            topic_filter_type=d.get("topicFilterType", "SINGLE_TAG"),
            topic_sys_flag=int(d.get("topicSysFlag", 0)),
            order=bool(d.get("order", False)),
            attributes=tuple(sorted((str(k), str(v)) for k, v in (d.get("attributes") or {}).items())),
        )


SCHEDULE_TOPIC_QUEUE_NUMS = 18  # RocketMQ 4.9 TopicConfigManager.SCHEDULE_TOPIC_QUEUE_NUM (not the level count)

# registered by RocketMQ 4.9's TopicConfigManager constructor and used by raftmq: SCHEDULE_TOPIC_XXXX, perm RW
BUILTIN_TOPICS = (
    TopicConfig(SCHEDULE_TOPIC, read_queue_nums=SCHEDULE_TOPIC_QUEUE_NUMS, write_queue_nums=SCHEDULE_TOPIC_QUEUE_NUMS),
)


def _with_builtins(topics: dict[str, TopicConfig]) -> dict[str, TopicConfig]:
    """``topics`` laid over the built-in ones (a stored config of a built-in topic wins, as in RocketMQ's load)."""
    return {**{t.topic_name: t for t in BUILTIN_TOPICS}, **topics}


CREATE, PUT, DELETE, MARK = "create", "put", "delete", "mark"  # TopicConfigTable.apply's operations
MARK_KEEP_MS = 24 * 3600 * 1000  # a mark older than this (by the timestamps of later changes) is forgotten
MARKS_KEY = "raftmqTopicMarks"  # topics.json's key of the marks (absent when there are none)


@dataclass(frozen=True)
class TopicMark:
    """When this group last created (``deleted`` False) or deleted a topic in a cluster-wide change, by the
    timestamp of the change that did it (its leader's clock, ms)."""

    deleted: bool
    at_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"deleted": self.deleted, "at": self.at_ms}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicMark:
        return cls(deleted=bool(d["deleted"]), at_ms=int(d["at"]))


class TopicConfigTable:
    """Topics of one store: ``{config_dir}/topics.json`` in RocketMQ's shape plus the change log beside it
    (store.topic_changes, docs/design/topic-table.md).

    A change is appended to the log and synced before it is visible or acknowledged, at a cost that does not
    grow with the table; the log is folded into ``topics.json`` once it outgrows the file (so the work of a fold
    is spread over as many changes as the table has topics), every ``fold`` call of the store's periodic thread
    and at a clean stop, so the file RocketMQ's tools read is whole and current after a stop.
    """

    FILE_NAME = "topics.json"
    LOG_NAME = "topics.json.changes"
    FOLD_MIN_BYTES = 64 * 1024  # a log smaller than this is never folded on size alone

    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, self.FILE_NAME)
        self.changes = TopicChangeLog(os.path.join(config_dir, self.LOG_NAME))
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = _with_builtins({})
        self._marks: dict[str, TopicMark] = {}
        self.data_version = {"counter": 0, "timestamp": 0}
        self._file_version: Version = (0, 0)  # what topics.json on disk holds
        self._file_bytes = 0
        self.folds = 0

    def load(self) -> None:
        """``topics.json`` (or its ``.bak``), then the changes of the log it does not hold yet."""
        data = json_file.read_leniently(self.path)
        topics: dict[str, TopicConfig] = {}
        marks: dict[str, TopicMark] = {}
        version: Version = (0, 0)
        if data is not None:
            try:
                table = data.get("topicConfigTable", {})
                topics = {name: TopicConfig.from_json(v) for name, v in table.items()}
                marks = _marks_from_json(data)
                dv = data.get("dataVersion", {})
                version = (int(dv.get("counter", 0)), int(dv.get("timestamp", 0)))
            except (AttributeError, KeyError, TypeError, ValueError) as e:
                raise StoreError(f"{self.path} does not have the topics.json shape: {e}") from None
        file_version = version
        self.changes.read()
        later = self.changes.after(version)
        if later is None:
            raise StoreLoadError(
                f"{self.path} (dataVersion {version[0]}) is older than its change log {self.changes.path}, which "
                f"holds changes up to dataVersion {self.changes.changes[-1].version[0]} but none that continues the "
                "file: topics changed since the file was last written would be lost. Restore the topics.json the "
                "log continues (its .bak?), or move the log away to start from the file as it is")
        try:
            for change in later:
                _apply_ops(topics, marks, change.ops, change.version[1])
                version = change.version
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise StoreLoadError(f"{self.changes.path} holds a change of the wrong shape: {e}") from None
        with self._lock:
            self._topics = _with_builtins(topics)
            self._marks = marks
            self.data_version = {"counter": version[0], "timestamp": version[1]}
            self._file_version = file_version
            self._file_bytes = os.path.getsize(self.path) if os.path.exists(self.path) else 0
        if later:
            log.info("topics: %d change(s) replayed from %s (dataVersion %d)", len(later), self.changes.path,
                     version[0])

    # ------------------------------------------------------------------ reads
    def get(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._topics

    def __len__(self) -> int:
        return len(self._topics)

    def list(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda t: t.topic_name)

    def names(self) -> list[str]:
        return sorted(self._topics)

    def marks(self) -> dict[str, TopicMark]:
        """The marks (a copy): when this group last created or deleted each topic in a cluster-wide change."""
        with self._lock:
            return dict(self._marks)

    # ------------------------------------------------------------------ deterministic changes
    @staticmethod
    def is_builtin(name: str) -> bool:
        """A topic the broker registers itself (never created, changed or deleted by a user)."""
        return any(t.topic_name == name for t in BUILTIN_TOPICS)

    def put(self, cfg: TopicConfig, timestamp_ms: int) -> TopicConfig:
        """Create or replace a topic; ``timestamp_ms`` stamps the data version."""
        refusal = self.apply([(PUT, cfg)], timestamp_ms)[0]
        if refusal:
            raise StoreError(refusal)
        return cfg

    def update(self, name: str, timestamp_ms: int, **changes: Any) -> TopicConfig:
        current = self._topics.get(name)
        if current is None:
            raise StoreError(f"topic {name} does not exist")
        return self.put(replace(current, **changes), timestamp_ms)

    def delete(self, name: str, timestamp_ms: int) -> bool:
        self._refuse_builtin(name, "deleted")  # its queues hold the delayed messages not yet delivered
        return self.apply([(DELETE, name)], timestamp_ms)[0] is None

    def apply(self, ops: Sequence[tuple[str, Any]], timestamp_ms: int) -> list[str | None]:
        """Apply topic operations in order as ONE change (one line of the log, one sync): ``(CREATE, cfg)`` (refused
        when the topic exists), ``(PUT, cfg)`` (create or replace), ``(DELETE, name)`` (refused when absent) or
        ``(MARK, (name, at_ms))`` (remember ``at_ms``, or ``timestamp_ms`` when None, as when the topic was
        created or deleted, whichever it is after the operations before it; never refused). A topic marked
        before that is created or deleted without a mark of its own is marked at ``timestamp_ms`` (a topic
        created on first use after a delete is newer than the delete). Returns a refusal (str) or None per
        operation, the same on every replica; the data version grows by one per operation applied (marks
        included) and takes ``timestamp_ms``."""
        refusals: list[str | None] = []
        accepted: list[tuple[str, Any]] = []
        with self._lock:
            pending: dict[str, TopicConfig | None] = {}  # this change's effect so far, over the table
            marks: dict[str, TopicMark] = {}
            born_or_gone: dict[str, bool] = {}  # topics this change creates (False) or deletes (True)

            def exists(name: str) -> bool:
                return pending[name] is not None if name in pending else name in self._topics

            for op, arg in ops:
                try:
                    if op in (CREATE, PUT):
                        arg.validate()
                        self._refuse_builtin(arg.topic_name, "created or changed")
                        if op == CREATE and exists(arg.topic_name):
                            raise StoreError(f"topic {arg.topic_name} already exists")
                        if not exists(arg.topic_name):
                            born_or_gone[arg.topic_name] = False
                        pending[arg.topic_name] = arg
                        accepted.append(("put", arg.to_json()))
                    elif op == DELETE:
                        self._refuse_builtin(arg, "deleted")
                        if not exists(arg):
                            raise StoreError(f"topic {arg} does not exist")
                        born_or_gone[arg] = True
                        pending[arg] = None
                        accepted.append(("del", arg))
                    elif op == MARK:
                        name, at_ms = arg
                        marks[name] = TopicMark(deleted=not exists(name),
                                                at_ms=int(timestamp_ms if at_ms is None else at_ms))
                        accepted.append(("mark", {"name": name, **marks[name].to_json()}))
                    else:
                        raise ValueError(f"unknown topic operation {op!r}")
                    refusals.append(None)
                except StoreError as e:
                    refusals.append(str(e))
            for name, deleted in born_or_gone.items():
                if name in self._marks and name not in marks:
                    marks[name] = TopicMark(deleted=deleted, at_ms=int(timestamp_ms))
                    accepted.append(("mark", {"name": name, **marks[name].to_json()}))
            if not accepted:
                return refusals
            before = (self.data_version["counter"], self.data_version["timestamp"])
            version = (before[0] + len(accepted), int(timestamp_ms))
            self.changes.append(Change(version, tuple(accepted)), before)  # durable before anyone sees it
            for name, cfg in pending.items():
                if cfg is None:
                    self._topics.pop(name, None)
                else:
                    self._topics[name] = cfg
            if marks:
                self._marks.update(marks)
                _forget_old_marks(self._marks, int(timestamp_ms))
            self.data_version = {"counter": version[0], "timestamp": version[1]}
            if self.changes.size > max(self.FOLD_MIN_BYTES, self._file_bytes):
                self._fold_locked()
        return refusals

    def _refuse_builtin(self, name: str, what: str) -> None:
        if self.is_builtin(name):
            raise StoreError(f"topic {name} is a system topic the broker registers itself; it cannot be {what}")

    # ------------------------------------------------------------------ persistence / snapshots
    def to_json(self) -> dict[str, Any]:
        data = {
            "dataVersion": dict(self.data_version),
            "topicConfigTable": {name: self._topics[name].to_json() for name in sorted(self._topics)},
        }
        if self._marks:
            data[MARKS_KEY] = {name: self._marks[name].to_json() for name in sorted(self._marks)}
        return data

    def snapshot(self) -> str:
        with self._lock:
            return json_file.dumps(self.to_json())

    def restore(self, text: str) -> None:
        """Replace the table with a ``snapshot`` (replica catch-up) and write it to ``topics.json``."""
        data = json_file.loads(text)
        with self._lock:
            self._topics = _with_builtins(
                {n: TopicConfig.from_json(v) for n, v in data.get("topicConfigTable", {}).items()})
            self._marks = _marks_from_json(data)
            dv = data.get("dataVersion", {})
            self.data_version = {"counter": int(dv.get("counter", 0)), "timestamp": int(dv.get("timestamp", 0))}
            # the log first: a crash before the file is written leaves a log that continues neither file (ignored)
            self.changes.restart(self._version())
            self._write_file_locked()

    def fold(self, only_if_changed: bool = True) -> None:
        """Write the whole table to ``topics.json`` (the store's periodic thread, a clean stop)."""
        with self._lock:
            if only_if_changed and self._file_version == self._version():
                return
            self._fold_locked()

    persist = fold

    def close(self) -> None:
        self.changes.close()

    def _version(self) -> Version:
        return self.data_version["counter"], self.data_version["timestamp"]

    def _fold_locked(self) -> None:
        """topics.json first (its old content becomes the .bak), then a log that keeps only what that .bak lacks:
        a crash between the two leaves a log whose lines the new file already holds (skipped at load)."""
        bak = self._file_version
        self._write_file_locked()
        self.changes.restart(bak, self.changes.after(bak) or ())
        self.folds += 1

    def _write_file_locked(self) -> None:
        text = json_file.dumps(self.to_json())
        json_file.write_safely(self.path, text)
        self._file_version = self._version()
        self._file_bytes = len(text.encode())


def _apply_ops(topics: dict[str, TopicConfig], marks: dict[str, TopicMark], ops: Sequence[tuple[str, Any]],
               timestamp_ms: int) -> None:
    """Replay one change of the log onto ``topics`` and ``marks``."""
    marked = False
    for op, arg in ops:
        if op == "put":
            cfg = TopicConfig.from_json(arg)
            topics[cfg.topic_name] = cfg
        elif op == "del":
            topics.pop(str(arg), None)
        elif op == "mark":
            marks[str(arg["name"])] = TopicMark.from_json(arg)
            marked = True
        else:
            raise ValueError(f"unknown operation {op!r}")
    if marked:
        _forget_old_marks(marks, timestamp_ms)


def _forget_old_marks(marks: dict[str, TopicMark], now_ms: int) -> None:
    """Drop the marks older than ``MARK_KEEP_MS`` before ``now_ms`` (a change's timestamp: the same everywhere)."""
    for name in [n for n, m in marks.items() if now_ms - m.at_ms > MARK_KEEP_MS]:
        del marks[name]


def _marks_from_json(data: dict[str, Any]) -> dict[str, TopicMark]:
    return {str(name): TopicMark.from_json(v) for name, v in data.get(MARKS_KEY, {}).items()}

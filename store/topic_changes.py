"""TopicChangeLog: ``config/topics.json.changes``, the append-only log of topic-table changes beside ``topics.json``
(docs/design/topic-table.md).

Why: ``topics.json`` is RocketMQ's file, one JSON document of the whole table; rewriting it on every change made
a create cost O(all topics) (10,000 topics: 1.7 MB per create). A change is appended here instead, one line per
change (of any number of topics), and synced before it is acknowledged; the table folds the log into
``topics.json`` now and then and at a clean stop.

The file: a header line naming the data version of the ``topics.json`` it continues, then one line per change::

    <crc32 hex> {"base":{"counter":12,"timestamp":1700000000000}}
    <crc32 hex> {"v":13,"ts":1700000001000,"ops":[["put",{...topic in topics.json's shape...}]]}
    <crc32 hex> {"v":15,"ts":1700000002000,"ops":[["put",{...}],["del","old-topic"]]}

``v`` is the table's ``dataVersion.counter`` after the change (it grows by one per topic changed) and ``ts`` its
timestamp, so a loaded ``topics.json`` tells which lines it already holds. The CRC covers the JSON text. A
damaged last line is a write the crash cut short (never acknowledged: the sync did not return) and is dropped; a
damaged line followed by whole ones is damage to synced data and stops the load.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from raftmq.store.errors import StoreLoadError
from raftmq.store.json_file import fsync_dir, makedirs_durably

log = logging.getLogger("raftmq.store.topic_changes")

Version = tuple[int, int]  # (dataVersion counter, timestamp)


@dataclass(frozen=True)
class Change:
    """One line: the table's version after it and its topic operations (``("put", topic JSON)`` or
    ``("del", name)``)."""

    version: Version
    ops: tuple[tuple[str, Any], ...]

    def encode(self) -> bytes:
        body = {"v": self.version[0], "ts": self.version[1], "ops": [list(op) for op in self.ops]}
        return _line(body)


def _line(body: dict) -> bytes:
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return f"{zlib.crc32(text.encode()):08x} {text}\n".encode()


def _parse(raw: bytes) -> dict | None:
    """The JSON of one whole line whose CRC matches, else None."""
    if not raw.endswith(b"\n") or len(raw) < 10 or raw[8:9] != b" ":
        return None
    text = raw[9:-1]
    try:
        if int(raw[:8], 16) != zlib.crc32(text):
            return None
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class TopicChangeLog:
    """The log file; ``read`` at load, ``append`` per change (synced), ``restart`` when the table is folded."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd = -1
        self.base: Version | None = None  # the header's version; None: no file yet
        self.changes: list[Change] = []  # what the file holds, in order
        self.size = 0  # bytes in the file

    # ------------------------------------------------------------------ load
    def read(self) -> None:
        """Read the file (absent: nothing); a torn last line is cut off, damage before it raises StoreLoadError."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        lines = data.splitlines(keepends=True)
        good = 0
        parsed: list[dict] = []
        for i, raw in enumerate(lines):
            value = _parse(raw)
            if value is None:
                if any(_parse(later) is not None for later in lines[i + 1:]):
                    raise StoreLoadError(
                        f"{self.path} is damaged at line {i + 1} (bad checksum or JSON) with whole lines after "
                        "it: changes the node acknowledged are unreadable. Restore the file, or move it away to "
                        "start from topics.json (topics changed since its last fold are then missing; a "
                        "replicated member gets them back with `raftmq cluster rebuild-member`)")
                break
            parsed.append(value)
            good += len(raw)
        try:
            if parsed:
                head = parsed[0]["base"]
                self.base = (int(head["counter"]), int(head["timestamp"]))
                self.changes = [Change((int(c["v"]), int(c["ts"])), tuple((str(op), arg) for op, arg in c["ops"]))
                                for c in parsed[1:]]
        except (KeyError, TypeError, ValueError) as e:
            raise StoreLoadError(f"{self.path} does not have the change log's shape ({e}); move it away to start "
                                 "from topics.json") from None
        if good < len(data):
            log.warning("%s: dropping a torn last line (%d bytes): a change cut short by a crash, never "
                        "acknowledged", self.path, len(data) - good)
            with open(self.path, "r+b") as f:
                f.truncate(good)
                os.fsync(f.fileno())
        self.size = good

    def after(self, version: Version) -> list[Change] | None:
        """The changes made after the table was at ``version``: all of them when the header names it, those after
        the line that produced it, [] when every line is older (the file lags the table), None when the log does
        not continue ``version`` (it has newer changes, but none connects to it)."""
        if self.base == version:
            return list(self.changes)
        for i, c in enumerate(self.changes):
            if c.version == version:
                return self.changes[i + 1:]
        if all(c.version[0] <= version[0] for c in self.changes):
            return []
        return None

    # ------------------------------------------------------------------ write
    def append(self, change: Change, current: Version) -> None:
        """Append ``change`` and sync it (a new file starts with a header naming ``current``, the version
        before the change)."""
        line = change.encode()
        with self._lock:
            if self._fd < 0:
                self._open(current)
            os.write(self._fd, line)
            os.fdatasync(self._fd)
            self.size += len(line)
            self.changes.append(change)

    def _open(self, current: Version) -> None:
        if self.base is None or not os.path.exists(self.path):
            self._write_new([], current)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)

    def restart(self, base: Version, keep: Sequence[Change] = ()) -> None:
        """Replace the file by one whose header names ``base``, holding ``keep`` (tmp file, fsync, rename,
        directory fsync): after a fold (``keep``: the changes the previous ``topics.json``, now its ``.bak``,
        lacks) or a restore (nothing kept)."""
        with self._lock:
            self._close()
            self._write_new(list(keep), base)

    def _write_new(self, keep: list[Change], base: Version) -> None:
        directory = os.path.dirname(self.path) or "."
        makedirs_durably(directory)
        data = _line({"base": {"counter": base[0], "timestamp": base[1]}}) + b"".join(c.encode() for c in keep)
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(directory)
        self.base = base
        self.changes = keep
        self.size = len(data)

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

"""fastjson-shaped config files (docs/design/store-formats.md#config-files): tab-indented, unquoted integer map keys, safe writes.

RocketMQ tools read these files; its ``MixAll.string2File`` writes ``name.tmp``, keeps the old content as
``name.bak`` and renames. We do the same and fsync each step, and read leniently with a ``.bak`` fallback.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable
from typing import Any

from raftmq.store.errors import StoreLoadError

log = logging.getLogger("raftmq.store.json_file")

_BARE_INT_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def dumps(obj: Any) -> str:
    """fastjson ``toJSONString(obj, prettyFormat=true)``: tabs, no space after ':', int keys unquoted."""
    if _plain(obj):  # string keys and no lists (topics.json): json's own indenting writes the same bytes, 10x faster
        return json.dumps(obj, indent="\t", separators=(",", ":"), ensure_ascii=False)
    out: list[str] = []
    _write(obj, 0, out)
    return "".join(out)


def _plain(obj: Any) -> bool:
    """Nested dicts with string keys and scalar leaves only."""
    if not isinstance(obj, dict):
        return not isinstance(obj, list)
    return all(isinstance(k, str) and _plain(v) for k, v in obj.items())


def _key(k: Any) -> str:
    return str(k) if isinstance(k, int) and not isinstance(k, bool) else json.dumps(str(k), ensure_ascii=False)


def _write(obj: Any, depth: int, out: list[str]) -> None:
    if isinstance(obj, dict):
        if obj and all(isinstance(k, int) for k in obj) and all(not isinstance(v, dict | list) for v in obj.values()):
            body = ",".join(f"{_key(k)}:{json.dumps(v)}" for k, v in obj.items())
            out.append("{" + body + "\n" + "\t" * depth + "}")  # fastjson prints int-keyed maps inline
            return
        if not obj:
            out.append("{}")
            return
        out.append("{\n")
        items = list(obj.items())
        for i, (k, v) in enumerate(items):
            out.append("\t" * (depth + 1) + _key(k) + ":")
            _write(v, depth + 1, out)
            out.append(",\n" if i + 1 < len(items) else "\n")
        out.append("\t" * depth + "}")
    elif isinstance(obj, list):
        out.append("[" + ",".join(json.dumps(v, ensure_ascii=False) for v in obj) + "]")
    else:
        out.append(json.dumps(obj, ensure_ascii=False))


def loads(text: str) -> Any:
    """Parse fastjson output (bare integer keys are quoted first)."""
    return json.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', text))


def write_safely(path: str, text: str) -> None:
    """tmp + fsync, old content to .bak, atomic rename, fsync of the directory."""
    directory = os.path.dirname(path) or "."
    makedirs_durably(directory)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    if os.path.exists(path) and os.path.getsize(path) > 0:
        shutil.copyfile(path, path + ".bak")
    os.replace(tmp, path)
    fsync_dir(directory)


def fsync_dir(directory: str) -> None:
    """Make a directory's entries (a created, renamed or removed name) survive a power loss."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs_durably(directory: str, sync_parent: Callable[[str], None] = fsync_dir) -> None:
    """``os.makedirs(directory, exist_ok=True)`` whose new directories survive a power loss: each created one's
    parent is synced (a file fsynced inside a directory whose own name was never synced is lost with it).
    ``sync_parent`` is called with that parent: ``fsync_dir`` by default, or something that batches the syncs."""
    directory = os.path.abspath(directory)
    if os.path.isdir(directory):
        return
    missing = []
    while not os.path.isdir(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:
            if not os.path.isdir(d):
                raise
        sync_parent(os.path.dirname(d))


def read_leniently(path: str) -> Any | None:
    """The parsed file, else its ``.bak``; None when neither exists; StoreLoadError when both are damaged."""
    problems: list[str] = []
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            continue
        except UnicodeDecodeError as e:
            problems.append(f"{candidate} is not valid JSON (not UTF-8 text: byte 0x{e.object[e.start]:02x} at "
                            f"position {e.start})")
            continue
        if not text.strip():
            problems.append(f"{candidate} is empty")
            continue
        try:
            value = loads(text)
        except ValueError as e:
            problems.append(f"{candidate} is not valid JSON ({e})")
            continue
        if candidate != path:
            log.warning("config file %s unusable (%s); loaded %s instead", path, "; ".join(problems), candidate)
        return value
    if problems and any("not valid" in p for p in problems):
        raise StoreLoadError("cannot load " + path + ": " + "; ".join(problems) + "; repair or remove the file")
    return None


class PersistedTable:
    """A small in-memory table written to one fastjson-shaped file by the store's periodic thread.

    Offsets change far more often than they need to reach disk, so changes only mark the table dirty and
    ``persist`` writes it (RocketMQ's ``ConfigManager.persist``). Subclasses name the file and say how the table
    is read from and written to its JSON shape; ``snapshot``/``restore`` carry it to a catching-up replica.
    """

    FILE_NAME = ""

    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, self.FILE_NAME)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # one writer of the file at a time
        self._table: dict = {}
        self._dirty = False

    def _parse(self, data: Any) -> dict:
        """The table held by the file's parsed JSON; StoreError naming the file when it has the wrong shape."""
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    def load(self) -> None:
        data = read_leniently(self.path)
        if data is None:
            return
        table = self._parse(data)
        with self._lock:
            self._table = table

    def snapshot(self) -> str:
        with self._lock:
            return dumps(self.to_json())

    def restore(self, text: str) -> None:
        """Replace the table with a ``snapshot`` (replica catch-up) and persist it."""
        table = self._parse(loads(text))
        with self._lock:
            self._table = table
            self._dirty = True
        self.persist()

    def persist(self, only_if_dirty: bool = False) -> None:
        with self._write_lock:
            with self._lock:
                if only_if_dirty and not self._dirty:
                    return
                text = dumps(self.to_json())
                self._dirty = False
            write_safely(self.path, text)

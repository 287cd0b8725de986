"""Helpers shared by the store acceptance tests: tiny configs, waiting for reput, reading files directly.

The commit log is read straight from the segment files on disk (not through the store's read path), so a
test compares the store's answers with what is really there.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from raftmq.store.message import RecordStatus, decode_record

# Small enough that files roll every few messages, large enough for a batch of a few hundred bytes each.
TINY = {
    "mapped_file_size_commit_log": 8192,
    "mapped_file_size_consume_queue": 5 * 20,
    "max_hash_slot_num": 4,
    "max_index_num": 8,
    "flush_interval_commit_log": 10,
    "flush_interval_consume_queue": 10,
    "preallocate": False,
}


def wait_dispatched(st, timeout: float = 20.0) -> None:
    """Block until reput has dispatched everything in the commit log (consume queues and index are current)."""
    deadline = time.monotonic() + timeout
    while st.dispatch_behind_bytes() > 0:
        if time.monotonic() > deadline:
            raise AssertionError(f"reput still {st.dispatch_behind_bytes()} bytes behind after {timeout}s")
        time.sleep(0.002)


def segment_files(directory: str | Path) -> list[Path]:
    d = Path(directory)
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.is_file() and p.name.isdigit())


def read_commit_log_files(root: str | Path):
    """Every message record in ``root/commitlog``, decoded from the files, in physical order.

    Each segment is read from its start until the end-of-file blank record or the first position that is not
    a valid record (the end of data). Returns ``(messages, end_offset)``.
    """
    msgs = []
    end = 0
    for path in segment_files(Path(root) / "commitlog"):
        base = int(path.name)
        data = path.read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            r = decode_record(data, pos, check_crc=True)
            if r.status == RecordStatus.OK:
                msgs.append(r.message)
                pos += r.size
                end = base + pos
            elif r.status == RecordStatus.BLANK:
                end = base + len(data)
                break
            else:
                break
    return msgs, end


def tree_bytes(directory: str | Path) -> dict[str, bytes]:
    """Relative path -> content of every file under ``directory``."""
    root = Path(directory)
    out: dict[str, bytes] = {}
    if not root.exists():
        return out
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = p.read_bytes()
    return out

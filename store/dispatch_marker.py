"""What a clean stop leaves for the next start: how far consume queues and index were complete (issue 33 item 7).

Why: the start-up check of the derived files used to walk the whole commit log (3.4 s of a 5.2 s start with 600k
records, and it grows with the log). After a clean stop nothing is new: reput had dispatched everything and the
files were flushed. The stop writes ``dispatched.json`` (fsynced, renamed, directory fsynced) before it removes the
``abort`` marker: the commit-log offset dispatch had reached, and each queue's range. The next start reads and
deletes it, checks only the log after that offset, and opens no queue file (issue 43: with 10,000 topics, opening
and recovering every queue was most of a 12 s start): each queue is taken as its line describes it, and checked
against it when it is first used (``store.consume_queue.ConsumeQueue``): a queue that comes back shorter (a
deleted or rotten queue file) is re-dispatched from the end of its last unit, and its next offset is never
lowered. Older damage is the scrubber's (its first pass starts a minute after the start) and every read checks
the units it uses.

Without the file (a crash, a store from before it existed) the start checks what recovery re-dispatches anyway,
from the checkpoint's segment after a machine crash, or the whole log after a clean stop without it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

from raftmq.store.json_file import fsync_dir

log = logging.getLogger("raftmq.store.dispatch_marker")

FILE_NAME = "dispatched.json"


@dataclass
class DispatchMarker:
    """``end``: every record below it was in the consume queues and index; ``queues``: ``"topic/queueId"`` ->
    ``(first queue offset, next queue offset, commit-log offset of the first unit's record, end of the last unit's
    record)`` (the last two -1 when not known; a marker from before them has the first two only);
    ``index_files``: the index file names in order."""

    end: int
    queues: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    index_files: list[str] = field(default_factory=list)


def write(root: str, marker: DispatchMarker) -> None:
    """Make ``marker`` durable (tmp file, fsync, rename, directory fsync)."""
    path = os.path.join(root, FILE_NAME)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"end": marker.end, "queues": {k: list(v) for k, v in marker.queues.items()},
                   "index_files": marker.index_files}, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(root)


def _queue_line(v: list) -> tuple[int, int, int, int]:
    first, nxt = int(v[0]), int(v[1])
    return (first, nxt, int(v[2]), int(v[3])) if len(v) >= 4 else (first, nxt, -1, -1)


def take(root: str) -> DispatchMarker | None:
    """Read and delete the marker (it describes the files as the last clean stop left them: once the store runs
    again, or crashes, it no longer does). None when there is none or it cannot be read."""
    path = os.path.join(root, FILE_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        marker = DispatchMarker(int(raw["end"]), {str(k): _queue_line(v) for k, v in raw["queues"].items()},
                                [str(n) for n in raw["index_files"]])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        log.warning("ignoring %s: %s (the start checks the whole log instead)", path, e)
        marker = None
    try:
        os.unlink(path)
        fsync_dir(root)
    except FileNotFoundError:
        pass
    return marker

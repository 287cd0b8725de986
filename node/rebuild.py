"""Rebuilding a member from its peers (``raftmq cluster rebuild-member``): its files are set aside, it restarts
empty and copies the group's committed data like a brand-new member.

Why a marker file and a restart instead of swapping the store inside the running process: every service holds the
store, and an empty start is the path that is already proven (start-up copy from the most advanced peer, verified
record by record, resumable). The marker is written before the request is answered, so whatever happens next (a
clean restart, a kill, a pod rescheduled) the next start sets the files aside before it opens anything, and
exactly once: each entry moves by an atomic rename, and the marker goes last.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time

from raftmq.store.json_file import fsync_dir

log = logging.getLogger(__name__)

MARKER = "REBUILD-REQUESTED"
SET_ASIDE_PREFIX = "set-aside-"
_KEPT = ("lost+found",)  # a filesystem's own directory at a volume's root stays where it is


class RebuildError(Exception):
    """The data directory cannot be set aside; the message says what to do."""


def request(data_dir: str, by: str, discard: bool = False) -> str:
    """Mark ``data_dir`` for rebuilding at the next start; returns the directory its files will move to (and,
    with ``discard``, be deleted from once they all moved)."""
    into = os.path.join(data_dir, SET_ASIDE_PREFIX + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    tmp = os.path.join(data_dir, MARKER + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"into": os.path.basename(into), "discard": discard, "requested_by": by,
                   "requested_at": time.time()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(data_dir, MARKER))
    fsync_dir(data_dir)
    return into


def set_aside(data_dir: str, replicated: bool) -> str | None:
    """When ``data_dir`` is marked: move every file and directory in it (earlier set-aside copies excepted) into
    the directory the request named, then drop the mark. Returns that directory, or None when not marked."""
    marker = os.path.join(data_dir, MARKER)
    try:
        with open(marker) as f:
            mark = json.load(f)
        into = os.path.join(data_dir, os.path.basename(mark["into"]))
        discard = bool(mark.get("discard", False))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RebuildError(f"{marker} is unreadable ({e}); remove it to start with this member's files as they "
                           "are, or run `raftmq cluster rebuild-member` again") from None
    if not replicated:
        raise RebuildError(f"{marker} asks to rebuild this node from its peers, but it has none (cluster.members is "
                           "empty): its data would be lost. Remove the file to start with its files as they are")
    os.makedirs(into, exist_ok=True)
    moved = 0
    for name in sorted(os.listdir(data_dir)):
        if name == MARKER or name.startswith(SET_ASIDE_PREFIX) or name in _KEPT:
            continue
        os.rename(os.path.join(data_dir, name), os.path.join(into, name))
        moved += 1
    fsync_dir(into)
    fsync_dir(data_dir)
    os.remove(marker)
    fsync_dir(data_dir)
    if discard:  # after the mark is gone: an interrupted delete leaves a partial copy, never a half-moved store
        shutil.rmtree(into)
        log.warning("rebuild requested: %d entries of %s deleted; this member starts empty and copies the group's "
                    "data from a peer", moved, data_dir)
        return into
    log.warning("rebuild requested: %d entries of %s set aside in %s; this member starts empty and copies the "
                "group's data from a peer (delete that directory once the member is back and `raftmq cluster "
                "check` agrees)", moved, data_dir, into)
    return into


def restart_process() -> None:
    """Replace this process by a fresh start of the same command line (same pid, environment and arguments:
    ``raftmq node ...`` in the image, ``python -m raftmq.node node ...`` locally)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])

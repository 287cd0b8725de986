"""Small, idempotent patches to pysyncobj 0.3.17 that raftmq's replication depends on (REPLICATION.md 2.5, 2.6).

Why each one:
1. pickle protocol 4 instead of 2: protocol 2 pickles ``bytes`` as a latin-1 string, inflating binary records
   ~1.5x per pickling layer (a command is pickled twice on its way to a follower). Readers auto-detect the
   protocol, so a patched node still reads a stock node's messages.
2. zlib level 0 on the wire instead of 3: encoded records are mostly incompressible and level 3 costs ~7 ms per
   64 KiB per follower on the tick thread. Level 0 is still a valid zlib stream, so stock nodes can read it.
3. write readiness: when ``send()`` cannot write everything, stock TcpConnection waits for the next send (the
   next heartbeat) to flush the rest; subscribe for WRITE so large batches drain at socket speed.
4. durable Raft metadata: the journal's meta file (currentTerm, votedFor, commit index) is replaced by rename
   without fsync; fsync the file and its directory so a vote survives power loss. Only a change of term or vote
   needs that (Raft's safety rests on them; a stale commit index is simply learned again from the leader), and
   pysyncobj re-stores the meta once a second on every follower that got a heartbeat, changed or not: an fsync
   per second on the tick thread, which on a busy disk delayed heartbeats into elections (issue 11). So an
   unchanged meta is not rewritten, and a commit-index-only change is written without fsync (as stock does).
5. journal writes without an fstat: the journal's ResizableFile asks ``mmap.size()`` (an fstat, which releases
   and retakes the GIL) on every write, two or three per entry on every member; the mapping's own length says
   the same (the file only grows through that mapping) without a system call.
6. a journal with a torn tail opens: pysyncobj trusts the header's end-of-records offset, so a crash or power
   cut that kept the header's page but not the last record's (pages reach the disk in any order unless synced)
   made the member fail to start on a ``struct.error``, although its peers hold every entry it lost. Before
   pysyncobj reads the journal, records are walked (size at both ends, consecutive indexes, terms that never
   fall) and the header is cut back to the last whole record; the member fetches the rest from the leader. No
   acknowledged entry is lost by that: under ``sync`` a member acknowledges only what it synced, and under
   ``async`` a power cut may lose the last moments anyway (README: Replication).

Patches 1 and 2 change the bytes on the wire but stay readable by stock nodes; every member runs this module.
"""

from __future__ import annotations

import logging
import mmap
import os
import shutil
import struct
import zlib

import pysyncobj.journal as _journal
import pysyncobj.pickle as _pickle
import pysyncobj.tcp_connection as _tcp
from pysyncobj.poller import POLL_EVENT_TYPE

from raftmq.store.json_file import fsync_dir

PICKLE_PROTOCOL = 4
ZLIB_LEVEL = 0

_applied = False
_U32 = struct.Struct("<I")
_RECORD_HEAD = struct.Struct("<IQQ")  # size of (index, term, command), index, term; the size again after it
log = logging.getLogger(__name__)


class _FastZlib:
    """Stands in for the ``zlib`` module inside tcp_connection: same decompress, cheaper compress."""

    error = zlib.error

    @staticmethod
    def compress(data: bytes, level: int = ZLIB_LEVEL) -> bytes:
        return zlib.compress(data, ZLIB_LEVEL)

    decompress = staticmethod(zlib.decompress)


def _send_and_subscribe_write(self, message) -> None:
    _orig_send(self, message)
    if self._TcpConnection__writeBuffer and self._TcpConnection__fileno is not None:
        self._TcpConnection__poller.subscribe(
            self._TcpConnection__fileno, self._TcpConnection__processConnection,
            POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.WRITE | POLL_EVENT_TYPE.ERROR)


def _store_meta_durably(self, meta) -> None:
    last = getattr(self, "_raftmq_last_meta", None)
    if last == meta:
        return  # pysyncobj asks once a second whether anything changed or not
    durable = last is None or any(last.get(k) != meta.get(k) for k in ("currentTerm", "votedForNodeId"))
    path = self.getPath()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(_pickle.dumps(meta))
        f.flush()
        if durable:
            os.fsync(f.fileno())
    shutil.move(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(os.path.abspath(path)))
    self._raftmq_last_meta = dict(meta)


def _journal_write(self, offset: int, values: bytes) -> None:
    mapping = self._ResizableFile__mm
    end = offset + len(values)
    if end > len(mapping):
        _orig_journal_write(self, offset, values)  # grows the file (and mapping) first
        return
    mapping[offset:end] = values


def drop_torn_tail(path: str) -> int:
    """Cut the journal at ``path`` back to its last whole record (patch 6); the bytes dropped, 0 if none."""
    try:
        f = open(path, "r+b")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return 0
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < _journal.FIRST_RECORD_OFFSET:
            return 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            end = _U32.unpack_from(mm, _journal.LAST_RECORD_OFFSET_OFFSET)[0]
            limit = min(end, size)
            pos = _journal.FIRST_RECORD_OFFSET
            last: tuple[int, int] | None = None
            while pos + _RECORD_HEAD.size + 4 <= limit:
                n, index, term = _RECORD_HEAD.unpack_from(mm, pos)
                if n < 16 or pos + n + 8 > limit or _U32.unpack_from(mm, pos + 4 + n)[0] != n:
                    break
                if last is not None and (index != last[0] + 1 or term < last[1]):
                    break
                last = (index, term)
                pos += n + 8
        if pos >= end:
            return 0
        f.seek(_journal.LAST_RECORD_OFFSET_OFFSET)
        f.write(_U32.pack(pos))
        f.flush()
        os.fsync(f.fileno())
    after = f"entry {last[0]} (term {last[1]})" if last is not None else "the journal's start"
    log.error("Raft journal %s: a torn tail of %d bytes after %s (a crash or power cut cut its last write short) "
              "was dropped; this member fetches those entries from the leader again", path, end - pos, after)
    return end - pos


def _open_journal_without_torn_tail(self, journalFile) -> None:  # noqa: N803 - pysyncobj's name
    self.torn_tail_bytes = drop_torn_tail(journalFile)  # for the metrics (ReplicatedLog.journal_torn_tail_bytes)
    _orig_file_journal_init(self, journalFile)


_orig_send = _tcp.TcpConnection.send
_orig_journal_write = _journal.ResizableFile.write
_orig_file_journal_init = _journal.FileJournal.__init__


def apply() -> None:
    """Install the patches (once per process)."""
    global _applied
    if _applied:
        return
    setattr(_pickle, "__protocol", PICKLE_PROTOCOL)
    _tcp.zlib = _FastZlib
    _tcp.TcpConnection.send = _send_and_subscribe_write
    _journal.MetaStorer.storeMeta = _store_meta_durably
    _journal.ResizableFile.write = _journal_write
    _journal.FileJournal.__init__ = _open_journal_without_torn_tail
    _applied = True

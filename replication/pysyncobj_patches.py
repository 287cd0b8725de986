"""Small, idempotent patches to pysyncobj 0.3.17 that raftmq's replication depends on (docs/design/replication.md#what-raftmq-changes-in-pysyncobj).

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
   writes the file (Raft's safety rests on them); pysyncobj also re-stores it once a second on every follower
   whose commit index moved, and stock did that by renaming an unsynced file over the durable one, so a power cut
   could leave an empty meta file and the member forgot its vote (two votes in one term). The commit index is
   therefore a hint, written only together with a term or vote: a stale one merely delays applying entries
   until the leader says again that they are committed (docs/design/durability.md).
5. journal writes without an fstat: the journal's ResizableFile asks ``mmap.size()`` (an fstat, which releases
   and retakes the GIL) on every write, two or three per entry on every member; the mapping's own length says
   the same (the file only grows through that mapping) without a system call.
6. a journal with a torn tail opens: pysyncobj trusts the header's end-of-records offset, so a crash or power
   cut that kept the header's page but not the last record's (pages reach the disk in any order unless synced)
   made the member fail to start on a ``struct.error``, although its peers hold every entry it lost. Before
   pysyncobj reads the journal, records are walked (size at both ends, consecutive indexes, terms that never
   fall) and the header is cut back to the last whole record; the member fetches the rest from the leader. No
   acknowledged entry is lost by that: under ``sync`` a member acknowledges only what it synced, and under
   ``async`` a power cut may lose the last moments anyway (docs/operations/cluster.md#durability).

7. a snapshot is durable before the journal is compacted: pysyncobj renames the dump (ours, or one received
   from the leader) into place without syncing the incoming file or the directory, then drops the journal
   entries the dump covers. After a power cut a member had a compacted journal and no dump, could apply nothing
   and never caught up. The file is synced, renamed, and the directory synced before pysyncobj goes on.
8. crash-safe compaction: stock compaction rewrites the journal file in place (header first, then the kept
   records), so a power cut in the middle (any subset of its pages on disk) could leave records of the old and
   new layout mixed and lose entries this member had acknowledged as durable. The kept entries are written to a
   new file, synced, renamed over the journal and the directory synced.

Patches 1 and 2 change the bytes on the wire but stay readable by stock nodes; every member runs this module.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import zlib
from dataclasses import dataclass

import pysyncobj.journal as _journal
import pysyncobj.pickle as _pickle
import pysyncobj.serializer as _serializer
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
    if last is not None and all(last.get(k) == meta.get(k) for k in _DURABLE_META_KEYS):
        return  # only the commit index moved: a hint, never renamed over the durable term and vote (patch 4)
    path = self.getPath()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(_pickle.dumps(meta))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))
    self._raftmq_last_meta = dict(meta)


def _get_meta_remembering_it(self):
    """pysyncobj's read of the meta file at start, remembered so an unchanged term and vote are not rewritten."""
    meta = _orig_get_meta(self)
    self._raftmq_last_meta = dict(meta) if meta else None
    return meta


def _journal_write(self, offset: int, values: bytes) -> None:
    mapping = self._ResizableFile__mm
    end = offset + len(values)
    if end > len(mapping):
        _orig_journal_write(self, offset, values)  # grows the file (and mapping) first
        return
    mapping[offset:end] = values


@dataclass(frozen=True)
class JournalSpan:
    """What a journal file holds in whole records: first and last (index, term), and where its records end."""

    first: tuple[int, int] | None
    last: tuple[int, int] | None
    records_end: int     # file offset after the last whole record
    header_end: int      # file offset after the last record according to the header


def journal_span(path: str) -> JournalSpan | None:
    """Walk the journal at ``path`` record by record (sizes at both ends, consecutive indexes, terms that never
    fall), stopping at the first record that is not whole; None when there is no journal file."""
    walked = _walk_journal(path, None)
    if walked is None:
        return None
    records, records_end, header_end = walked
    first = records[0][:2] if records else None
    last = records[-1][:2] if records else None
    return JournalSpan(first, last, records_end, header_end)


def journal_commands(path: str, command_type: int) -> list[tuple[int, bytes]]:
    """(index, command) of the whole records of the journal at ``path`` (as ``journal_span`` walks them) whose
    command is of pysyncobj type ``command_type`` (its first byte); empty when there is no journal. Read before
    pysyncobj opens the file (the membership replay at start)."""
    walked = _walk_journal(path, command_type)
    return [(index, command) for index, _term, command in walked[0] if command] if walked is not None else []


def _walk_journal(path: str, command_type: int | None) -> tuple[list, int, int] | None:
    """(records, file offset after the last whole record, the header's end-of-records offset); a record is
    (index, term, command), the command only when its type is ``command_type`` (else b"")."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return None
    records: list[tuple[int, int, bytes]] = []
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < _journal.FIRST_RECORD_OFFSET:
            return records, _journal.FIRST_RECORD_OFFSET, _journal.FIRST_RECORD_OFFSET
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
                wanted = command_type is not None and n > 16 and mm[pos + 20] == command_type
                records.append((index, term, mm[pos + 20:pos + 4 + n] if wanted else b""))
                pos += n + 8
    return records, pos, end


def drop_torn_tail(path: str) -> int:
    """Cut the journal at ``path`` back to its last whole record (patch 6); the bytes dropped, 0 if none."""
    span = journal_span(path)
    if span is None or span.records_end >= span.header_end:
        return 0
    with open(path, "r+b") as f:
        f.seek(_journal.LAST_RECORD_OFFSET_OFFSET)
        f.write(_U32.pack(span.records_end))
        f.flush()
        os.fsync(f.fileno())
    last = span.last
    after = f"entry {last[0]} (term {last[1]})" if last is not None else "the journal's start"
    dropped = span.header_end - span.records_end
    log.error("Raft journal %s: a torn tail of %d bytes after %s (a crash or power cut cut its last write short) "
              "was dropped; this member fetches those entries from the leader again", path, dropped, after)
    return dropped


def _open_journal_without_torn_tail(self, journalFile) -> None:  # noqa: N803 - pysyncobj's name
    self.torn_tail_bytes = drop_torn_tail(journalFile)  # for the metrics (ReplicatedLog.journal_torn_tail_bytes)
    _orig_file_journal_init(self, journalFile)


def _replace_durably(src: str, dst: str) -> None:
    """Patch 7: a snapshot file is on disk, under its final name, before pysyncobj compacts the journal."""
    fd = os.open(src, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(src, dst)
    fsync_dir(os.path.dirname(os.path.abspath(dst)))


def _journal_header(records_end: int) -> bytes:
    name = _journal.APP_NAME.ljust(_journal.NAME_SIZE, b"\0")
    version = _journal.APP_VERSION.ljust(_journal.VERSION_SIZE, b"\0")
    return name + version + struct.pack("<II", _journal.JOURNAL_FORMAT_VERSION, records_end)


def _delete_entries_to_atomically(self, entry_to: int) -> None:
    """Patch 8: keep the entries from position ``entry_to`` on, written to a new synced file renamed into place."""
    kept = self._FileJournal__journal[entry_to:]
    resizable = self._FileJournal__journalFile
    path = resizable._ResizableFile__fileName
    records = bytearray()
    for command, idx, term in kept:
        body = struct.pack("<QQ", idx, term) + _pickle.to_bytes(command)
        size = _U32.pack(len(body))
        records += size + body + size
    tmp = path + ".compacting"
    with open(tmp, "wb") as f:
        f.write(_journal_header(_journal.FIRST_RECORD_OFFSET + len(records)) + records)
        f.flush()
        os.fsync(f.fileno())
    resizable._ResizableFile__mm.close()  # the old file's pages no longer matter: not flushed first
    resizable._ResizableFile__f.close()
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))
    self._FileJournal__journalFile = _journal.ResizableFile(path)
    self._FileJournal__journal = list(kept)
    self._FileJournal__currentOffset = _journal.FIRST_RECORD_OFFSET + len(records)


_orig_send = _tcp.TcpConnection.send
_orig_journal_write = _journal.ResizableFile.write
_orig_file_journal_init = _journal.FileJournal.__init__
_orig_get_meta = _journal.MetaStorer.getMeta
_DURABLE_META_KEYS = ("currentTerm", "votedForNodeId")


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
    _journal.MetaStorer.getMeta = _get_meta_remembering_it
    _serializer.atomicReplace = _replace_durably
    _journal.FileJournal.deleteEntriesTo = _delete_entries_to_atomically
    _applied = True

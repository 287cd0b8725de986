"""The Raft snapshot ("full dump") raftmq gives pysyncobj: kilobytes, never messages.

Why custom: pysyncobj's default dump pickles the SyncObj's attributes (with a fork, risky in a gRPC process);
our state is the store, which is durable on its own. The dump only records how far the store is
(last applied Raft index with a frame, the commit-log end it produced), the replicated metadata (topic configs,
consumer offsets) at that point, and pysyncobj's own tuple (last two log entries, cluster), which it needs back.

File layout: b"RMQSNAP1" | u32 header length | header JSON | u32 tuple length | pickled tuple | u32 crc32.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import zlib
from dataclasses import dataclass

MAGIC = b"RMQSNAP1"
_U32 = struct.Struct(">I")


class SnapshotError(Exception):
    """The dump file is unreadable; the message names the file and what is wrong."""


@dataclass
class SnapshotMeta:
    applied_index: int      # last Raft index that wrote a frame (AppliedIndex.last)
    commit_log_end: int     # commit-log end after it
    raft_index: int         # pysyncobj's last applied index (>= applied_index: no-op entries write no frame)
    metadata: dict          # {"topics": ..., "offsets": ...}


def encode(meta: SnapshotMeta, internal: tuple) -> bytes:
    header = json.dumps({"applied_index": meta.applied_index, "commit_log_end": meta.commit_log_end,
                         "raft_index": meta.raft_index, "metadata": meta.metadata},
                        separators=(",", ":")).encode()
    tup = pickle.dumps(internal, protocol=4)
    body = MAGIC + _U32.pack(len(header)) + header + _U32.pack(len(tup)) + tup
    return body + _U32.pack(zlib.crc32(body))


def decode(data: bytes, name: str = "snapshot") -> tuple[SnapshotMeta, tuple]:
    if len(data) < len(MAGIC) + 12 or data[:len(MAGIC)] != MAGIC:
        raise SnapshotError(f"{name}: not a raftmq snapshot (bad magic); delete it and let the node catch up")
    body, (crc,) = data[:-4], _U32.unpack_from(data, len(data) - 4)
    if zlib.crc32(body) != crc:
        raise SnapshotError(f"{name}: checksum mismatch (torn or corrupted write); delete it and let the node "
                            "catch up from a peer")
    pos = len(MAGIC)
    (hl,) = _U32.unpack_from(body, pos)
    header = json.loads(body[pos + 4:pos + 4 + hl])
    pos += 4 + hl
    (tl,) = _U32.unpack_from(body, pos)
    internal = pickle.loads(body[pos + 4:pos + 4 + tl])
    meta = SnapshotMeta(header["applied_index"], header["commit_log_end"], header["raft_index"], header["metadata"])
    return meta, internal


def write_file(path: str, meta: SnapshotMeta, internal: tuple) -> None:
    """Write (pysyncobj renames the file into place afterwards); fsynced so a dump never outlives its data."""
    with open(path, "wb") as f:
        f.write(encode(meta, internal))
        f.flush()
        os.fsync(f.fileno())


def read_file(path: str) -> tuple[SnapshotMeta, tuple]:
    with open(path, "rb") as f:
        return decode(f.read(), path)

"""StoreCheckpoint: the 4096-byte ``checkpoint`` file with three timestamps (docs/design/store-formats.md#checkpoint-abort-and-lock).

It bounds abnormal recovery: commit-log segments whose first message is older than ``min_timestamp`` are
known to be fully dispatched and flushed.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading

from raftmq.store.config import OS_PAGE_SIZE
from raftmq.store.mapped_file import sync_mapped

_THREE = struct.Struct(">qqq")
_FLUSHED = struct.Struct(">q")
FLUSHED_OFFSET_POSITION = 24  # RocketMQ 5.x masterFlushedOffset; 4.9 leaves it 0 and never reads it


class StoreCheckpoint:
    """physicMsgTimestamp @0, logicsMsgTimestamp @8, indexMsgTimestamp @16 (big-endian int64).

    Also ``flushed_offset`` @24 (RocketMQ 5.x's masterFlushedOffset slot): the commit-log offset up to which
    everything was durable when the checkpoint was last written. Recovery may cut damage only beyond it
    (``store.integrity``); 0 means unknown (a store written before it existed).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        exists = os.path.exists(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            st = os.fstat(fd)
            if st.st_size != OS_PAGE_SIZE:
                os.ftruncate(fd, OS_PAGE_SIZE)
            self._mm = mmap.mmap(fd, OS_PAGE_SIZE)
            self._inode = st.st_ino
        finally:
            os.close(fd)
        self._lock = threading.Lock()
        if exists:
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = _THREE.unpack_from(
                self._mm, 0
            )
            self.flushed_offset = max(0, _FLUSHED.unpack_from(self._mm, FLUSHED_OFFSET_POSITION)[0])
        else:
            self.physic_msg_timestamp = self.logics_msg_timestamp = self.index_msg_timestamp = 0
            self.flushed_offset = 0

    def flush(self) -> None:
        """Write the three timestamps and make the page durable."""
        with self._lock:
            if self._mm.closed:
                return
            _THREE.pack_into(
                self._mm, 0, self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp
            )
            _FLUSHED.pack_into(self._mm, FLUSHED_OFFSET_POSITION, self.flushed_offset)
            sync_mapped(self.path, self._inode, self._mm)

    def min_timestamp(self) -> int:
        """``getMinTimestamp``: min(physic, logics) minus 3 s of slack, never negative."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def shutdown(self) -> None:
        self.flush()
        with self._lock:
            self._mm.close()


def read_flushed_offset(path: str) -> int:
    """The ``flushed_offset`` of a checkpoint file without mapping it (offline tools); 0 when absent."""
    try:
        with open(path, "rb") as f:
            data = f.read(FLUSHED_OFFSET_POSITION + 8)
    except FileNotFoundError:
        return 0
    if len(data) < FLUSHED_OFFSET_POSITION + 8:
        return 0
    return max(0, _FLUSHED.unpack_from(data, FLUSHED_OFFSET_POSITION)[0])

"""The single-node store engine: RocketMQ 4.9's CommitLog / ConsumeQueue / IndexFile, byte-compatible.

The public surface is ``store.MessageStore`` (see ``store.message_store`` for the whole API) and the
record codec in ``store.message``; everything else is internal to the package.
"""

from raftmq.store.commit_log import AppendResult
from raftmq.store.config import StoreConfig
from raftmq.store.errors import (
    DiskFullError,
    MessageIllegalError,
    PropertiesSizeExceededError,
    StoreClosedError,
    StoreError,
    StoreLockedError,
)
from raftmq.store.message import Message, MessageExt
from raftmq.store.message_store import GetResult, GetStatus, MessageStore, PutResult, PutStatus
from raftmq.store.tag_filter import TagFilter

__all__ = [
    "AppendResult",
    "DiskFullError",
    "GetResult",
    "GetStatus",
    "Message",
    "MessageExt",
    "MessageIllegalError",
    "MessageStore",
    "PropertiesSizeExceededError",
    "PutResult",
    "PutStatus",
    "StoreClosedError",
    "StoreConfig",
    "StoreError",
    "StoreLockedError",
    "TagFilter",
]

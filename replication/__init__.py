"""The write path: local (single node) and Raft (pysyncobj). `node` calls it; it calls `store`."""

from replication.errors import (
    BusyError,
    NoLeaderError,
    NotLeaderError,
    ReplicationError,
    UnknownOutcomeError,
)
from replication.local import LocalWritePath
from replication.raft_write_path import RaftSettings, RaftWritePath
from replication.write_path import MemberInfo, WritePath

__all__ = [
    "BusyError", "LocalWritePath", "MemberInfo", "NoLeaderError", "NotLeaderError", "RaftSettings", "RaftWritePath", "ReplicationError",
    "UnknownOutcomeError", "WritePath",
]

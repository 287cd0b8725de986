"""The write path: local (single node) and Raft (pysyncobj). `node` calls it; it calls `store`."""

from raftmq.replication.errors import (
    BusyError,
    NoLeaderError,
    NotLeaderError,
    ReplicationError,
    UnknownOutcomeError,
)
from raftmq.replication.local import LocalWritePath
from raftmq.replication.raft_write_path import RaftSettings, RaftWritePath
from raftmq.replication.write_path import MemberInfo, WritePath

__all__ = [
    "BusyError", "LocalWritePath", "MemberInfo", "NoLeaderError", "NotLeaderError", "RaftSettings", "RaftWritePath", "ReplicationError",
    "UnknownOutcomeError", "WritePath",
]

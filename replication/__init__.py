"""The write path: local (single node) and Raft (pysyncobj). `node` calls it; it calls `store`.

The installed pysyncobj is checked first (replication/pysyncobj_guard.py): any import of replication fails with
one line when it is not the release raftmq's use of its internals was written against.
"""

from raftmq.replication import pysyncobj_guard  # noqa: F401  (checks pysyncobj at import)
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

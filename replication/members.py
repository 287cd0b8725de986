"""MemberInfo: one member of a replication group, as the write path, the peers' channels and clients name it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemberInfo:
    """One member of the replication group as clients and peers see it."""

    id: str
    raft_address: str
    grpc_address: str

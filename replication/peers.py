"""gRPC channels to the other members' ReplicaService, with the cluster secret attached.

Why a small class: catch-up, the sync-durability round and the status call all talk to peers; one place owns
channel reuse and the secret metadata. The members follow the group's configuration (``update``): ``others`` are
the other voters, ``learners`` the other learners (docs/design/membership.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from raftmq.replication.members import MemberInfo
from raftmq.v1 import replica_pb2_grpc

SECRET_METADATA_KEY = "x-raftmq-secret"
# Reconnect backoff: gRPC's default grows to 120 s while a peer is down, and every call in that window fails at
# once with the stale "connection refused"; a restarted member then looked unreachable to the leader's status
# fan-out for over a minute (issue 11). Peers are few and on the cluster network: retry about once a second.
_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20),
                    ("grpc.dns_min_time_between_resolutions_ms", 2000),
                    ("grpc.initial_reconnect_backoff_ms", 200), ("grpc.min_reconnect_backoff_ms", 200),
                    ("grpc.max_reconnect_backoff_ms", 1000)]


class Peers:
    def __init__(self, members: list[MemberInfo], self_id: str, secret: str = "",
                 channel_credentials: Callable[[], grpc.ChannelCredentials] | None = None,
                 channel_options: Sequence[tuple[str, Any]] = ()):
        """``channel_credentials``: called for each new channel when the members' gRPC ports use TLS."""
        self.members = {m.id: m for m in members}
        self.self_id = self_id
        self.others = [m for m in members if m.id != self_id]
        self.learners: list[MemberInfo] = []
        self.is_voter = True  # this member is one of the voters (the seed lists it)
        self._known = dict(self.members)  # every member ever seen: a caller may still hold a removed one's id
        self.metadata = ((SECRET_METADATA_KEY, secret),) if secret else ()
        self._stubs: dict[str, replica_pb2_grpc.ReplicaServiceStub] = {}
        self._channels: list[grpc.Channel] = []
        self._lock = threading.Lock()
        self._credentials = channel_credentials
        self._options = _CHANNEL_OPTIONS + list(channel_options)

    def update(self, voters: Sequence[MemberInfo], learners: Sequence[MemberInfo]) -> None:
        """Follow the configuration. A member whose gRPC address changed gets a new channel."""
        members = {m.id: m for m in (*voters, *learners)}
        with self._lock:
            for mid, m in members.items():
                old = self._known.get(mid)
                if old is not None and old.grpc_address != m.grpc_address:
                    self._stubs.pop(mid, None)
                self._known[mid] = m
            self.members = members
            self.others = [m for m in voters if m.id != self.self_id]
            self.learners = [m for m in learners if m.id != self.self_id]
            self.is_voter = any(m.id == self.self_id for m in voters)

    def group_size(self) -> int:
        """The number of voters, the size a majority is counted against."""
        return len(self.others) + (1 if self.is_voter else 0)

    def everyone(self) -> list[MemberInfo]:
        """The other voters and the learners."""
        return [*self.others, *self.learners]

    def stub(self, member_id: str) -> replica_pb2_grpc.ReplicaServiceStub:
        with self._lock:
            s = self._stubs.get(member_id)
            if s is None:
                address = self._known[member_id].grpc_address
                if self._credentials is not None:
                    ch = grpc.secure_channel(address, self._credentials(), options=self._options)
                else:
                    ch = grpc.insecure_channel(address, options=self._options)
                self._channels.append(ch)
                s = self._stubs[member_id] = replica_pb2_grpc.ReplicaServiceStub(ch)
            return s

    def by_raft_address(self, raft_address: str | None) -> MemberInfo | None:
        if not raft_address:
            return None
        for m in self.members.values():
            if m.raft_address == raft_address:
                return m
        return None

    def close(self) -> None:
        with self._lock:
            for ch in self._channels:
                ch.close()
            self._channels.clear()
            self._stubs.clear()

"""gRPC channels to the other members' ReplicaService, with the cluster secret attached.

Why a small class: catch-up, the sync-durability round and the status call all talk to peers; one place owns
channel reuse and the secret metadata.
"""

from __future__ import annotations

import threading

import grpc
from raftmq.v1 import replica_pb2_grpc

from replication.write_path import MemberInfo

SECRET_METADATA_KEY = "x-raftmq-secret"
# Reconnect backoff: gRPC's default grows to 120 s while a peer is down, and every call in that window fails at
# once with the stale "connection refused"; a restarted member then looked unreachable to the leader's status
# fan-out for over a minute (issue 11). Peers are few and on the cluster network: retry about once a second.
_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20),
                    ("grpc.dns_min_time_between_resolutions_ms", 2000),
                    ("grpc.initial_reconnect_backoff_ms", 200), ("grpc.min_reconnect_backoff_ms", 200),
                    ("grpc.max_reconnect_backoff_ms", 1000)]


class Peers:
    def __init__(self, members: list[MemberInfo], self_id: str, secret: str = ""):
        self.members = {m.id: m for m in members}
        self.self_id = self_id
        self.others = [m for m in members if m.id != self_id]
        self.metadata = ((SECRET_METADATA_KEY, secret),) if secret else ()
        self._stubs: dict[str, replica_pb2_grpc.ReplicaServiceStub] = {}
        self._channels: list[grpc.Channel] = []
        self._lock = threading.Lock()

    def stub(self, member_id: str) -> replica_pb2_grpc.ReplicaServiceStub:
        with self._lock:
            s = self._stubs.get(member_id)
            if s is None:
                ch = grpc.insecure_channel(self.members[member_id].grpc_address, options=_CHANNEL_OPTIONS)
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

"""What a node's web console does as a client of its own cluster, with the SDK: hand leadership over, end a
login session on every member, reset a group's offsets, describe a group on the leader, check the replicas.

The node reaches this module only through the ``raftmq.console`` entry point (pyproject.toml), the mirror of the
``raftmq.commands`` hook the CLI uses to find the node's commands: node/ never imports client/, and the console's
actions still take the one path a CLI user's take (leader following, retries, signing, TLS).
``credentials`` is the node's own member identity as ``ClientSecurity`` fields (its TLS files and, with
authentication on, the bootstrap admin's keys).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc

from raftmq.client.acl import AclAdmin
from raftmq.client.admin import Admin
from raftmq.client.connection import ServerPool
from raftmq.client.errors import RaftmqError
from raftmq.client.replica_check import CheckReport, ReplicaChecker
from raftmq.client.security import ClientSecurity
from raftmq.v1 import raftmq_pb2 as pb

Error = RaftmqError  # what every call below raises for a refusal or an unreachable cluster


def channel(address: str, credentials: Mapping[str, Any]) -> grpc.Channel:
    """A channel to one member as the node itself (member TLS, signed when authentication is on)."""
    return ClientSecurity(**credentials).channel(address, [])


def transfer_leader(address: str, credentials: Mapping[str, Any], to: str | None) -> str:
    """AdminService.TransferLeader through ``address``; the new leader's id."""
    with Admin(address, security=ClientSecurity(**credentials)) as admin:
        return admin.transfer_leader(to)


def end_console_session(address: str, credentials: Mapping[str, Any], session: str) -> None:
    """AclService.EndConsoleSession through ``address`` (a follower reaches the leader)."""
    with AclAdmin(address, security=ClientSecurity(**credentials), timeout=5, retry_timeout=10) as acl:
        acl.end_console_session(session)


def reset_group_offsets(address: str, credentials: Mapping[str, Any],
                        request: pb.ResetGroupOffsetsRequest) -> pb.ResetGroupOffsetsResponse:
    """MessagingService.ResetGroupOffsets, as ``raftmq group reset-offsets`` sends it."""
    pool = ServerPool([address], security=ClientSecurity(**credentials))
    try:
        response, _ = pool.write(lambda s, t: s.messaging.ResetGroupOffsets(request, timeout=t), idempotent=True)
    finally:
        pool.close()
    return response


def check_replicas(address: str, secret: str, credentials: Mapping[str, Any], *, max_bytes: int | None,
                   queues: bool) -> CheckReport:
    """``raftmq cluster check`` from ``address``: every member's commit log (and consume queues) compared."""
    with ReplicaChecker(address, secret=secret, security=ClientSecurity(**credentials)) as checker:
        return checker.check(max_bytes=max_bytes, queues=queues)


def cluster_view(address: str, credentials: Mapping[str, Any], group: str | None = None) -> Any:
    """``raftmq cluster status`` from ``address``: every group's members (``group``: that group's), each group
    asked through ``address``, which relays it to one of that group's members (client/cluster_view.py)."""
    from raftmq.client.cluster_view import cluster_view as view_of

    with Admin(address, security=ClientSecurity(**credentials), timeout=5, retry_timeout=5) as admin:
        return view_of(admin, group)


def queue_offsets(address: str, credentials: Mapping[str, Any], topic: str, group: str) -> list:
    """A topic's queues in ``group`` (min / max offsets), asked through ``address`` as ``raftmq topic describe``
    asks them."""
    with Admin(address, security=ClientSecurity(**credentials), timeout=5, retry_timeout=5) as admin:
        return admin.queue_offsets(topic, broker=group)

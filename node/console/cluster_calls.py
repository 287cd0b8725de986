"""The console's calls to its own cluster (leadership transfer, ending a login session on every member, a group
reset, a group described by the leader, the replica check) run through the SDK, as the CLI's do.

node/ does not import client/ (the layering, checked by lint-imports): the SDK module is found through the
``raftmq.console`` entry point (pyproject.toml), the mirror of how the CLI finds the node's own commands.
``ClusterCalls`` is what the console needs of it.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Mapping
from typing import Any, Protocol

import grpc

from raftmq.node.config import NodeConfig

ENTRY_POINT_GROUP = "raftmq.console"
ENTRY_POINT_NAME = "calls"


class ClusterCalls(Protocol):
    """client/console_calls.py; ``credentials`` are ``member_credentials(config)``."""

    Error: type[Exception]

    def channel(self, address: str, credentials: Mapping[str, Any]) -> grpc.Channel: ...

    def transfer_leader(self, address: str, credentials: Mapping[str, Any], to: str | None) -> str: ...

    def end_console_session(self, address: str, credentials: Mapping[str, Any], session: str) -> None: ...

    def reset_group_offsets(self, address: str, credentials: Mapping[str, Any], request: Any) -> Any: ...

    def check_replicas(self, address: str, secret: str, credentials: Mapping[str, Any], *,
                       max_bytes: int | None, queues: bool) -> Any: ...

    def cluster_view(self, address: str, credentials: Mapping[str, Any], group: str | None = None) -> Any: ...

    def queue_offsets(self, address: str, credentials: Mapping[str, Any], topic: str, group: str) -> list: ...


@functools.cache
def cluster_calls() -> ClusterCalls:
    """The SDK's console calls; RuntimeError naming the missing hook when the installation lacks it."""
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=ENTRY_POINT_NAME)
    for ep in found:
        return ep.load()
    raise RuntimeError(f"the raftmq SDK's console calls (entry point {ENTRY_POINT_GROUP}:{ENTRY_POINT_NAME}) are "
                       "not installed; reinstall raftmq (make install)")


def member_credentials(cfg: NodeConfig) -> dict[str, Any]:
    """This node's identity towards its cluster, as client.security.ClientSecurity fields: its member TLS files
    and, with authentication on, the bootstrap admin's credentials."""
    tls, sec = cfg.tls_files(), cfg.security
    return {"tls": tls is not None, "ca_file": tls.trust_file if tls else "", "cert_file": tls.cert_file if tls else "",
            "key_file": tls.key_file if tls else "", "server_name": tls.server_name if tls else "",
            "access_key": sec.auth_admin_access_key if sec.auth_enabled else "",
            "secret_key": sec.auth_admin_secret_key if sec.auth_enabled else ""}

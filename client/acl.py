"""Users and access rules of a cluster with authentication on (AclService). Changes go to the leader and are
replicated; every member enforces them at once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import grpc

from raftmq.client.connection import ServerPool
from raftmq.client.errors import RaftmqError
from raftmq.client.security import ClientSecurity
from raftmq.v1 import raftmq_pb2 as pb


@dataclass(frozen=True)
class AclRule:
    effect: str                      # allow | deny
    actions: tuple[str, ...]         # PUB, SUB, ADMIN
    resources: tuple[str, ...]       # topic:NAME, group:NAME (trailing * = prefix), cluster

    def text(self) -> str:
        return f"{self.effect} {','.join(self.actions)} on {', '.join(self.resources)}"


@dataclass(frozen=True)
class AclUser:
    access_key: str
    admin: bool
    bootstrap: bool
    rules: tuple[AclRule, ...] = field(default_factory=tuple)
    networks: tuple[str, ...] = ()  # source networks it may sign from; empty = anywhere

    @classmethod
    def from_pb(cls, u: pb.AclUser) -> AclUser:
        return cls(u.access_key, u.admin, u.bootstrap,
                   tuple(AclRule(r.effect, tuple(r.actions), tuple(r.resources)) for r in u.rules),
                   tuple(u.networks))


class AclAdmin:
    """``raftmq acl``'s calls; the caller must be an admin user."""

    def __init__(self, servers: str | Iterable[str] | None = None, *, timeout: float = 10.0,
                 retry_timeout: float = 15.0, security: ClientSecurity | None = None):
        self._pool = ServerPool(servers, timeout=timeout, retry_timeout=retry_timeout, security=security)

    def put_user(self, access_key: str, secret_key: str, *, admin: bool = False,
                 networks: Sequence[str] = ()) -> tuple[AclUser, bool]:
        """Create a user or replace its secret / admin flag (rules are kept; so are its networks unless
        ``networks`` are given: CIDRs it may sign from); (user, created)."""
        req = pb.PutAclUserRequest(access_key=access_key, secret_key=secret_key, admin=admin, networks=list(networks))
        resp, _ = self._pool.write(lambda s, t: s.acl.PutAclUser(req, timeout=t), idempotent=True)
        return AclUser.from_pb(resp.user), resp.created

    def set_networks(self, access_key: str, networks: Sequence[str]) -> AclUser:
        """Replace the source networks (CIDRs) a user may sign from; empty: anywhere."""
        req = pb.SetAclUserNetworksRequest(access_key=access_key, networks=list(networks))
        resp, _ = self._pool.write(lambda s, t: s.acl.SetAclUserNetworks(req, timeout=t), idempotent=True)
        return AclUser.from_pb(resp.user)

    def delete_user(self, access_key: str) -> None:
        req = pb.DeleteAclUserRequest(access_key=access_key)
        self._pool.write(lambda s, t: s.acl.DeleteAclUser(req, timeout=t))

    def list_users(self, group: str = "") -> list[AclUser]:
        """The users and rules of ``group`` (a cluster of several groups keeps them in each group), else of the
        answering member's group."""
        req = pb.ListAclUsersRequest(broker=group)
        resp, _ = self._pool.read(lambda s, t: s.acl.ListAclUsers(req, timeout=t))
        return [AclUser.from_pb(u) for u in resp.users]

    def groups(self) -> list[str]:
        """The cluster's group names in configuration order ([] from a server without routes)."""
        try:
            resp, _ = self._pool.read(lambda s, t: s.messaging.QueryRoute(pb.QueryRouteRequest(), timeout=t))
        except RaftmqError as e:
            if e.code == grpc.StatusCode.UNIMPLEMENTED:
                return []
            raise
        return [g.name for g in resp.groups]

    def add_rule(self, access_key: str, effect: str, actions: Sequence[str], resources: Sequence[str]) -> AclUser:
        req = pb.AddAclRuleRequest(access_key=access_key, rule=pb.AclRule(effect=effect, actions=list(actions),
                                                                          resources=list(resources)))
        resp, _ = self._pool.write(lambda s, t: s.acl.AddAclRule(req, timeout=t))
        return AclUser.from_pb(resp.user)

    def remove_rule(self, access_key: str, index: int) -> AclUser:
        req = pb.RemoveAclRuleRequest(access_key=access_key, index=index)
        resp, _ = self._pool.write(lambda s, t: s.acl.RemoveAclRule(req, timeout=t))
        return AclUser.from_pb(resp.user)

    def end_console_session(self, session: str) -> str:
        """End a web-console session (its cookie value) on every member; returns its user. The console's log-out
        button calls it; refused (InvalidArgumentError) for a value that is not a valid session."""
        resp, _ = self._pool.write(lambda s, t: s.acl.EndConsoleSession(
            pb.EndConsoleSessionRequest(session=session), timeout=t), idempotent=True)
        return resp.user

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> AclAdmin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

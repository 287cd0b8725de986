"""AclService: users and their access rules, changed through the write path so every member applies them.

Why through the write path: users and rules are replicated cluster state like topics; a change proposed here is
in force on every member as soon as it is applied there, without restarts. Secrets are sealed (node.auth.SecretBox)
before they are proposed, so neither the Raft log nor any file holds them in the clear. Each change is one audit
line (who, what, from where).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import grpc

from raftmq.node.auth import ACCESS_KEY_PATTERN, MIN_SECRET_LENGTH, audit, check_rule, current_principal
from raftmq.node.errors import RpcError, invalid, not_found
from raftmq.node.networks import parse_network
from raftmq.node.rpc import rpc_handler
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore


def _user_message(u: dict) -> pb.AclUser:
    return pb.AclUser(access_key=u["access_key"], admin=u["admin"], bootstrap=u.get("bootstrap", False),
                      rules=[pb.AclRule(effect=r["effect"], actions=r["actions"], resources=r["resources"])
                             for r in u.get("rules", [])], networks=u.get("networks", []))


def _networks(values) -> list[str]:
    """A user's allowed networks, checked and normalised (``10.1.2.3`` -> ``10.1.2.3/32``)."""
    out = []
    for v in values:
        try:
            out.append(str(parse_network(v)))
        except ValueError as e:
            raise invalid(f"allowed network: {e}") from None
    return out


class AclService(pb_grpc.AclServiceServicer):
    def __init__(self, node: BrokerCore):
        self.node = node

    def _auth(self):
        if self.node.auth is None:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                           "authentication is off on this node: set security.auth_enabled (and the bootstrap admin "
                           "security.auth_admin_access_key / auth_admin_secret_key) on every member")
        return self.node.auth

    def _check_user(self, access_key: str) -> None:
        if not ACCESS_KEY_PATTERN.match(access_key):
            raise invalid(f"access key {access_key!r} must be 3-64 letters, digits, '_', '-', '.'")
        if access_key == self.node.config.security.auth_admin_access_key:
            raise invalid(f"{access_key!r} is the bootstrap admin from the configuration; change it there")

    async def _apply(self, cmd: dict, context) -> None:
        from raftmq.store import StoreError

        principal = current_principal.get()
        if self.node.groups.many:  # when this group made the change: the settings reconcile pass compares it
            cmd = {**cmd, "mark": int(time.time() * 1000)}
        try:
            await self.node.run_blocking(self.node.write_path.update_acl, cmd)
        except StoreError as e:
            raise not_found(str(e)) from None
        self._auth().forget(cmd["user"])
        fields = {k: v for k, v in cmd.items() if k not in ("secret", "mark")}  # never the (sealed) secret
        audit("acl_change", by=principal.access_key if principal else "?", peer=context.peer(), **fields)

    async def _in_every_group(self, method: str, request, context):
        """Issue 37: users and rules are replicated settings of each group; a change without a group, in a cluster
        of several, is made in every group (each part idempotent), and the answer is this member's group's. None
        when this call is one group's part, or the cluster is one group: the change is made here."""
        node = self.node
        node.check_group(request.broker)
        if request.broker or not node.groups.many:
            return None
        return (await node.groups.in_every_group(method, request, context, reconciled=True))[node.groups.own]

    def _user(self, access_key: str) -> dict | None:
        return next((u for u in self._auth().users() if u["access_key"] == access_key), None)

    def _one(self, access_key: str) -> pb.AclUser:
        for u in self._auth().users():
            if u["access_key"] == access_key:
                return _user_message(u)
        raise not_found(f"no user with access key {access_key!r}")

    @rpc_handler("PutAclUser")
    async def PutAclUser(self, request: pb.PutAclUserRequest, context) -> pb.PutAclUserResponse:  # noqa: N802
        auth = self._auth()
        self._check_user(request.access_key)
        if len(request.secret_key) < MIN_SECRET_LENGTH:
            raise invalid(f"secret key must have at least {MIN_SECRET_LENGTH} characters")
        networks = _networks(request.networks)
        if (answer := await self._in_every_group("PutAclUser", request, context)) is not None:
            return answer
        existed = any(u["access_key"] == request.access_key for u in auth.users())
        cmd = {"op": "user_put", "user": request.access_key, "secret": auth.box.seal(request.secret_key),
               "admin": request.admin}
        if networks:
            cmd["networks"] = networks
        await self._apply(cmd, context)
        return pb.PutAclUserResponse(user=self._one(request.access_key), created=not existed)

    @rpc_handler("SetAclUserNetworks")
    async def SetAclUserNetworks(self, request: pb.SetAclUserNetworksRequest,  # noqa: N802
                                 context) -> pb.SetAclUserNetworksResponse:
        self._auth()
        self._check_user(request.access_key)
        networks = _networks(request.networks)
        if (answer := await self._in_every_group("SetAclUserNetworks", request, context)) is not None:
            return answer
        await self._apply({"op": "user_networks", "user": request.access_key, "networks": networks}, context)
        return pb.SetAclUserNetworksResponse(user=self._one(request.access_key))

    @rpc_handler("DeleteAclUser")
    async def DeleteAclUser(self, request: pb.DeleteAclUserRequest, context) -> pb.DeleteAclUserResponse:  # noqa: N802
        self._auth()
        self._check_user(request.access_key)
        node = self.node
        node.check_group(request.broker)
        if not request.broker and node.groups.many:  # a group without the user has it deleted already
            await node.groups.in_every_group("DeleteAclUser", request, context, done_if_not_found=True,
                                             reconciled=True)
            return pb.DeleteAclUserResponse()
        await self._apply({"op": "user_delete", "user": request.access_key}, context)
        return pb.DeleteAclUserResponse()

    @rpc_handler("ListAclUsers")
    async def ListAclUsers(self, request: pb.ListAclUsersRequest, context) -> pb.ListAclUsersResponse:  # noqa: N802
        self.node.check_group(request.broker)  # issue 38: another group's users, relayed there
        return pb.ListAclUsersResponse(users=[_user_message(u) for u in self._auth().users()])

    @rpc_handler("AddAclRule")
    async def AddAclRule(self, request: pb.AddAclRuleRequest, context) -> pb.AddAclRuleResponse:  # noqa: N802
        self._auth()
        self._check_user(request.access_key)
        try:
            rule = check_rule({"effect": request.rule.effect, "actions": list(request.rule.actions),
                               "resources": list(request.rule.resources)})
        except ValueError as e:
            raise invalid(str(e)) from None
        if (answer := await self._in_every_group("AddAclRule", request, context)) is not None:
            return answer
        user = self._user(request.access_key)
        if request.broker and user is not None and rule in user.get("rules", []):  # one group's part, done there
            self.node.check_leader()
            return pb.AddAclRuleResponse(user=self._one(request.access_key))
        await self._apply({"op": "rule_add", "user": request.access_key, "rule": rule}, context)
        return pb.AddAclRuleResponse(user=self._one(request.access_key))

    @rpc_handler("RemoveAclRule")
    async def RemoveAclRule(self, request: pb.RemoveAclRuleRequest, context) -> pb.RemoveAclRuleResponse:  # noqa: N802
        self._auth()
        self._check_user(request.access_key)
        node = self.node
        node.check_group(request.broker)
        if not request.broker and node.groups.many:
            # the groups may list a user's rules in different orders after a partial change: each group removes
            # the rule this member's group has at that index, found by value (NOT_FOUND here when there is none)
            rules = self._one(request.access_key).rules
            if not 0 <= request.index < len(rules):
                raise not_found(f"user {request.access_key!r} has no rule {request.index} (it has {len(rules)}; "
                                "see `raftmq acl list`)")
            pinned = pb.RemoveAclRuleRequest(access_key=request.access_key, rule=rules[request.index])
            return (await node.groups.in_every_group("RemoveAclRule", pinned, context,
                                                     reconciled=True))[node.groups.own]
        index = request.index
        if request.HasField("rule"):  # one group's part of a removal in every group: the rule by value
            found = [i for i, r in enumerate(self._one(request.access_key).rules) if r == request.rule]
            if not found:
                node.check_leader()
                return pb.RemoveAclRuleResponse(user=self._one(request.access_key))
            index = found[0]
        await self._apply({"op": "rule_remove", "user": request.access_key, "index": index}, context)
        return pb.RemoveAclRuleResponse(user=self._one(request.access_key))

    @rpc_handler("EndConsoleSession")
    async def EndConsoleSession(self, request: pb.EndConsoleSessionRequest,  # noqa: N802
                                context) -> pb.EndConsoleSessionResponse:
        """issue 34: a console log-out, on every member: the session's id is replicated as ended (until it would
        have expired), so the cookie stops working everywhere, also where it was copied to."""
        self._auth()
        sessions = self.node.console_sessions
        # a session ended already is ended again (a retried request after a lost answer succeeds)
        found = sessions.session(request.session, even_ended=True) if sessions is not None else None
        if found is None:
            raise invalid("not a valid console session (expired, or not issued by this cluster)")
        user, session, expires = found
        await self.node.run_blocking(self.node.write_path.end_console_session, session, expires)
        return pb.EndConsoleSessionResponse(user=user)

"""The cluster's other Raft groups, as this member knows them: their members, endpoints, leader and health.

Why: a cluster is G groups, each of them one replicated group with its own leader (docs/design/scale-out.md).
A call for another group's queue can reach any member (one client address for the whole cluster); the member
relays it to that group's leader over the cluster channel, as a follower relays to its own leader
(node/forwarding.py: the same trust rules and outcome semantics). The directory remembers each group's leader
from the answers (a redirect's hint names a new one), and a group none of whose members answers is *down* for a
short back-off, so the sends that follow fail at once, naming the group, instead of each waiting on a connection.
The groups themselves are configuration (``cluster.groups``), or learned from DNS while running
(``cluster.group_discovery``: node/group_discovery.py hands them to ``learn``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from raftmq.node.errors import RpcError, not_found
from raftmq.node.forwarding import NotSent
from raftmq.node.preferred_leaders import preferred_leaders
from raftmq.routing import fifo_queue
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.config import GroupSpec, NodeConfig
    from raftmq.node.forwarding import Forwarder

DOWN_FIRST_S = 1.0  # a group none of whose members answered is not tried again for this long (doubling)
DOWN_MAX_S = 10.0
MAX_HINTS = 3  # redirects followed inside another group per call (a leader moving while we ask)


class GroupRedirect(RpcError):
    """The call belongs to another group of the cluster: the RPC scope relays it there (node/rpc.py).

    A send's messages are pinned to that group (and a FIFO message group's queue) before this is raised, so the
    group that receives the relayed call stores them exactly there and never routes them again."""

    def __init__(self, group: str):
        super().__init__(grpc.StatusCode.FAILED_PRECONDITION, f"the call is for group {group}")
        self.group = group


class InternalCall:
    """The call context of a call this member makes on its own behalf (the topic reconcile pass), for the
    relays that expect a client's: signed as the bootstrap admin when authentication is on, bounded by
    ``timeout_s``."""

    def __init__(self, timeout_s: float, metadata: list[tuple[str, str]] | None = None):
        self._deadline = time.monotonic() + timeout_s
        self._metadata = tuple(metadata or ())

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def time_remaining(self) -> float:
        return max(0.0, self._deadline - time.monotonic())

    def peer(self) -> str:
        return "internal"


class GroupDirectory:
    """Every group of the cluster in configuration order; relays calls to the others."""

    def __init__(self, cfg: NodeConfig, forwarder: Forwarder):
        self.own = cfg.group_name
        self._configured = list(cfg.groups)
        self._discovered = bool(cfg.cluster.group_discovery)
        self._forwarder = forwarder
        self._leaders: dict[str, str] = {}  # group -> the leader's gRPC address, as last seen
        self._down: dict[str, tuple[float, float, str]] = {}  # group -> (down until, back-off, why)
        self._set(self._configured)

    def _set(self, groups: list[GroupSpec]) -> None:
        # replaced, never changed in place: a caller that holds specs or names has a consistent view of them
        self.specs: dict[str, GroupSpec] = {g.name: g for g in groups}
        self.names = [g.name for g in groups]
        self.many = len(self.names) > 1
        # what every member's list must agree with, in order: names, store hosts and members of every group; with
        # discovery the groups' client addresses (what a group tells about itself: node/group_discovery.py)
        # (a member's host and a group's pinned leader only when set: lists written before them keep their digest)
        rows = ([[g.name, g.store_host, g.client_addresses()] for g in groups] if self._discovered else
                [[g.name, g.store_host, [[m.id, m.raft, m.grpc, *([m.host] if m.host else [])] for m in g.members],
                  *([g.preferred_leader] if g.preferred_leader else [])] for g in groups])
        self.digest = hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]
        self.preferred = preferred_leaders(groups)  # group -> the member id that should lead it

    def learn(self, found: list[GroupSpec]) -> tuple[list[str], list[str]]:
        """The groups discovery found (node/group_discovery.py), in their order: they become the cluster's
        groups, a configured group's own entry winning over what was found for it, and a configured group not
        found kept after them. (added, removed) names."""
        configured = {g.name: g for g in self._configured}
        merged = [configured.get(g.name, g) for g in found]
        seen = {g.name for g in merged}
        merged += [g for g in self._configured if g.name not in seen]
        before = set(self.names)
        if [(g.name, g.store_host, g.client_addresses()) for g in merged] != [
                (g.name, g.store_host, g.client_addresses()) for g in self.specs.values()]:
            self._set(merged)
        after = set(self.names)
        for gone in before - after:
            self._leaders.pop(gone, None)
            self._down.pop(gone, None)
        return [n for n in self.names if n not in before], sorted(before - after)

    @property
    def answer_name(self) -> str:
        """The group an answer names (a send result's, a received message's broker): this member's in a cluster of
        several groups; "" in a one-group cluster, whose answers stay exactly what they were before groups."""
        return self.own if self.many else ""

    def spec(self, name: str) -> GroupSpec:
        spec = self.specs.get(name)
        if spec is None:
            raise not_found(f"unknown group {name!r}: this cluster's groups are {', '.join(self.names)} (a client "
                            "with an old route: query the route again)")
        return spec

    def resolve(self, name: str) -> str:
        """A request's group: "" is this member's own; anything else must be one of the cluster's."""
        return self.spec(name).name if name else self.own

    def of_store_host(self, host: str, port: int) -> str:
        """The group whose records carry STOREHOST ``host:port`` (a msgId's first part), "" when none does (a
        msgId from before a change of store host: this member's group answers it)."""
        for spec in self.specs.values():
            h, _, p = spec.store_host.rpartition(":")
            if h.strip("[]") == host and p == str(port):
                return spec.name
        return ""

    def fifo_queue(self, message_group: str, nqueues: int) -> tuple[str, int]:
        """(group, queue) of a FIFO message group over every group's ``nqueues`` queues (raftmq/routing.py)."""
        return fifo_queue(message_group, self.names, nqueues)

    def leader_of(self, group: str) -> str:
        """The leader's gRPC address of another group as last seen ("" when unknown)."""
        return self._leaders.get(group, "")

    def down_reason(self, group: str) -> str:
        """Why ``group`` is out of reach right now ("" when it is not known to be)."""
        entry = self._down.get(group)
        return entry[2] if entry is not None and entry[0] > time.monotonic() else ""

    def _others_text(self, group: str) -> str:
        others = [n for n in self.names if n != group]
        return f"groups {', '.join(others)} are" if len(others) > 1 else f"group {others[0]} is"

    def unavailable(self, group: str, why: str) -> RpcError:
        return RpcError(grpc.StatusCode.UNAVAILABLE,
                        f"group {group} is unavailable: {why}; its queues take nothing until it has a leader again "
                        f"(not stored: retry later, or send to another group's queue); {self._others_text(group)} "
                        "not affected")

    async def relay(self, group: str, method: str, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """Relay a call to another group: its leader as last seen first, then each member, following a leader
        hint; a refusal of that group's is passed back naming the group."""
        spec = self.spec(group)
        why = self.down_reason(group)
        if why:
            raise self.unavailable(group, why)
        members = [m.grpc for m in spec.members]
        candidates = list(dict.fromkeys([a for a in (self._leaders.get(group),) if a] + members))
        unreachable: list[str] = []
        no_leader = ""
        hints = 0
        i = 0
        while i < len(candidates):
            address = candidates[i]
            i += 1
            try:
                response = await self._forwarder.relay(address, method, request, context)
            except NotSent:
                unreachable.append(address)
                continue
            except RpcError as e:
                if e.code == grpc.StatusCode.FAILED_PRECONDITION and e.leader and e.leader != address:
                    if hints < MAX_HINTS:
                        hints += 1
                        self._leaders[group] = e.leader
                        candidates.insert(i, e.leader)
                        continue
                if e.code == grpc.StatusCode.UNAVAILABLE:  # that member has no leader: an election, or no majority
                    no_leader = e.message
                    continue
                raise RpcError(e.code, e.message if e.message.startswith(f"group {group}") else
                               f"group {group}: {e.message}") from None
            self._leaders[group] = address
            self._down.pop(group, None)
            return response
        if no_leader:
            raise self.unavailable(group, f"no leader ({no_leader})")
        why = f"none of its members answers ({', '.join(unreachable)})"
        _, last, _ = self._down.get(group, (0.0, 0.0, ""))
        period = min(DOWN_MAX_S, last * 2) if last else DOWN_FIRST_S
        self._down[group] = (time.monotonic() + period, period, why)
        self._leaders.pop(group, None)
        raise self.unavailable(group, why)

    async def relay_stream(self, group: str, method: str, request: Any, context: grpc.aio.ServicerContext):
        """A server-streaming call (RocketMQ 5's ReceiveMessage) relayed to another group's leader: its
        responses as they come. The leader is the one last seen, else found by ``relay``ing a route request."""
        spec = self.spec(group)
        leader = self._leaders.get(group)
        if not leader:
            answer = await self.relay(group, "QueryRoute", pb.QueryRouteRequest(local=True), context)
            leader = next((g.leader for g in answer.groups if g.name == group), "")
            if not leader:
                raise self.unavailable(group, f"no leader (asked {', '.join(m.grpc for m in spec.members)})")
        try:
            async for response in self._forwarder.relay_stream(leader, method, request, context):
                yield response
        except NotSent:
            self._leaders.pop(group, None)
            raise self.unavailable(group, f"its leader at {leader} does not answer") from None

    async def fan_out(self, method: str, request_for: Callable[[str], Any],
                      context: grpc.aio.ServicerContext) -> list[tuple[str, Any]]:
        """The same call pinned to every group at once (topic administration): (group, its response or the
        RpcError it failed with, naming the group), in configuration order."""

        async def one(group: str) -> tuple[str, Any]:
            try:
                return group, await self.relay(group, method, request_for(group), context)
            except RpcError as e:
                return group, e

        return list(await asyncio.gather(*(one(g) for g in self.names)))

    async def in_every_group(self, method: str, request: Any, context: grpc.aio.ServicerContext, *,
                             done_if_not_found: bool = False, reconciled: bool = False) -> dict[str, Any]:
        """A change of replicated settings without a group (access rules, consumer-group settings, an offset
        reset), in a cluster of several: ``request`` pinned (its ``broker``) to every group at once, each group
        applying it idempotently (docs/design/scale-out.md#settings-in-every-group). Every group's answer by
        group; if any group refused or did not answer, an RpcError with each refusal naming its group and the
        groups that did it. ``done_if_not_found`` (a delete): a group answering NOT_FOUND has nothing left to
        do (its answer is the error), unless every group does (then that is the refusal). ``reconciled``: the
        leaders' settings reconcile pass completes the change in a group that missed it (node/settings_reconcile.py),
        and the refusal says so."""

        def pinned(group: str) -> Any:
            copy = type(request)()
            copy.CopyFrom(request)
            copy.broker = group
            return copy

        answers = await self.fan_out(method, pinned, context)
        failed = [e for _, e in answers if isinstance(e, RpcError)]
        if done_if_not_found and len(failed) < len(answers):
            failed = [e for e in failed if e.code != grpc.StatusCode.NOT_FOUND]
        if failed:
            did = ", ".join(g for g, a in answers if not isinstance(a, RpcError)) or "no group"
            code = (grpc.StatusCode.UNAVAILABLE if any(e.code == grpc.StatusCode.UNAVAILABLE for e in failed)
                    else failed[0].code)
            after = ("the leaders' reconcile pass completes it in the groups that missed it once they answer, or run "
                     "it again then" if reconciled else "run it again once every group answers")
            raise RpcError(code, "; ".join(e.message for e in failed) + f" (done in: {did}; {after}: each group's "
                           "part is idempotent)")
        return dict(answers)

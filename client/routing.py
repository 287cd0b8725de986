"""Routes: which groups a cluster has and where a send goes (docs/design/scale-out.md#routes).

A raftmq cluster is one or more Raft groups, and a topic has N queues in each. The SDK asks any member for a
topic's route (``QueryRoute``), keeps it for ``ROUTE_TTL_S`` (RocketMQ's clients refresh theirs every 30 s) and
sooner when a call names a group it does not know, and keeps one ``ServerPool`` per group (that group's
endpoints), so inside a group every rule of ``client.connection`` holds as before (leader redirects, suspects,
forwarding). A one-group cluster, and a server without ``QueryRoute``, take the exact path they took before
routes existed: the pool of the addresses the user gave.

Where a send goes: the group it names; a FIFO message group's group and queue (its hash over every group's
queues, as the node computes it: raftmq/routing.py); else the next group round robin, skipping groups that did not
answer lately, so one group down does not stop the others.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from raftmq.client import errors
from raftmq.client.connection import ServerPool
from raftmq.client.types import PERM_WRITE
from raftmq.routing import fifo_queue
from raftmq.v1 import raftmq_pb2 as pb

ROUTE_TTL_S = 30.0
ROUTE_TIMEOUT_S = 2.0  # a route is asked once per address, this long at most: a send never waits on it for long
ROUTE_RETRY_S = 1.0  # after a failed route request, sends go the servers-given way this long before asking again
DOWN_S = 5.0  # a group none of whose members could be reached is skipped by round robin for this long


@dataclass(frozen=True)
class GroupRoute:
    """One group of a topic's route."""

    name: str
    endpoints: tuple[str, ...]
    leader: str
    available: bool
    error: str
    has_topic: bool
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    preferred_leader: str = ""  # the member id that should lead it; "" from a server before issue 38

    @classmethod
    def from_pb(cls, g: pb.GroupRoute) -> GroupRoute:
        return cls(g.name, tuple(g.endpoints), g.leader, g.available, g.error, g.has_topic, g.read_queue_nums,
                   g.write_queue_nums, g.perm, g.preferred_leader)


@dataclass(frozen=True)
class Route:
    """A topic's route: every group of the cluster in configuration order."""

    topic: str
    groups: tuple[GroupRoute, ...]
    fetched: float  # time.monotonic()

    @property
    def names(self) -> list[str]:
        return [g.name for g in self.groups]

    def queue_count(self) -> int:
        """N, the topic's write queues per group (the first group that holds the topic says it)."""
        return next((g.write_queue_nums for g in self.groups if g.has_topic and g.write_queue_nums > 0), 0)


class Router:
    """A client's view of the cluster's groups; thread-safe."""

    def __init__(self, bootstrap: ServerPool, make_pool: Callable[[list[str]], ServerPool]):
        self.bootstrap = bootstrap
        self._make_pool = make_pool
        self._lock = threading.Lock()
        self._routes: dict[str, Route] = {}
        self._pools: dict[str, ServerPool] = {}
        self._endpoints: dict[str, tuple[str, ...]] = {}
        self._down: dict[str, float] = {}  # group -> skipped by round robin until (monotonic)
        self._failed: dict[str, float] = {}  # topic -> when its route could last not be had (monotonic)
        self._next = itertools.count(random.randrange(1 << 16))  # a random start, as RocketMQ's ThreadLocalIndex:
        # short-lived producers (one CLI send each) spread over the groups too
        # until then (monotonic) the cluster is one group (or a server without QueryRoute: for ever) and the
        # bootstrap pool is the route; a one-group answer is asked again after ROUTE_TTL_S, as a route is, so a
        # group added later (docs/design/scale-out.md#discovery) reaches a running client
        self._single_until = 0.0

    # ------------------------------------------------------------------ routes
    def route(self, topic: str, *, refresh: bool = False) -> Route | None:
        """The topic's route, or None when the cluster is one group (use the bootstrap pool, as always)."""
        if self.single:
            return None
        with self._lock:
            cached = self._routes.get(topic)
        if cached is not None and not refresh and time.monotonic() - cached.fetched < ROUTE_TTL_S:
            return cached
        if time.monotonic() - self._failed.get(topic, -ROUTE_RETRY_S) < ROUTE_RETRY_S:
            return cached
        try:
            answer = self.bootstrap.read_once(
                lambda s, t: s.messaging.QueryRoute(pb.QueryRouteRequest(topic=topic), timeout=t),
                min(self.bootstrap.timeout, ROUTE_TIMEOUT_S))
        except errors.RaftmqError as e:
            if e.code == grpc.StatusCode.UNIMPLEMENTED:  # a server from before routes: one group
                self._single_until = math.inf
                return None
            # no route now: keep what we knew, or send through the servers given (their own group) as before
            # routes existed; the send itself then says what is wrong. Asked again after ROUTE_RETRY_S.
            self._failed[topic] = time.monotonic()
            return cached
        if len(answer.groups) <= 1:
            self._single_until = time.monotonic() + ROUTE_TTL_S
            return None
        route = Route(topic, tuple(GroupRoute.from_pb(g) for g in answer.groups), time.monotonic())
        with self._lock:
            self._routes[topic] = route
            for g in route.groups:
                if g.endpoints and self._endpoints.get(g.name) != g.endpoints:
                    self._endpoints[g.name] = g.endpoints
                    old = self._pools.pop(g.name, None)
                    if old is not None:
                        old.close()
        return route

    @property
    def single(self) -> bool:
        """The cluster is known to be one group (or a server from before routes)."""
        return time.monotonic() < self._single_until

    def knows(self, topic: str) -> bool:
        """Whether ``route(topic)`` answers without asking the cluster."""
        if self.single:
            return True
        cached = self._routes.get(topic)
        return cached is not None and time.monotonic() - cached.fetched < ROUTE_TTL_S

    def pool(self, group: str) -> ServerPool:
        """The pool of ``group``'s endpoints (known from a route); in a one-group cluster the servers given
        (whatever its one group is named)."""
        if self.single:
            return self.bootstrap
        with self._lock:
            pool = self._pools.get(group)
            if pool is None:
                endpoints = self._endpoints.get(group)
                if not endpoints and not self._endpoints:  # no route named any group yet: one group as far as
                    return self.bootstrap  # this client knows (its one-group answer just expired)
                if not endpoints:
                    raise errors.NotFoundError(f"unknown group {group!r}: no route names it")
                pool = self._pools[group] = self._make_pool(list(endpoints))
            return pool

    # ------------------------------------------------------------------ where a send goes
    def target(self, route: Route, message_group: str, broker: str | None) -> tuple[str, int | None, bool]:
        """(group, queue or None, pinned) of a send: the named group, a FIFO message group's group and queue
        (pinned: it must go exactly there), or the next group round robin that is not known to be down."""
        if broker:
            if broker not in route.names:
                raise errors.NotFoundError(f"unknown group {broker!r}: the cluster's groups are "
                                           f"{', '.join(route.names)}")
            return broker, None, True
        n = route.queue_count()
        if message_group and n > 0:
            group, qid = fifo_queue(message_group, route.names, n)
            return group, qid, True
        now = time.monotonic()
        # as RocketMQ's producer picks only writable queues: a group whose copy of the topic is read-only (drained
        # before it is removed, docs/operations/kubernetes.md#removing-a-group) takes no round-robin sends
        writable = [g for g in route.groups if not (g.has_topic and g.perm and not g.perm & PERM_WRITE)] or route.groups
        live = [g.name for g in writable if g.available and self._down.get(g.name, 0.0) <= now] or [
            g.name for g in writable]
        return live[next(self._next) % len(live)], None, False

    def mark_down(self, group: str) -> None:
        """No member of ``group`` could be reached: round robin skips it for a while."""
        self._down[group] = time.monotonic() + DOWN_S

    def others(self, route: Route, group: str) -> list[str]:
        now = time.monotonic()
        return [g.name for g in route.groups if g.name != group and self._down.get(g.name, 0.0) <= now]

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for p in pools:
            p.close()

    def place(self, items: list[pb.Message], broker: str | None) -> Placement:
        """Where the send of ``items`` (one topic) goes: see ``Placement``."""
        return Placement(self, items, broker)


class Placement:
    """One send's group, and the next one when its group could not be reached at all (so nothing was stored).

    ``apply()`` pins the messages to the group (and a FIFO message group's queue) and returns the pool to send
    through (the bootstrap pool and group "" for a one-group cluster or a send with a queue but no group: the
    path sends took before routes existed). ``retry(e)`` says whether to try again after ``e``: another group for
    a round-robin send whose group did not answer, the same send after a route refresh for an unknown group; a
    pinned send never moves (its order, or its de-duplication, belongs to its group)."""

    def __init__(self, router: Router, items: list[pb.Message], broker: str | None):
        self.router = router
        self.items = items
        self.broker = broker
        first = items[0]
        routed = bool(broker) or not first.HasField("queue_id")
        self.route = router.route(first.topic) if routed else None
        self.group = ""
        self.pinned = False
        self._refreshed = False
        # a pinned send whose group's endpoints we cannot reach goes through the servers given, unary (a member
        # relays a call, never a stream to another group)
        self.relayed = False

    def apply(self) -> tuple[ServerPool, str]:
        route = self.route
        if self.relayed:  # any member relays it to its group (node/groups.py), which may be out of our reach only
            return self.router.bootstrap, ""
        if route is None:
            if self.broker:
                for m in self.items:
                    m.broker = self.broker
            # no route of a cluster of groups right now: a send whose group is fixed (named, or its message
            # group's hash) may belong to another group than the member's, which relays a call, not a stream
            self.relayed = not self.router.single and bool(self.broker or self.items[0].message_group)
            return self.router.bootstrap, ""
        self.group, qid, self.pinned = self.router.target(route, self.items[0].message_group, self.broker)
        for m in self.items:
            m.broker = self.group
            if qid is not None:
                m.queue_id = qid
        return self.router.pool(self.group), self.group

    def retry(self, e: errors.RaftmqError) -> bool:
        route = self.route
        if route is None:
            return False
        if isinstance(e, errors.NotFoundError) and "unknown group" in e.message and not self._refreshed:
            self._refreshed = True
            self.route = self.router.route(route.topic, refresh=True)
            return True
        if isinstance(e, errors.ConnectionError) and not self.relayed:  # none of its endpoints answered: not sent
            self.router.mark_down(self.group)
            if self.pinned:  # it must go to that group: let the servers given relay it (they answer for the group)
                self.relayed = True
                return True
            return bool(self.router.others(route, self.group))
        return False

    def named(self, e: errors.RaftmqError) -> errors.RaftmqError:
        """``e`` as the caller sees it: a group none of whose members answered is named."""
        if self.group and isinstance(e, errors.ConnectionError):
            return errors.UnavailableError(f"group {self.group} is unavailable: {e.message}; its queues take "
                                           "nothing until it is back (not stored)", address=e.address, code=e.code)
        return e

"""Which consumers of a group are alive, per topic: the leader's side of clustering consumption.

Why in memory and on the leader only (as RocketMQ's ConsumerManager keeps group -> client channels in the broker's
memory): membership is soft state that every live consumer re-announces with each heartbeat, so replicating it
through Raft would cost a log entry per heartbeat for nothing. A member that misses ``EXPIRY_FACTOR`` heartbeat
intervals is dropped (RocketMQ: 120 s without a heartbeat). After a failover the new leader's table is empty
until the consumers' next heartbeats reach it; until then each consumer keeps its last allocation, so queues may
briefly be read twice (duplicates, at-least-once) but never by nobody for longer than one heartbeat interval.

Consumers compute their own queues from the sorted member list (``allocate_averagely``); the broker runs the same
function only to show operators who owns what (``DescribeConsumerGroup``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

DEFAULT_HEARTBEAT_INTERVAL_S = 5.0
MIN_HEARTBEAT_INTERVAL_S = 0.05  # a client asking for less is treated as this (bounds the expiry from below)
MAX_HEARTBEAT_INTERVAL_S = 300.0
EXPIRY_FACTOR = 3
MAX_CLIENT_ID_LENGTH = 255


def allocate_averagely(queue_ids: Sequence[int], client_ids: Sequence[str], client_id: str) -> list[int]:
    """RocketMQ's AllocateMessageQueueAveragely: contiguous blocks of the sorted queues, the first
    ``len(queues) % len(clients)`` clients one queue more; clients beyond the queue count get none."""
    queues = sorted(queue_ids)
    clients = sorted(client_ids)
    if client_id not in clients or not queues:
        return []
    index = clients.index(client_id)
    n, k = len(queues), len(clients)
    mod = n % k
    if n <= k:
        size = 1
    else:
        size = n // k + 1 if mod > 0 and index < mod else n // k
    start = index * size if mod > 0 and index < mod else index * size + mod
    count = min(size, n - start)
    return [queues[(start + i) % n] for i in range(max(count, 0))]


@dataclass(frozen=True)
class Member:
    client_id: str
    last_heartbeat: float  # time.time()
    expires_at: float  # time.time()


@dataclass(frozen=True)
class Membership:
    """One (group, topic)'s live members, sorted, and the generation that names this membership."""

    client_ids: list[str]
    generation: int


class ConsumerGroupRegistry:
    """group -> topic -> live members, thread-safe; expired members are dropped lazily on every access."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._lock = threading.Lock()
        self._members: dict[tuple[str, str], dict[str, Member]] = {}
        self._generations: dict[tuple[str, str], int] = {}
        self._term = 0

    def heartbeat(self, group: str, topic: str, client_id: str, interval_s: float = 0.0) -> Membership:
        """Register or refresh ``client_id``; the membership after the heartbeat."""
        interval = min(max(interval_s or DEFAULT_HEARTBEAT_INTERVAL_S, MIN_HEARTBEAT_INTERVAL_S),
                       MAX_HEARTBEAT_INTERVAL_S)
        now = self._clock()
        key = (group, topic)
        with self._lock:
            self._expire(now)
            members = self._members.setdefault(key, {})
            if client_id not in members:
                self._generations[key] = self._generations.get(key, 0) + 1
            members[client_id] = Member(client_id, now, now + EXPIRY_FACTOR * interval)
            return self._membership(key)

    def start_term(self, term: int) -> None:
        """Forget every member when leadership changed since the last call (an election happened).

        Why: a node that leads again after another member led in between holds members that may have closed or
        moved meanwhile; ghosts would keep queues unowned until they expire. The consumers' next heartbeats
        rebuild the table, as on any new leader."""
        with self._lock:
            if term != self._term:
                if self._members:
                    self._generations = {k: g + 1 for k, g in self._generations.items()}
                self._members.clear()
                self._term = term

    def unregister(self, group: str, topic: str, client_id: str) -> Membership:
        """Drop ``client_id`` at once (a consumer closing); unknown ids are ignored (idempotent)."""
        key = (group, topic)
        with self._lock:
            self._expire(self._clock())
            members = self._members.get(key, {})
            if members.pop(client_id, None) is not None:
                self._generations[key] = self._generations.get(key, 0) + 1
                if not members:
                    self._members.pop(key, None)
            return self._membership(key)

    def members(self, group: str) -> dict[str, list[Member]]:
        """topic -> live members of ``group``, sorted by client id."""
        with self._lock:
            self._expire(self._clock())
            return {topic: sorted(m.values(), key=lambda x: x.client_id)
                    for (g, topic), m in self._members.items() if g == group}

    def generation(self, group: str, topic: str) -> int:
        with self._lock:
            return self._generations.get((group, topic), 0)

    def group_sizes(self) -> dict[str, int]:
        """group -> live members over all its topics (a client consuming two topics counts twice)."""
        with self._lock:
            self._expire(self._clock())
            out: dict[str, int] = {}
            for (group, _topic), members in self._members.items():
                out[group] = out.get(group, 0) + len(members)
            return out

    def _membership(self, key: tuple[str, str]) -> Membership:
        return Membership(sorted(self._members.get(key, {})), self._generations.get(key, 0))

    def _expire(self, now: float) -> None:
        for key in list(self._members):
            members = self._members[key]
            gone = [cid for cid, m in members.items() if m.expires_at <= now]
            if gone:
                for cid in gone:
                    del members[cid]
                self._generations[key] = self._generations.get(key, 0) + 1
                if not members:
                    del self._members[key]

"""Consumer groups: how a group's consumers split a topic's queues, and what an operator sees of a group.

Why the allocation is computed here and not asked from the broker: as in RocketMQ, every consumer runs the same
deterministic function over the same sorted member list, so they agree without a coordinator round trip per
rebalance; the broker (``node.consumer_groups``) runs the same function only for ``DescribeConsumerGroup``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from raftmq.client import errors
from raftmq.client.connection import ServerPool
from raftmq.client.security import ClientSecurity
from raftmq.v1 import raftmq_pb2 as pb


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
class GroupMember:
    client_id: str
    topic: str
    queue_ids: list[int]
    last_heartbeat_ms: int
    expires_in_ms: int
    broker: str = ""  # the group whose queues, in a cluster of several Raft groups


@dataclass(frozen=True)
class GroupQueue:
    topic: str
    queue_id: int
    client_id: str  # "" when no live member owns it
    committed: bool
    committed_offset: int
    max_offset: int
    lag: int
    broker: str = ""  # the group of the queue, in a cluster of several Raft groups


@dataclass(frozen=True)
class GroupSettings:
    """How a group consumes (issue 34): its own replicated settings (``source`` "group settings", changed with
    ``update_consumer_group``) or the node configuration's (``source`` "node config")."""

    fifo: bool
    max_delivery_attempts: int
    retry_backoff_ms: list[int]
    source: str

    @classmethod
    def from_pb(cls, s: pb.ConsumerGroupSettings) -> GroupSettings:
        return cls(s.fifo, s.max_delivery_attempts, list(s.retry_backoff_ms), s.source)


@dataclass(frozen=True)
class ConsumerGroupDescription:
    group: str
    members: list[GroupMember]
    queues: list[GroupQueue]
    generations: dict[str, int]
    answered_by: str
    settings: GroupSettings | None = None  # None from a node older than group settings


def describe_consumer_group(servers: str | Iterable[str] | None, group: str, *, timeout: float = 10.0,
                            retry_timeout: float = 15.0,
                            security: ClientSecurity | None = None) -> ConsumerGroupDescription:
    """Members, their queues and the group's lag, from the leader (which holds the membership)."""
    if not group.strip():
        raise errors.InvalidArgumentError("consumer group must not be empty")
    pool = ServerPool(servers, timeout=timeout, retry_timeout=retry_timeout, security=security)
    req = pb.DescribeConsumerGroupRequest(group=group)
    try:
        resp, address = pool.write(lambda s, t: s.admin.DescribeConsumerGroup(req, timeout=t), idempotent=True)
    finally:
        pool.close()
    return ConsumerGroupDescription(
        group=resp.group,
        members=[GroupMember(m.client_id, m.topic, list(m.queue_ids), m.last_heartbeat_ms, m.expires_in_ms,
                             m.broker) for m in resp.members],
        queues=[GroupQueue(q.topic, q.queue_id, q.client_id, q.committed, q.committed_offset, q.max_offset, q.lag,
                           q.broker) for q in resp.queues],
        generations=dict(resp.generations), answered_by=address,
        settings=GroupSettings.from_pb(resp.settings) if resp.HasField("settings") else None)


def update_consumer_group(servers: str | Iterable[str] | None, group: str, *, fifo: bool | None = None,
                          max_delivery_attempts: int | None = None, retry_backoff: str | None = None,
                          reset: bool = False, timeout: float = 10.0, retry_timeout: float = 15.0,
                          security: ClientSecurity | None = None) -> GroupSettings:
    """Change a group's settings at runtime, on every member (issue 34; RocketMQ's ``updateSubGroup``): FIFO
    consumption, deliveries before the dead-letter topic, the back-off after a nack (``"1s 5s 1m"``: the N-th
    delay after attempt N). Unset ones keep their value; ``reset`` drops the group's own settings so the node
    configuration applies again. Returns the settings now in force."""
    if not group.strip():
        raise errors.InvalidArgumentError("consumer group must not be empty")
    req = pb.UpdateConsumerGroupRequest(group=group, retry_backoff=retry_backoff or "", reset=reset)
    if fifo is not None:
        req.fifo = fifo
    if max_delivery_attempts is not None:
        req.max_delivery_attempts = max_delivery_attempts
    pool = ServerPool(servers, timeout=timeout, retry_timeout=retry_timeout, security=security)
    try:  # the same request twice leaves the same settings
        resp, _ = pool.write(lambda s, t: s.admin.UpdateConsumerGroup(req, timeout=t), idempotent=True)
    finally:
        pool.close()
    return GroupSettings.from_pb(resp.settings)

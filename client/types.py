"""Typed results of the SDK: plain dataclasses built from the v1 protobuf messages, so callers never touch
generated code and get attributes, equality and ``dataclasses.asdict`` for JSON output."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from raftmq.v1 import raftmq_pb2 as pb

PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


@dataclass(frozen=True)
class Message:
    """A message to send. ``body`` may be ``str`` (sent as UTF-8)."""

    body: bytes | str
    tags: str | None = None
    keys: list[str] | str | None = None
    properties: dict[str, str] | None = None
    delay_level: int = 0
    message_group: str = ""  # FIFO message group: one queue, delivered in order to a FIFO consumer group
    # timer message: deliver at this time (ms since the epoch; ``epoch_ms(datetime)`` converts); 0 = now
    deliver_at_ms: int = 0


def epoch_ms(when: datetime | int | float) -> int:
    """A delivery time as milliseconds since the epoch: an aware ``datetime``, or a number of epoch ms."""
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise ValueError(f"deliver_at {when.isoformat()} has no time zone; use an aware datetime, e.g. "
                             "datetime.now(timezone.utc) + timedelta(minutes=5)")
        return int(when.timestamp() * 1000)
    if isinstance(when, bool) or not isinstance(when, (int, float)) or when < 0:
        raise ValueError(f"deliver_at must be a datetime or milliseconds since the epoch, got {when!r}")
    return int(when)


@dataclass(frozen=True)
class SendResult:
    """Where a message was stored; final once returned (acknowledged by a majority)."""

    msg_id: str
    uniq_key: str
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_timestamp: int
    note: str = ""
    broker: str = ""  # the group that stored it (its queue is topic, broker, queue_id); "" from older nodes
    # a re-send of a message stored before (same UNIQ_KEY, within the topic's de-duplication window): this is the
    # first send's result and nothing was stored again (docs/design/deduplication.md)
    duplicate: bool = False

    @classmethod
    def from_pb(cls, r: pb.SendResult) -> SendResult:
        return cls(r.msg_id, r.uniq_key, r.topic, r.queue_id, r.queue_offset, r.physical_offset,
                   r.store_timestamp, r.note, r.broker, r.duplicate)


@dataclass(frozen=True)
class MessageView:
    """A stored message as read back (pull, query, view)."""

    msg_id: str
    uniq_key: str
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_size: int
    body: bytes
    tags: str
    keys: list[str]
    properties: dict[str, str]
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    sys_flag: int = 0
    flag: int = 0
    reconsume_times: int = 0
    body_crc: int = 0
    prepared_transaction_offset: int = 0
    broker: str = ""  # the group it was read from, in a cluster of several groups (its queue: topic, broker, id)

    @classmethod
    def from_pb(cls, m: pb.MessageView, broker: str = "") -> MessageView:
        return cls(m.msg_id, m.uniq_key, m.topic, m.queue_id, m.queue_offset, m.physical_offset, m.store_size,
                   m.body, m.tags, list(m.keys), dict(m.properties), m.born_timestamp, m.born_host,
                   m.store_timestamp, m.store_host, m.sys_flag, m.flag, m.reconsume_times, m.body_crc,
                   m.prepared_transaction_offset, broker)

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class QueueOffsets:
    """Offsets of one queue: ``max_offset`` is the next offset to be written."""

    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp: int = 0


# What a topic takes (issue 34, RocketMQ 5's topic message type): a send of another kind is refused. NORMAL
# (no message group, delay or delivery time), FIFO (a message group), DELAY (a delay level or delivery time),
# TRANSACTION (transactional half messages), MIXED (every kind).
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")


@dataclass(frozen=True)
class TopicConfig:
    """A topic's configuration. ``perm`` uses RocketMQ's bits: read 4, write 2, inherit 1; ``message_type`` one
    of ``MESSAGE_TYPES``; ``dedup_window_seconds`` the topic's own de-duplication window (0: off; None: the
    node's, ``node.dedup_window_seconds``)."""

    name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ | PERM_WRITE
    order: bool = False
    message_type: str = "NORMAL"
    dedup_window_seconds: int | None = None

    @classmethod
    def from_pb(cls, t: pb.TopicConfig) -> TopicConfig:
        return cls(t.name, t.read_queue_nums, t.write_queue_nums, t.perm, t.order, t.message_type or "NORMAL",
                   t.dedup_window_seconds if t.HasField("dedup_window_seconds") else None)

    def to_pb(self) -> pb.TopicConfig:
        return pb.TopicConfig(name=self.name, read_queue_nums=self.read_queue_nums,
                              write_queue_nums=self.write_queue_nums, perm=self.perm, order=self.order,
                              message_type=self.message_type, dedup_window_seconds=self.dedup_window_seconds)


@dataclass(frozen=True)
class TopicPage:
    """One page of ``Admin.list_topics_page``: the topics by name, how many match on every page together, and
    whether more follow the last one (ask again with ``after=topics[-1].name``)."""

    topics: list[TopicConfig]
    matching: int
    more: bool


@dataclass(frozen=True)
class MemberStatus:
    """One cluster member as the answering node sees it."""

    id: str
    grpc_address: str
    raft_address: str
    role: str
    term: int
    commit_index: int
    applied_index: int
    applied_offset: int
    dispatch_behind_bytes: int
    lag_bytes: int
    healthy: bool
    ready: bool
    error: str = ""
    storage_integrity: str = ""  # damage found and scrub progress (issue 10), "" from an older server
    membership: str = ""  # "voter" or "learner" (issue 39), "" from an older server
    progress: str = ""  # a learner's catch-up as the leader measures it

    @classmethod
    def from_pb(cls, m: pb.MemberStatus) -> MemberStatus:
        return cls(m.id, m.grpc_address, m.raft_address, m.role, m.term, m.commit_index, m.applied_index,
                   m.applied_offset, m.dispatch_behind_bytes, m.lag_bytes, m.healthy, m.ready, m.error,
                   m.storage_integrity, m.membership, m.progress)


@dataclass(frozen=True)
class MembershipChange:
    """What a membership request did (or, with dry_run, would do): the plan in words, the configuration after
    it, and the Raft index of the entry that made it (0 when nothing was proposed)."""

    plan: str
    voters: list[str]
    learners: list[str]
    index: int

    @classmethod
    def from_pb(cls, r: pb.MembershipChangeResponse) -> MembershipChange:
        return cls(r.plan, list(r.voters), list(r.learners), r.index)


@dataclass(frozen=True)
class ClusterStatus:
    cluster_name: str
    leader_id: str
    durability: str
    members: list[MemberStatus] = field(default_factory=list)
    answered_by: str = ""  # the address that answered
    group: str = ""  # the group these members form (issue 38), "" from an older server

    @classmethod
    def from_pb(cls, r: pb.ClusterStatusResponse, answered_by: str) -> ClusterStatus:
        return cls(r.cluster_name, r.leader_id, r.durability, [MemberStatus.from_pb(m) for m in r.members],
                   answered_by, r.group)

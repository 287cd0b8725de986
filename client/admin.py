"""Administration and lookups: topics, queue and group offsets, offset search, cluster status, leadership
transfer, and queries by key / time range and by message id."""

from __future__ import annotations

import time
from collections.abc import Iterable

import grpc

from raftmq.client.connection import ServerPool
from raftmq.client.errors import (
    InvalidArgumentError,
    RaftmqError,
    TopicNotFoundError,
    UnavailableError,
    from_rpc_error,
)
from raftmq.client.routing import GroupRoute
from raftmq.client.security import ClientSecurity
from raftmq.client.types import (
    MESSAGE_TYPES,
    PERM_READ,
    PERM_WRITE,
    ClusterStatus,
    MembershipChange,
    MessageView,
    QueueOffsets,
    TopicConfig,
    TopicPage,
)
from raftmq.v1 import raftmq_pb2 as pb

MAX_QUERY_PER_CALL = 64
CREATE_TOPICS_PER_REQUEST = 1000  # Admin.create_topics: one Raft command each
LIST_TOPICS_PAGE = 1000  # Admin.list_topics fetches this many per call


def _message_type(value: str) -> str:
    name = str(value).strip().upper()
    if name not in MESSAGE_TYPES:
        raise InvalidArgumentError(f"message type {value!r} is not one of {', '.join(MESSAGE_TYPES)}")
    return name


class Admin:
    """Administrative calls. Topic changes, offset commits and leadership transfer go to the leader; lookups
    go to any replica (bounded staleness: that replica's apply lag)."""

    def __init__(self, servers: str | Iterable[str] | None = None, *, timeout: float = 10.0,
                 retry_timeout: float = 15.0, security: ClientSecurity | None = None):
        self._pool = ServerPool(servers, timeout=timeout, retry_timeout=retry_timeout, security=security)

    @property
    def servers(self) -> list[str]:
        return list(self._pool.addresses)

    # ------------------------------------------------------------------ topics

    def create_topic(self, name: str, *, queues: int | None = None, read_queues: int | None = None,
                     write_queues: int | None = None, perm: int = PERM_READ | PERM_WRITE,
                     order: bool = False, message_type: str = "NORMAL",
                     dedup_window_seconds: int | None = None) -> TopicConfig:
        """Create a topic (``queues`` sets both read and write queue counts; default 4) that takes messages of
        ``message_type`` (types.MESSAGE_TYPES; MIXED takes every kind), with its own de-duplication window
        (``dedup_window_seconds``, 0: off; None: the node's). Raises ``AlreadyExistsError`` if it exists."""
        cfg = pb.TopicConfig(name=name, read_queue_nums=read_queues or queues or 0,
                             write_queue_nums=write_queues or queues or 0, perm=perm, order=order,
                             message_type=_message_type(message_type), dedup_window_seconds=dedup_window_seconds)
        resp, _ = self._pool.write(lambda s, t: s.admin.CreateTopic(pb.CreateTopicRequest(topic=cfg), timeout=t))
        return TopicConfig.from_pb(resp.topic)

    def create_topics(self, topics: Iterable[TopicConfig], *, skip_existing: bool = False,
                      per_request: int = CREATE_TOPICS_PER_REQUEST) -> tuple[list[TopicConfig], list[str]]:
        """Create many topics (``TopicConfig``: queue counts 0 take the default of 4), ``per_request`` per call;
        each call is checked whole and applied as one change of the broker's topic table (one Raft command).
        Returns (created, names that existed and were left alone). Without ``skip_existing`` a topic that exists
        raises ``AlreadyExistsError`` and nothing of that call is created (earlier calls' topics are)."""
        created: list[TopicConfig] = []
        existing: list[str] = []
        todo = [t.to_pb() for t in topics]
        for start in range(0, len(todo), per_request):
            batch = todo[start:start + per_request]
            req = pb.CreateTopicsRequest(topics=batch, skip_existing=skip_existing)
            try:
                resp, _ = self._pool.write(lambda s, t, req=req: s.admin.CreateTopics(req, timeout=t),
                                           idempotent=skip_existing)
            except RaftmqError as e:
                if created:  # said with the error: the earlier requests' topics stay
                    e.message = f"{e.message} ({len(created)} topics of earlier requests were created)"
                    e.args = (e.message,)
                raise
            created += [TopicConfig.from_pb(t) for t in resp.created]
            existing += list(resp.existing)
        return created, existing

    def get_topic(self, name: str) -> TopicConfig | None:
        page = self.list_topics_page(include_system=True, filter=name, limit=0)
        return next((t for t in page.topics if t.name == name), None)

    def update_topic(self, name: str, *, queues: int | None = None, read_queues: int | None = None,
                     write_queues: int | None = None, perm: int | None = None,
                     order: bool | None = None, message_type: str | None = None,
                     dedup_window_seconds: int | None = None, broker: str | None = None) -> TopicConfig:
        """Change the given fields of an existing topic, keeping the others (raises ``TopicNotFoundError``).
        ``dedup_window_seconds``: the topic's own de-duplication window (0: off; -1: the node's again).
        ``broker``: in a cluster of several groups, change it in that group only (default: every group)."""
        if perm == 0:
            raise InvalidArgumentError("perm 0 cannot be set on an existing topic; use 1 (inherit only) to close it")
        cur = self.get_topic(name)
        if cur is None:
            raise TopicNotFoundError(f"topic {name!r} does not exist")
        cfg = pb.TopicConfig(
            name=name,
            read_queue_nums=read_queues or queues or cur.read_queue_nums,
            write_queue_nums=write_queues or queues or cur.write_queue_nums,
            perm=0 if perm is None else perm,  # 0: each group keeps its own (a drained group stays read-only)
            order=cur.order if order is None else order,
            message_type="" if message_type is None else _message_type(message_type),
            dedup_window_seconds=dedup_window_seconds)
        request = pb.UpdateTopicRequest(topic=cfg, broker=broker or "")
        resp, _ = self._pool.write(lambda s, t: s.admin.UpdateTopic(request, timeout=t), idempotent=True)
        return TopicConfig.from_pb(resp.topic)

    def list_topics(self, *, include_system: bool = False, filter: str = "") -> list[TopicConfig]:
        """Every topic (whose name contains ``filter``, any case), by name; fetched a page at a time."""
        out: list[TopicConfig] = []
        after = ""
        while True:
            page = self.list_topics_page(include_system=include_system, filter=filter, after=after,
                                         limit=LIST_TOPICS_PAGE)
            out += page.topics
            if not page.more or not page.topics:
                return out
            after = page.topics[-1].name

    def list_topics_page(self, *, include_system: bool = False, filter: str = "", after: str = "",
                         limit: int = 100) -> TopicPage:
        """Up to ``limit`` topics (0: all) whose name contains ``filter`` (any case), by name, from the first
        one after ``after``. (A broker from before paging lists every topic, in one page.)"""
        if limit < 0:
            raise InvalidArgumentError(f"limit {limit} is negative")
        req = pb.ListTopicsRequest(include_system=include_system, filter=filter, after=after, limit=limit)
        resp, _ = self._pool.read(lambda s, t: s.admin.ListTopics(req, timeout=t))
        topics = sorted((TopicConfig.from_pb(t) for t in resp.topics), key=lambda t: t.name)
        if limit and len(topics) > limit:  # a broker from before paging
            topics = [t for t in topics if t.name > after and filter.lower() in t.name.lower()]
            return TopicPage(topics, len(topics), False)
        return TopicPage(topics, resp.matching, resp.more)

    def delete_topic(self, name: str) -> None:
        self._pool.write(lambda s, t: s.admin.DeleteTopic(pb.DeleteTopicRequest(name=name), timeout=t))

    # ------------------------------------------------------------------ offsets

    def groups(self, topic: str = "") -> list[GroupRoute]:
        """The cluster's Raft groups (docs/design/scale-out.md#routes), in configuration order: each one's
        endpoints, leader, whether it answers and, with ``topic``, the topic's queues there. A one-group
        cluster is one group (named after the cluster); an older server without routes answers []."""
        try:
            resp, _ = self._pool.read(
                lambda s, t: s.messaging.QueryRoute(pb.QueryRouteRequest(topic=topic), timeout=t))
        except RaftmqError as e:
            if e.code == grpc.StatusCode.UNIMPLEMENTED:
                return []
            raise
        return [GroupRoute.from_pb(g) for g in resp.groups]

    def queue_offsets(self, topic: str, broker: str = "") -> list[QueueOffsets]:
        """Per-queue min/max offsets (max = next offset to be written), by queue id; ``broker``: of that group
        (a cluster of several groups), else of the answering member's."""
        resp, _ = self._pool.read(lambda s, t: s.messaging.GetQueueOffsets(
            pb.GetQueueOffsetsRequest(topic=topic, broker=broker), timeout=t))
        return sorted((QueueOffsets(q.queue_id, q.min_offset, q.max_offset, q.last_store_timestamp)
                       for q in resp.queues), key=lambda q: q.queue_id)

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First offset of the queue stored at or after ``timestamp_ms`` (the max offset if none)."""
        req = pb.SearchOffsetRequest(topic=topic, queue_id=queue_id, timestamp=timestamp_ms)
        resp, _ = self._pool.read(lambda s, t: s.messaging.SearchOffset(req, timeout=t))
        return resp.offset

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        """The group's committed offsets (next offset to consume) by queue; queues never committed are absent."""
        req = pb.FetchOffsetRequest(group=group, topic=topic)
        resp, _ = self._pool.read(lambda s, t: s.messaging.FetchOffset(req, timeout=t))
        return dict(resp.offsets)

    def commit_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Set the group's offsets (next offset to consume) for the given queues. Idempotent."""
        req = pb.CommitOffsetRequest(group=group, topic=topic, offsets=offsets)
        self._pool.write(lambda s, t: s.messaging.CommitOffset(req, timeout=t), idempotent=True)

    # ------------------------------------------------------------------ queries

    def query_by_key(self, topic: str, key: str, *, begin_ms: int = 0, end_ms: int = 0,
                     max_num: int = 32) -> list[MessageView]:
        """Messages of ``topic`` indexed under ``key`` stored in [begin_ms, end_ms] (0: unbounded / now),
        oldest first, at most ``max_num`` (the server caps one call at 64)."""
        req = pb.QueryMessageByKeyRequest(topic=topic, key=key, begin_timestamp=begin_ms,
                                          end_timestamp=end_ms or time.time_ns() // 1_000_000,
                                          max_num=max_num)
        resp, _ = self._pool.read(lambda s, t: s.messaging.QueryMessageByKey(req, timeout=t))
        return [MessageView.from_pb(m) for m in resp.messages]

    def view_message(self, msg_id: str, *, topic: str | None = None) -> MessageView:
        """A message by its offset msgId, or by UNIQ_KEY when ``topic`` is given (raises ``NotFoundError``)."""
        req = pb.ViewMessageRequest(msg_id=msg_id, topic=topic or "")
        resp, _ = self._pool.read(lambda s, t: s.messaging.ViewMessage(req, timeout=t))
        return MessageView.from_pb(resp.message)

    # ------------------------------------------------------------------ cluster

    def cluster_status(self, group: str = "") -> ClusterStatus:
        """Every member's role, term, indexes and lag, as the answering node sees them; ``group``: the members
        of that group of the cluster, as one of them sees them (relayed there), else the answering member's."""
        resp, address = self._pool.read(
            lambda s, t: s.admin.ClusterStatus(pb.ClusterStatusRequest(broker=group), timeout=t))
        return ClusterStatus.from_pb(resp, address)

    def transfer_leader(self, to_id: str | None = None) -> str:
        """Hand leadership to member ``to_id`` (any up-to-date follower when None); returns the new leader id."""
        req = pb.TransferLeaderRequest(to_id=to_id or "")
        resp, _ = self._pool.write(lambda s, t: s.admin.TransferLeader(req, timeout=t))
        return resp.leader_id

    def rebuild_member(self, member_id: str, *, discard: bool = False) -> tuple[str, str]:
        """Ask member ``member_id`` (a follower; the others must keep a majority without it) to set its files aside
        (``discard``: delete them) and start again empty, copying the group's data from a peer. It answers before
        it restarts; returns (its gRPC address, the directory in its data directory that keeps its old files)."""
        status = self.cluster_status()
        member = next((m for m in status.members if m.id == member_id), None)
        if member is None:
            raise InvalidArgumentError(f"{member_id!r} is not a member; members are "
                                       f"{sorted(m.id for m in status.members)}")
        if member.role == "unreachable" or not member.grpc_address:
            raise UnavailableError(
                f"{member_id} cannot be reached ({member.error or 'no gRPC address'}): it must be running to rebuild "
                "itself. A member that cannot start is rebuilt by moving its data directory away and starting it")
        req = pb.RebuildMemberRequest(member_id=member_id, discard=discard)
        try:  # that member itself, never forwarded: it is the one that restarts
            resp = self._pool.stubs(member.grpc_address, redirect=True).admin.RebuildMember(
                req, timeout=self._pool.timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, member.grpc_address) from None
        return member.grpc_address, resp.set_aside

    def add_member(self, member_id: str, raft_address: str, grpc_address: str, *, replaces: str = "",
                   dry_run: bool = False) -> MembershipChange:
        """Add ``member_id`` as a learner; the leader makes it a voter once it has caught up (and then removes
        ``replaces``, a voter, when given). Refused (``RaftmqError``) when another change is in progress or the
        group would have no healthy majority. Returns at once; follow it with ``cluster_status``."""
        req = pb.AddMemberRequest(id=member_id, raft_address=raft_address, grpc_address=grpc_address,
                                  replaces=replaces, dry_run=dry_run)
        resp, _ = self._pool.write(lambda s, t: s.admin.AddMember(req, timeout=t))
        return MembershipChange.from_pb(resp)

    def remove_member(self, member_id: str, *, dry_run: bool = False) -> MembershipChange:
        """Remove a learner or a voter (a leader hands leadership away first); returns once committed."""
        req = pb.RemoveMemberRequest(id=member_id, dry_run=dry_run)
        resp, _ = self._pool.write(lambda s, t: s.admin.RemoveMember(req, timeout=t))
        return MembershipChange.from_pb(resp)

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

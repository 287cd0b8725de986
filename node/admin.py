"""AdminService: topics (through the write path, so they replicate) and cluster status / leadership.

Why topics go through the write path: topic configs are replicated metadata (contract 6); a node that changed
its local table directly would disagree with its peers after a failover.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import TYPE_CHECKING

import grpc
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

from node.consumer_groups import allocate_averagely
from node.errors import RpcError, invalid, not_found
from node.rpc import rpc_handler
from node.validation import check_group_name, check_perm, check_queue_nums, check_topic_name, is_system_topic

if TYPE_CHECKING:
    from node.broker import Broker

DEFAULT_QUEUE_NUMS = 4
DEFAULT_PERM = 6


def topic_message(cfg) -> pb.TopicConfig:
    return pb.TopicConfig(name=cfg.topic_name, read_queue_nums=cfg.read_queue_nums,
                          write_queue_nums=cfg.write_queue_nums, perm=cfg.perm, order=cfg.order)


class AdminService(pb_grpc.AdminServiceServicer):
    def __init__(self, node: Broker):
        self.node = node

    # ------------------------------------------------------------------ topics
    @rpc_handler("CreateTopic")
    async def CreateTopic(self, request: pb.CreateTopicRequest, context) -> pb.TopicResponse:  # noqa: N802
        from store.topic_config import TopicConfig

        t = request.topic
        check_topic_name(t.name)
        read = t.read_queue_nums or DEFAULT_QUEUE_NUMS
        write = t.write_queue_nums or DEFAULT_QUEUE_NUMS
        perm = t.perm or DEFAULT_PERM
        check_queue_nums("read_queue_nums", read)
        check_queue_nums("write_queue_nums", write)
        check_perm(perm)
        if self.node.topic_config(t.name) is not None:
            raise RpcError(grpc.StatusCode.ALREADY_EXISTS,
                           f"topic {t.name!r} already exists; change it with `raftmq topic update {t.name}` "
                           "(SDK: Admin.update_topic)")
        cfg = TopicConfig(topic_name=t.name, read_queue_nums=read, write_queue_nums=write, perm=perm, order=t.order)
        await self.node.run_blocking(self.node.write_path.create_topic, cfg)
        return pb.TopicResponse(topic=topic_message(self.node.existing_topic(t.name)))

    @rpc_handler("UpdateTopic")
    async def UpdateTopic(self, request: pb.UpdateTopicRequest, context) -> pb.TopicResponse:  # noqa: N802
        t = request.topic
        check_topic_name(t.name)
        current = self.node.existing_topic(t.name)
        changes = {}
        if t.read_queue_nums:
            check_queue_nums("read_queue_nums", t.read_queue_nums)
            changes["read_queue_nums"] = t.read_queue_nums
        if t.write_queue_nums:
            check_queue_nums("write_queue_nums", t.write_queue_nums)
            changes["write_queue_nums"] = t.write_queue_nums
        if t.perm:
            check_perm(t.perm)
            changes["perm"] = t.perm
        if t.order != current.order:
            changes["order"] = t.order
        cfg = dataclasses.replace(current, **changes)
        await self.node.run_blocking(self.node.write_path.update_topic, cfg)
        return pb.TopicResponse(topic=topic_message(self.node.existing_topic(t.name)))

    @rpc_handler("ListTopics")
    async def ListTopics(self, request: pb.ListTopicsRequest, context) -> pb.ListTopicsResponse:  # noqa: N802
        topics = [c for c in self.node.store.topics.list()
                  if request.include_system or not is_system_topic(c.topic_name)]
        topics.sort(key=lambda c: c.topic_name)
        return pb.ListTopicsResponse(topics=[topic_message(c) for c in topics])

    @rpc_handler("DeleteTopic")
    async def DeleteTopic(self, request: pb.DeleteTopicRequest, context) -> pb.DeleteTopicResponse:  # noqa: N802
        check_topic_name(request.name)
        self.node.existing_topic(request.name)
        await self.node.run_blocking(self.node.write_path.delete_topic, request.name)
        return pb.DeleteTopicResponse()

    # ------------------------------------------------------------------ cluster
    @rpc_handler("ClusterStatus", needs_ready=False)
    async def ClusterStatus(self, request, context) -> pb.ClusterStatusResponse:  # noqa: N802
        node = self.node
        cfg = node.config
        resp = pb.ClusterStatusResponse(cluster_name=cfg.cluster.name, durability=cfg.cluster.durability)
        if node.write_path is None:  # still opening the store
            resp.members.append(pb.MemberStatus(id=node.node_id, grpc_address=cfg.advertised_address,
                                                role="starting", healthy=True, ready=False,
                                                error=node.readiness()[1]))
            return resp
        leader = node.write_path.leader()
        resp.leader_id = leader.id if leader else ""
        # its own thread, not the read pool: asking peers may wait out a short timeout and pulls must not queue
        statuses = await asyncio.to_thread(node.write_path.members_status)
        standalone = not cfg.members

        def num(s: dict, key: str) -> int:  # None: unknown (an unreachable member), shown as 0 with role/error
            v = s.get(key)
            return int(v) if v is not None else 0

        for s in statuses:
            me = s.get("id") == node.node_id
            role = "standalone" if standalone else str(s.get("role", ""))
            healthy = s.get("health", "ok") == "ok"
            error = str(s.get("error") or "")
            if not healthy and not error and s.get("health") not in ("unreachable", None):
                error = str(s.get("health"))  # fenced / stalled / disconnected: say why it is unhealthy
            if me:
                ready = node.readiness()[0]
            else:  # the peer's own /ready verdict; an older peer that does not send one: answering and healthy
                ready = s.get("ready")
                ready = healthy if ready is None else bool(ready) and healthy
            resp.members.append(pb.MemberStatus(
                id=str(s.get("id", "")), grpc_address=str(s.get("address") or s.get("grpc_address") or ""),
                raft_address=str(s.get("raft_address", "")), role=role, term=num(s, "term"),
                commit_index=num(s, "commit_index"), applied_index=num(s, "applied_index"),
                applied_offset=num(s, "applied_offset"), dispatch_behind_bytes=num(s, "dispatch_behind_bytes"),
                lag_bytes=num(s, "lag"), healthy=healthy, ready=ready, error=error,
            ))
        return resp

    @rpc_handler("TransferLeader")
    async def TransferLeader(self, request, context) -> pb.TransferLeaderResponse:  # noqa: N802
        node = self.node
        if not node.config.members:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                           "this is a single-node deployment (cluster.members is empty): there is no other member "
                           "to transfer leadership to")
        if request.to_id and request.to_id not in {m.id for m in node.config.members}:
            raise invalid(f"{request.to_id!r} (transfer-leader --to) is not a member; members are "
                          f"{sorted(m.id for m in node.config.members)}")
        await node.run_blocking(node.write_path.transfer_leadership, request.to_id or None)
        leader = node.write_path.leader()
        return pb.TransferLeaderResponse(leader_id=leader.id if leader else "")

    # ------------------------------------------------------------------ consumer groups
    @rpc_handler("DescribeConsumerGroup")
    async def DescribeConsumerGroup(self, request, context) -> pb.DescribeConsumerGroupResponse:  # noqa: N802
        """Live members (the leader's table), who owns which queue, committed offsets and lag per queue."""
        node = self.node
        check_group_name(request.group)
        node.check_leader()  # only the leader knows the members
        node.consumer_groups.start_term(node.leader_term())
        group = request.group
        members = node.consumer_groups.members(group)
        committed_topics = node.store.consumer_offsets.topics(group)
        topics = sorted(set(members) | set(committed_topics))
        if not topics:
            raise not_found(f"consumer group {group!r} has no live members and no committed offsets (check the "
                            "name; a group appears once a consumer of it heartbeats or commits)")
        resp = pb.DescribeConsumerGroupResponse(group=group)
        for topic in topics:
            cfg = node.topic_config(topic)
            live = members.get(topic, [])
            ids = [m.client_id for m in live]
            resp.generations[topic] = node.consumer_groups.generation(group, topic)
            queue_ids = list(range(cfg.read_queue_nums)) if cfg is not None else []
            owner = {}
            for m in live:
                mine = allocate_averagely(queue_ids, ids, m.client_id)
                owner.update(dict.fromkeys(mine, m.client_id))
                left = max(0.0, m.expires_at - time.time())
                resp.members.append(pb.ConsumerGroupMember(
                    client_id=m.client_id, topic=topic, queue_ids=mine,
                    last_heartbeat_ms=int(m.last_heartbeat * 1000), expires_in_ms=int(left * 1000)))
            if cfg is None:  # offsets of a deleted topic: nothing to show per queue
                continue
            offsets = node.group_offsets(group, topic)
            queues = await node.run_blocking(node.queue_offsets, topic, cfg.read_queue_nums)
            for q in queues:
                has = q.queue_id in offsets
                at = offsets.get(q.queue_id, 0)
                resp.queues.append(pb.ConsumerGroupQueue(
                    topic=topic, queue_id=q.queue_id, client_id=owner.get(q.queue_id, ""), committed=has,
                    committed_offset=at, max_offset=q.max_offset,
                    lag=max(0, q.max_offset - max(at, q.min_offset)) if has else q.max_offset - q.min_offset))
        return resp

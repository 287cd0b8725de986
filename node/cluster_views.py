"""Cluster status and consumer-group descriptions, built once for every reader of them.

Why a module of its own: the AdminService answers them over gRPC and the web console (node.console) shows them
on the HTTP port; both must show the same facts computed the same way. Both functions block (the status asks
every peer, with a short timeout; the group description reads queue offsets from the store), so callers run them
off the event loop.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from raftmq.node.consumer_groups import allocate_averagely
from raftmq.node.errors import not_found
from raftmq.node.validation import check_group_name
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore


def cluster_status(node: BrokerCore) -> pb.ClusterStatusResponse:
    """Every member's role, term, Raft indexes and lag, as this node sees them (peers are asked directly)."""
    cfg = node.config
    resp = pb.ClusterStatusResponse(cluster_name=cfg.cluster.name, durability=cfg.cluster.durability,
                                    group=node.groups.own)
    if node.write_path is None:  # still opening the store
        resp.members.append(pb.MemberStatus(id=node.node_id, grpc_address=cfg.advertised_address,
                                            role="starting", healthy=True, ready=False,
                                            error=node.readiness()[1]))
        return resp
    leader = node.write_path.leader()
    resp.leader_id = leader.id if leader else ""
    statuses = node.write_path.members_status()
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
            if not ready and not error and s.get("not_ready_reason"):
                error = str(s["not_ready_reason"])  # e.g. it cannot apply, or is still catching up
        resp.members.append(pb.MemberStatus(
            id=str(s.get("id", "")), grpc_address=str(s.get("address") or s.get("grpc_address") or ""),
            raft_address=str(s.get("raft_address", "")), role=role, term=num(s, "term"),
            commit_index=num(s, "commit_index"), applied_index=num(s, "applied_index"),
            applied_offset=num(s, "applied_offset"), dispatch_behind_bytes=num(s, "dispatch_behind_bytes"),
            lag_bytes=num(s, "lag"), healthy=healthy, ready=ready, error=error,
            storage_integrity=node.store.integrity_summary() if me else str(s.get("storage_integrity") or ""),
            membership=str(s.get("membership") or ""), progress=str(s.get("progress") or ""),
        ))
    return resp


def group_settings(node: BrokerCore, group: str) -> pb.ConsumerGroupSettings:
    """The settings a group consumes with (issue 34): its own replicated ones, else the node configuration's."""
    policy = node.pop.policy(group)
    own = node.store.subscription_groups.get(group) is not None
    return pb.ConsumerGroupSettings(fifo=policy.fifo, max_delivery_attempts=policy.max_delivery_attempts,
                                    retry_backoff_ms=list(policy.retry_backoff_ms),
                                    source="group settings" if own else "node config")


def describe_group(node: BrokerCore, group: str, *, with_members: bool = True) -> pb.DescribeConsumerGroupResponse:
    """Live members (the leader's table), who owns which queue, committed offsets and lag per queue.

    Raises RpcError (FAILED_PRECONDITION with the leader) on a follower: only the leader knows the members.
    ``with_members=False``: any member answers with the replicated part only (offsets and lag, no members)."""
    check_group_name(group)
    members = {}
    if with_members:
        node.check_leader()
        node.consumer_groups.start_term(node.leader_term())
        members = node.consumer_groups.members(group)
    committed_topics = node.store.consumer_offsets.topics(group)
    topics = sorted(set(members) | set(committed_topics))
    if not topics and node.store.subscription_groups.get(group) is None:
        raise not_found(f"consumer group {group!r} has no live members, no committed offsets and no settings of its "
                        "own (check the name; a group appears once a consumer of it heartbeats or commits, or once "
                        "`raftmq group update` gives it settings)")
    resp = pb.DescribeConsumerGroupResponse(group=group, settings=group_settings(node, group))
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
        for q in node.queue_offsets(topic, cfg.read_queue_nums):
            has = q.queue_id in offsets
            at = offsets.get(q.queue_id, 0)
            resp.queues.append(pb.ConsumerGroupQueue(
                topic=topic, queue_id=q.queue_id, client_id=owner.get(q.queue_id, ""), committed=has,
                committed_offset=at, max_offset=q.max_offset,
                lag=max(0, q.max_offset - max(at, q.min_offset)) if has else q.max_offset - q.min_offset))
    return resp

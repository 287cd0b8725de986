"""Routes: every group of the cluster with its endpoints, leader and a topic's queues there (issue 37,
docs/design/scale-out.md#routes). raftmq's ``QueryRoute`` answers them, RocketMQ 5's builds its brokers from them.
This member's group comes from its own state; every other group is asked (``local``) through the group directory
(node/groups.py), all at once; one that does not answer is in the route as unavailable, with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc

from raftmq.node.errors import RpcError
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)


def own_route(node: BrokerCore, topic: str) -> pb.GroupRoute:
    """This member's group as a route names it: endpoints, leader, and the topic's queues in its table."""
    spec = node.groups.specs[node.groups.own]
    wp = node.write_path
    leader = wp.leader() if wp is not None else None
    route = pb.GroupRoute(name=node.groups.own, endpoints=spec.client_addresses() or [node.config.advertised_address],
                          leader=(leader.grpc_address or "") if leader is not None else "", available=True,
                          store_host=spec.store_host,
                          # a single node (no members listed) is its own group's only possible leader
                          preferred_leader=node.groups.preferred.get(node.groups.own, node.node_id))
    cfg = node.topic_config(topic) if topic else None
    if cfg is not None:
        route.has_topic = True
        route.read_queue_nums, route.write_queue_nums, route.perm = (cfg.read_queue_nums, cfg.write_queue_nums,
                                                                     cfg.perm)
    return route


async def route(node: BrokerCore, topic: str, context: grpc.aio.ServicerContext) -> pb.QueryRouteResponse:
    """Every group's route for ``topic``: this member's from its own state, the others asked at once (a group
    that does not answer is in the route as unavailable, with the reason)."""

    # one view of the groups for the whole answer: discovery may change the directory's list while we ask
    specs, names = node.groups.specs, node.groups.names

    async def ask(group: str) -> pb.GroupRoute:
        spec = specs[group]
        try:
            answer = await node.groups.relay(group, "QueryRoute", pb.QueryRouteRequest(topic=topic, local=True),
                                             context)
        except RpcError as e:
            return pb.GroupRoute(name=group, endpoints=spec.client_addresses(), available=False, error=e.message,
                                 store_host=spec.store_host, preferred_leader=node.groups.preferred.get(group, ""))
        found = next((g for g in answer.groups if g.name == group), None)
        if found is None or answer.groups_digest != node.groups.digest:  # a half-rolled-out change of the list
            log.warning("group %s: its member %s has another cluster.groups list than this member (%s): roll the "
                        "same list out to every member", group, answer.answered_by, node.node_id)
            return pb.GroupRoute(name=group, endpoints=spec.client_addresses(), available=False,
                                 error=f"its member {answer.answered_by} (of group {answer.group!r}) has another "
                                       f"cluster.groups list than {node.node_id}: roll the same list out to every "
                                       "member", store_host=spec.store_host,
                                 preferred_leader=node.groups.preferred.get(group, ""))
        return found

    others = [n for n in names if n != node.groups.own]
    answers = dict(zip(others, await asyncio.gather(*(ask(n) for n in others)), strict=True))
    answers[node.groups.own] = own_route(node, topic)
    return pb.QueryRouteResponse(cluster_name=node.config.cluster.name,
                                 groups=[answers[n] for n in names], answered_by=node.node_id,
                                 group=node.groups.own, groups_digest=node.groups.digest)

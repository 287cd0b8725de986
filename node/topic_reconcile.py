"""The topic reconcile pass: each group's leader creates in its own group every topic another group has and it
lacks (issue 37, docs/design/scale-out.md#topic-administration).

Why: a topic is created in every group at once, but a group that is down or without a leader at that moment
misses it, and sends to it then find the topic in some groups only. Each leader repairs only its own group, with
the settings the other group has, through its own write path (so the change replicates like any other). A topic
this leader deleted lately (``BrokerCore.topics_deleted``) is not brought back: a delete that reached only some
groups is completed by running it again, never undone here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from raftmq.node.errors import RpcError
from raftmq.node.groups import InternalCall
from raftmq.signing import signed_headers
from raftmq.store import StoreError
from raftmq.store.topic_config import TopicConfig
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)

TOMBSTONE_S = 24 * 3600.0  # a topic this leader deleted is not re-created from another group for this long
CALL_TIMEOUT_S = 10.0


class TopicReconcile:
    """Runs on every member of a cluster of several groups; acts while the member leads its group."""

    def __init__(self, node: BrokerCore, interval_s: float):
        self.node = node
        self.interval_s = interval_s
        self.created = 0  # topics this member created in a pass (metrics, tests)

    def _context(self) -> InternalCall:
        s = self.node.config.security
        signed = signed_headers(s.auth_admin_access_key, s.auth_admin_secret_key) if s.auth_enabled else None
        return InternalCall(CALL_TIMEOUT_S, signed)

    async def run(self) -> None:
        node = self.node
        next_pass = time.monotonic() + self.interval_s
        while not node.stopping:
            await asyncio.sleep(min(1.0, max(0.0, next_pass - time.monotonic())))
            if time.monotonic() < next_pass:
                continue
            next_pass = time.monotonic() + self.interval_s
            if node.serving and node.is_leader():
                try:
                    await self.pass_once()
                except Exception:  # noqa: BLE001 - one failed pass must not end the loop
                    log.exception("topic reconcile pass failed; trying again in %.0f s", self.interval_s)

    async def pass_once(self) -> list[str]:
        """One pass over the other groups' topic tables; the topics created in this member's group."""
        node, groups = self.node, self.node.groups
        now = time.time()
        for name, when in list(node.topics_deleted.items()):
            if now - when > TOMBSTONE_S:
                del node.topics_deleted[name]
        created: list[str] = []
        for group in groups.names:
            if group == groups.own:
                continue
            try:
                answer = await groups.relay(group, "ListTopics", pb.ListTopicsRequest(broker=group), self._context())
            except RpcError as e:
                log.info("topic reconcile: group %s not asked this time: %s", group, e.message)
                continue
            for t in answer.topics:
                if node.topic_config(t.name) is not None or t.name in node.topics_deleted or t.name in created:
                    continue
                cfg = TopicConfig(topic_name=t.name, read_queue_nums=t.read_queue_nums,
                                  write_queue_nums=t.write_queue_nums, perm=t.perm,
                                  order=t.order).with_message_type(t.message_type)
                try:
                    await node.run_blocking(node.write_path.create_topic, cfg)
                except StoreError:
                    continue  # created meanwhile
                created.append(t.name)
                self.created += 1
                log.warning("topic reconcile: created topic %r in group %s (%d queues, as group %s has it)", t.name,
                            groups.own, t.write_queue_nums, group)
        return created

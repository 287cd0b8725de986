"""The topic reconcile pass: each group's leader brings its own group's topics to what the latest cluster-wide
change of each topic left, as any group saw it (issue 37, docs/design/scale-out.md#topic-administration).

Why: a topic is created or deleted in every group at once, but a group that is down or without a leader at that
moment misses it. Every group keeps, in its replicated topic table, the time it last created or deleted each topic
in such a change (store.topic_config.TopicMark), so any of its leaders, a new one included, can compare: the
latest event among the groups that answer wins. A topic another group created after this group deleted it is
created here (with that group's settings); a topic another group deleted after this group created it is deleted
here - a delete that reached only some groups is completed, never undone. A topic every group holds is brought
to the settings of the group that changed it last (an update marks the topic as created at its time), so an
update that reached only some groups is completed too. Each leader changes only its own group,
through its own write path, and marks the change with the time of the event it follows, so the passes of all
groups agree and stop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftmq.node.admin import topic_message
from raftmq.node.errors import RpcError
from raftmq.node.groups import InternalCall
from raftmq.node.validation import is_system_topic
from raftmq.signing import signed_headers
from raftmq.store.topic_config import TopicConfig
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 10.0
CHANGES_PER_COMMAND = 500  # topics a pass changes in one Raft command (each a create or delete, and its mark)


@dataclass(frozen=True)
class GroupTopics:
    """One group's topic table as the pass sees it: its topics and marks, by name. (The settings pass,
    node/settings_reconcile.py, holds a group's users or consumer-group settings in it the same way.)"""

    topics: dict[str, pb.TopicConfig]
    marks: dict[str, pb.TopicMark]

    def state(self, name: str) -> tuple[int, bool]:
        """``(since_ms, present)``: whether the group holds the topic and since when. A group without a mark has
        held (or lacked) it from the start (0); a mark that does not match what the group holds is older than
        what it holds (a create or delete that left no mark came after it)."""
        present = name in self.topics
        mark = self.marks.get(name)
        if mark is None:
            return 0, present
        return (mark.at_ms if mark.deleted != present else mark.at_ms + 1), present


def latest(views: dict[str, GroupTopics], name: str) -> tuple[int, bool, str]:
    """``(since_ms, present, group)`` of the latest state of topic ``name`` among ``views``; on a tie a group
    that holds it wins (so a topic no group ever marked is copied to the groups that miss it)."""
    return max((*v.state(name), g) for g, v in sorted(views.items()))


def _shared(t: pb.TopicConfig) -> pb.TopicConfig:
    """The settings every group's copy of a topic shares: all but ``perm``, which is each group's own (as a
    RocketMQ topic's perm is each broker's): `raftmq topic update --perm r --group G` drains one group."""
    out = pb.TopicConfig()
    out.CopyFrom(t)
    out.perm = 0
    return out


def changes(views: dict[str, GroupTopics], own: str) -> list[tuple[str, int, str, str]]:
    """What group ``own`` must do to reach the latest state of every topic among ``views``: ``(name, the latest
    state's time, the group it is from, "create" | "update" | "delete")``. An update only when the other group's
    state is strictly newer than this group's (equal marks with different settings are left alone: no two groups
    copy each other back and forth) and differs in a shared setting (``_shared``: never the group's own perm)."""
    mine = views[own]
    names = sorted({n for v in views.values() for n in (*v.topics, *v.marks) if not is_system_topic(n)})
    out = []
    for name in names:
        since_ms, present, source = latest(views, name)
        if present != (name in mine.topics):
            out.append((name, since_ms, source, "create" if present else "delete"))
        elif present and since_ms > mine.state(name)[0] and \
                _shared(views[source].topics[name]) != _shared(mine.topics[name]):
            out.append((name, since_ms, source, "update"))  # an update this group missed
    return out


def _config(t: pb.TopicConfig, current: TopicConfig | None = None) -> TopicConfig:
    """The store config of another group's topic ``t``; over ``current`` (an update: its other attributes and
    its perm stay)."""
    base = current or TopicConfig(topic_name=t.name)
    perm = t.perm if current is None else current.perm  # a group's perm is its own (``_shared``)
    cfg = dataclasses.replace(base, read_queue_nums=t.read_queue_nums, write_queue_nums=t.write_queue_nums,
                              perm=perm, order=t.order).with_message_type(t.message_type)
    return cfg.with_dedup_window(t.dedup_window_seconds if t.HasField("dedup_window_seconds") else None)


class LeaderPass:
    """A pass that runs every ``interval_s`` on every member of a cluster of several groups and acts while the
    member leads its group (``pass_once``); its calls to other groups are signed as the bootstrap admin."""

    what = "reconcile"

    def __init__(self, node: BrokerCore, interval_s: float):
        self.node = node
        self.interval_s = interval_s

    def _context(self) -> InternalCall:
        s = self.node.config.security
        signed = signed_headers(s.auth_admin_access_key, s.auth_admin_secret_key) if s.auth_enabled else None
        return InternalCall(CALL_TIMEOUT_S, signed)

    async def pass_once(self) -> list[str]:
        raise NotImplementedError

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
                    log.exception("%s pass failed; trying again in %.0f s", self.what, self.interval_s)


class TopicReconcile(LeaderPass):
    """Runs on every member of a cluster of several groups; acts while the member leads its group."""

    what = "topic reconcile"

    def __init__(self, node: BrokerCore, interval_s: float):
        super().__init__(node, interval_s)
        self.created = 0  # topics this member created in a pass (metrics, tests)
        self.deleted = 0  # topics this member deleted in a pass, completing another group's delete
        self.updated = 0  # topics this member updated in a pass to another group's newer settings

    def _own(self) -> GroupTopics:
        table = self.node.store.topics
        topics = {n: topic_message(c) for n in table.names()
                  if not is_system_topic(n) and (c := table.get(n)) is not None}
        marks = {n: pb.TopicMark(name=n, deleted=m.deleted, at_ms=m.at_ms) for n, m in table.marks().items()}
        return GroupTopics(topics, marks)

    def _operation(self, views: dict[str, GroupTopics], name: str, source: str, kind: str) -> tuple:
        """The topic-table operation of one change: a delete by name; a create with group ``source``'s settings,
        an update with them over this group's own config (its other attributes stay)."""
        if kind == "delete":
            return "delete", name
        current = self.node.store.topics.get(name) if kind == "update" else None
        return kind, _config(views[source].topics[name], current)

    async def pass_once(self) -> list[str]:
        """One pass over every group's topic table; what it changed in this member's group (``created NAME``,
        ``updated NAME`` or ``deleted NAME``)."""
        node, groups = self.node, self.node.groups
        views = {groups.own: self._own()}
        for group in groups.names:
            if group == groups.own:
                continue
            try:
                answer = await groups.relay(group, "ListTopics", pb.ListTopicsRequest(broker=group, include_marks=True),
                                            self._context())
            except RpcError as e:
                log.info("topic reconcile: group %s not asked this time: %s", group, e.message)
                continue
            views[group] = GroupTopics({t.name: t for t in answer.topics}, {m.name: m for m in answer.marks})
        if len(views) == 1:
            return []
        # (name, the latest state's time, its group, the operation that follows it)
        plans = [(name, since_ms, source, self._operation(views, name, source, kind))
                 for name, since_ms, source, kind in changes(views, groups.own)]
        done: list[str] = []
        for i in range(0, len(plans), CHANGES_PER_COMMAND):
            batch = plans[i:i + CHANGES_PER_COMMAND]
            ops = [op for name, since_ms, _, change in batch for op in (change, ("mark", (name, since_ms)))]
            refusals = await node.run_blocking(node.write_path.change_topics, ops)
            for (name, since_ms, source, (kind, arg)), refusal in zip(batch, refusals[::2], strict=True):
                if refusal:
                    continue  # changed meanwhile: the next pass looks again
                done.append(f"{kind}d {name}")
                if kind == "create":
                    self.created += 1
                    log.warning("topic reconcile: created topic %r in group %s (%d queues, as group %s has it)",
                                name, groups.own, arg.write_queue_nums, source)
                elif kind == "update":
                    self.updated += 1
                    log.warning("topic reconcile: updated topic %r in group %s to group %s's settings of %d ms "
                                "(%d read / %d write queues, perm %d; the update had not reached this group)",
                                name, groups.own, source, since_ms, arg.read_queue_nums, arg.write_queue_nums,
                                arg.perm)
                else:
                    self.deleted += 1
                    log.warning("topic reconcile: deleted topic %r in group %s, as group %s did at %d ms (its "
                                "delete had not reached this group)", name, groups.own, source, since_ms)
        return done

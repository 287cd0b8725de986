"""AdminService: topics (through the write path, so they replicate) and cluster status / leadership.

Why topics go through the write path: topic configs are replicated metadata (docs/architecture.md#contracts, 6); a node that changed
its local table directly would disagree with its peers after a failover.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import json
import time
from typing import TYPE_CHECKING

import grpc

from raftmq.node.cluster_views import cluster_status, describe_group, group_settings
from raftmq.node.errors import RpcError, invalid
from raftmq.node.rpc import rpc_handler
from raftmq.node.validation import (
    ValidationError,
    check_group_name,
    check_message_type_name,
    check_perm,
    check_queue_nums,
    check_topic_name,
    is_system_topic,
)
from raftmq.replication.write_path import raise_refusal
from raftmq.store.topic_config import MAX_DEDUP_WINDOW_SECONDS, MIXED, NORMAL
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

DEFAULT_QUEUE_NUMS = 4
MAX_CREATE_TOPICS = 10_000  # CreateTopics: topics in one request (~3 MB as a Raft command)
DEFAULT_PERM = 6
REBUILD_CHECK_S = 5.0  # RebuildMember: how long the group may take to show a leader and a majority without us


def new_topic_config(t: pb.TopicConfig):
    """The store config of a topic to create (defaults filled in); ValidationError saying what to fix."""
    from raftmq.store.topic_config import TopicConfig

    check_topic_name(t.name)
    read = t.read_queue_nums or DEFAULT_QUEUE_NUMS
    write = t.write_queue_nums or DEFAULT_QUEUE_NUMS
    perm = t.perm or DEFAULT_PERM
    check_queue_nums("read_queue_nums", read)
    check_queue_nums("write_queue_nums", write)
    check_perm(perm)
    message_type = check_message_type_name(t.message_type, allow_empty=True) or NORMAL
    cfg = TopicConfig(topic_name=t.name, read_queue_nums=read, write_queue_nums=write, perm=perm,
                      order=t.order).with_message_type(message_type)
    if t.HasField("dedup_window_seconds"):
        cfg = cfg.with_dedup_window(_dedup_window(t, update=False))
    return cfg


def _dedup_window(t: pb.TopicConfig, update: bool) -> int | None:
    """The topic's own de-duplication window asked for (None: the node's); checked here to name the field."""
    seconds = t.dedup_window_seconds
    if update and seconds == -1:
        return None
    if not 0 <= seconds <= MAX_DEDUP_WINDOW_SECONDS:
        raise ValidationError(f"dedup_window_seconds {seconds} must be 0 (off) to {MAX_DEDUP_WINDOW_SECONDS}"
                              + (", or -1 to use the node's window again" if update else ""))
    return seconds


def marked(node: BrokerCore, ops: list[tuple], name: str) -> list[tuple]:
    """``ops`` on topic ``name``, followed in a cluster of several groups by the mark of when this group created,
    updated or deleted it (replicated with them: docs/design/scale-out.md#topic-administration)."""
    return [*ops, ("mark", (name, None))] if node.groups.many else ops


def _listed(items: list[str], sep: str = ", ", shown: int = 10) -> str:
    """The first ``shown`` of ``items``, and how many more."""
    more = f"{sep}and {len(items) - shown} more" if len(items) > shown else ""
    return sep.join(items[:shown]) + more


def _principal() -> str:
    from raftmq.node.auth import current_principal

    principal = current_principal.get()
    return principal.access_key if principal is not None else ""


def _change_response(done: dict) -> pb.MembershipChangeResponse:
    return pb.MembershipChangeResponse(plan=done["plan"], voters=done["voters"], learners=done["learners"],
                                       index=done["index"])


def now_ms() -> int:
    return int(time.time() * 1000)


def settings_of(node: BrokerCore) -> pb.ListSettingsResponse:
    """This member's access users and consumer-group settings, each with its mark (ListSettings)."""

    def entries(records: dict[str, str], marks: dict[str, tuple[bool, int]]) -> list[pb.SettingEntry]:
        out = []
        for name in sorted({*records, *marks}):
            deleted, at = marks.get(name, (False, 0))
            out.append(pb.SettingEntry(name=name, present=name in records, record=records.get(name, ""),
                                       marked=name in marks, deleted=deleted, at_ms=at))
        return out

    table = node.store.subscription_groups
    groups = entries({g.group_name: json.dumps(g.to_json(), sort_keys=True) for g in table.list()},
                     {n: (m.deleted, m.at_ms) for n, m in table.marks().items()})
    acl = node.write_path.acl_table() if node.auth is not None else None
    if acl is None:
        return pb.ListSettingsResponse(groups=groups)
    users = entries({u: json.dumps(r, sort_keys=True) for u, r in acl.snapshot().items()}, acl.marks())
    return pb.ListSettingsResponse(users=users, groups=groups, auth=True)


def topic_message(cfg) -> pb.TopicConfig:
    # a topic from before message types takes every kind: MIXED is what it does
    return pb.TopicConfig(name=cfg.topic_name, read_queue_nums=cfg.read_queue_nums,
                          write_queue_nums=cfg.write_queue_nums, perm=cfg.perm, order=cfg.order,
                          message_type=cfg.message_type or MIXED, dedup_window_seconds=cfg.dedup_window_seconds)


class AdminService(pb_grpc.AdminServiceServicer):
    def __init__(self, node: BrokerCore):
        self.node = node

    # ------------------------------------------------------------------ topics
    async def _everywhere(self, method: str, request_for, context):
        """Issue 37: a topic change without a group, in a cluster of several: the same change pinned to every
        group (docs/design/scale-out.md#topic-administration). All of them done: the answers of every group, in
        configuration order, each with its group's outcome; otherwise the refusals, each naming its group, what
        the others did, and that the reconcile pass completes the change in the groups that missed it."""
        answers = await self.node.groups.fan_out(method, request_for, context)
        done = [a for _, a in answers if not isinstance(a, RpcError)]
        failed = [a for _, a in answers if isinstance(a, RpcError)]
        if failed:
            did = ", ".join(f"{o.group} {o.outcome}" for a in done for o in a.groups) or "no group changed"
            code = (grpc.StatusCode.UNAVAILABLE if any(e.code == grpc.StatusCode.UNAVAILABLE for e in failed)
                    else failed[0].code)
            after = {"CreateTopic": "creates it in the groups that lack it",
                     "CreateTopics": "creates them in the groups that lack them",
                     "UpdateTopic": "updates it in the groups that missed the update",
                     "DeleteTopic": "deletes it in the groups that missed the delete"}[method]
            raise RpcError(code, "; ".join(e.message for e in failed) + f" (done: {did}) - the leaders' reconcile "
                           f"pass {after} once they answer (docs/design/scale-out.md#topic-administration)")
        return done

    def _merged(self, done: list):
        """One answer of every group's: the first group's, with every group's outcome."""
        response = done[0]
        outcomes = [o for a in done for o in a.groups]
        del response.groups[:]
        response.groups.extend(outcomes)
        return response

    def _outcome(self, outcome: str) -> list[pb.GroupTopicOutcome]:
        return [pb.GroupTopicOutcome(group=self.node.groups.own, outcome=outcome)]

    @rpc_handler("CreateTopic")
    async def CreateTopic(self, request: pb.CreateTopicRequest, context) -> pb.TopicResponse:  # noqa: N802
        node = self.node
        t = request.topic
        cfg = new_topic_config(t)
        node.check_group(request.broker)
        if not request.broker and node.groups.many:
            return self._merged(await self._everywhere(
                "CreateTopic", lambda g: pb.CreateTopicRequest(topic=t, broker=g), context))
        existing = node.topic_config(t.name)
        if existing is not None:
            if request.broker and topic_message(existing) == topic_message(cfg):  # one group of a fan-out
                return pb.TopicResponse(topic=topic_message(existing), groups=self._outcome("exists"))
            where = f" in group {node.groups.own}" if node.groups.many else ""
            raise RpcError(grpc.StatusCode.ALREADY_EXISTS,
                           f"topic {t.name!r} already exists{where}; change it with `raftmq topic update {t.name}` "
                           "(SDK: Admin.update_topic)")
        ops = marked(node, [("create", cfg)], t.name)
        [refusal, *_] = await node.run_blocking(node.write_path.change_topics, ops)
        if refusal:
            raise self._refused(t.name, refusal)
        return pb.TopicResponse(topic=topic_message(node.existing_topic(t.name)), groups=self._outcome("created"))

    @rpc_handler("CreateTopics")
    async def CreateTopics(self, request: pb.CreateTopicsRequest, context) -> pb.CreateTopicsResponse:  # noqa: N802
        """Every topic checked first, then one change of the topic table for all of them (one Raft command)."""
        given = request.topics
        if not given:
            raise invalid("no topics given; set topics (one TopicConfig per topic)")
        if len(given) > MAX_CREATE_TOPICS:
            raise invalid(f"{len(given)} topics in one request; at most {MAX_CREATE_TOPICS}: split them over "
                          "several requests")
        cfgs, problems, seen = [], [], set()
        for i, t in enumerate(given):
            try:
                cfgs.append(new_topic_config(t))
                if t.name in seen:
                    raise ValidationError("given twice")
                seen.add(t.name)
            except ValidationError as e:
                problems.append(f"topics[{i}] {t.name!r}: {e}")
        if problems:
            raise invalid(_listed(problems, "; ") + "; nothing was created")
        node = self.node
        node.check_group(request.broker)
        if not request.broker and node.groups.many:  # issue 37: in every group, as CreateTopic
            return self._created_everywhere(await self._everywhere("CreateTopics", lambda g: pb.CreateTopicsRequest(
                topics=given, skip_existing=request.skip_existing, broker=g), context))
        held = {c.topic_name: (c, now) for c in cfgs if (now := node.topic_config(c.topic_name)) is not None}
        existing = list(held)
        # one group of a fan-out: a topic it holds with the same settings is done (the call is idempotent)
        differing = [n for n, (c, now) in held.items() if not request.broker or topic_message(now) != topic_message(c)]
        if differing and not request.skip_existing:
            where = f" in group {node.groups.own}" if node.groups.many else ""
            same = " with other settings" if request.broker else ""
            raise RpcError(grpc.StatusCode.ALREADY_EXISTS,
                           f"{len(differing)} of the {len(cfgs)} topics exist already{where}{same} "
                           f"({_listed(differing)}); nothing was created{where}: leave them out, or skip them with "
                           "skip_existing (`--skip-existing`)")
        skip = set(existing)
        todo = [c for c in cfgs if c.topic_name not in skip]
        ops = [marked(node, [("create", c)], c.topic_name) for c in todo]  # a create (and its mark)
        answers = await node.run_blocking(node.write_path.change_topics, [op for o in ops for op in o])
        refusals = answers[::len(ops[0])] if ops else []
        created = [c for c, r in zip(todo, refusals, strict=True) if r is None]
        late = [(c.topic_name, r) for c, r in zip(todo, refusals, strict=True) if r is not None]
        for name, refusal in late:
            if not request.skip_existing or self.node.topic_config(name) is None:
                raise RpcError(self._refused(name, refusal).code,
                               f"{len(created)} topics created; {len(late)} refused ({_listed([n for n, _ in late])}):"
                               f" {refusal}")
        return pb.CreateTopicsResponse(created=[topic_message(c) for c in created],
                                       existing=existing + [n for n, _ in late],
                                       groups=self._outcome("created" if created else "exists"))

    @staticmethod
    def _created_everywhere(done: list[pb.CreateTopicsResponse]) -> pb.CreateTopicsResponse:
        """Every group's CreateTopics answer as one: created = the topics some group created (with its settings),
        existing = those every group held already; each group's outcome."""
        created: dict[str, pb.TopicConfig] = {}
        for a in done:
            for t in a.created:
                created.setdefault(t.name, t)
        existing = [n for n in dict.fromkeys(n for a in done for n in a.existing) if n not in created]
        return pb.CreateTopicsResponse(created=list(created.values()), existing=existing,
                                       groups=[o for a in done for o in a.groups])

    def _refused(self, name: str, refusal: str) -> RpcError:
        """The status of a create the topic table refused: the topic was created meanwhile, or invalid."""
        if self.node.topic_config(name) is not None:
            return RpcError(grpc.StatusCode.ALREADY_EXISTS, f"topic {name!r} already exists ({refusal})")
        return invalid(refusal)

    @rpc_handler("UpdateTopic")
    async def UpdateTopic(self, request: pb.UpdateTopicRequest, context) -> pb.TopicResponse:  # noqa: N802
        t = request.topic
        check_topic_name(t.name)
        self.node.check_group(request.broker)
        if not request.broker and self.node.groups.many:
            return self._merged(await self._everywhere(
                "UpdateTopic", lambda g: pb.UpdateTopicRequest(topic=t, broker=g), context))
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
        if t.message_type:
            cfg = cfg.with_message_type(check_message_type_name(t.message_type))
        if t.HasField("dedup_window_seconds"):
            cfg = cfg.with_dedup_window(_dedup_window(t, update=True))
        # marked in a cluster of several groups: the reconcile pass brings a group that missed it to the newest
        refusals = await self.node.run_blocking(self.node.write_path.change_topics,
                                                marked(self.node, [("update", cfg)], t.name))
        raise_refusal(refusals)
        return pb.TopicResponse(topic=topic_message(self.node.existing_topic(t.name)), groups=self._outcome("updated"))

    @rpc_handler("ListTopics")
    async def ListTopics(self, request: pb.ListTopicsRequest, context) -> pb.ListTopicsResponse:  # noqa: N802
        self.node.check_group(request.broker)
        if request.limit < 0:
            raise invalid(f"limit {request.limit} is negative; give the page size (0: every topic)")
        text = request.filter.lower()
        names = [n for n in self.node.store.topics.names()
                 if (request.include_system or not is_system_topic(n)) and text in n.lower()]
        start = bisect.bisect_right(names, request.after) if request.after else 0
        page = names[start:start + request.limit] if request.limit else names[start:]
        topics = self.node.store.topics
        marks = [pb.TopicMark(name=n, deleted=m.deleted, at_ms=m.at_ms)
                 for n, m in sorted(topics.marks().items())] if request.include_marks else []
        return pb.ListTopicsResponse(topics=[topic_message(c) for n in page if (c := topics.get(n)) is not None],
                                     matching=len(names), more=start + len(page) < len(names), marks=marks)

    @rpc_handler("ListSettings")
    async def ListSettings(self, request: pb.ListSettingsRequest, context) -> pb.ListSettingsResponse:  # noqa: N802
        """This group's access users (secrets sealed) and consumer-group settings with their marks: what the
        leaders' settings reconcile pass compares (docs/design/scale-out.md#settings-in-every-group)."""
        node = self.node
        node.check_group(request.broker)
        node.check_leader()  # only the leader's tables are current
        return settings_of(node)

    @rpc_handler("DeleteTopic")
    async def DeleteTopic(self, request: pb.DeleteTopicRequest, context) -> pb.DeleteTopicResponse:  # noqa: N802
        node = self.node
        check_topic_name(request.name)
        node.check_group(request.broker)
        if not request.broker and node.groups.many:
            answer = self._merged(await self._everywhere(
                "DeleteTopic", lambda g: pb.DeleteTopicRequest(name=request.name, broker=g), context))
            return pb.DeleteTopicResponse(groups=answer.groups)
        if request.broker and node.topic_config(request.name) is None:
            node.check_leader()  # only the leader's table is current: a follower's may lag a create
            if node.groups.many:  # the group remembers the delete even so: the reconcile pass must not undo it
                await node.run_blocking(node.write_path.change_topics, marked(node, [], request.name))
            return pb.DeleteTopicResponse(groups=self._outcome("absent"))
        node.existing_topic(request.name)
        refusals = await node.run_blocking(node.write_path.change_topics,
                                           marked(node, [("delete", request.name)], request.name))
        raise_refusal(refusals)
        return pb.DeleteTopicResponse(groups=self._outcome("deleted"))

    # ------------------------------------------------------------------ cluster
    @rpc_handler("ClusterStatus", needs_ready=False)
    async def ClusterStatus(self, request, context) -> pb.ClusterStatusResponse:  # noqa: N802
        self.node.check_group(request.broker)  # issue 38: another group's members, relayed to one of them
        # its own thread, not the read pool: asking peers may wait out a short timeout and pulls must not queue
        return await asyncio.to_thread(cluster_status, self.node)

    @rpc_handler("TransferLeader")
    async def TransferLeader(self, request, context) -> pb.TransferLeaderResponse:  # noqa: N802
        node = self.node
        if not node.config.members:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                           "this is a single-node deployment (cluster.members is empty): there is no other member "
                           "to transfer leadership to")
        voters = node.write_path.configuration().voter_ids
        if request.to_id and request.to_id not in voters:
            raise invalid(f"{request.to_id!r} (transfer-leader --to) is not a voter of the group (only a voter can "
                          f"lead; a learner is promoted once it has caught up); voters: {', '.join(voters)}")
        await node.run_blocking(node.write_path.transfer_leadership, request.to_id or None)
        leader = node.write_path.leader()
        return pb.TransferLeaderResponse(leader_id=leader.id if leader else "")

    @rpc_handler("AddMember")
    async def AddMember(self, request, context) -> pb.MembershipChangeResponse:  # noqa: N802
        """Record a learner (issue 39); the leader promotes it to voter once it is caught up and, with
        ``replaces``, removes that voter afterwards. Served by the leader (others forward or redirect)."""
        from raftmq.node.config import member_id_problem, parse_host_port
        from raftmq.replication.write_path import MemberInfo

        problem = member_id_problem(request.id)
        if problem:
            raise invalid(f"member id {problem}")
        for what, address in (("--raft", request.raft_address), ("--grpc", request.grpc_address)):
            try:
                parse_host_port(address)
            except ValueError as e:
                raise invalid(f"{what} {address!r}: {e}") from None
        if request.raft_address == request.grpc_address:
            raise invalid("--raft and --grpc must be different ports")
        changes = self._changes()
        member = MemberInfo(request.id, request.raft_address, request.grpc_address)
        done = await asyncio.to_thread(changes.add, member, replaces=request.replaces, dry_run=request.dry_run,
                                       by=_principal())
        return _change_response(done)

    @rpc_handler("RemoveMember")
    async def RemoveMember(self, request, context) -> pb.MembershipChangeResponse:  # noqa: N802
        """Remove a learner or a voter (issue 39), refused when the voters left would have no healthy majority."""
        if not request.id:
            raise invalid("name the member to remove (its id, as `raftmq cluster status` shows it)")
        changes = self._changes()
        done = await asyncio.to_thread(changes.remove, request.id, dry_run=request.dry_run, by=_principal())
        return _change_response(done)

    def _changes(self):
        wp = self.node.write_path
        if not self.node.config.members or not hasattr(wp, "changes"):
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                           "this is a single-node deployment (cluster.members is empty): it runs without Raft and "
                           "cannot grow; to make it a group of one that can, list it alone in cluster.members")
        return wp.changes

    @rpc_handler("RebuildMember", needs_ready=False)
    async def RebuildMember(self, request, context) -> pb.RebuildMemberResponse:  # noqa: N802
        """Refused unless this member is the one named, follows a leader, and the others keep a majority while it
        copies; then it marks its data directory, answers, and restarts (see node.rebuild)."""
        node = self.node
        cfg = node.config
        if not cfg.members:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                           "this is a single-node deployment (cluster.members is empty): there is no peer to "
                           "rebuild it from")
        if request.member_id != node.node_id:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"this is member {node.node_id}, not {request.member_id!r}: send the request to the "
                           "member to rebuild (`raftmq cluster rebuild-member ID` finds it)")
        voters = node.write_path.configuration().voter_ids
        majority = len(voters) // 2 + 1
        deadline = asyncio.get_running_loop().time() + REBUILD_CHECK_S
        while True:  # a moment after a transfer or a restart the others may not be ready yet: look again briefly
            status = await asyncio.to_thread(cluster_status, node)
            if status.leader_id == node.node_id:
                raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"{node.node_id} leads the group: move leadership first "
                               f"(`raftmq cluster transfer-leader`), then rebuild it")
            others_up = sorted(m.id for m in status.members if m.id != node.node_id and m.healthy and m.ready
                               and m.id in voters)
            if status.leader_id and len(others_up) >= majority:
                break
            if asyncio.get_running_loop().time() >= deadline:
                if not status.leader_id:
                    raise RpcError(grpc.StatusCode.UNAVAILABLE,
                                   "the group has no leader right now: a rebuild copies from a working group; try "
                                   "again once `raftmq cluster status` shows a leader")
                down = sorted(m for m in voters if m != node.node_id and m not in others_up)
                raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"while {node.node_id} rebuilds, only {len(others_up)} of {len(voters)} voters "
                               f"({', '.join(others_up) or 'none'}) would be up, not a majority ({majority}): the "
                               f"group would stop taking writes. Bring {', '.join(down)} back first")
            await asyncio.sleep(0.5)
        from raftmq.node import rebuild
        from raftmq.node.auth import audit, current_principal

        principal = current_principal.get()
        by = principal.access_key if principal is not None else ""
        into = await asyncio.to_thread(rebuild.request, cfg.node.data_dir, by, request.discard)
        audit("rebuild_member", user=by, member=node.node_id, set_aside=into, discard=request.discard,
              peer=context.peer())
        asyncio.get_running_loop().call_later(0.2, node.restart_to_rebuild)  # after this answer has left
        return pb.RebuildMemberResponse(set_aside=into)

    # ------------------------------------------------------------------ consumer groups
    @rpc_handler("DescribeConsumerGroup")
    async def DescribeConsumerGroup(self, request, context) -> pb.DescribeConsumerGroupResponse:  # noqa: N802
        """Live members (the leader's table), who owns which queue, committed offsets and lag per queue; in a
        cluster of several groups without ``broker``, every group's, each member and queue naming its group."""
        node = self.node
        node.check_group(request.broker)
        if request.broker or not node.groups.many:
            resp = await node.run_blocking(describe_group, node, request.group)
            if node.groups.many:
                for part in (*resp.members, *resp.queues):
                    part.broker = node.groups.own
            return resp
        check_group_name(request.group)
        answers = await node.groups.in_every_group("DescribeConsumerGroup", request, context,
                                                   done_if_not_found=True)  # a group it never used
        found = {g: a for g, a in answers.items() if not isinstance(a, RpcError)}
        resp = pb.DescribeConsumerGroupResponse(group=request.group, settings=group_settings(node, request.group))
        for a in found.values():
            resp.members.extend(a.members)
            resp.queues.extend(a.queues)
        own = found.get(node.groups.own) or next(iter(found.values()))
        resp.generations.update(own.generations)  # membership generations are each group's leader's (soft state)
        return resp

    @rpc_handler("UpdateConsumerGroup")
    async def UpdateConsumerGroup(self, request, context) -> pb.UpdateConsumerGroupResponse:  # noqa: N802
        """A group's own settings (issue 34), replicated: given fields change, the others keep what the group
        consumes with now (its settings, else the leader's node configuration); ``reset`` drops them."""
        from raftmq.node.pop_core import parse_policy
        from raftmq.store.subscription_groups import SubscriptionGroup

        node = self.node
        group = request.group
        check_group_name(group)
        given = request.HasField("fifo") or request.HasField("max_delivery_attempts") or bool(request.retry_backoff)
        if request.reset and given:
            raise invalid("reset drops the group's settings (the node configuration applies again); give no "
                          "other setting with it")
        if not request.reset and not given:
            raise invalid("nothing to change: give fifo, max_delivery_attempts, retry_backoff or reset")
        node.check_group(request.broker)
        if not request.broker and node.groups.many:  # issue 37: the group's settings in every group of the cluster
            return (await node.groups.in_every_group("UpdateConsumerGroup", request, context,
                                                     reconciled=True))[node.groups.own]
        node.check_leader()  # a group without settings starts from the leader's configuration, on every member
        mark = now_ms() if node.groups.many else None  # the settings reconcile pass compares these
        if request.reset:
            await node.run_blocking(node.write_path.update_group_config, group, None, mark)
        else:
            now = node.pop.policy(group)
            try:  # the node configuration's checks, so both ways of setting a policy refuse the same values
                policy = parse_policy(
                    request.max_delivery_attempts if request.HasField("max_delivery_attempts")
                    else now.max_delivery_attempts, request.retry_backoff or "1s", "",
                    request.fifo if request.HasField("fifo") else now.fifo)
            except ValueError as e:  # ".max_delivery_attempts: must be ...": the field and what to fix
                raise invalid(f"consumer group {group!r}: {str(e).lstrip('.')}") from None
            backoff = policy.retry_backoff_ms if request.retry_backoff else now.retry_backoff_ms
            existing = node.store.subscription_groups.get(group)
            cfg = SubscriptionGroup(group, policy.fifo, policy.max_delivery_attempts, backoff,
                                    **({"other": existing.other} if existing is not None else {}))
            await node.run_blocking(node.write_path.update_group_config, group, cfg, mark)
        return pb.UpdateConsumerGroupResponse(group=group, settings=group_settings(node, group))

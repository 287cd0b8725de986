"""Consumer groups: the list and one group's members, queues, lag and dead letters.

Members live only in the leader's memory (node.consumer_groups): a follower asks the leader's AdminService, and
when it cannot, shows its replicated offsets and lag with a note that members are unknown.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import grpc

from raftmq.node.auth import audit
from raftmq.node.cluster_views import describe_group
from raftmq.node.console.cluster_calls import cluster_calls, member_credentials
from raftmq.node.console.layout import (
    BadRequest,
    Response,
    cards,
    esc_or_dash,
    int_arg,
    link,
    notice,
    page,
    section,
    shorten,
    table,
    time_arg,
)
from raftmq.node.console.safe import Markup, html, join, seg, url
from raftmq.node.errors import RpcError
from raftmq.node.validation import ValidationError, check_group_name
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from raftmq.node.console.context import ConsoleContext

DLQ_PREFIX = "%DLQ%"
LEADER_CALL_TIMEOUT_S = 3.0
GROUPS_LISTED_MAX = 200  # the group list asks the leader once per group: bounded


def _group_view(c: ConsoleContext, group: str) -> tuple[pb.DescribeConsumerGroupResponse, str]:
    """The group as the leader describes it (asked over gRPC when this node follows); when the leader cannot
    be asked, the replicated offsets from here with a note saying members are unknown."""
    node = c.node
    if node.groups.many:  # issue 38: every group's members and queues, each naming its group
        return _every_groups_view(c, group)
    leader = node.write_path.leader() if node.write_path is not None else None
    if leader is not None and leader.id == node.node_id:
        return describe_group(node, group), ""
    if leader is not None and leader.grpc_address:
        try:  # as the node itself (member TLS; signed with authentication on): the viewer's right was checked here
            with cluster_calls().channel(leader.grpc_address, member_credentials(node.config)) as ch:
                return pb_grpc.AdminServiceStub(ch).DescribeConsumerGroup(
                    pb.DescribeConsumerGroupRequest(group=group), timeout=LEADER_CALL_TIMEOUT_S), ""
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                raise BadRequest(e.details() or f"consumer group {group!r} not found", 404) from None
            why = f"the leader {leader.id} could not be asked ({e.code().name}: {shorten(e.details() or '')})"
    else:
        why = "there is no leader right now"
    return describe_group(node, group, with_members=False), f"live members unknown: {why}; offsets and lag " \
                                                             f"below are {node.node_id}'s replicated copy"

def _every_groups_view(c: ConsoleContext, group: str) -> tuple[pb.DescribeConsumerGroupResponse, str]:
    """In a cluster of several groups: DescribeConsumerGroup through this node, which asks every group's leader
    (as `raftmq group describe`); when that fails, this group's replicated offsets with a note."""
    node = c.node
    try:
        with cluster_calls().channel(node.config.advertised_address, member_credentials(node.config)) as ch:
            return pb_grpc.AdminServiceStub(ch).DescribeConsumerGroup(
                pb.DescribeConsumerGroupRequest(group=group), timeout=2 * LEADER_CALL_TIMEOUT_S), ""
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:
            raise BadRequest(e.details() or f"consumer group {group!r} not found", 404) from None
        why = f"{e.code().name}: {shorten(e.details() or '')}"
    view = describe_group(node, group, with_members=False)
    for q in view.queues:
        q.broker = node.groups.own
    return view, (f"the groups' leaders could not be asked ({why}); live members unknown, offsets and lag below "
                  f"are {node.node_id}'s replicated copy of group {node.groups.own}'s queues only")


def _known_groups(c: ConsoleContext) -> list[str]:
    st = c.store()
    groups = set(st.consumer_offsets.groups())
    if c.node.is_leader():
        groups |= set(c.node.consumer_groups.group_sizes())
    return sorted(groups)

def groups_page(c: ConsoleContext, query: dict[str, str], name: str | None = None) -> Response:
    if name is not None:
        return _group_page(c, name, query)
    st = c.store()
    rows = []
    notes = set()
    for g in [g for g in _known_groups(c) if c.may("SUB", "group", g)][:GROUPS_LISTED_MAX]:
        try:
            view, note = _group_view(c, g)
        except (BadRequest, RpcError, ValidationError):
            continue  # gone between listing and describing
        if note:
            notes.add(note.split(";")[0])
        members = {m.client_id for m in view.members}
        rows.append([link(f"/ui/groups/{seg(g)}", g), ", ".join(sorted({q.topic for q in view.queues})),
                     len(members) if not note else Markup('<span class="muted">?</span>'),
                     sum(q.lag for q in view.queues), _dlq_cell(st, g)])
    gtable = table(["group", "topics", "live members", "lag (messages)", "DLQ messages"], rows,
                   table_id="groups", numeric=(2, 3, 4),
                   empty="no consumer groups yet: a group appears once a consumer heartbeats or commits")
    note = "; ".join(sorted(notes))
    body = join([notice(note, "warn") if note else Markup(""),
                 section("Groups", gtable, "groups-section", live=True,
                         note="members as the leader knows them (heartbeats go to the leader); lag = "
                              "messages stored past the committed offset")])
    return page(c.frame(), "groups", "Consumer groups", body)

def _group_page(c: ConsoleContext, group: str, query: dict[str, str]) -> Response:
    st = c.store()
    try:
        check_group_name(group)
    except ValidationError as e:
        raise BadRequest(str(e)) from None
    c.require("SUB", "group", group)  # as DescribeConsumerGroup
    try:
        view, note = _group_view(c, group)
    except RpcError as e:
        raise BadRequest(e.message, 404 if e.code == grpc.StatusCode.NOT_FOUND else 400) from None
    now_ms = int(time.time() * 1000)
    many = c.node.groups.many  # issue 38: a group column; members and queues of every group
    own = c.node.groups.own
    mrows = [[*([m.broker] if many else []), m.client_id, m.topic, ", ".join(map(str, m.queue_ids)) or "-",
              f"{max(0, now_ms - m.last_heartbeat_ms) / 1000:.1f} s ago", f"{m.expires_in_ms / 1000:.1f} s"]
             for m in view.members]
    mtable = table((["group"] if many else []) + ["client id", "topic", "queues", "last heartbeat", "expires in"],
                   mrows, table_id="members", empty="no live members" if not note else "unknown (see above)")
    qrows = [[*([q.broker] if many else []), link(f"/ui/topics/{seg(q.topic)}", q.topic), q.queue_id,
              esc_or_dash(q.client_id),
              q.committed_offset if q.committed else Markup('<span class="muted">never committed</span>'),
              q.max_offset, q.lag,
              link(url("/ui/messages", by="offset", topic=q.topic, queue=q.queue_id,
                       offset=q.committed_offset), "browse from committed")
              if q.committed and (not many or q.broker == own) else ""]  # the browser reads this node's group
             for q in view.queues]
    qtable = table((["group"] if many else []) + ["topic", "queue", "owner", "committed offset", "max offset", "lag",
                                                  ""], qrows,
                   table_id="group-queues", numeric=(2, 4, 5, 6) if many else (1, 3, 4, 5))
    dlq = DLQ_PREFIX + group
    summary = cards([("topics", len({q.topic for q in view.queues})),
                     ("live members", len({m.client_id for m in view.members}) if not note else "?"),
                     ("total lag", sum(q.lag for q in view.queues)),
                     ("DLQ messages", _dlq_cell(st, group)),
                     *([("settings", _settings_text(view.settings))] if view.HasField("settings") else [])],
                    card_id="summary")
    parts = [notice(note, "warn") if note else Markup(""), summary,
             section("Members", mtable, "members-section", live=True),
             section("Queues", qtable, "queues-section", live=True,
                     note=f"dead letters of this group go to topic {dlq}")]
    topics = sorted({q.topic for q in view.queues})
    if query.get("reset") in topics:  # after the action; the offsets are the table's, read now
        parts.insert(0, notice(f"offsets of {group} on {query['reset']} reset: the committed offsets below are "
                               "the new ones", "ok"))
    if c.node.auth is not None and topics and c.may("ADMIN", "group", group):
        parts.append(section("Actions", _reset_form(group, topics), "actions"))
    return page(c.frame(), "groups", f"Consumer group {group}", join(parts))


def _settings_text(s) -> str:
    """How the group consumes (issue 34), and whether that is its own replicated setting or the node's."""
    steps = " ".join(f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms" for ms in s.retry_backoff_ms)
    return (f"{'FIFO' if s.fifo else 'not FIFO'}, {s.max_delivery_attempts} deliveries before the DLQ, "
            f"back-off {steps} ({s.source})")


def _reset_form(group: str, topics: list[str]) -> Markup:
    options = join(html('<option value="{}">{}</option>', t, t) for t in topics)
    return html(
        '<form method="post" action="/ui/groups/reset-offsets" class="inline" id="reset-form">'
        '<input type="hidden" name="group" value="{group}"><label>reset offsets on <select name="topic">'
        '{options}</select></label> <label>to the first message at or after (UTC) <input name="to_time" '
        'type="datetime-local" step="1"></label> <label>or to offset <input name="to_offset" size="8"></label> '
        '<button type="submit">Reset</button></form><p class="note">as <code>raftmq group reset-offsets</code>: '
        'moves the pull offsets and the receive position on every queue (clamped to what is stored); messages '
        'in flight are forgotten. Stop the group\'s consumers first, or they commit their old positions '
        'again.</p>', group=group, options=options)


def reset_offsets(c: ConsoleContext, form: dict[str, str], address: str) -> Response:
    """POST /ui/groups/reset-offsets: MessagingService.ResetGroupOffsets (as the CLI) for a viewer with ADMIN on
    the group; back to the group page with the new offsets."""
    group, topic = form.get("group", "").strip(), form.get("topic", "").strip()
    try:
        check_group_name(group)
    except ValidationError as e:
        raise BadRequest(str(e)) from None
    c.require("ADMIN", "group", group)  # as ResetGroupOffsets
    if not topic:
        raise BadRequest("choose the topic whose offsets to reset")
    req = pb.ResetGroupOffsetsRequest(group=group, topic=topic)
    has_time, has_offset = bool(form.get("to_time", "").strip()), bool(form.get("to_offset", "").strip())
    if has_time == has_offset:
        raise BadRequest("give either a time or an offset to reset to (not both)")
    if has_time:
        req.timestamp = time_arg(form, "to_time", 0)
    else:
        req.offset = int_arg(form, "to_offset", 0, 0, None)
    node = c.node
    calls = cluster_calls()
    try:
        resp = calls.reset_group_offsets(node.config.advertised_address, member_credentials(node.config), req)
    except calls.Error as e:
        audit("console_action", user=c.viewer(), action="reset_offsets", group=group, topic=topic,
              error=str(e), peer=address)
        raise BadRequest(f"offsets were not reset: {e}", 409) from None
    audit("console_action", user=c.viewer(), action="reset_offsets", group=group, topic=topic,
          offsets=dict(resp.offsets) or {g.group: dict(g.offsets) for g in resp.groups}, peer=address)
    return Response(303, b"", headers={"Location": url(f"/ui/groups/{seg(group)}", reset=topic)})


def _dlq_cell(st, group: str) -> Markup | int:
    dlq = DLQ_PREFIX + group
    cfg = st.topics.get(dlq)
    if cfg is None:
        return 0
    n = sum(st.max_offset_in_queue(dlq, q) - st.min_offset_in_queue(dlq, q) for q in range(cfg.read_queue_nums))
    return link(f"/ui/topics/{seg(dlq)}", n) if n else 0

"""The cluster page (members, Raft term and lag over time, leader changes) and the on-demand replica check."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from raftmq.node.auth import audit
from raftmq.node.cluster_views import cluster_status
from raftmq.node.console import safe
from raftmq.node.console.charts import Series, line_chart
from raftmq.node.console.cluster_calls import cluster_calls, member_credentials
from raftmq.node.console.layout import (
    BadRequest,
    Response,
    badge,
    cards,
    esc_or_dash,
    link,
    notice,
    page,
    section,
    shorten,
    table,
    utc,
    yes_no,
)
from raftmq.node.console.safe import Markup, html, join, url
from raftmq.store.message_store import NO_DAMAGE
from raftmq.text import short_reason

if TYPE_CHECKING:
    from raftmq.node.console.context import ConsoleContext


def cluster_page(c: ConsoleContext, query: dict[str, str]) -> Response:
    groups = c.node.groups
    group = query.get("group", "").strip()
    if group and group not in groups.specs:
        raise BadRequest(f"unknown group {group!r}: this cluster's groups are {', '.join(groups.names)}", 404)
    if group and group != groups.own:
        return _other_group_page(c, group)
    status = cluster_status(c.node)
    snap = c.history.snapshot()
    members = sorted(status.members, key=lambda m: m.id)
    members_table = _members_table(c, members)
    terms = [m.term for m in members if m.term and m.role != "unreachable"]
    summary = cards([
        ("cluster", status.cluster_name), *([("group", groups.own)] if groups.many else []),
        ("leader", status.leader_id or "none (election)"),
        ("term", max(terms) if terms else 0), ("durability", status.durability or "-"),
        ("members ready", f"{sum(m.ready for m in members)} / {len(members)}"),
        # the same record as the list below, so the two always agree (issue 34)
        (f"leader changes seen here since {utc(int(snap.since * 1000))[11:19]} UTC", snap.takeovers),
    ], card_id="summary")
    return _own_group_page(c, query, status, members, members_table, summary, snap)


def _groups_section(c: ConsoleContext, shown: str) -> Markup:
    """Issue 38: every group of the cluster, each linking to its page (its members asked through this node, as
    `raftmq cluster status` asks them)."""
    calls = cluster_calls()
    try:
        view = calls.cluster_view(c.node.config.advertised_address, member_credentials(c.node.config))
    except calls.Error as e:
        return section("Groups", notice(f"the groups could not be asked: {e}", "bad"), "groups-section")
    rows = []
    for g in view.groups:
        name = html("<b>{}</b>", g.name) if g.name == shown else link(url("/ui/cluster", group=g.name), g.name)
        mine = " (this node's group)" if g.name == c.node.groups.own else ""
        if g.status is None:
            rows.append([html("{}{}", name, mine), "-", "-", badge("unavailable", "bad"), shorten(g.error)])
            continue
        members = g.status.members
        rows.append([html("{}{}", name, mine), g.status.leader_id or "none (election)",
                     f"{sum(m.ready for m in members)} / {len(members)}",
                     badge("ok" if g.status.leader_id else "no leader", "ok" if g.status.leader_id else "bad"), "-"])
    return section("Groups", table(["group", "leader", "members ready", "state", "error"], rows,
                                   table_id="groups", wrap=(4,)), "groups-section", live=True,
                   note="every Raft group of the cluster; a group's page lists its members, asked through this "
                        "node (docs/operations/console.md#a-cluster-of-several-raft-groups)")


def _other_group_page(c: ConsoleContext, group: str) -> Response:
    """Another group's members, asked through this node (relayed to one of that group's members)."""
    calls = cluster_calls()
    try:
        view = calls.cluster_view(c.node.config.advertised_address, member_credentials(c.node.config), group)
        found = view.groups[0]
        status, error = found.status, found.error
    except calls.Error as e:
        status, error = None, str(e)
    parts = [_groups_section(c, group)]
    if status is None:
        parts.append(notice(f"group {group} did not answer: {error}", "bad"))
    else:
        members = sorted(status.members, key=lambda m: m.id)
        terms = [m.term for m in members if m.term and m.role != "unreachable"]
        parts += [cards([("cluster", status.cluster_name), ("group", group),
                         ("leader", status.leader_id or "none (election)"), ("term", max(terms) if terms else 0),
                         ("members ready", f"{sum(m.ready for m in members)} / {len(members)}")], card_id="summary"),
                  section("Members", _members_table(c, members), "members-section", live=True,
                          note=f"as a member of group {group} sees them, asked through {c.node.node_id}; the "
                               "charts and leader changes are on each group's own members' consoles")]
    return page(c.frame(), "cluster", f"Cluster: group {group}", join(parts))


def _members_table(c: ConsoleContext, members: list) -> Markup:
    rows = []
    for m in members:
        role = m.role or "unknown"
        if role == "unreachable":  # nobody knows its numbers (the status says 0): "-", as the CLI shows them
            numbers = ["-"] * 7
            error = html('<span title="{}">{}</span>', shorten(m.error), short_reason(m.error)) if m.error else "-"
        else:
            numbers = [m.term, m.commit_index, m.applied_index, max(0, m.commit_index - m.applied_index),
                       m.applied_offset, safe.human_bytes(m.lag_bytes), safe.human_bytes(m.dispatch_behind_bytes)]
            error = esc_or_dash(shorten(m.error))
        rows.append([
            html('<b title="Raft {}">{}</b>{}', m.raft_address or "-", m.id,
                 Markup(" (this node)") if m.id == c.node.node_id else Markup("")),
            badge(role), m.membership or "-", yes_no(m.ready), yes_no(m.healthy), *numbers, m.grpc_address, error,
        ])
    members_table = table(
        ["member", "role", "membership", "ready", "healthy", "term", "commit index", "applied index", "apply lag",
         "applied offset", "behind leader", "undispatched", "gRPC address", "error"],
        rows, table_id="members", numeric=(5, 6, 7, 8, 9, 10, 11), wrap=(13,))
    learners = [m for m in members if m.membership == "learner"]
    if learners:  # issue 39: a new member catching up before it votes
        members_table = join([members_table, table(
            ["learner", "progress (as the leader measures it)"],
            [[m.id, esc_or_dash(m.progress or m.error)] for m in learners], table_id="learners", wrap=(1,))])
    return members_table


def _own_group_page(c: ConsoleContext, query: dict[str, str], status, members: list, members_table: Markup,
                    summary: Markup, snap) -> Response:
    samples = snap.samples
    term_chart = line_chart([Series("term", [(s.at, s.term) for s in samples], step=True)],
                            title="Raft term (each step = an election)", chart_id="chart-term", width=580)
    lag_chart = line_chart([
        Series("commit−applied (entries)", [(s.at, s.commit_index - s.applied_index) for s in samples]),
        Series("dispatch behind (KiB)", [(s.at, s.dispatch_behind_bytes / 1024) for s in samples]),
    ], title=f"apply / dispatch lag on {c.node.node_id}", chart_id="chart-lag", width=580)
    events = table(["time (UTC)", "event"],
                   [[utc(int(e.at * 1000)), e.describe()] for e in reversed(snap.events)],
                   table_id="events", empty="no leader change since this node's console started sampling "
                   f"at {utc(int(snap.since * 1000))} UTC")
    if snap.takeovers > sum(1 for e in snap.events if e.new):
        events = join([html('<p class="note">the last {} events of {} leader changes</p>', len(snap.events),
                            snap.takeovers), events])
    damaged = [m.id for m in members if m.storage_integrity and not m.storage_integrity.startswith(NO_DAMAGE)]
    integrity = join([
        notice(f"damaged data found on {', '.join(damaged)}: see the lines below and the node log", "bad")
        if damaged else Markup(""),
        table(["member", "damage found, scrubber"], [[m.id, esc_or_dash(m.storage_integrity)] for m in members],
              table_id="integrity", wrap=(1,)),
    ])
    body = join([
        _groups_section(c, c.node.groups.own) if c.node.groups.many else Markup(""),
        summary,
        section("Members", members_table, "members-section", live=True,
                note="as this node sees them right now: peers are asked directly, an unreachable one shows "
                     "its error; a learner copies and follows the log without voting until the leader makes "
                     "it a voter (raftmq cluster add-member)"),
        section("Storage integrity", integrity, "integrity-section", live=True,
                note="damage each member found in its files since it started (at start, by the scrubber, by a "
                     "read, by comparing with its peers), as raftmq cluster status shows it"),
        section("Over time", html('<div class="charts">{}{}</div>', term_chart, lag_chart), "charts",
                live=True),
        section("Leader changes", events, "events-section", live=True,
                note=f"seen by {c.node.node_id}; the Raft term counts every election in the cluster"),
    ])
    if query.get("transferred") == "1":  # after the action: what this node sees now, not what the link says
        body = join([notice(f"leadership transferred: the leader is now {status.leader_id or 'being elected'}",
                            "ok"), body])
    if c.node.auth is not None and c.node.config.members and c.may("ADMIN", "cluster", ""):
        body = join([body, section("Actions", _transfer_form(members, status.leader_id), "actions")])
    return page(c.frame(), "cluster", "Cluster", body)


def _transfer_form(members: list, leader_id: str) -> Markup:
    options = join([Markup('<option value="">any up-to-date follower</option>')]
                   + [html('<option value="{}">{}</option>', m.id, m.id) for m in members if m.id != leader_id])
    return html('<form method="post" action="/ui/cluster/transfer-leader" class="inline" id="transfer-form">'
                '<label>transfer leadership to <select name="to">{}</select></label> '
                '<button type="submit">Transfer</button></form><p class="note">as <code>raftmq cluster '
                'transfer-leader</code>: the leader stops taking writes, waits until the target has its whole '
                'log and hands over; writes in flight get "unknown outcome" and clients retry on the new '
                'leader.</p>', options)


def transfer_leader(c: ConsoleContext, form: dict[str, str], address: str) -> Response:
    """POST /ui/cluster/transfer-leader: AdminService.TransferLeader through the SDK, for a viewer with ADMIN on
    the cluster; back to the cluster page, which says where leadership went."""
    c.require("ADMIN", "cluster", "")
    to = form.get("to", "").strip()
    calls = cluster_calls()
    try:
        leader = calls.transfer_leader(c.node.config.advertised_address, member_credentials(c.node.config),
                                       to or None)
    except calls.Error as e:
        audit("console_action", user=c.viewer(), action="transfer_leader", to=to, error=str(e), peer=address)
        raise BadRequest(f"leadership was not transferred: {e}", 409) from None
    audit("console_action", user=c.viewer(), action="transfer_leader", to=to, leader=leader, peer=address)
    return Response(303, b"", headers={"Location": url("/ui/cluster", transferred="1")})


def check_page(c: ConsoleContext, query: dict[str, str]) -> Response:
    c.require("ADMIN", "cluster", "")  # reads every member's whole commit log: an operator's tool
    run = query.get("run") == "1"
    limit_mib = query.get("mib", "").strip()
    queues = query.get("queues", "1" if not run else "") == "1"
    form = html(
        '<form method="get" action="/ui/check" class="inline" id="check-form"><input type="hidden" name="run" '
        'value="1"><label>check at most <input name="mib" size="6" value="{}" placeholder="all"> MiB of '
        'commit log</label> <label><input type="checkbox" name="queues" value="1"{}> consume queues too</label>'
        ' <button type="submit" id="run-check">Run check</button></form>',
        limit_mib, Markup(" checked") if queues else Markup(""))
    intro = html('<p class="note">Compares every member\'s committed commit log (and consume queues) by '
                 'SHA-256 digests of fixed chunks, as <code>raftmq cluster check</code> does. It reads the '
                 'members\' files and changes nothing.</p>')
    result: Markup = Markup("")
    if run:
        max_bytes = None
        if limit_mib:
            try:
                max_bytes = int(float(limit_mib) * (1 << 20))
            except ValueError:
                raise BadRequest(f"MiB to check {limit_mib!r} is not a number (leave it empty for all)") from None
        result = _run_check(c, max_bytes, queues)
    return page(c.frame(), "check", "Replica check", join([intro, form, result]))

def _run_check(c: ConsoleContext, max_bytes: int | None, queues: bool) -> Markup:
    if not c.check_lock.acquire(blocking=False):
        return notice("a check started from this console is still running; wait for it and reload", "warn")
    t0 = time.monotonic()
    calls = cluster_calls()
    try:
        report = calls.check_replicas(c.node.config.advertised_address, c.node.config.cluster.secret,
                                      member_credentials(c.node.config), max_bytes=max_bytes, queues=queues)
    except calls.Error as e:
        return notice(f"check failed: {e}", "bad")
    finally:
        c.check_lock.release()
    took = time.monotonic() - t0
    data = report.to_json()
    ok = data["identical"]
    verdict = html('<p class="verdict {}" id="verdict">{}</p>', "ok" if ok else "bad",
                   "IDENTICAL: every reachable member holds the same bytes" if ok else
                   "NOT IDENTICAL: see below")
    rows = [[m.id, m.address, esc_or_dash(m.min_offset), esc_or_dash(m.applied_offset),
             safe.human_bytes(m.bytes_checked), badge(m.verdict, _verdict_kind(m.verdict)),
             badge(m.queue_verdict, _verdict_kind(m.queue_verdict)) if m.queue_verdict else "-",
             esc_or_dash(shorten(m.error))] for m in report.members]
    mtable = table(["member", "address", "first offset", "applied end", "checked", "commit log",
                    "consume queues", "error"], rows, table_id="check-members", numeric=(2, 3, 4), wrap=(7,))
    facts = cards([("range", f"[{report.range_from}, {report.range_to})"),
                   ("bytes compared", safe.human_bytes(report.range_to - report.range_from)),
                   ("queues compared", f"{report.queues_compared} ({report.queue_units} units)"),
                   ("asked via", report.answered_by), ("took", f"{took:.2f} s")])
    extra = []
    if report.difference is not None:
        d = report.difference
        extra.append(notice(f"commit logs differ in [{d.offset}, {d.end}) (chunk [{d.chunk_offset}, "
                            f"{d.chunk_end})): differing {', '.join(d.differing)}; majority "
                            f"{', '.join(d.majority) or 'none'}", "bad"))
    if report.queue_difference is not None:
        qd = report.queue_difference
        extra.append(notice(f"consume queue {qd.topic}/{qd.queue_id} differs at offsets [{qd.from_offset}, "
                            f"{qd.to_offset}): differing {', '.join(qd.differing)}", "bad"))
    if report.queues_not_everywhere:
        extra.append(notice("queues not on every member: " + "; ".join(report.queues_not_everywhere), "warn"))
    return section("Result", join([verdict, facts, *extra, mtable]), "check-result")


def _verdict_kind(verdict: str) -> str:
    return {"identical": "ok", "matches majority": "warn", "DIFFERS": "bad", "unreachable": "bad"}.get(verdict, "")

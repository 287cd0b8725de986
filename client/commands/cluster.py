"""``raftmq cluster status|check|transfer-leader|rebuild-member``; the membership changes are in
``commands.members``, leader balancing in ``commands.balance``."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import sys
import time

from raftmq.client.admin import Admin
from raftmq.client.commands import balance, members
from raftmq.client.commands.args import (
    UsageError,
    add_command,
    chunk_size_arg,
    non_negative_float,
    non_negative_int,
    positive_float,
    security_of,
    servers_of,
    size_arg,
)
from raftmq.client.commands.output import Progress, checked_text, print_json
from raftmq.client.errors import RaftmqError, ReplicaLagsError, ReplicasDifferError, UnavailableError
from raftmq.client.replica_check import (
    DEFAULT_CHUNK,
    DEFAULT_LAG_WAIT_S,
    SECRET_ENV,
    CheckReport,
    ReplicaChecker,
)
from raftmq.client.table import render_table
from raftmq.client.types import ClusterStatus, MemberStatus
from raftmq.text import short_reason


def member_state(m: MemberStatus, *, full: bool = False) -> str:
    """The State column: an error is cut to its reason (``full``: the whole text, for --json)."""
    reason = m.error if full else short_reason(m.error)
    if m.role == "unreachable":
        return f"unreachable: {reason}" if m.error else "unreachable"
    if m.error:
        return f"error: {reason}"
    if not m.healthy:
        return "unhealthy"
    return "running" if m.ready else "not ready"


def cluster_table(status: ClusterStatus) -> str:
    """The ``cluster status`` table, one row per member, in the style of ``patronictl list``."""
    rows = []
    for m in sorted(status.members, key=lambda m: m.id):
        role = m.role.capitalize() if m.role else ""
        # an unreachable member's numbers are unknown, not zero
        numbers = ["-"] * 5 if m.role == "unreachable" else [m.term, m.commit_index, m.applied_offset,
                                                             m.dispatch_behind_bytes, m.lag_bytes]
        rows.append([m.id, m.grpc_address, role, *numbers, member_state(m)])
    title = (f"Cluster: {status.cluster_name or '?'} (leader: {status.leader_id or 'none'}, "
             f"durability: {status.durability or '?'})")
    headers = ["Member", "Address", "Role", "Term", "Commit index", "Applied offset", "Dispatch behind (B)",
               "Lag (B)", "State"]
    table = render_table(headers, rows, title=title)
    storage = [f"  {m.id}: {m.storage_integrity}" for m in sorted(status.members, key=lambda m: m.id)
               if m.storage_integrity]
    learners = [f"  {m.id}: {m.progress or m.error or 'catching up'}" for m in sorted(status.members, key=lambda m: m.id)
                if m.membership == "learner"]
    return (table + ("\nLearners (not voting yet):\n" + "\n".join(learners) if learners else "")
            + ("\nStorage integrity:\n" + "\n".join(storage) if storage else ""))


def _status_json(status: ClusterStatus) -> dict:
    d = dataclasses.asdict(status)
    for m, member in zip(d["members"], status.members, strict=True):
        m["state"] = member_state(member, full=True)
    return d


def cmd_cluster_status(args: argparse.Namespace) -> int:
    from raftmq.client.cluster_watch import Watch

    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        if args.watch is None:
            status = admin.cluster_status()
            try:
                groups = admin.groups()
            except RaftmqError:  # the status is what was asked: the groups line is extra
                groups = []
            if args.json:
                print_json({**_status_json(status), **({"groups": [_group_json(g) for g in groups]}
                                                        if len(groups) > 1 else {})})
                return 0
            print(cluster_table(status))
            if len(groups) > 1:  # issue 37: the answering member's group above; every group in one line each
                print(render_table(["Group", "Leader", "Answers", "Endpoints"],
                                   [[g.name, g.leader or "-", "yes" if g.available else f"no: {g.error}",
                                     ", ".join(g.endpoints)] for g in groups], title="Groups"))
            return 0
        watch = None if args.json else Watch(admin.cluster_status, cluster_table)
        try:
            while True:
                _json_once(admin) if watch is None else watch.tick()
                time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0


def _group_json(g) -> dict:
    return {"name": g.name, "leader": g.leader, "available": g.available, "error": g.error,
            "endpoints": list(g.endpoints)}


def _json_once(admin: Admin) -> None:
    stamp = dt.datetime.now().isoformat(sep=" ", timespec="seconds")
    try:
        status = admin.cluster_status()
    except RaftmqError as exc:  # keep watching through a failover or a restart
        print(f"{stamp}  raftmq: error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return
    print_json({"time": stamp, **_status_json(status)})


def cmd_transfer_leader(args: argparse.Namespace) -> int:
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        leader = admin.transfer_leader(args.to)
    print(f"leader is now {leader}")
    return 0


REBUILD_POLL_S = 0.25


def cmd_rebuild_member(args: argparse.Namespace) -> int:
    """``cluster rebuild-member ID``: the member restarts empty and copies from a peer; wait until it is back."""
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        address, set_aside = admin.rebuild_member(args.member, discard=args.discard)
        kept = "are deleted" if args.discard else f"stay in {set_aside} on that member"
        print(f"{args.member} ({address}) is restarting empty; its old files {kept}", flush=True)
        if args.no_wait:
            return 0
        print(f"waiting up to {args.wait_timeout:.0f}s for {args.member} to copy the group's data and catch up ...",
              file=sys.stderr, flush=True)
        deadline = time.monotonic() + args.wait_timeout
        went_down = False  # it answered the request ready and caught up: only after it went away is "back" news
        while time.monotonic() < deadline:
            try:
                m = next((m for m in admin.cluster_status().members if m.id == args.member), None)
            except RaftmqError:  # the only address given may be the member's own
                m = None
            if m is None or not m.healthy or not m.ready:
                went_down = True  # not merely lagging: a follower under load may lag for a moment
            elif went_down and m.lag_bytes == 0:
                then = "" if args.discard else f", then delete {set_aside} on {args.member}"
                print(f"{args.member} is back: healthy, ready, lag 0 (commit log up to {m.applied_offset}). Confirm "
                      f"with `raftmq cluster check`{then}")
                return 0
            time.sleep(REBUILD_POLL_S)
    raise UnavailableError(f"{args.member} was not back (healthy, ready, lag 0) within {args.wait_timeout:.0f}s "
                           f"(--wait-timeout); follow it with `raftmq cluster status -w` and its log")


def _range_text(start: int, end: int) -> str:
    return f"[{start}, {end})"


def check_table(report: CheckReport) -> str:
    """The ``cluster check`` table: one row per member, its checked range, bytes and verdicts."""
    rows = []
    queues = any(m.queue_verdict for m in report.members)
    for m in report.members:
        if m.verdict == "unreachable":
            cells = [m.id, m.address, "-", "-", f"unreachable: {m.error}" if m.error else "unreachable"]
            rows.append(cells + ["-"] if queues else cells)
            continue
        verdict = m.verdict
        d = report.difference
        if m.lag:
            verdict = f"LAGS ({m.lag_bytes} bytes behind)"
        elif d is not None and m.id in d.differing:
            verdict = f"DIFFERS in {_range_text(d.offset, d.end)}"
        cells = [m.id, m.address, _range_text(m.checked_from, m.checked_to), m.bytes_checked, verdict]
        if queues:
            q = report.queue_difference
            cells.append(f"DIFFERS in {q.topic}/{q.queue_id} at {q.from_offset}"
                         if q is not None and m.id in q.differing else m.queue_verdict)
        rows.append(cells)
    title = f"Commit-log check: {report.algorithm} in {report.chunk_bytes}-byte chunks"
    headers = ["Member", "Address", "Range checked", "Bytes", "Verdict"] + (["Consume queues"] if queues else [])
    return render_table(headers, rows, title=title)


def _differ_text(differing: list[str], majority: list[str]) -> str:
    verb = "differs" if len(differing) == 1 else "differ"
    than = f" from {', '.join(majority)}" if majority else " (no majority: every member differs)"
    return f"{', '.join(differing)} {verb}{than}"


def _check_summary(report: CheckReport) -> str:
    d = report.difference
    if d is not None:
        return (f"first difference: commit-log bytes {_range_text(d.offset, d.end)} (in chunk "
                f"{_range_text(d.chunk_offset, d.chunk_end)}): {_differ_text(d.differing, d.majority)}")
    compared = [m for m in report.members if m.verdict == "identical"]
    if compared:
        return (f"{len(compared)} members identical over {_range_text(report.range_from, report.range_to)} "
                f"({report.range_to - report.range_from} bytes)")
    return f"nothing compared over {_range_text(report.range_from, report.range_to)}"


def _queue_summary(report: CheckReport) -> str:
    q = report.queue_difference
    if q is not None:
        return (f"first consume-queue difference: {q.topic}/{q.queue_id} unit at queue offset {q.from_offset}: "
                f"{_differ_text(q.differing, q.majority)}")
    return (f"consume queues: {report.queues_compared} queues identical over every member's dispatched range "
            f"({report.queue_units} units)")


def _read_secret(args: argparse.Namespace) -> str:
    if args.secret_file is None:
        return os.environ.get(SECRET_ENV, "")
    try:
        with open(args.secret_file, encoding="utf-8") as f:
            return f.read().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --secret-file {args.secret_file}: {getattr(exc, 'strerror', None) or exc}") \
            from None


def cmd_cluster_check(args: argparse.Namespace) -> int:
    progress = Progress(0, render=checked_text)

    def show(done: int, total: int) -> None:
        progress.total = total
        progress.update(done)

    with ReplicaChecker(servers_of(args), secret=_read_secret(args), timeout=args.timeout,
                         security=security_of(args)) as checker:
        report = checker.check(from_offset=args.from_offset, max_bytes=args.bytes, chunk_bytes=args.chunk,
                               progress=show, queues=not args.no_queues, lag_wait_s=args.lag_wait)
    progress.finish()
    queues = any(m.queue_verdict for m in report.members)
    if args.json:
        print_json(report.to_json())
    else:
        print(check_table(report))
        print(_check_summary(report))
        if queues:
            print(_queue_summary(report))
    for name in report.queues_not_everywhere:
        print(f"raftmq: warning: consume queue {name}: not compared (still dispatching, or lost there)",
              file=sys.stderr)
    lost = ", ".join(f"{m.id} ({m.address}): {m.error}" for m in report.unreachable)
    if report.lagging and report.difference is None and report.queue_difference is None:
        raise ReplicaLagsError("; ".join(f"{m.id} lags: {m.lag}" for m in report.lagging)
                               + " (rebuild a stuck member with `raftmq cluster rebuild-member`)"
                               + (f"; also unreachable: {lost}" if lost else ""))
    if report.difference is not None or report.queue_difference is not None:
        found = [_check_summary(report)] if report.difference is not None else []
        found += [_queue_summary(report)] if report.queue_difference is not None else []
        raise ReplicasDifferError("; ".join(found) + (f"; also unreachable: {lost}" if lost else ""))
    if lost:
        raise UnavailableError(f"member(s) not checked, unreachable: {lost}")
    if report.range_to <= report.range_from:
        print(f"raftmq: note: no committed commit-log bytes held by every member in "
              f"{_range_text(report.range_from, report.range_to)}: nothing to compare", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("cluster", help="cluster status, replica check, leadership and membership")
    csub = c.add_subparsers(dest="cluster_command", metavar="{status,check,transfer-leader,balance-leaders,"
                                                            "rebuild-member,add-member,remove-member,replace-member}")
    csub.required = True
    p = add_command(csub, "status", cmd_cluster_status, "members, roles, terms, indexes and lag")
    p.add_argument("--watch", "-w", nargs="?", const=2.0, type=positive_float, metavar="SECONDS",
                   help="refresh every SECONDS (default 2) until Ctrl-C")
    p = add_command(csub, "check", cmd_cluster_check, "prove the members' commit logs byte-identical",
                    description="Ask every member for SHA-256 digests of its commit log over the range all members have "
                                "committed and applied ([largest first retained offset, smallest applied end)), compare "
                                "them chunk by chunk and name the first differing 4 KiB block; then every consume queue over "
                                "the queue offsets all members have dispatched, down to the first differing unit. Progress "
                                "on stderr. Exit 0 "
                                "when all agree, 9 when they differ, 5 when a member cannot be reached (the others are "
                                "still compared), 11 when a member stays behind what the others had applied when the check "
                                "began for all of --lag-wait (stuck or far behind: the common range cannot vouch for it). "
                                f"The cluster secret, when set, comes from ${SECRET_ENV} or --secret-file.")
    p.add_argument("--from", dest="from_offset", type=non_negative_int, default=0, metavar="OFFSET",
                   help="start at this commit-log offset (default: the first one every member holds)")
    p.add_argument("--bytes", type=size_arg, metavar="N", help="check at most N bytes (e.g. 64M; default: all)")
    p.add_argument("--chunk", type=chunk_size_arg, default=DEFAULT_CHUNK, metavar="N",
                   help="digest chunk size, 4K..16M (default 1M)")
    p.add_argument("--no-queues", action="store_true",
                   help="compare only the commit logs, not the consume queues")
    p.add_argument("--lag-wait", type=non_negative_float, default=DEFAULT_LAG_WAIT_S, metavar="SECONDS",
                   help="how long a member behind the others may take to catch up before it LAGS (default 10)")
    p.add_argument("--secret-file", metavar="PATH", help=f"file holding cluster.secret (default ${SECRET_ENV})")
    p = add_command(csub, "transfer-leader", cmd_transfer_leader, "hand leadership to another member", json_flag=False)
    p.add_argument("--to", metavar="ID", help="member id (default: any up-to-date follower)")
    p = add_command(csub, "rebuild-member", cmd_rebuild_member, "rebuild a diverged or damaged member from its peers",
                    json_flag=False,
                    description="The member (a follower: move leadership first) sets its files aside in a set-aside-<time> "
                                "directory inside its data directory, restarts its process and starts empty, copying the "
                                "group's committed data from a peer, as a new member would. Refused when the other members "
                                "would not keep a majority without it. Waits until it is healthy, ready and caught up "
                                "(exit 5 if not within --wait-timeout).")
    p.add_argument("member", metavar="ID", help="the member to rebuild (as `cluster status` names it)")
    p.add_argument("--discard", action="store_true",
                   help="delete its files instead of setting them aside (a volume without room for a second copy)")
    p.add_argument("--no-wait", action="store_true", help="return once the member has accepted the request")
    p.add_argument("--wait-timeout", type=positive_float, default=600.0, metavar="SECONDS",
                   help="how long to wait for it to be back (default 600)")
    members.register(csub)  # add-member, remove-member, replace-member (issue 39)
    balance.register(csub)  # balance-leaders (issue 38)

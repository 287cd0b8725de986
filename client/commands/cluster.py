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
from raftmq.client.cluster_view import ClusterView, cluster_view, groups_of
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
from raftmq.client.errors import (
    NotFoundError,
    RaftmqError,
    ReplicaLagsError,
    ReplicasDifferError,
    UnavailableError,
)
from raftmq.client.replica_check import (
    DEFAULT_CHUNK,
    DEFAULT_LAG_WAIT_S,
    SECRET_ENV,
    CheckReport,
    NothingToCompareError,
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


STATUS_HEADERS = ["Member", "Address", "Role", "Term", "Commit index", "Applied offset", "Dispatch behind (B)",
                  "Lag (B)", "State"]


def _member_row(m: MemberStatus) -> list:
    role = m.role.capitalize() if m.role else ""
    # an unreachable member's numbers are unknown, not zero
    numbers = ["-"] * 5 if m.role == "unreachable" else [m.term, m.commit_index, m.applied_offset,
                                                         m.dispatch_behind_bytes, m.lag_bytes]
    return [m.id, m.grpc_address, role, *numbers, member_state(m)]


def _notes(members: list[MemberStatus]) -> str:
    """Learners' progress and storage integrity below a status table."""
    members = sorted(members, key=lambda m: m.id)
    storage = [f"  {m.id}: {m.storage_integrity}" for m in members if m.storage_integrity]
    learners = [f"  {m.id}: {m.progress or m.error or 'catching up'}" for m in members if m.membership == "learner"]
    return (("\nLearners (not voting yet):\n" + "\n".join(learners) if learners else "")
            + ("\nStorage integrity:\n" + "\n".join(storage) if storage else ""))


def cluster_table(status: ClusterStatus) -> str:
    """The ``cluster status`` table, one row per member, in the style of ``patronictl list``."""
    rows = [_member_row(m) for m in sorted(status.members, key=lambda m: m.id)]
    title = (f"Cluster: {status.cluster_name or '?'} (leader: {status.leader_id or 'none'}, "
             f"durability: {status.durability or '?'})")
    return render_table(STATUS_HEADERS, rows, title=title) + _notes(status.members)


def groups_table(view: ClusterView) -> str:
    """``cluster status`` of a cluster of several groups (issue 38): one table, a row per member of every group
    (a group that did not answer: one row saying why), like ``patronictl list`` over several clusters."""
    rows = []
    for g in view.groups:
        if g.status is None:
            rows.append([g.name, "-", "-", "-", "-", "-", "-", "-", "-", f"unavailable: {short_reason(g.error)}"])
            continue
        rows += [[g.name, *_member_row(m)] for m in sorted(g.status.members, key=lambda m: m.id)]
    leaders = ", ".join(f"{g.name}: {(g.status.leader_id or 'none') if g.status else '?'}" for g in view.groups)
    durability = next((g.status.durability for g in view.groups if g.status is not None), "") or "?"
    title = f"Cluster: {view.cluster_name or '?'} (leaders: {leaders}; durability: {durability})"
    return render_table(["Group", *STATUS_HEADERS], rows, title=title) + _notes([m for _, m in view.members()])


def _view_table(view: ClusterView) -> str:
    return groups_table(view) if view.many else cluster_table(view.groups[0].status)


def _status_json(status: ClusterStatus) -> dict:
    d = dataclasses.asdict(status)
    for m, member in zip(d["members"], status.members, strict=True):
        m["state"] = member_state(member, full=True)
    return d


def _view_json(view: ClusterView) -> dict:
    """``cluster status --json`` of several groups: each group's status (as one group's) or its error."""
    return {"cluster_name": view.cluster_name, "answered_by": view.answered_by,
            "groups": [{"group": g.name, **(_status_json(g.status) if g.status is not None else {}),
                        "error": g.error} for g in view.groups]}


def cmd_cluster_status(args: argparse.Namespace) -> int:
    from raftmq.client.cluster_watch import Watch, view_events, view_summary

    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        if args.watch is None:
            view = cluster_view(admin, args.group)
            if all(g.status is None for g in view.groups):  # nothing answered: an error, not an empty table
                raise UnavailableError("; ".join(f"group {g.name}: {g.error}" for g in view.groups))
            if args.json:
                print_json(_view_json(view) if view.many else _status_json(view.groups[0].status))
            else:
                print(_view_table(view))
            return 0
        try:
            many = cluster_view(admin, args.group).many
        except NotFoundError:
            raise
        except RaftmqError:  # not answering yet: watch the way a one-group cluster is watched
            many = False
        if many:
            watch = Watch(lambda: cluster_view(admin, args.group), _view_table, events=view_events,
                          summary=view_summary)
        else:
            watch = Watch(lambda: admin.cluster_status(group=args.group or ""), cluster_table)
        try:
            while True:
                _json_once(admin, args.group, many) if args.json else watch.tick()
                time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0


def _json_once(admin: Admin, group: str | None, many: bool) -> None:
    stamp = dt.datetime.now().isoformat(sep=" ", timespec="seconds")
    try:
        answer = _view_json(cluster_view(admin, group)) if many else \
            _status_json(admin.cluster_status(group=group or ""))
    except RaftmqError as exc:  # keep watching through a failover or a restart
        print(f"{stamp}  raftmq: error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return
    print_json({"time": stamp, **answer})


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


def check_table(report: CheckReport, group: str = "") -> str:
    """The ``cluster check`` table: one row per member, its checked range, bytes and verdicts (``group``: the
    group these members form, in the title)."""
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
    title = (f"Group {group}: commit" if group else "Commit") + \
        f"-log check: {report.algorithm} in {report.chunk_bytes}-byte chunks"
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


def _check_failure(report: CheckReport) -> RaftmqError | None:
    """What a report fails with (differ, lags, unreachable), None when the replicas were proven identical."""
    lost = ", ".join(f"{m.id} ({m.address}): {m.error}" for m in report.unreachable)
    if report.lagging and report.difference is None and report.queue_difference is None:
        return ReplicaLagsError("; ".join(f"{m.id} lags: {m.lag}" for m in report.lagging)
                                + " (rebuild a stuck member with `raftmq cluster rebuild-member`)"
                                + (f"; also unreachable: {lost}" if lost else ""))
    if report.difference is not None or report.queue_difference is not None:
        found = [_check_summary(report)] if report.difference is not None else []
        found += [_queue_summary(report)] if report.queue_difference is not None else []
        return ReplicasDifferError("; ".join(found) + (f"; also unreachable: {lost}" if lost else ""))
    if lost:
        return UnavailableError(f"member(s) not checked, unreachable: {lost}")
    return None


def _print_report(report: CheckReport, group: str = "") -> None:
    prefix = f"group {group}: " if group else ""
    print(check_table(report, group))
    print(prefix + _check_summary(report))
    if any(m.queue_verdict for m in report.members):
        print(prefix + _queue_summary(report))


def _warn_report(report: CheckReport, group: str = "") -> None:
    prefix = f"group {group}: " if group else ""
    for name in report.queues_not_everywhere:
        print(f"raftmq: warning: {prefix}consume queue {name}: not compared (still dispatching, or lost there)",
              file=sys.stderr)
    if report.range_to <= report.range_from:
        print(f"raftmq: note: {prefix}no committed commit-log bytes held by every member in "
              f"{_range_text(report.range_from, report.range_to)}: nothing to compare", file=sys.stderr)


def cmd_cluster_check(args: argparse.Namespace) -> int:
    _read_secret(args)  # a bad --secret-file is a usage error before anything is asked
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout,
               retry_timeout=args.timeout) as admin:
        routes, many = groups_of(admin, args.group)
    if many or args.group is not None:
        return _check_groups([g.name for g in routes], args)
    report = _check_one(args, "")
    if args.json:
        print_json(report.to_json())
    else:
        _print_report(report)
    _warn_report(report)
    failure = _check_failure(report)
    if failure is not None:
        raise failure
    return 0


def _check_one(args: argparse.Namespace, group: str) -> CheckReport:
    progress = Progress(0, render=checked_text)

    def show(done: int, total: int) -> None:
        progress.total = total
        progress.update(done)

    try:
        with ReplicaChecker(servers_of(args), secret=_read_secret(args), timeout=args.timeout,
                            security=security_of(args)) as checker:
            return checker.check(from_offset=args.from_offset, max_bytes=args.bytes, chunk_bytes=args.chunk,
                                 progress=show, queues=not args.no_queues, lag_wait_s=args.lag_wait, group=group)
    finally:
        progress.finish()


# which failure a check of several groups exits with: the worst found in any group
_FAILURE_ORDER = (ReplicasDifferError, ReplicaLagsError, UnavailableError)


def _check_groups(names: list[str], args: argparse.Namespace) -> int:
    """``cluster check`` of every group (issue 38): each group's members compared among themselves, one after
    the other; the exit status covers all of them (9 when any group's replicas differ, else 11 when a member of
    any lags, else 5 when any member or group could not be asked) and every failure names its group."""
    reports: list[tuple[str, CheckReport | None, RaftmqError | None]] = []
    for name in names:
        print(f"checking group {name} ...", file=sys.stderr, flush=True)
        try:
            report = _check_one(args, name)
        except NothingToCompareError as exc:
            reports.append((name, None, exc))
            continue
        except RaftmqError as exc:
            if isinstance(exc, UnavailableError):
                exc = UnavailableError(f"could not ask its members: {exc.message}")
            reports.append((name, None, exc))
            continue
        reports.append((name, report, _check_failure(report)))
    if args.json:
        print_json({"groups": [{"group": name, **(report.to_json() if report is not None else {}),
                                "error": exc.message if exc is not None else ""}
                               for name, report, exc in reports],
                    "identical": all(exc is None for _, _, exc in reports)})
    for name, report, exc in reports:
        if report is not None:
            if not args.json:
                _print_report(report, name)
            _warn_report(report, name)
        elif not args.json:
            print(f"Group {name}: not checked: {exc.message}")
    failures = [(name, exc) for name, _, exc in reports if exc is not None
                and not isinstance(exc, NothingToCompareError)]
    if not failures:
        if all(isinstance(exc, NothingToCompareError) for _, _, exc in reports):
            raise NothingToCompareError("every group has a single member: there are no replicas to compare")
        return 0
    text = "; ".join(f"group {name}: {exc.message}" for name, exc in failures)
    for kind in _FAILURE_ORDER:
        if any(isinstance(exc, kind) for _, exc in failures):
            raise kind(text)
    raise type(failures[0][1])(text)


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("cluster", help="cluster status, replica check, leadership and membership")
    csub = c.add_subparsers(dest="cluster_command", metavar="{status,check,transfer-leader,balance-leaders,"
                                                            "rebuild-member,add-member,remove-member,replace-member}")
    csub.required = True
    p = add_command(csub, "status", cmd_cluster_status, "members of every group: roles, terms, indexes and lag")
    p.add_argument("--watch", "-w", nargs="?", const=2.0, type=positive_float, metavar="SECONDS",
                   help="refresh every SECONDS (default 2) until Ctrl-C")
    p.add_argument("--group", metavar="NAME", help="only this group of the cluster (default: every group)")
    p = add_command(csub, "check", cmd_cluster_check, "prove the members' commit logs byte-identical",
                    description="Ask every member for SHA-256 digests of its commit log over the range all members have "
                                "committed and applied ([largest first retained offset, smallest applied end)), compare "
                                "them chunk by chunk and name the first differing 4 KiB block; then every consume queue over "
                                "the queue offsets all members have dispatched, down to the first differing unit. Progress "
                                "on stderr. Exit 0 "
                                "when all agree, 9 when they differ, 5 when a member cannot be reached (the others are "
                                "still compared), 11 when a member stays behind what the others had applied when the check "
                                "began for all of --lag-wait (stuck or far behind: the common range cannot vouch for it). "
                                "In a cluster of several groups every group is checked, each among its own members, "
                                "and the exit status covers all of them (every failure names its group). "
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
    p.add_argument("--group", metavar="NAME", help="only this group of the cluster (default: every group, each "
                   "compared among its own members)")
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

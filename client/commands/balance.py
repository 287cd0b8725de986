"""``raftmq cluster balance-leaders``: every group back to its preferred leader (issue 38,
docs/operations/leader-balance.md), as Kafka's ``kafka-leader-election --election-type PREFERRED`` does.

The servers say which member each group prefers (the route's ``preferred_leader``: the rule of
docs/design/leader-balance.md, computed from the configuration every member shares); this command only looks at
each group's status and moves leadership with the same transfer `cluster transfer-leader` uses, one group at a
time, waiting until the move has taken effect before the next."""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass

from raftmq.client.admin import Admin
from raftmq.client.commands.args import UsageError, add_command, positive_float, security_of, servers_of
from raftmq.client.commands.output import print_json
from raftmq.client.errors import LeadersNotBalancedError, RaftmqError, UnavailableError
from raftmq.client.routing import GroupRoute
from raftmq.client.security import ClientSecurity
from raftmq.client.table import render_table
from raftmq.client.types import ClusterStatus
from raftmq.text import short_reason

POLL_S = 0.2
MOVE = "move"
BALANCED = "balanced"


@dataclass
class GroupPlan:
    """One group: who leads it, who should, and what to do (``move``, ``balanced`` or why it cannot move)."""

    group: str
    leader: str
    preferred: str
    action: str
    result: str = ""
    seconds: float = 0.0


def plan_for(group: GroupRoute, status: ClusterStatus | None, error: str = "") -> GroupPlan:
    """What to do for ``group`` given its status (None: it did not answer, ``error`` says why)."""
    preferred = group.preferred_leader
    if status is None:
        return GroupPlan(group.name, "?", preferred or "?", f"cannot move: the group does not answer ({error})")
    leader = status.leader_id
    if not preferred:
        return GroupPlan(group.name, leader or "none", "?", "cannot move: the server names no preferred leader "
                                                            "(older than issue 38)")
    if leader == preferred:
        return GroupPlan(group.name, leader, preferred, BALANCED)
    if not leader:
        return GroupPlan(group.name, "none", preferred, "cannot move: the group has no leader (an election?)")
    m = next((m for m in status.members if m.id == preferred), None)
    if m is None:
        return GroupPlan(group.name, leader, preferred, f"cannot move: {preferred} is not a member of the group")
    if m.membership == "learner":
        return GroupPlan(group.name, leader, preferred, f"cannot move: {preferred} is a learner, not a voter yet")
    if m.role == "unreachable" or not m.healthy or not m.ready:
        why = short_reason(m.error) if m.error else ("not ready" if m.healthy else "unhealthy")
        return GroupPlan(group.name, leader, preferred, f"cannot move: {preferred} is {m.role or 'down'} ({why})")
    return GroupPlan(group.name, leader, preferred, MOVE)


class Balancer:
    """Plans and moves, one group at a time, each through an Admin on that group's endpoints."""

    def __init__(self, servers: list[str], security: ClientSecurity, timeout: float, wait_timeout: float):
        self.servers = servers
        self.security = security
        self.timeout = timeout
        self.wait_timeout = wait_timeout

    def _admin(self, endpoints) -> Admin:
        return Admin(list(endpoints), security=self.security, timeout=self.timeout, retry_timeout=self.timeout)

    def groups(self, only: str | None) -> list[GroupRoute]:
        with self._admin(self.servers) as admin:
            groups = admin.groups()
        if not groups:
            raise UnavailableError("the server answers no route (older than issue 37): it cannot name preferred "
                                   "leaders")
        if only is not None:
            chosen = [g for g in groups if g.name == only]
            if not chosen:
                raise UsageError(f"--group {only}: no such group; the groups are {', '.join(g.name for g in groups)}")
            return chosen
        return groups

    def status(self, group: GroupRoute) -> ClusterStatus:
        with self._admin(group.endpoints) as admin:
            return admin.cluster_status()

    def plan(self, group: GroupRoute) -> GroupPlan:
        try:
            return plan_for(group, self.status(group))
        except RaftmqError as e:
            return plan_for(group, None, short_reason(e.message))

    def move(self, group: GroupRoute, p: GroupPlan) -> None:
        """Hand ``p.group``'s leadership to its preferred leader and wait until every answer names it leader."""
        started = time.monotonic()
        try:
            with self._admin(group.endpoints) as admin:
                admin.transfer_leader(p.preferred)
                deadline = time.monotonic() + self.wait_timeout
                last = "no answer yet"
                while time.monotonic() < deadline:
                    try:
                        st = admin.cluster_status()
                    except RaftmqError as e:  # the old leader may answer no more for a moment
                        last = short_reason(e.message)
                    else:
                        new = next((m for m in st.members if m.id == st.leader_id), None)
                        if st.leader_id == p.preferred and new is not None and new.ready:
                            p.result, p.seconds = "moved", time.monotonic() - started
                            return
                        last = f"leader {st.leader_id or 'none'}"
                    time.sleep(POLL_S)
            p.result = f"FAILED: {p.preferred} was not the ready leader within {self.wait_timeout:.0f}s ({last})"
        except RaftmqError as e:  # the whole reason: the leader says what to fix ("'n9' ... is not a voter ...")
            p.result = "FAILED: " + " ".join(e.message.split())
        p.seconds = time.monotonic() - started


def _table(plans: list[GroupPlan], done: bool) -> str:
    headers = ["Group", "Leader", "Preferred leader", "Action"] + (["Result", "Seconds"] if done else [])
    rows = [[p.group, p.leader, p.preferred, p.action] + ([p.result or "-", f"{p.seconds:.1f}" if p.result else "-"]
                                                          if done else []) for p in plans]
    return render_table(headers, rows, title="Leader balance" + (" (dry run)" if not done else ""))


def cmd_balance_leaders(args: argparse.Namespace) -> int:
    balancer = Balancer(servers_of(args), security_of(args), args.timeout, args.wait_timeout)
    started = time.monotonic()
    groups = balancer.groups(args.group)
    plans = [balancer.plan(g) for g in groups]
    if not args.dry_run:
        for g, p in zip(groups, plans, strict=True):
            if p.action == MOVE:
                balancer.move(g, p)
                if not args.json:
                    print(f"{p.group}: {p.leader} -> {p.preferred}: {p.result} ({p.seconds:.1f}s)", flush=True)
    elapsed = time.monotonic() - started
    if args.json:
        print_json({"dry_run": args.dry_run, "seconds": round(elapsed, 3), "groups": [asdict(p) for p in plans]})
    else:
        print(_table(plans, done=not args.dry_run))
    failed = [p for p in plans if p.result.startswith("FAILED")]
    stuck = [p for p in plans if p.action not in (MOVE, BALANCED)]
    if args.dry_run:
        to_move = [p.group for p in plans if p.action == MOVE]
        if to_move or stuck:
            raise LeadersNotBalancedError(
                "not balanced: " + "; ".join([f"group {g} would move" for g in to_move]
                                             + [f"group {p.group}: {p.action}" for p in stuck]))
        print(f"every group ({len(plans)}) is led by its preferred leader")
        return 0
    if failed or stuck:
        raise LeadersNotBalancedError("; ".join([f"group {p.group}: moving leadership {p.leader} -> {p.preferred} "
                                                 f"{p.result}" for p in failed]
                                                + [f"group {p.group}: {p.action}" for p in stuck]))
    moved = sum(1 for p in plans if p.result == "moved")
    print(f"balanced: every group ({len(plans)}) is led by its preferred leader; {moved} moved in {elapsed:.1f}s")
    return 0


def register(csub: argparse._SubParsersAction) -> None:
    p = add_command(csub, "balance-leaders", cmd_balance_leaders, "move each group's leadership to its preferred leader",
                    description="Show every group's leader and preferred leader (docs/design/leader-balance.md) and "
                                "hand leadership to the preferred one where it differs, with the transfer of `cluster "
                                "transfer-leader`, one group at a time, waiting until each move has taken effect. A "
                                "group whose preferred leader is down, lagging or a learner is left as it is. Exit 0 "
                                "when every group is led by its preferred leader afterwards (with --dry-run: already), "
                                "12 when some group is not (the reason is named per group), 5 when no member answers.")
    p.add_argument("--dry-run", action="store_true", help="only show the plan; exit 12 if anything would move")
    p.add_argument("--group", metavar="NAME", help="only this group (default: every group)")
    p.add_argument("--wait-timeout", type=positive_float, default=60.0, metavar="SECONDS",
                   help="how long each move may take to show a ready new leader (default 60)")

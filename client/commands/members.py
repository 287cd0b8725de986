"""CLI for membership changes (issue 39): ``raftmq cluster add-member``, ``remove-member``, ``replace-member``.

Each asks the leader (any member forwards or redirects), prints the plan, and with ``--dry-run`` stops there. An
addition then waits until the new member is a voter, printing the learner's progress as the leader measures it;
a replacement also until the old member is gone (the leader removes it once the new one votes). A refusal (another
change in progress, no healthy majority after the change) is one line naming who is down, exit 1.
"""

from __future__ import annotations

import argparse
import sys
import time

from raftmq.client.admin import Admin
from raftmq.client.commands.args import add_command, positive_float, security_of, servers_of
from raftmq.client.commands.output import print_json
from raftmq.client.connection import parse_server
from raftmq.client.errors import InvalidArgumentError, RaftmqError, UnavailableError
from raftmq.client.types import ClusterStatus, MembershipChange

POLL_S = 1.0


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(servers_of(args), security=security_of(args), timeout=args.timeout,
                 retry_timeout=args.timeout)


def _addresses(args: argparse.Namespace, member_id: str) -> tuple[str, str]:
    """(Raft, gRPC) address of the member to add: ``--raft`` and ``--grpc``, or ``--address`` (its gRPC port) of
    a member that is already running, which is asked for its Raft address."""
    grpc_address = args.grpc or args.address
    if not grpc_address:
        raise InvalidArgumentError(f"give the address of {member_id}: --address HOST:PORT (its gRPC port; it must be "
                                   "running) or --raft HOST:PORT --grpc HOST:PORT")
    grpc_address = parse_server(grpc_address)
    if args.raft:
        return parse_server(args.raft), grpc_address
    try:
        with Admin([grpc_address], security=security_of(args), timeout=args.timeout,
                   retry_timeout=args.timeout) as new:
            status = new.cluster_status()
    except RaftmqError as e:
        raise UnavailableError(f"{member_id} at {grpc_address} does not answer ({e}): start it first, or give its "
                               "Raft address with --raft HOST:PORT") from None
    me = next((m for m in status.members if m.id == member_id), None)
    if me is None or not me.raft_address:
        raise InvalidArgumentError(f"the node at {grpc_address} is not {member_id} (it answers for "
                                   f"{', '.join(sorted(m.id for m in status.members)) or 'nobody'}); check the id "
                                   "and --address")
    return me.raft_address, grpc_address


def _print_plan(args: argparse.Namespace, change: MembershipChange) -> None:
    if args.json:
        print_json({"plan": change.plan, "voters": change.voters, "learners": change.learners,
                              "index": change.index, "dry_run": args.dry_run})
        return
    print(("would do: " if args.dry_run else "") + change.plan)
    if not args.dry_run:
        print(f"voters: {', '.join(change.voters)}" + (f"; learners: {', '.join(change.learners)}"
                                                       if change.learners else ""), flush=True)


def _wait(admin: Admin, args: argparse.Namespace, member_id: str, gone: str = "") -> int:
    """Until ``member_id`` is a voter (and ``gone`` is no member), printing each new progress line on stderr."""
    deadline = time.monotonic() + args.wait_timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            status = admin.cluster_status()
        except RaftmqError as e:  # a failover while waiting: keep asking
            line = f"cluster status: {e}"
        else:
            done, line = _state(status, member_id, gone)
            if done:
                print(line, flush=True)
                return 0
        if line != last:
            print(f"{time.strftime('%H:%M:%S')}  {line}", file=sys.stderr, flush=True)
            last = line
        time.sleep(POLL_S)
    raise UnavailableError(f"{member_id} is not a voter{f' and {gone} not removed' if gone else ''} after "
                           f"{args.wait_timeout:.0f}s (--wait-timeout); the change goes on: follow it with "
                           "`raftmq cluster status -w`")


def _state(status: ClusterStatus, member_id: str, gone: str) -> tuple[bool, str]:
    rows = {m.id: m for m in status.members}
    m = rows.get(member_id)
    if m is None:
        return False, f"{member_id} is not in the configuration of the answering member yet"
    if m.membership == "learner":
        return False, f"{member_id}: learner, {m.progress or m.error or 'catching up'}"
    if gone and gone in rows:
        return False, f"{member_id} is a voter; {gone} is being removed"
    return True, (f"{member_id} is a voter" + (f"; {gone} was removed" if gone else "") +
                  f" (leader {status.leader_id or 'unknown'}). Check the replicas with `raftmq cluster check`")


def cmd_add_member(args: argparse.Namespace) -> int:
    raft, grpc_address = _addresses(args, args.member)
    with _admin(args) as admin:
        change = admin.add_member(args.member, raft, grpc_address, dry_run=args.dry_run)
        _print_plan(args, change)
        if args.dry_run or args.no_wait:
            return 0
        return _wait(admin, args, args.member)


def cmd_remove_member(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        _print_plan(args, admin.remove_member(args.member, dry_run=args.dry_run))
    return 0


def cmd_replace_member(args: argparse.Namespace) -> int:
    raft, grpc_address = _addresses(args, args.new)
    with _admin(args) as admin:
        change = admin.add_member(args.new, raft, grpc_address, replaces=args.old, dry_run=args.dry_run)
        _print_plan(args, change)
        if args.dry_run or args.no_wait:
            return 0
        return _wait(admin, args, args.new, gone=args.old)


def _address_options(p: argparse.ArgumentParser, who: str) -> None:
    p.add_argument("--address", metavar="HOST:PORT",
                   help=f"gRPC address of {who}, which is running: its Raft address is asked from it")
    p.add_argument("--raft", metavar="HOST:PORT", help=f"Raft address of {who} (peers dial it)")
    p.add_argument("--grpc", metavar="HOST:PORT", help=f"gRPC address of {who} (same as --address)")


def _change_options(p: argparse.ArgumentParser, waits: bool) -> None:
    p.add_argument("--dry-run", action="store_true",
                   help="check the change (health of the group, conflicts) and print what it would do")
    if waits:
        p.add_argument("--no-wait", action="store_true", help="return once the leader recorded the learner")
        p.add_argument("--wait-timeout", type=positive_float, default=1800.0, metavar="SECONDS",
                       help="how long to wait for the change to complete (default 1800)")


def register(csub) -> None:
    """The membership subcommands of ``raftmq cluster``."""
    add = add_command
    p = add(csub, "add-member", cmd_add_member, "add a member: a learner first, a voter once caught up",
            description="Record ID as a learner (it must be started with a cluster.members listing the group and "
                        "itself): it copies the group's data, follows the log without counting for any majority, "
                        "and the leader makes it a voter once it is within cluster.raft.learner_max_lag_entries "
                        "of the log. Waits until then, printing its progress. Refused when another change is in "
                        "progress or the group would have no healthy majority (the refusal names who is down).")
    p.add_argument("member", metavar="ID", help="the new member's id (its node.id)")
    _address_options(p, "the new member")
    _change_options(p, waits=True)
    p = add(csub, "remove-member", cmd_remove_member, "remove a voter or a learner",
            description="Remove ID from the group (a leader first hands leadership to another voter). Refused "
                        "when the voters left would have no healthy majority, naming who is down or behind; "
                        "removing a member that is down is allowed while the others keep a majority. The removed "
                        "member stops taking part and reports itself removed; its data is kept.")
    p.add_argument("member", metavar="ID", help="the member to remove (as `cluster status` names it)")
    _change_options(p, waits=False)
    p = add(csub, "replace-member", cmd_replace_member, "replace a member with a new one (of a new name)",
            description="Add NEW as a learner that replaces OLD: once NEW is a voter the leader removes OLD, so "
                        "the group never has fewer voters than before. Waits until both are done.")
    p.add_argument("old", metavar="OLD", help="the voter to replace")
    p.add_argument("new", metavar="NEW", help="the new member's id")
    _address_options(p, "the new member")
    _change_options(p, waits=True)

"""``raftmq acl``: users and access rules (docs/operations/security.md).

    raftmq acl user add ALICE [--admin]          # prints a generated secret key once (or --secret-key-stdin)
    raftmq acl user add ALICE --network 10.1.0.0/16 --network fd00::/8   # may sign only from these networks
    raftmq acl user networks ALICE --network 10.2.0.0/16 | --any
    raftmq acl user delete ALICE
    raftmq acl user list                         # every group's users, each line naming its group (issue 38)
    raftmq acl policy add ALICE --allow PUB,SUB --resource topic:orders-* --resource group:billing
    raftmq acl policy add ALICE --deny SUB --resource topic:orders.secret
    raftmq acl policy remove ALICE INDEX
    raftmq acl policy list [ALICE]
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys

from raftmq.client.acl import AclAdmin, AclUser
from raftmq.client.commands.args import UsageError, add_command, security_of, servers_of
from raftmq.client.errors import NotFoundError, RaftmqError


def _admin(args: argparse.Namespace) -> AclAdmin:
    return AclAdmin(servers_of(args), timeout=args.timeout, retry_timeout=args.timeout, security=security_of(args))


def _user_json(u: AclUser) -> dict:
    return {"access_key": u.access_key, "admin": u.admin, "bootstrap": u.bootstrap,
            "rules": [{"effect": r.effect, "actions": list(r.actions), "resources": list(r.resources)}
                      for r in u.rules], "networks": list(u.networks)}


def cmd_user_add(args: argparse.Namespace) -> int:
    generated = not args.secret_key_stdin
    secret = secrets.token_urlsafe(24) if generated else sys.stdin.readline().rstrip("\n")
    if not secret:
        raise UsageError("--secret-key-stdin: stdin held no secret key")
    with _admin(args) as admin:
        user, created = admin.put_user(args.user, secret, admin=args.admin, networks=_checked_networks(args.network))
    verb = "created" if created else "updated"
    if args.json:
        out = _user_json(user) | {"created": created}
        if generated:
            out["secret_key"] = secret
        print(json.dumps(out))
    else:
        print(f"user {user.access_key} {verb}{' (admin)' if user.admin else ''}; networks: {_networks_text(user)}")
        if generated:
            print(f"secret key (shown once, store it now): {secret}")
    return 0


def _checked_networks(values: list[str]) -> list[str]:
    """--network values, each a CIDR or one address (a usage error, exit 2, names a bad one)."""
    import ipaddress

    for v in values:
        try:
            ipaddress.ip_network(v, strict=True)
        except ValueError:
            raise UsageError(f"--network {v!r}: not a network; use a CIDR such as 10.0.0.0/8 or fd00::/8 (no bits "
                             "set beyond the prefix), or one address") from None
    return list(values)


def _networks_text(u: AclUser) -> str:
    return ", ".join(u.networks) if u.networks else "any"


def cmd_user_networks(args: argparse.Namespace) -> int:
    if bool(args.network) == bool(args.any):
        raise UsageError("give one or more --network CIDR, or --any (the user may sign from anywhere)")
    with _admin(args) as admin:
        user = admin.set_networks(args.user, _checked_networks(args.network))
    if args.json:
        print(json.dumps(_user_json(user)))
    else:
        print(f"user {user.access_key} may sign from: {_networks_text(user)}")
    return 0


def cmd_user_delete(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        admin.delete_user(args.user)
    print(f"user {args.user} deleted")
    return 0


def _users_of_every_group(admin: AclAdmin) -> list[tuple[str, list[AclUser] | RaftmqError]]:
    """Issue 38: each group keeps its own users and rules (a change is made in every group), so a list asks each
    group (relayed there by the answering member); a one-group cluster is one unnamed entry, asked as before."""
    names = admin.groups()
    if len(names) <= 1:
        return [("", admin.list_users())]
    out: list[tuple[str, list[AclUser] | RaftmqError]] = []
    for name in names:
        try:
            out.append((name, admin.list_users(group=name)))
        except RaftmqError as exc:
            out.append((name, exc))
    return out


def _finish_listing(by_group: list[tuple[str, list[AclUser] | RaftmqError]]) -> int:
    """After a list of several groups: warn of users the groups disagree on, fail naming groups not asked."""
    answered = {g: users for g, users in by_group if not isinstance(users, RaftmqError)}
    if len(answered) > 1:
        keys = sorted({u.access_key for users in answered.values() for u in users})
        for key in keys:
            held = {g: next((u for u in users if u.access_key == key), None) for g, users in answered.items()}
            if len({u for u in held.values()}) > 1:
                print(f"raftmq: warning: user {key} differs between groups ("
                      + ", ".join(f"{g}: {'absent' if u is None else 'present'}" for g, u in held.items())
                      + "): a change missed a group; run it again (each group's part is idempotent)", file=sys.stderr)
    failed = [(g, e) for g, e in by_group if isinstance(e, RaftmqError)]
    if failed:
        raise type(failed[0][1])("; ".join(f"group {g}: {' '.join(e.message.split())}" for g, e in failed)
                                 + f" (listed: {', '.join(answered) or 'no group'})")
    return 0


def _listing_json(by_group: list[tuple[str, list[AclUser] | RaftmqError]], users_of) -> list[dict]:
    if len(by_group) == 1 and not by_group[0][0]:
        return [_user_json(u) for u in users_of(by_group[0][1])]
    return [{"group": g, **_user_json(u)} for g, users in by_group if not isinstance(users, RaftmqError)
            for u in users_of(users)]


def cmd_user_list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        by_group = _users_of_every_group(admin)
    if args.json:
        print(json.dumps(_listing_json(by_group, lambda users: users)))
        return _finish_listing(by_group)
    for group, users in by_group:
        if isinstance(users, RaftmqError):
            continue
        for u in users:
            kind = "bootstrap admin" if u.bootstrap else "admin" if u.admin else f"{len(u.rules)} rule(s)"
            print(f"{group}\t" * bool(group) + f"{u.access_key}\t{kind}\tnetworks: {_networks_text(u)}")
    return _finish_listing(by_group)


def _rules_text(u: AclUser) -> list[str]:
    return [f"{u.access_key}\t{i}\t{r.text()}" for i, r in enumerate(u.rules)]


def cmd_policy_add(args: argparse.Namespace) -> int:
    effect, actions = ("allow", args.allow) if args.allow else ("deny", args.deny)
    if not args.resource:
        raise UsageError("give at least one --resource (topic:NAME, group:NAME, a trailing * for a prefix, or "
                         "cluster)")
    with _admin(args) as admin:
        user = admin.add_rule(args.user, effect, [a.strip().upper() for a in actions.split(",") if a.strip()],
                              args.resource)
    if args.json:
        print(json.dumps(_user_json(user)))
    else:
        print(f"rule {len(user.rules) - 1} added to {user.access_key}: {user.rules[-1].text()}")
    return 0


def cmd_policy_remove(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        user = admin.remove_rule(args.user, args.index)
    print(f"rule {args.index} removed from {user.access_key}; {len(user.rules)} left")
    return 0


def cmd_policy_list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        by_group = _users_of_every_group(admin)

    def chosen(users: list[AclUser]) -> list[AclUser]:
        return [u for u in users if u.access_key == args.user] if args.user else users

    if args.user and not any(chosen(users) for _, users in by_group if not isinstance(users, RaftmqError)):
        _finish_listing(by_group)  # a group that did not answer may hold the user: say so first
        raise NotFoundError(f"no user with access key {args.user!r}")
    if args.json:
        print(json.dumps(_listing_json(by_group, chosen)))
        return _finish_listing(by_group)
    for group, users in by_group:
        if isinstance(users, RaftmqError):
            continue
        for u in chosen(users):
            prefix = f"{group}\t" * bool(group)
            if u.admin:
                print(f"{prefix}{u.access_key}\t-\tadmin: every action on every resource")
            for line in _rules_text(u):
                print(prefix + line)
    return _finish_listing(by_group)


def register(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser("acl", help="users and access rules (authentication on)")
    asub = a.add_subparsers(dest="acl_command", metavar="{user,policy}")
    asub.required = True
    u = asub.add_parser("user", help="add, delete, list users")
    usub = u.add_subparsers(dest="acl_user_command", metavar="{add,delete,list,networks}")
    usub.required = True
    p = add_command(usub, "add", cmd_user_add, "create a user (or replace its secret)",
                    description="Create a user with a generated secret key (printed once), or the one line read from "
                                "stdin with --secret-key-stdin. An existing user gets the new secret and keeps its rules.")
    p.add_argument("user", metavar="ACCESS_KEY")
    p.add_argument("--admin", action="store_true", help="every action on every resource")
    p.add_argument("--secret-key-stdin", action="store_true", help="read the new user's secret key from stdin")
    p.add_argument("--network", action="append", default=[], metavar="CIDR",
                   help="the user may sign only from this source network (10.0.0.0/8, fd00::/8, one address); "
                        "repeatable; without it a new user may sign from anywhere and an existing one keeps its own")
    p = add_command(usub, "delete", cmd_user_delete, "delete a user and its rules", json_flag=False)
    p.add_argument("user", metavar="ACCESS_KEY")
    add_command(usub, "list", cmd_user_list, "list users")
    p = add_command(usub, "networks", cmd_user_networks, "set the source networks a user may sign from",
                    description="Replace the user's allowed source networks (like RocketMQ's whiteRemoteAddress): its "
                                "requests from other addresses are refused (PERMISSION_DENIED, exit 8). --any lifts it.")
    p.add_argument("user", metavar="ACCESS_KEY")
    p.add_argument("--network", action="append", default=[], metavar="CIDR",
                   help="an allowed network (10.0.0.0/8, fd00::/8, one address); repeatable")
    p.add_argument("--any", action="store_true", help="the user may sign from anywhere")

    pol = asub.add_parser("policy", help="add, remove, list access rules")
    psub = pol.add_subparsers(dest="acl_policy_command", metavar="{add,remove,list}")
    psub.required = True
    p = add_command(psub, "add", cmd_policy_add, "add an allow or deny rule to a user",
                    description="A rule allows or denies actions (PUB, SUB, ADMIN) on resources: topic:NAME, group:NAME "
                                "(a trailing * makes NAME a prefix: topic:orders-*, topic:*) or cluster. A matching deny "
                                "wins; with no match the node's security.acl_default (deny) applies.")
    p.add_argument("user", metavar="ACCESS_KEY")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--allow", metavar="ACTIONS", help="comma-separated: PUB,SUB,ADMIN")
    g.add_argument("--deny", metavar="ACTIONS", help="comma-separated: PUB,SUB,ADMIN")
    p.add_argument("--resource", "-r", action="append", default=[], metavar="RESOURCE",
                   help="topic:NAME, group:NAME (trailing * = prefix) or cluster; repeatable")
    p = add_command(psub, "remove", cmd_policy_remove, "remove a user's rule by index (see policy list)", json_flag=False)
    p.add_argument("user", metavar="ACCESS_KEY")
    p.add_argument("index", type=int, metavar="INDEX")
    p = add_command(psub, "list", cmd_policy_list, "rules of every user (or one)")
    p.add_argument("user", nargs="?", metavar="ACCESS_KEY")

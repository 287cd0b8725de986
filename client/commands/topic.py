"""``raftmq topic create|update|describe|list|delete``."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys

from raftmq.client.admin import Admin
from raftmq.client.commands.args import (
    UsageError,
    add_command,
    format_perm,
    message_type_arg,
    non_negative_int,
    parse_perm,
    positive_int,
    security_of,
    servers_of,
)
from raftmq.client.commands.output import ms_to_text, print_json
from raftmq.client.errors import RaftmqError, TopicNotFoundError
from raftmq.client.render import escape
from raftmq.client.table import render_table
from raftmq.client.topic_file import TopicFileError, read_topic_file
from raftmq.client.types import MESSAGE_TYPES, PERM_READ, PERM_WRITE


def _topic_json(t) -> dict:
    d = dataclasses.asdict(t)
    d["perm_text"] = format_perm(t.perm)
    return d


def _topic_line(verb: str, t) -> str:
    return (f"{verb} topic {t.name}: read queues {t.read_queue_nums}, write queues {t.write_queue_nums}, "
            f"perm {format_perm(t.perm)}, order {'yes' if t.order else 'no'}, message type {t.message_type}, "
            f"de-duplication window {_window_text(t)}")


def _window_text(t) -> str:
    if t.dedup_window_seconds is None:
        return "the node's"
    return "off" if t.dedup_window_seconds == 0 else f"{t.dedup_window_seconds} s"


def cmd_topic_create(args: argparse.Namespace) -> int:
    if (args.name is None) == (args.from_file is None):
        raise UsageError("give a topic name, or --from-file PATH with one topic per line (not both)")
    if args.from_file is not None:
        return create_topics_from_file(args)
    if args.skip_existing:
        raise UsageError("--skip-existing goes with --from-file")
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        t = admin.create_topic(args.name, queues=args.queues, read_queues=args.read_queues,
                               write_queues=args.write_queues, perm=args.perm, order=args.order,
                               message_type=args.message_type, dedup_window_seconds=args.dedup_window)
    print_json(_topic_json(t)) if args.json else print(_topic_line("created", t))
    return 0


def create_topics_from_file(args: argparse.Namespace) -> int:
    """``topic create --from-file``: every line checked first (each problem named with its line), then the
    topics created, 1,000 per request (one change of the broker's topic table each)."""
    defaults = {k: getattr(args, k) for k in ("queues", "read_queues", "write_queues", "perm", "order",
                                              "message_type")}
    try:
        lines = read_topic_file(args.from_file, lambda p: _topic_fields(p, update=False), defaults)
    except TopicFileError as e:
        for problem in e.problems[:20]:
            print(f"raftmq: {problem}", file=sys.stderr)
        shown = "" if len(e.problems) <= 20 else f" (the first 20 of {len(e.problems)} shown)"
        raise UsageError(str(e) + shown) from None
    line_of = {t.name: n for n, t in lines}
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        try:
            created, existing = admin.create_topics([t for _, t in lines], skip_existing=args.skip_existing)
        except RaftmqError as e:  # the broker names topics by position in its request: say the file's line
            e.message = re.sub(r"topics\[\d+\] '([^']*)'", lambda m: f"line {line_of.get(m[1], '?')} '{m[1]}'",
                               e.message)
            e.args = (e.message,)
            raise
    if args.json:
        print_json({"created": [t.name for t in created], "existing": existing})
    else:
        print(f"created {len(created)} topics from {args.from_file}"
              + (f"; {len(existing)} existed already and were left as they are" if existing else ""))
    return 0


def _removed_queues_check(admin: Admin, args: argparse.Namespace) -> None:
    """Fewer read queues make the messages of the queues beyond them unreadable (RocketMQ reads only queues
    below the read count): refused without --force, said on stderr with it."""
    new_read = args.read_queues or args.queues
    if new_read is None:
        return
    # a system topic is not listed: the server refuses to change it, which says more than this would
    current = next((t for t in admin.list_topics() if t.name == args.name), None)
    if current is None or new_read >= current.read_queue_nums:
        return
    removed = [q for q in admin.queue_offsets(args.name) if q.queue_id >= new_read]
    stored = sum(q.max_offset - q.min_offset for q in removed)
    text = (f"lowering topic {args.name}'s read queues from {current.read_queue_nums} to {new_read} makes queues "
            f"{new_read}..{current.read_queue_nums - 1} unreadable: their {stored} stored message(s) can no longer "
            f"be consumed (raising the count again makes them readable). To shrink without that, lower "
            f"--write-queues first and let consumers drain the queues")
    if not args.force:
        raise UsageError(f"{text}; add --force to do it anyway")
    print(f"raftmq: warning: {text}", file=sys.stderr)


def cmd_topic_update(args: argparse.Namespace) -> int:
    changes = [args.queues, args.read_queues, args.write_queues, args.perm, args.order, args.message_type,
               args.dedup_window]
    if all(c is None for c in changes):
        raise UsageError("nothing to update: give --queues, --read-queues, --write-queues, --perm, "
                         "--order/--no-order, --message-type or --dedup-window")
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        _removed_queues_check(admin, args)
        t = admin.update_topic(args.name, queues=args.queues, read_queues=args.read_queues,
                               write_queues=args.write_queues, perm=args.perm, order=args.order,
                               message_type=args.message_type, dedup_window_seconds=args.dedup_window,
                               broker=args.group)
    print_json(_topic_json(t)) if args.json else print(_topic_line("updated", t) +
                                                       (f" (in group {args.group})" if args.group else ""))
    return 0


def cmd_topic_list(args: argparse.Namespace) -> int:
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        if args.limit:
            page = admin.list_topics_page(include_system=args.system, filter=args.filter, after=args.after,
                                          limit=args.limit)
            topics = page.topics
            if page.more:
                print(f"raftmq: {len(topics)} of {page.matching} topics shown; next page: --after "
                      f"{topics[-1].name}", file=sys.stderr)
        else:
            topics = [t for t in admin.list_topics(include_system=args.system, filter=args.filter)
                      if t.name > args.after]
    if args.json:
        print_json([_topic_json(t) for t in topics])
        return 0
    rows = [[t.name, t.read_queue_nums, t.write_queue_nums, format_perm(t.perm), "yes" if t.order else "no",
             t.message_type] for t in topics]
    print(render_table(["Topic", "Read queues", "Write queues", "Perm", "Order", "Message type"], rows))
    return 0


def cmd_topic_describe(args: argparse.Namespace) -> int:
    """``topic describe``: the topic's configuration (message type included) and its queues' offsets."""
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        t = admin.get_topic(args.name)
        if t is None:
            raise TopicNotFoundError(f"topic {args.name!r} does not exist; create it with `raftmq topic create "
                                     f"{args.name}`")
        groups = admin.groups(args.name)
        if len(groups) > 1:  # issue 37: each group's queues, asked through the member (it relays to the group)
            by_group = {}
            for g in groups:
                try:
                    if not g.available:
                        raise RaftmqError(g.error)
                    by_group[g.name] = admin.queue_offsets(args.name, broker=g.name) if g.has_topic else []
                except RaftmqError as e:
                    by_group[g.name] = e
        else:
            by_group = {"": admin.queue_offsets(args.name)}
    if args.json and len(groups) <= 1:
        print_json({**_topic_json(t), "queues": [dataclasses.asdict(q) for q in by_group[""]]})
        return 0
    if args.json:
        print_json({**_topic_json(t), "queues": [{"group": name, **dataclasses.asdict(q)}
                                                 for name, qs in by_group.items() if not isinstance(qs, Exception)
                                                 for q in qs],
                    "groups": [{"name": g.name, "has_topic": g.has_topic, "available": g.available,
                                "error": str(by_group[g.name]) if isinstance(by_group[g.name], Exception) else
                                g.error} for g in groups]})
        return 0
    queues = [(name, q) for name, qs in by_group.items() if not isinstance(qs, Exception) for q in qs]
    stored = sum(q.max_offset - q.min_offset for _, q in queues)
    print(f"Topic: {t.name}\n  message type:  {t.message_type}\n  read queues:   {t.read_queue_nums}"
          f"{' per group' if len(groups) > 1 else ''}\n  write queues:  {t.write_queue_nums}\n"
          f"  perm:          {format_perm(t.perm)}\n  order:         {'yes' if t.order else 'no'}\n"
          f"  de-duplication window: {_window_text(t)}\n  messages kept: {stored}")
    if len(groups) > 1:
        for g in groups:
            got = by_group[g.name]
            if isinstance(got, Exception) or not g.has_topic:
                why = escape(str(got)) if isinstance(got, Exception) else "the topic is missing there (the leaders' " \
                    "reconcile pass creates it)"
                print(f"  group {escape(g.name)}: {why}")
    rows = [[*([name] if len(groups) > 1 else []), q.queue_id, q.min_offset, q.max_offset,
             q.max_offset - q.min_offset, ms_to_text(q.last_store_timestamp)] for name, q in queues]
    print(render_table([*(["Group"] if len(groups) > 1 else []), "Queue", "Min offset", "Max offset", "Messages",
                        "Last stored"], rows, title="Queues"))
    return 0


def cmd_topic_delete(args: argparse.Namespace) -> int:
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        admin.delete_topic(args.name)
    print(f"deleted topic {args.name}")
    return 0


def _topic_options(p: argparse.ArgumentParser, *, update: bool) -> None:
    if update:
        p.add_argument("name", metavar="TOPIC")
        p.add_argument("--group", metavar="GROUP",
                       help="in a cluster of several Raft groups, change the topic in this group only (default: every "
                            "group), e.g. --perm r to stop writes to a group before removing it")
    else:
        p.add_argument("name", metavar="TOPIC", nargs="?")
        p.add_argument("--from-file", metavar="PATH",
                       help="create the topics of a file, one per line: a name and, optionally, these options "
                            "(those given here are every line's defaults); '-' reads standard input; checked whole "
                            "before anything is created")
        p.add_argument("--skip-existing", action="store_true",
                       help="with --from-file: leave topics that exist as they are and create the others")
    _topic_fields(p, update=update)


def _topic_fields(p: argparse.ArgumentParser, *, update: bool) -> None:
    p.add_argument("--queues", type=positive_int, help="read and write queue count" +
                   ("" if update else " (default 4)"))
    p.add_argument("--read-queues", type=positive_int, help="read queue count")
    p.add_argument("--write-queues", type=positive_int, help="write queue count")
    p.add_argument("--perm", type=parse_perm, default=None if update else PERM_READ | PERM_WRITE,
                   help="rw, r, w or none (+inherit), or RocketMQ bits 0-7" + ("" if update else " (default rw)"))
    if update:
        p.add_argument("--order", action=argparse.BooleanOptionalAction, default=None, help="ordered topic")
        p.add_argument("--message-type", type=message_type_arg, metavar="TYPE",
                       help=f"what the topic takes from now on: {', '.join(MESSAGE_TYPES)}")
        p.add_argument("--dedup-window", type=_dedup_window_arg, metavar="SECONDS",
                       help="the topic's own de-duplication window: a send whose UNIQ_KEY was stored this many "
                            "seconds before or less is not stored again (0: off; 'node': the node's window again)")
        p.add_argument("--force", action="store_true",
                       help="lower the read queue count even though the removed queues' messages become unreadable")
    else:
        p.add_argument("--order", action="store_true", help="ordered topic")
        p.add_argument("--message-type", type=message_type_arg, default="NORMAL", metavar="TYPE",
                       help="what the topic takes: NORMAL (default: no message group, delay or delivery time), "
                            "FIFO (a message group), DELAY (a delay level or delivery time), TRANSACTION "
                            "(transactional messages) or MIXED (every kind); a send of another kind is refused")
        p.add_argument("--dedup-window", type=_dedup_window_arg, metavar="SECONDS",
                       help="the topic's own de-duplication window: a send whose UNIQ_KEY was stored this many "
                            "seconds before or less is not stored again (0: off; default: the node's "
                            "node.dedup_window_seconds, 120 s)")


def _dedup_window_arg(text: str) -> int:
    """Seconds (0: off), or ``node`` (-1 on the wire: the node's window again)."""
    if text.strip().lower() == "node":
        return -1
    try:
        seconds = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds (or 'node')") from None
    if not 0 <= seconds <= 86400:
        raise argparse.ArgumentTypeError(f"{seconds} must be 0 (off) to 86400 seconds")
    return seconds


def register(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("topic", help="create, update, list, delete topics")
    tsub = t.add_subparsers(dest="topic_command", metavar="{create,update,describe,list,delete}")
    tsub.required = True
    _topic_options(add_command(tsub, "create", cmd_topic_create, "create a topic"), update=False)
    _topic_options(add_command(tsub, "update", cmd_topic_update,
                               "change a topic's queues, permission, order or message type"), update=True)
    p = add_command(tsub, "describe", cmd_topic_describe, "a topic's configuration and its queues")
    p.add_argument("name", metavar="TOPIC")
    p = add_command(tsub, "list", cmd_topic_list, "list topics")
    p.add_argument("--system", action="store_true", help="include system topics")
    p.add_argument("--filter", default="", metavar="TEXT", help="only topics whose name contains TEXT (any case)")
    p.add_argument("--limit", type=non_negative_int, default=0, metavar="N",
                   help="a page of at most N topics (0: all); stderr says how to ask for the next page")
    p.add_argument("--after", default="", metavar="TOPIC", help="start after this topic name (the last of a page)")
    p = add_command(tsub, "delete", cmd_topic_delete, "delete a topic and its consume queues", json_flag=False)
    p.add_argument("name", metavar="TOPIC")

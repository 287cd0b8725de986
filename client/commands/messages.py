"""Reading messages: ``raftmq consume`` (pull with committed offsets, or pop with acks), ``query``, ``view``,
``offsets``."""

from __future__ import annotations

import argparse
import sys
import time

from raftmq.client.admin import Admin
from raftmq.client.commands.args import (
    UsageError,
    add_command,
    parse_time,
    positive_float,
    positive_int,
    security_of,
    servers_of,
)
from raftmq.client.commands.output import message_json, message_line, ms_to_text, preview, print_json
from raftmq.client.consumer import START_FIRST, START_LAST, PullConsumer
from raftmq.client.render import LINE_LIMIT, body_text, escape
from raftmq.client.simple_consumer import SimpleConsumer
from raftmq.client.table import render_table


def cmd_consume(args: argparse.Namespace) -> int:
    if args.ack_mode == "pop":
        return cmd_consume_pop(args)
    consumer = PullConsumer(args.group, args.topic, servers_of(args), tags=args.tags, sql=args.sql,
                            security=security_of(args),
                            start_from=START_FIRST if args.from_beginning else START_LAST,
                            auto_commit=not args.no_commit, auto_commit_interval=1.0,
                            timeout=args.timeout, retry_timeout=args.timeout, long_poll=1.0)
    received = 0
    try:
        consumer.start()
        where = "the oldest message" if args.from_beginning else "new messages"
        print(f"consuming {args.topic} as {args.group} ({len(consumer.positions())} queues; committed offsets, "
              f"else {where}); Ctrl-C to stop", file=sys.stderr, flush=True)
        idle_since = time.monotonic()
        while args.max is None or received < args.max:
            m = consumer.receive(timeout=0.5)
            if m is None:
                if args.idle_timeout is not None and time.monotonic() - idle_since >= args.idle_timeout:
                    break
                continue
            idle_since = time.monotonic()
            received += 1
            if args.json:
                print_json(message_json(m))
            else:
                print(message_line(m, full=args.full), flush=True)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a follower stops: commit below, exit 0
    finally:
        consumer.close()
    committed = "not committed (--no-commit)" if args.no_commit else "offsets committed"
    print(f"consumed {received} message(s) from {args.topic} as {args.group}; {committed}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------- query / view


def cmd_query(args: argparse.Namespace) -> int:
    if args.begin is not None and args.end is not None and args.begin > args.end:
        raise UsageError("--begin is after --end")
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        msgs = admin.query_by_key(args.topic, args.key, begin_ms=args.begin or 0, end_ms=args.end or 0,
                                  max_num=args.max)
    if args.json:
        for m in msgs:
            print_json(message_json(m))
        return 0
    if not msgs:
        print(f"no message with key {args.key!r} in topic {args.topic!r}", file=sys.stderr)
        return 0
    rows = [[m.msg_id, m.queue_id, m.queue_offset, ms_to_text(m.store_timestamp), m.tags, " ".join(m.keys),
             preview(m.body)] for m in msgs]
    print(render_table(["Message id", "Queue", "Offset", "Stored", "Tags", "Keys", "Body"], rows))
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        m = admin.view_message(args.msg_id, topic=args.topic)
    if args.body_file == "-":  # the raw body alone on stdout, e.g. to pipe into a decoder
        sys.stdout.flush()
        sys.stdout.buffer.write(m.body)
        sys.stdout.buffer.flush()
        return 0
    if args.body_file is not None:
        _write_body_file(args.body_file, m.body)
    if args.json:
        print_json(message_json(m))
        return 0
    fields = [("Message id", m.msg_id), ("Uniq key", m.uniq_key), ("Topic", m.topic), ("Queue", m.queue_id),
              ("Queue offset", m.queue_offset), ("Physical offset", m.physical_offset), ("Size", m.store_size),
              ("Tags", m.tags), ("Keys", " ".join(m.keys)), ("Born", f"{ms_to_text(m.born_timestamp)} "
                                                                    f"from {m.born_host}"),
              ("Stored", f"{ms_to_text(m.store_timestamp)} at {m.store_host}"),
              ("Reconsume times", m.reconsume_times), ("Sys flag", m.sys_flag), ("Body CRC", m.body_crc)]
    width = max(len(k) for k, _ in fields)
    for k, v in fields:
        print(f"{k.ljust(width)}: {escape(str(v))}")
    print("Properties:")
    for k in sorted(m.properties):
        print(f"  {escape(k)}={escape(m.properties[k])}")
    if args.body_file is not None:
        print(f"Body ({len(m.body)} bytes): written to {args.body_file}")
        return 0
    print(f"Body ({len(m.body)} bytes):")
    print(body_text(m.body, full=args.full))
    return 0


def _write_body_file(path: str, body: bytes) -> None:
    """The raw body, byte for byte."""
    try:
        with open(path, "wb") as f:
            f.write(body)
    except OSError as exc:
        raise UsageError(f"cannot write --body-file {path}: {exc.strerror or exc}") from None


# ---------------------------------------------------------------------- offsets


def cmd_offsets(args: argparse.Namespace) -> int:
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        queues = admin.queue_offsets(args.topic)
        committed = admin.committed_offsets(args.group, args.topic) if args.group else None
    rows = []
    total_lag = 0
    for q in queues:
        row = {"queue_id": q.queue_id, "min_offset": q.min_offset, "max_offset": q.max_offset,
               "last_store_timestamp": q.last_store_timestamp}
        if committed is not None:
            c = committed.get(q.queue_id)
            lag = q.max_offset - max(c, q.min_offset) if c is not None else q.max_offset - q.min_offset
            row["committed_offset"] = c
            row["lag"] = max(lag, 0)
            total_lag += row["lag"]
        rows.append(row)
    if args.json:
        out = {"topic": args.topic, "queues": rows}
        if committed is not None:
            out.update(group=args.group, total_lag=total_lag)
        print_json(out)
        return 0
    headers = ["Queue", "Min offset", "Max offset", "Messages", "Last stored"]
    table = [[r["queue_id"], r["min_offset"], r["max_offset"], r["max_offset"] - r["min_offset"],
              ms_to_text(r["last_store_timestamp"])] for r in rows]
    if committed is not None:
        headers += ["Committed", "Lag"]
        for t, r in zip(table, rows, strict=True):
            t += ["-" if r["committed_offset"] is None else r["committed_offset"], r["lag"]]
    title = f"Topic: {args.topic}" + (f", group: {args.group} (total lag {total_lag})" if committed is not None
                                      else "")
    print(render_table(headers, table, title=title))
    return 0


def cmd_consume_pop(args: argparse.Namespace) -> int:
    """Receive with an invisible time and ack each printed message (``--no-commit``: print, never ack)."""
    received = 0
    with SimpleConsumer(args.group, args.topic, servers_of(args), tags=args.tags, sql=args.sql,
                        security=security_of(args),
                        await_duration=1.0, timeout=args.timeout, retry_timeout=args.timeout) as c:
        print(f"receiving {args.topic} as {args.group} (pop: each message acked after it is printed, "
              f"invisible {args.invisible:g}s meanwhile); Ctrl-C to stop", file=sys.stderr, flush=True)
        idle_since = time.monotonic()
        try:
            while args.max is None or received < args.max:
                want = 32 if args.max is None else min(32, args.max - received)
                got = c.receive(want, args.invisible)
                if not got:
                    if args.idle_timeout is not None and time.monotonic() - idle_since >= args.idle_timeout:
                        break
                    continue
                idle_since = time.monotonic()
                for m in got:
                    if args.json:
                        d = message_json(m.message)
                        d["delivery_attempt"] = m.delivery_attempt
                        print_json(d)
                    else:
                        print(f"attempt={m.delivery_attempt} {message_line(m.message)}", flush=True)
                if not args.no_commit:
                    c.ack(got)
                received += len(got)
        except KeyboardInterrupt:
            pass
    acked = "not acked (--no-commit): they come back after their invisible time" if args.no_commit else "acked"
    print(f"received {received} message(s) from {args.topic} as {args.group}; {acked}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "consume", cmd_consume, "consume a topic as a group",
                    description="Print messages as they arrive and commit the group's offsets. Starts at the group's "
                                "committed offsets; with none, at the end (only new messages) or, with "
                                "--from-beginning, at the oldest stored message. Ctrl-C stops (exit 0).")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--from-beginning", action="store_true", help="with no committed offset, start at the oldest")
    p.add_argument("--max", type=positive_int, metavar="N", help="stop after N messages")
    p.add_argument("--tags", default="*", metavar="EXPR", help="tag expression: '*' (default) or 'A || B'")
    p.add_argument("--idle-timeout", type=positive_float, metavar="SECONDS",
                   help="stop after this long without a new message (default: follow forever)")
    p.add_argument("--no-commit", action="store_true", help="do not commit offsets")
    p.add_argument("--sql", default="", metavar="EXPR",
                   help="SQL92 filter on message properties, e.g. \"a > 5 AND TAGS IN ('A', 'B')\"")
    p.add_argument("--ack-mode", choices=("offset", "pop"), default="offset",
                   help="offset: pull and commit offsets (default); pop: receive with an invisible time and ack "
                        "each message (redelivered if not acked, dead-lettered after max attempts)")
    p.add_argument("--invisible", type=positive_float, default=30.0, metavar="SECONDS",
                   help="--ack-mode pop: how long a received message stays invisible (default 30)")
    p.add_argument("--full", action="store_true",
                   help=f"print whole bodies (default: the first {LINE_LIMIT} characters, or 32 bytes of a binary "
                        "body in hex; control characters are always escaped)")

    p = add_command(sub, "query", cmd_query, "find messages by key (and store-time range)", key_alias=False)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--key", "-k", required=True, help="the key to look up")
    p.add_argument("--begin", type=parse_time, metavar="TIME",
                   help="earliest store time: epoch ms, ISO-8601 (local time), now, now-10m/now-2h/now-1d")
    p.add_argument("--end", type=parse_time, metavar="TIME", help="latest store time (default now)")
    p.add_argument("--max", type=positive_int, default=32, metavar="N", help="at most N messages (max 64)")

    p = add_command(sub, "view", cmd_view, "show one message by msgId (or by UNIQ_KEY with --topic)")
    p.add_argument("msg_id", metavar="MSGID")
    p.add_argument("--topic", help="look MSGID up as a UNIQ_KEY in this topic")
    p.add_argument("--full", action="store_true",
                   help="print the whole body (default: 2048 characters of text, or a hexdump of 256 bytes of a "
                        "binary body; control characters are always escaped)")
    p.add_argument("--body-file", metavar="PATH", help="write the raw body to PATH ('-' for stdout, alone)")

    p = add_command(sub, "offsets", cmd_offsets, "per-queue offsets of a topic (and a group's lag)")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--group", "-g", help="also show this group's committed offsets and lag")

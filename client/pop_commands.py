"""CLI for pop consumption and dead letters: ``raftmq consume --ack-mode pop``, ``raftmq dlq list|view|resend``,
``raftmq group reset-offsets --to-time|--to-offset``."""

from __future__ import annotations

import argparse
import sys
import time

from raftmq.client import commands
from raftmq.client.connection import ServerPool
from raftmq.client.errors import NotFoundError
from raftmq.client.producer import Producer
from raftmq.client.render import body_text, escape
from raftmq.client.simple_consumer import SimpleConsumer
from raftmq.client.table import render_table
from raftmq.client.types import MessageView
from raftmq.v1 import raftmq_pb2 as pb

DLQ_PREFIX = "%DLQ%"
# properties a resend must not carry (the broker sets or rejects them); user properties and tags/keys stay
_SYSTEM = ("KEYS", "TAGS", "UNIQ_KEY", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "DLQ_ORIGIN_QUEUE_ID",
           "DLQ_ORIGIN_QUEUE_OFFSET", "DLQ_DELIVERY_ATTEMPTS", "DLQ_REASON", "CLUSTER", "WAIT", "DELAY", "REAL_TOPIC",
           "REAL_QID", "MAX_OFFSET", "MIN_OFFSET", "__SHARDINGKEY", "RECONSUME_TIME", "MAX_RECONSUME_TIMES")


def cmd_consume_pop(args: argparse.Namespace) -> int:
    """Receive with an invisible time and ack each printed message (``--no-commit``: print, never ack)."""
    received = 0
    with SimpleConsumer(args.group, args.topic, commands.servers_of(args), tags=args.tags, sql=args.sql,
                        security=commands.security_of(args),
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
                        d = commands.message_json(m.message)
                        d["delivery_attempt"] = m.delivery_attempt
                        commands._print_json(d)
                    else:
                        print(f"attempt={m.delivery_attempt} {commands._message_line(m.message)}", flush=True)
                if not args.no_commit:
                    c.ack(got)
                received += len(got)
        except KeyboardInterrupt:
            pass
    acked = "not acked (--no-commit): they come back after their invisible time" if args.no_commit else "acked"
    print(f"received {received} message(s) from {args.topic} as {args.group}; {acked}", file=sys.stderr)
    return 0


def _dead_letters(args: argparse.Namespace) -> list[MessageView]:
    """Every message still stored in %DLQ%<group>, oldest first."""
    topic = DLQ_PREFIX + args.group
    pool = ServerPool(commands.servers_of(args), timeout=args.timeout, retry_timeout=args.timeout,
                      security=commands.security_of(args))
    out: list[MessageView] = []
    try:
        offset = 0
        while True:
            req = pb.PullMessageRequest(topic=topic, queue_id=0, offset=offset, max_count=256)
            try:
                resp, _ = pool.read(lambda s, t, r=req: s.messaging.PullMessage(r, timeout=t))
            except NotFoundError:
                return []  # no dead letter yet: the topic is created with the first one
            out.extend(MessageView.from_pb(m) for m in resp.messages)
            if resp.status == pb.NO_NEW_MSG or resp.next_offset <= offset:
                return out
            offset = resp.next_offset
    finally:
        pool.close()


def _find(msgs: list[MessageView], ident: str) -> MessageView:
    for m in msgs:
        if ident in (m.msg_id, m.uniq_key, m.properties.get("ORIGIN_MESSAGE_ID")):
            return m
    raise NotFoundError(f"no dead letter with id {ident!r} (give a msgId or UNIQ_KEY from 'raftmq dlq list')")


def cmd_dlq_list(args: argparse.Namespace) -> int:
    msgs = _dead_letters(args)
    if args.json:
        for m in msgs:
            commands._print_json(commands.message_json(m))
        return 0
    if not msgs:
        print(f"no dead letters for group {args.group!r}", file=sys.stderr)
        return 0
    rows = [[m.uniq_key, m.properties.get("RETRY_TOPIC", ""), m.properties.get("DLQ_DELIVERY_ATTEMPTS", ""),
             commands._ms_to_text(m.store_timestamp), m.properties.get("DLQ_REASON", ""), commands._preview(m.body)]
            for m in msgs]
    print(render_table(["Uniq key", "From topic", "Attempts", "Dead since", "Reason", "Body"], rows))
    return 0


def cmd_dlq_view(args: argparse.Namespace) -> int:
    m = _find(_dead_letters(args), args.id)
    if args.json:
        commands._print_json(commands.message_json(m))
        return 0
    for k, v in [("msgId", m.msg_id), ("uniqKey", m.uniq_key), ("stored", commands._ms_to_text(m.store_timestamp)),
                 ("tags", m.tags), ("keys", " ".join(m.keys))] + sorted(m.properties.items()):
        print(f"{k:24} {escape(str(v))}")
    print(f"{'body':24} {body_text(m.body)}")  # escaped, binary as hex, long bodies cut (as raftmq view)
    return 0


def cmd_dlq_resend(args: argparse.Namespace) -> int:
    msgs = _dead_letters(args)
    chosen = msgs if args.all else [_find(msgs, i) for i in args.ids]
    if not chosen:
        raise commands.UsageError("name dead letters to resend (their UNIQ_KEY or msgId) or pass --all")
    with Producer(commands.servers_of(args), timeout=args.timeout, retry_timeout=args.timeout,
                  security=commands.security_of(args)) as p:
        for m in chosen:
            topic = args.to or m.properties.get("RETRY_TOPIC")
            if not topic:
                raise commands.UsageError(f"dead letter {m.uniq_key} does not say where it came from; pass --to TOPIC")
            props = {k: v for k, v in m.properties.items() if k not in _SYSTEM}
            r = p.send(topic, m.body, tags=m.tags or None, keys=m.keys or None, properties=props,
                       message_group=m.properties.get("__SHARDINGKEY", ""))
            print(f"resent {m.uniq_key} to {topic}: {commands._send_line(r)}")
    return 0


def cmd_group_reset_offsets(args: argparse.Namespace) -> int:
    req = pb.ResetGroupOffsetsRequest(group=args.group, topic=args.topic)
    if args.to_time is not None:
        req.timestamp = args.to_time
    else:
        req.offset = args.to_offset
    pool = ServerPool(commands.servers_of(args), timeout=args.timeout, retry_timeout=args.timeout,
                      security=commands.security_of(args))
    try:
        resp, _ = pool.write(lambda s, t: s.messaging.ResetGroupOffsets(req, timeout=t), idempotent=True)
    finally:
        pool.close()
    offsets = dict(sorted(resp.offsets.items()))
    if args.json:
        commands._print_json({"group": args.group, "topic": args.topic, "offsets": offsets})
    else:
        print(render_table(["Queue", "New offset"], [[q, o] for q, o in offsets.items()]))
    return 0


def register(sub: argparse._SubParsersAction, group_sub: argparse._SubParsersAction) -> None:
    """``dlq`` commands and ``group reset-offsets`` (called from client.commands.register)."""
    d = sub.add_parser("dlq", help="dead letters of a consumer group: list, view, resend")
    dsub = d.add_subparsers(dest="dlq_command", metavar="{list,view,resend}")
    dsub.required = True
    p = commands._add(dsub, "list", cmd_dlq_list, "messages in %%DLQ%%<group>")
    p.add_argument("group", metavar="GROUP")
    p = commands._add(dsub, "view", cmd_dlq_view, "one dead letter with every property")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("id", metavar="ID", help="UNIQ_KEY or msgId (see dlq list)")
    p = commands._add(dsub, "resend", cmd_dlq_resend, "send dead letters again to the topic they came from",
                      json_flag=False)
    p.add_argument("group", metavar="GROUP")
    p.add_argument("ids", nargs="*", metavar="ID", help="UNIQ_KEY or msgId (see dlq list)")
    p.add_argument("--all", action="store_true", help="every dead letter of the group")
    p.add_argument("--to", metavar="TOPIC", help="send to this topic instead of the one each came from")

    p = commands._add(group_sub, "reset-offsets", cmd_group_reset_offsets,
                      "move a group's position on a topic (pull offsets and receive state)")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("topic", metavar="TOPIC")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-time", type=commands.parse_time, metavar="TIME",
                    help="the first message stored at or after TIME (epoch ms, ISO-8601, now-1h ...)")
    to.add_argument("--to-offset", type=commands._non_negative_int, metavar="OFFSET",
                    help="this queue offset on every queue (clamped to what is stored)")

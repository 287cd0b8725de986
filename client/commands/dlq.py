"""``raftmq dlq list|view|resend``: a consumer group's dead letters."""

from __future__ import annotations

import argparse
import sys

import grpc

from raftmq.client.commands.args import UsageError, add_command, security_of, servers_of
from raftmq.client.commands.output import message_json, ms_to_text, preview, print_json, send_line
from raftmq.client.connection import ServerPool
from raftmq.client.errors import NotFoundError, RaftmqError
from raftmq.client.producer import Producer
from raftmq.client.render import body_text, escape
from raftmq.client.table import render_table
from raftmq.client.types import MessageView
from raftmq.v1 import raftmq_pb2 as pb

DLQ_PREFIX = "%DLQ%"
# properties a resend must not carry (the broker sets or rejects them); user properties and tags/keys stay
_SYSTEM = ("KEYS", "TAGS", "UNIQ_KEY", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "DLQ_ORIGIN_QUEUE_ID",
           "DLQ_ORIGIN_QUEUE_OFFSET", "DLQ_DELIVERY_ATTEMPTS", "DLQ_REASON", "CLUSTER", "WAIT", "DELAY", "REAL_TOPIC",
           "REAL_QID", "MAX_OFFSET", "MIN_OFFSET", "__SHARDINGKEY", "RECONSUME_TIME", "MAX_RECONSUME_TIMES")


def _dead_letters(args: argparse.Namespace) -> list[MessageView]:
    """Every message still stored in %DLQ%<group>, oldest first; in a cluster of several Raft groups each group's
    (a dead letter stays in the group that held the message: docs/design/scale-out.md#consumers), group by
    group. A group that does not answer fails the command, naming it."""
    topic = DLQ_PREFIX + args.group
    pool = ServerPool(servers_of(args), timeout=args.timeout, retry_timeout=args.timeout,
                      security=security_of(args))
    try:
        try:
            route, _ = pool.read(lambda s, t: s.messaging.QueryRoute(pb.QueryRouteRequest(), timeout=t))
            groups = [g.name for g in route.groups] if len(route.groups) > 1 else [""]
        except RaftmqError as e:
            if e.code != grpc.StatusCode.UNIMPLEMENTED:  # a server from before routes: one group
                raise
            groups = [""]
        return [m for g in groups for m in _dead_letters_in(pool, topic, g)]
    finally:
        pool.close()


def _dead_letters_in(pool: ServerPool, topic: str, broker: str) -> list[MessageView]:
    """The messages of ``topic``'s queue 0 in group ``broker`` ("": the answering member's)."""
    out: list[MessageView] = []
    offset = 0
    while True:
        req = pb.PullMessageRequest(topic=topic, queue_id=0, offset=offset, max_count=256, broker=broker)
        try:
            resp, _ = pool.read(lambda s, t, r=req: s.messaging.PullMessage(r, timeout=t))
        except NotFoundError:
            return []  # no dead letter yet: the topic is created with the first one
        out.extend(MessageView.from_pb(m, broker) for m in resp.messages)
        if resp.status == pb.NO_NEW_MSG or resp.next_offset <= offset:
            return out
        offset = resp.next_offset


def _find(msgs: list[MessageView], ident: str) -> MessageView:
    for m in msgs:
        if ident in (m.msg_id, m.uniq_key, m.properties.get("ORIGIN_MESSAGE_ID")):
            return m
    raise NotFoundError(f"no dead letter with id {ident!r} (give a msgId or UNIQ_KEY from 'raftmq dlq list')")


def cmd_dlq_list(args: argparse.Namespace) -> int:
    msgs = _dead_letters(args)
    if args.json:
        for m in msgs:
            print_json(message_json(m))
        return 0
    if not msgs:
        print(f"no dead letters for group {args.group!r}", file=sys.stderr)
        return 0
    rows = [[m.uniq_key, m.properties.get("RETRY_TOPIC", ""), m.properties.get("DLQ_DELIVERY_ATTEMPTS", ""),
             ms_to_text(m.store_timestamp), m.properties.get("DLQ_REASON", ""), preview(m.body)]
            for m in msgs]
    header = ["Uniq key", "From topic", "Attempts", "Dead since", "Reason", "Body"]
    if any(m.broker for m in msgs):  # a cluster of several Raft groups: the group that holds each
        header, rows = ["Group", *header], [[m.broker, *row] for m, row in zip(msgs, rows, strict=True)]
    print(render_table(header, rows))
    return 0


def cmd_dlq_view(args: argparse.Namespace) -> int:
    m = _find(_dead_letters(args), args.id)
    if args.json:
        print_json(message_json(m))
        return 0
    for k, v in [("msgId", m.msg_id), ("uniqKey", m.uniq_key), ("stored", ms_to_text(m.store_timestamp)),
                 ("tags", m.tags), ("keys", " ".join(m.keys))] + sorted(m.properties.items()):
        print(f"{k:24} {escape(str(v))}")
    print(f"{'body':24} {body_text(m.body)}")  # escaped, binary as hex, long bodies cut (as raftmq view)
    return 0


def cmd_dlq_resend(args: argparse.Namespace) -> int:
    msgs = _dead_letters(args)
    chosen = msgs if args.all else [_find(msgs, i) for i in args.ids]
    if not chosen:
        raise UsageError("name dead letters to resend (their UNIQ_KEY or msgId) or pass --all")
    with Producer(servers_of(args), timeout=args.timeout, retry_timeout=args.timeout,
                  security=security_of(args)) as p:
        for m in chosen:
            topic = args.to or m.properties.get("RETRY_TOPIC")
            if not topic:
                raise UsageError(f"dead letter {m.uniq_key} does not say where it came from; pass --to TOPIC")
            props = {k: v for k, v in m.properties.items() if k not in _SYSTEM}
            r = p.send(topic, m.body, tags=m.tags or None, keys=m.keys or None, properties=props,
                       message_group=m.properties.get("__SHARDINGKEY", ""))
            print(f"resent {m.uniq_key} to {topic}: {send_line(r)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser("dlq", help="dead letters of a consumer group: list, view, resend")
    dsub = d.add_subparsers(dest="dlq_command", metavar="{list,view,resend}")
    dsub.required = True
    p = add_command(dsub, "list", cmd_dlq_list, "messages in %%DLQ%%<group>")
    p.add_argument("group", metavar="GROUP")
    p = add_command(dsub, "view", cmd_dlq_view, "one dead letter with every property")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("id", metavar="ID", help="UNIQ_KEY or msgId (see dlq list)")
    p = add_command(dsub, "resend", cmd_dlq_resend, "send dead letters again to the topic they came from",
                      json_flag=False)
    p.add_argument("group", metavar="GROUP")
    p.add_argument("ids", nargs="*", metavar="ID", help="UNIQ_KEY or msgId (see dlq list)")
    p.add_argument("--all", action="store_true", help="every dead letter of the group")
    p.add_argument("--to", metavar="TOPIC", help="send to this topic instead of the one each came from")

"""``raftmq group describe|update|reset-offsets``: consumer groups' members, settings and positions."""

from __future__ import annotations

import argparse
import dataclasses

from raftmq.client.commands.args import (
    UsageError,
    add_command,
    non_negative_int,
    parse_time,
    positive_int,
    security_of,
    servers_of,
)
from raftmq.client.commands.output import ms_to_text, print_json
from raftmq.client.connection import ServerPool
from raftmq.client.consumer_group import describe_consumer_group, update_consumer_group
from raftmq.client.table import render_table
from raftmq.v1 import raftmq_pb2 as pb


def cmd_group_describe(args: argparse.Namespace) -> int:
    """``group describe``: live members (from the leader), who owns which queue, committed offsets and lag."""
    d = describe_consumer_group(servers_of(args), args.group, security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout)
    many = any(q.broker for q in d.queues) or any(m.broker for m in d.members)  # several Raft groups: name each
    if args.json:
        data = dataclasses.asdict(d)
        if not many:  # one group: the output it always had
            for part in (*data["members"], *data["queues"]):
                del part["broker"]
        print_json(data)
        return 0
    total_lag = sum(q.lag for q in d.queues)
    print(f"Group: {d.group} ({len({m.client_id for m in d.members})} live members, total lag {total_lag}, "
          f"answered by {d.answered_by})")
    if d.settings is not None:
        print(_settings_line(d.settings))
    rows = [_grouped(many, m.broker, [m.topic, m.client_id, ",".join(map(str, m.queue_ids)) or "-",
                                      ms_to_text(m.last_heartbeat_ms), f"{m.expires_in_ms / 1000:.1f}s"])
            for m in d.members]
    if rows:
        print(render_table(_grouped(many, "Group", ["Topic", "Member", "Queues", "Last heartbeat", "Expires in"]),
                           rows, title="Members"))
    rows = [_grouped(many, q.broker, [q.topic, q.queue_id, q.client_id or "-",
                                      q.committed_offset if q.committed else "-", q.max_offset, q.lag])
            for q in d.queues]
    if rows:
        print(render_table(_grouped(many, "Group", ["Topic", "Queue", "Owner", "Committed", "Max offset", "Lag"]),
                           rows, title="Queues"))
    return 0


def _grouped(many: bool, group, row: list) -> list:
    """``row`` with ``group`` after its first cell (the topic) in a cluster of several Raft groups."""
    return [row[0], group, *row[1:]] if many else row


def _duration_text(ms: int) -> str:
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _settings_line(s) -> str:
    return (f"Settings ({s.source}): fifo {'yes' if s.fifo else 'no'}, max delivery attempts "
            f"{s.max_delivery_attempts}, retry back-off {' '.join(_duration_text(ms) for ms in s.retry_backoff_ms)}")


def cmd_group_update(args: argparse.Namespace) -> int:
    """``group update``: a group's FIFO, delivery attempts and retry back-off, changed on every member now."""
    if not args.reset and args.fifo is None and args.max_attempts is None and args.retry_backoff is None:
        raise UsageError("nothing to update: give --fifo/--no-fifo, --max-attempts, --retry-backoff or --reset")
    if args.reset and (args.fifo is not None or args.max_attempts is not None or args.retry_backoff is not None):
        raise UsageError("--reset drops the group's settings (the node configuration applies again); give it alone")
    s = update_consumer_group(servers_of(args), args.group, fifo=args.fifo, max_delivery_attempts=args.max_attempts,
                              retry_backoff=args.retry_backoff, reset=args.reset, security=security_of(args),
                              timeout=args.timeout, retry_timeout=args.timeout)
    if args.json:
        print_json({"group": args.group, **dataclasses.asdict(s)})
    else:
        print(f"group {args.group}: {_settings_line(s)}")
    return 0


def cmd_group_reset_offsets(args: argparse.Namespace) -> int:
    req = pb.ResetGroupOffsetsRequest(group=args.group, topic=args.topic)
    if args.to_time is not None:
        req.timestamp = args.to_time
    else:
        req.offset = args.to_offset
    pool = ServerPool(servers_of(args), timeout=args.timeout, retry_timeout=args.timeout,
                      security=security_of(args))
    try:
        resp, _ = pool.write(lambda s, t: s.messaging.ResetGroupOffsets(req, timeout=t), idempotent=True)
    finally:
        pool.close()
    if resp.groups:  # a cluster of several Raft groups: each reset its own queues
        by_group = {g.group: dict(sorted(g.offsets.items())) for g in resp.groups}
        if args.json:
            print_json({"group": args.group, "topic": args.topic, "groups": by_group})
        else:
            print(render_table(["Group", "Queue", "New offset"],
                               [[g, q, o] for g, offsets in by_group.items() for q, o in offsets.items()]))
        return 0
    offsets = dict(sorted(resp.offsets.items()))
    if args.json:
        print_json({"group": args.group, "topic": args.topic, "offsets": offsets})
    else:
        print(render_table(["Queue", "New offset"], [[q, o] for q, o in offsets.items()]))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser("group", help="consumer groups: members, queue ownership, lag, settings")
    gsub = g.add_subparsers(dest="group_command", metavar="{describe,update,reset-offsets}")
    gsub.required = True
    p = add_command(gsub, "describe", cmd_group_describe, "a group's live members, their queues, offsets and lag",
                    description="Ask the leader (which holds the membership) for GROUP's live consumers, the queues each "
                                "reads (AllocateMessageQueueAveragely over the sorted member ids), and per queue the "
                                "committed offset and lag.")
    p.add_argument("group", metavar="GROUP")
    p = add_command(gsub, "update", cmd_group_update, "change how a group consumes, on every member, now",
                    description="Set GROUP's own settings, replicated to every member and used at once (as RocketMQ's "
                                "updateSubGroup): FIFO consumption, deliveries before the dead-letter topic %%DLQ%%GROUP, "
                                "the back-off after a nack. Options left out keep their value; a group without settings "
                                "of its own follows the node configuration (node.max_delivery_attempts, "
                                "node.retry_backoff, node.group_policies) until its first update. RocketMQ 5 clients pick "
                                "the change up when they next send their settings.")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--fifo", action=argparse.BooleanOptionalAction, default=None,
                   help="consume in order per message group (one message of a group in flight at a time)")
    p.add_argument("--max-attempts", type=positive_int, metavar="N",
                   help="deliveries before a message goes to the dead-letter topic (1..1000)")
    p.add_argument("--retry-backoff", metavar="DELAYS",
                   help="delays after a nack, by attempt, e.g. '1s 5s 30s 2m' (s, m, h, d; the last repeats)")
    p.add_argument("--reset", action="store_true",
                   help="drop the group's own settings: the node configuration applies again")
    p = add_command(gsub, "reset-offsets", cmd_group_reset_offsets,
                    "move a group's position on a topic (pull offsets and receive state)")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("topic", metavar="TOPIC")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-time", type=parse_time, metavar="TIME",
                    help="the first message stored at or after TIME (epoch ms, ISO-8601, now-1h ...)")
    to.add_argument("--to-offset", type=non_negative_int, metavar="OFFSET",
                    help="this queue offset on every queue (clamped to what is stored)")

"""``raftmq produce``: one message, one per stdin line, a transactional one, or a load with progress."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import time
from concurrent import futures

from raftmq.client.commands.args import (
    UsageError,
    _relative_ms,
    add_command,
    non_negative_int,
    positive_int,
    property_arg,
    security_of,
    servers_of,
)
from raftmq.client.commands.output import Progress, print_json, send_line, sent_text
from raftmq.client.errors import RaftmqError, UnavailableError, UnknownOutcomeError
from raftmq.client.producer import Producer
from raftmq.client.types import Message, SendResult


def _read_body(args: argparse.Namespace) -> bytes | None:
    if args.body is not None:
        return args.body.encode()
    if args.file is not None:
        try:
            with open(args.file, "rb") as f:
                return f.read()
        except OSError as exc:
            raise UsageError(f"cannot read --file {args.file}: {exc.strerror or exc}") from None
    return None


def _generated_body(size: int) -> bytes:
    pattern = b"raftmq-load-0123456789abcdefghijklmnopqrstuvwxyz-"
    return (pattern * (size // len(pattern) + 1))[:size]


def _deliver_at_ms(args: argparse.Namespace) -> int:
    """``--deliver-at`` (ISO 8601 with a time zone, ms since the epoch, or relative: now+10m) or
    ``--delay-seconds`` as epoch ms (0: deliver now)."""
    at, delay = getattr(args, "deliver_at", None), getattr(args, "delay_seconds", None)
    if at is None and delay is None:
        return 0
    if at is not None and delay is not None:
        raise UsageError("give --deliver-at or --delay-seconds, not both")
    if args.delay_level:
        raise UsageError("a timer message (--deliver-at / --delay-seconds) cannot also have --delay-level")
    if delay is not None:
        if delay < 0:
            raise UsageError(f"--delay-seconds {delay:g} is negative; give the seconds to wait, e.g. 90")
        return time.time_ns() // 1_000_000 + int(delay * 1000)
    if at.isdigit():
        return int(at)
    now = time.time_ns() // 1_000_000
    relative = now if at.strip() == "now" else _relative_ms(at.strip(), now)
    if relative is not None:  # as --begin takes them (issue 34)
        return relative
    try:
        when = dt.datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--deliver-at {at!r} is not a time; use ISO 8601 with a zone (2030-01-02T03:04:05Z), "
                         "milliseconds since the epoch, or a time from now (now+10m, now+2h, now+1d)") from None
    if when.tzinfo is None:
        raise UsageError(f"--deliver-at {at!r} has no time zone; add Z or +HH:MM")
    return int(when.timestamp() * 1000)


def cmd_produce(args: argparse.Namespace) -> int:
    keys = [k for item in args.keys for k in item.split()]
    deliver_at = _deliver_at_ms(args)
    props = dict(args.property)
    body = _read_body(args)
    load = args.count is not None or args.size is not None
    if args.size is not None and body is not None:
        raise UsageError("--size generates the body; drop --size, or drop --body/--file")
    if not load and (args.batch != 1 or args.concurrency != 1 or args.on_unknown is not None):
        raise UsageError("--batch, --concurrency and --on-unknown apply to a load (--count N [--size B])")
    args.on_unknown = args.on_unknown or "retry"
    if args.transactional:
        if deliver_at:
            raise UsageError("--transactional messages cannot be timer messages; drop --deliver-at/--delay-seconds")
        if args.broker:
            raise UsageError("--broker cannot be given with --transactional yet: a transaction's half goes to the "
                             "group of the servers given (--server a member of that group)")
        return _produce_transactional(args, body, keys, props, load)
    args.deliver_at_ms = deliver_at
    # retry: the producer re-sends an unknown outcome with the same UNIQ_KEYs (the broker de-duplicates them)
    with Producer(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout,
                  unknown_outcome_retries=None if args.on_unknown == "retry" else 0) as producer:
        if load:
            return _produce_load(args, producer, body, keys, props)
        if body is not None:
            r = producer.send(args.topic, body, tags=args.tags, keys=keys, properties=props, queue_id=args.queue,
                              delay_level=args.delay_level, deliver_at=deliver_at or None, broker=args.broker)
            _print_send(args, r)
            return 0
        if sys.stdin.isatty():
            print("reading messages from stdin, one per line (Ctrl-D to end)", file=sys.stderr)
        sent = 0
        for raw in sys.stdin.buffer:
            line = raw.rstrip(b"\r\n")
            if not line:
                continue
            r = producer.send(args.topic, line, tags=args.tags, keys=keys, properties=props, queue_id=args.queue,
                              delay_level=args.delay_level, deliver_at=deliver_at or None, broker=args.broker)
            _print_send(args, r)
            sent += 1
        if sent == 0:
            raise UsageError("no message to send: give --body TEXT, --file PATH, or lines on stdin")
        return 0


def _produce_transactional(args: argparse.Namespace, body: bytes | None, keys: list[str], props: dict,
                           load: bool) -> int:
    """One transactional message: half message, then the outcome given on the command line."""
    from raftmq.client.transaction_producer import TransactionProducer, TransactionState

    if body is None or load:
        raise UsageError("--transactional sends one message: give --body TEXT or --file PATH (no --count/--size)")
    if getattr(args, "delay_level", 0):
        raise UsageError("--transactional messages cannot be delayed; drop --delay-level")
    state = TransactionState.COMMIT if args.transactional == "commit" else TransactionState.ROLLBACK
    with TransactionProducer(servers_of(args), security=security_of(args), group=args.group, timeout=args.timeout,
                             retry_timeout=args.timeout) as producer:
        r = producer.send_in_transaction(args.topic, body, tags=args.tags, keys=keys, properties=props,
                                         queue_id=args.queue, local_tx=lambda half: state)
    if r.end_error:
        raise UsageError(f"half message {r.half.msg_id} stored, but the {args.transactional} failed: {r.end_error} "
                         "(the broker checks producers of the group later)")
    if r.committed is not None:
        _print_send(args, r.committed)
    elif args.json:
        print_json({"transaction_id": r.half.transaction_id, "half_msg_id": r.half.msg_id, "state": "ROLLBACK"})
    else:
        print(f"rolled back transaction {r.half.transaction_id} (half message {r.half.msg_id})", flush=True)
    return 0


def _print_send(args: argparse.Namespace, r: SendResult) -> None:
    if args.json:
        print_json(dataclasses.asdict(r))
    else:
        print(send_line(r), flush=True)


class _LoadTally:
    """What a load run saw: acknowledged, unknown, failed and re-sent sends, the UNIQ_KEYs whose outcome is
    unknown, and the longest time without any acknowledgement (a failover shows up there)."""

    def __init__(self, start: float):
        self.ok = self.unknown = self.failed = self.retried = 0
        self.duplicates = 0  # re-sends the broker recognised as already stored (not stored again)
        self.unknown_uniq_keys: list[str] = []
        self.last_ack = start
        self.start = start
        self.longest_gap = 0.0
        self.longest_gap_at = 0.0  # seconds after the start at which that gap began
        self.last_error: RaftmqError | None = None

    def acked(self, n: int) -> None:
        now = time.monotonic()
        if now - self.last_ack > self.longest_gap:
            self.longest_gap, self.longest_gap_at = now - self.last_ack, self.last_ack - self.start
        self.last_ack = now
        self.ok += n

    def current_gap(self) -> float:
        return time.monotonic() - self.last_ack


MAX_LOAD_RESENDS = 3  # per send: re-sends after a refusal (never stored)


def _produce_load(args, producer: Producer, body: bytes | None, keys: list[str], props: dict) -> int:
    """A load that rides through failovers: each send's outcome is counted (ok / unknown / failed), refused
    sends are re-sent, unknown outcomes are handled as ``--on-unknown`` says, and the run ends with a summary
    that includes the longest time without an acknowledgement."""
    count = args.count or 1
    size = args.size if args.size is not None else 128
    payload = body if body is not None else _generated_body(size)
    deliver_at = getattr(args, "deliver_at_ms", 0)
    msg = Message(payload, args.tags, keys, props, args.delay_level, deliver_at_ms=deliver_at)
    progress = Progress(count, render=lambda done, total, elapsed: _load_text(tally, done, total, elapsed))
    tally = _LoadTally(progress.start)
    stop: BaseException | None = None  # why no more sends are submitted

    def send_once(n: int) -> int:
        """Send ``n`` messages; how many of them the broker answered as already stored (duplicates)."""
        if args.batch == 1:
            r = producer.send(args.topic, payload, tags=args.tags, keys=keys, properties=props, queue_id=args.queue,
                              delay_level=args.delay_level, deliver_at=deliver_at or None, broker=args.broker)
            return int(r.duplicate)
        return sum(r.duplicate for r in producer.send_batch(args.topic, [msg] * n, queue_id=args.queue,
                                                            broker=args.broker))

    def send(n: int) -> tuple[str, int, int, list[str], RaftmqError | None, int]:
        """(outcome, n, duplicates, unknown UNIQ_KEYs, error, re-sends) of one send and its re-sends. An unknown
        outcome was re-sent by the producer already (--on-unknown retry) or is counted; a new send would get
        new UNIQ_KEYs, which no broker can recognise."""
        resends = 0
        while True:
            try:
                return "ok", n, send_once(n), [], None, resends
            except UnknownOutcomeError as exc:
                return "unknown", n, 0, list(exc.uniq_keys), exc, resends
            except UnavailableError as exc:  # refused or unreachable: nothing was stored
                if resends >= MAX_LOAD_RESENDS:
                    return "failed", n, 0, [], exc, resends
            except RaftmqError as exc:  # a definite refusal (bad topic, body too large, ...): resending cannot help
                return "fatal", n, 0, [], exc, resends
            resends += 1

    pool = futures.ThreadPoolExecutor(max_workers=args.concurrency, thread_name_prefix="raftmq-produce")
    inflight: set[futures.Future] = set()
    try:
        submitted = 0
        while (submitted < count and stop is None) or inflight:
            while submitted < count and stop is None and len(inflight) < args.concurrency:
                n = min(args.batch, count - submitted)
                inflight.add(pool.submit(send, n))
                submitted += n
            done, inflight = futures.wait(inflight, timeout=0.25, return_when=futures.FIRST_COMPLETED)
            for fut in done:
                outcome, n, duplicates, unknown, exc, resends = fut.result()
                tally.retried += resends
                if outcome == "ok":
                    tally.acked(n)
                    tally.duplicates += duplicates
                    continue
                tally.last_error = exc
                if outcome == "unknown":
                    tally.unknown += n
                    tally.unknown_uniq_keys.extend(unknown)
                    if args.on_unknown == "stop":
                        stop = stop or exc
                else:
                    tally.failed += n
                    if outcome == "fatal":
                        stop = stop or exc
            progress.update(tally.ok)
    except KeyboardInterrupt:
        stop = KeyboardInterrupt()
        for fut in inflight:
            fut.cancel()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    progress.update(tally.ok, force=True)
    progress.finish()
    elapsed = max(time.monotonic() - progress.start, 1e-9)
    tally.acked(0)  # a final silence counts as a gap too
    mib = tally.ok * len(payload) / (1 << 20)
    not_sent = count - tally.ok - tally.unknown - tally.failed
    summary = {"topic": args.topic, "sent": tally.ok, "requested": count, "ok": tally.ok, "unknown": tally.unknown,
               "failed": tally.failed, "not_sent": not_sent, "retried": tally.retried,
               "longest_gap_s": round(tally.longest_gap, 3), "longest_gap_at_s": round(tally.longest_gap_at, 3),
               "on_unknown": args.on_unknown, "unknown_uniq_keys": tally.unknown_uniq_keys,
               "duplicates_avoided": tally.duplicates,
               "body_bytes": len(payload), "batch": args.batch, "concurrency": args.concurrency,
               "seconds": round(elapsed, 3), "msgs_per_sec": round(tally.ok / elapsed, 1),
               "mib_per_sec": round(mib / elapsed, 3)}
    if tally.last_error is not None:
        summary["last_error"] = " ".join(str(tally.last_error).split())
    if args.json:
        print_json(summary)
    else:
        print(f"sent {tally.ok}/{count} messages of {len(payload)} B ({mib:.2f} MiB) to {args.topic} in "
              f"{elapsed:.2f} s: {tally.ok / elapsed:,.0f} msg/s, {mib / elapsed:.2f} MiB/s "
              f"(batch {args.batch}, concurrency {args.concurrency})", flush=True)
        print(f"ok {tally.ok}, unknown {tally.unknown}, failed {tally.failed}, retried {tally.retried}"
              + (f", not sent {not_sent}" if not_sent else "")
              + (f", duplicates avoided {tally.duplicates}" if tally.duplicates else "")
              + f"; longest gap without an ack {tally.longest_gap:.2f} s (from {tally.longest_gap_at:.2f} s)",
              flush=True)
        if tally.unknown_uniq_keys:
            shown = tally.unknown_uniq_keys[:5]
            more = len(tally.unknown_uniq_keys) - len(shown)
            print(f"outcome unknown (may or may not be stored; --json lists all): UNIQ_KEY {', '.join(shown)}"
                  + (f" and {more} more" if more else ""), flush=True)
    if isinstance(stop, KeyboardInterrupt):
        raise stop
    if stop is not None:
        raise stop
    if tally.failed:
        raise tally.last_error or RaftmqError(f"{tally.failed} message(s) failed")
    if tally.unknown:
        raise UnknownOutcomeError(f"{tally.unknown} message(s) with unknown outcome (may or may not have been "
                                  f"stored); their UNIQ_KEYs are listed above (all of them with --json)",
                                  uniq_keys=tally.unknown_uniq_keys)
    return 0


def _load_text(tally: _LoadTally, done: int, total: int, elapsed: float) -> str:
    text = sent_text(done, total, elapsed)
    if tally.unknown or tally.failed or tally.retried:
        text += f", unknown {tally.unknown}, failed {tally.failed}, retried {tally.retried}"
    gap = tally.current_gap()
    if gap >= 1.0:
        text += f", no ack for {gap:.1f} s"
    return text


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "produce", cmd_produce, "send messages",
                    description="Send one message (--body/--file), one per stdin line, or a load (--count N [--size B]) "
                                "with progress on stderr and a throughput line at the end.")
    p.add_argument("topic", metavar="TOPIC")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--body", "-b", help="message body (text)")
    src.add_argument("--file", "-f", metavar="PATH", help="message body: the whole file")
    p.add_argument("--tags", "-t", help="message tag (property TAGS)")
    p.add_argument("--keys", "-k", action="append", default=[], metavar="KEY",
                   help="index key(s), space-separated or repeated")
    p.add_argument("--property", "-p", action="append", default=[], type=property_arg, metavar="KEY=VALUE",
                   help="user property (repeatable)")
    p.add_argument("--queue", type=non_negative_int, metavar="ID", help="queue id (default: broker picks)")
    p.add_argument("--broker", metavar="GROUP", help="in a cluster of several Raft groups, the group to store in "
                   "(default: round robin over the groups)")
    p.add_argument("--delay-level", type=non_negative_int, default=0, metavar="N",
                   help="deliver after delay level N of the broker's store.message_delay_level (default levels: "
                        "1=1s 2=5s 3=10s 4=30s 5=1m ... 18=2h; a higher level is clamped to the last, 0 = now)")
    p.add_argument("--deliver-at", metavar="TIME",
                   help="timer message: deliver at TIME (ISO 8601 with a zone, e.g. 2030-01-02T03:04:05Z, ms "
                        "since the epoch, or from now: now+90s, now+10m, now+2h); at most the broker's "
                        "store.timer_max_delay_seconds ahead")
    p.add_argument("--delay-seconds", type=float, metavar="S",
                   help="timer message: deliver S seconds from now (like --deliver-at)")
    p.add_argument("--count", "-n", type=positive_int, metavar="N", help="load: send N messages")
    p.add_argument("--size", type=positive_int, metavar="BYTES", help="load: generated body size (default 128)")
    p.add_argument("--batch", type=positive_int, default=1, metavar="K", help="load: messages per request")
    p.add_argument("--concurrency", "-c", type=positive_int, default=1, metavar="C",
                   help="load: requests in flight (default 1)")
    p.add_argument("--on-unknown", choices=("count", "retry", "stop"),
                   help="load: a send whose outcome is unknown (the leader died mid-call) is re-sent with the same "
                        "UNIQ_KEYs until answered or --timeout passed (retry, default: the broker de-duplicates, "
                        "so nothing is stored twice; the summary counts the duplicates avoided), counted while the "
                        "load goes on (count), or stops the load (stop). The summary lists every unknown UNIQ_KEY "
                        "with --json; exit 7 when any remain")
    p.add_argument("--transactional", choices=("commit", "rollback"),
                   help="send one transactional message: a half message, then commit or roll it back")
    p.add_argument("--group", default="raftmq-cli", metavar="GROUP",
                   help="producer group of a --transactional message (default raftmq-cli)")

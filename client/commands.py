"""The client subcommands of ``raftmq``: produce, consume, query, view, offsets, topic, cluster.

Human-readable output on stdout by default, ``--json`` where a script wants it; progress on stderr. Failures
are raised (``RaftmqError``, ``UsageError``) and turned into one line and an exit code by ``client.cli``.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime as dt
import json
import os
import re
import sys
import time
from collections.abc import Callable
from concurrent import futures

from raftmq.client.admin import Admin
from raftmq.client.connection import DEFAULT_SERVER, parse_servers
from raftmq.client.consumer import START_FIRST, START_LAST, PullConsumer
from raftmq.client.consumer_group import describe_consumer_group, update_consumer_group
from raftmq.client.errors import (
    InvalidArgumentError,
    RaftmqError,
    ReplicaLagsError,
    ReplicasDifferError,
    TopicNotFoundError,
    UnavailableError,
    UnknownOutcomeError,
)
from raftmq.client.producer import Producer
from raftmq.client.render import LINE_LIMIT, body_text, escape, short_reason
from raftmq.client.replica_check import (
    DEFAULT_CHUNK,
    DEFAULT_LAG_WAIT_S,
    MAX_CHUNK,
    MIN_CHUNK,
    SECRET_ENV,
    CheckReport,
    ReplicaChecker,
)
from raftmq.client.security import (
    ACCESS_KEY_ENV,
    CA_ENV,
    CERT_ENV,
    KEY_ENV,
    SECRET_KEY_ENV,
    SERVER_NAME_ENV,
    TLS_ENV,
    ClientSecurity,
)
from raftmq.client.table import render_table
from raftmq.client.types import (
    MESSAGE_TYPES,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    ClusterStatus,
    MemberStatus,
    Message,
    MessageView,
    SendResult,
)

SERVER_ENV = "RAFTMQ_SERVER"


class UsageError(Exception):
    """A malformed command line the parser could not catch by itself (exit 2)."""


# ---------------------------------------------------------------------- argument types


def server_list(value: str) -> list[str]:
    try:
        return parse_servers(value)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {n}")
    return n


def _non_negative_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {n}")
    return n


_SIZE_UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}
_SIZE = re.compile(r"^(\d+)\s*([a-z]*)$")


def _size(value: str) -> int:
    """A byte count > 0: 4096, 64K, 1M, 2G (binary units)."""
    m = _SIZE.match(value.strip().lower())
    if not m or m.group(2) not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"expected a byte count such as 4096, 64K, 1M or 2G, got {value!r}")
    n = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a byte count > 0, got {value!r}")
    return n


def _chunk_size(value: str) -> int:
    n = _size(value)
    if not MIN_CHUNK <= n <= MAX_CHUNK:
        raise argparse.ArgumentTypeError(f"chunk size {value!r} must be 4K..16M")
    return n


def _positive_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not x > 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {value!r}")
    return x


def _non_negative_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not 0 <= x < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {value!r}")
    return x


def _property(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {value!r}")
    return key.strip(), val


_RELATIVE = re.compile(r"^(?:now)?([+-])(\d+(?:\.\d+)?)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _relative_ms(text: str, now_ms: int) -> int | None:
    """"now+10m", "now-2h", "-30s" as epoch ms; None when ``text`` is not such a time."""
    m = _RELATIVE.match(text)
    if m is None:
        return None
    delta = int(float(m.group(2)) * _UNIT_SECONDS[m.group(3)] * 1000)
    return now_ms + delta if m.group(1) == "+" else now_ms - delta


def parse_time(value: str, *, now_ms: int | None = None) -> int:
    """Epoch milliseconds from: an integer (ms), ISO-8601 (local time unless it has an offset), "now", or a
    time relative to now: "now-30s", "now-10m", "now+2h", "now-1d" (or "-2h" written as --begin=-2h)."""
    text = value.strip()
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if text == "now":
        return now
    if text.isdigit():
        return int(text)
    relative = _relative_ms(text, now)
    if relative is not None:
        return relative
    try:
        return int(dt.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad time {value!r}: use epoch milliseconds, ISO-8601 (2026-11-21T07:30:00), now, or now-10m/now-2h/now-1d"
        ) from None


def parse_perm(value: str) -> int:
    """RocketMQ permission bits from "rw", "r", "w", "none" (optionally with "+inherit") or a number 0-7."""
    text = value.strip().lower()
    if text.isdigit():
        n = int(text)
        if n > 7:
            raise argparse.ArgumentTypeError(f"bad permission {value!r}: a number is 0-7 (read 4, write 2, "
                                             f"inherit 1)")
        return n
    base, _, extra = text.partition("+")
    bits = {"rw": PERM_READ | PERM_WRITE, "wr": PERM_READ | PERM_WRITE, "r": PERM_READ, "ro": PERM_READ,
            "w": PERM_WRITE, "wo": PERM_WRITE, "none": 0}.get(base)
    if bits is None or extra not in ("", "inherit"):
        raise argparse.ArgumentTypeError(f"bad permission {value!r}: use rw, r, w or none (or a number 0-7)")
    return bits | (PERM_INHERIT if extra else 0)


def message_type_arg(value: str) -> str:
    """A topic message type, any case (docs/guides/cli.md)."""
    name = value.strip().upper()
    if name not in MESSAGE_TYPES:
        raise argparse.ArgumentTypeError(f"bad message type {value!r}: use {', '.join(MESSAGE_TYPES)}")
    return name


def format_perm(perm: int) -> str:
    text = ("r" if perm & PERM_READ else "-") + ("w" if perm & PERM_WRITE else "-")
    return text + ("+inherit" if perm & PERM_INHERIT else "")


def servers_of(args: argparse.Namespace) -> list[str]:
    """--server values, else $RAFTMQ_SERVER, else the default address."""
    if args.server:
        return [a for group in args.server for a in group]
    env = os.environ.get(SERVER_ENV, "").strip()
    if env:
        try:
            return parse_servers(env)
        except InvalidArgumentError as exc:
            raise UsageError(f"${SERVER_ENV}: {exc.message}") from None
    return [DEFAULT_SERVER]


def security_of(args: argparse.Namespace) -> ClientSecurity:
    """TLS and credentials from the flags, else the environment (RAFTMQ_TLS*, RAFTMQ_ACCESS_KEY/SECRET_KEY)."""
    try:
        return ClientSecurity.from_env(
            tls=getattr(args, "tls", None), ca_file=getattr(args, "ca", None), cert_file=getattr(args, "cert", None),
            key_file=getattr(args, "tls_key", None), server_name=getattr(args, "tls_server_name", None),
            access_key=getattr(args, "access_key", None), secret_key=getattr(args, "secret_key", None))
    except InvalidArgumentError as exc:
        raise UsageError(exc.message) from None


# ---------------------------------------------------------------------- output helpers


def _ms_to_text(ms: int) -> str:
    if ms <= 0:
        return ""
    return dt.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")


def message_json(m: MessageView) -> dict:
    """A message as JSON: the body as text when it is UTF-8, else base64 in ``body_base64``."""
    d = dataclasses.asdict(m)
    try:
        d["body"] = m.body.decode("utf-8")
    except UnicodeDecodeError:
        del d["body"]
        d["body_base64"] = base64.b64encode(m.body).decode()
    return d


def _print_json(obj) -> None:
    print(json.dumps(obj), flush=True)


def _message_line(m: MessageView, *, full: bool = False) -> str:
    """One consumed message on one line: producer-controlled text escaped, a long body cut unless ``full``."""
    parts = [f"queue={m.queue_id}", f"offset={m.queue_offset}", f"msgId={m.msg_id}"]
    if m.tags:
        parts.append(f"tags={escape(m.tags)}")
    if m.keys:
        parts.append(f"keys={escape(','.join(m.keys))}")
    return " ".join(parts) + " | " + body_text(m.body, full=full, one_line=True, text_limit=LINE_LIMIT)


def _send_line(r: SendResult) -> str:
    line = (f"SEND_OK msgId={r.msg_id} topic={r.topic} queue={r.queue_id} offset={r.queue_offset} "
            f"uniqKey={r.uniq_key}")
    return line + (f" note={r.note}" if r.note else "")


def _sent_text(done: int, total: int, elapsed: float) -> str:
    return f"sent {done}/{total} ({100 * done // max(total, 1)}%), {done / elapsed:,.0f} msg/s"


def _checked_text(done: int, total: int, elapsed: float) -> str:
    mib = 1 << 20
    return (f"checked {done / mib:,.1f}/{total / mib:,.1f} MiB ({100 * done // max(total, 1)}%), "
            f"{done / mib / elapsed:,.1f} MiB/s")


class Progress:
    """A progress line on stderr: redrawn in place on a terminal, a plain line every few seconds otherwise."""

    def __init__(self, total: int, stream=None, render: Callable[[int, int, float], str] | None = None):
        """``render(done, total, elapsed_s)`` makes the text (default: messages sent)."""
        self.total = total
        self.render = render or _sent_text
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self._last = self.start
        self._interval = 0.25 if self.tty else 2.0
        self._shown = False

    def update(self, done: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self._interval:
            return
        self._last = now
        text = self.render(done, self.total, max(now - self.start, 1e-9))
        self._shown = True
        if self.tty:
            self.stream.write("\r" + text.ljust(60))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()


# ---------------------------------------------------------------------- produce


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
    args.on_unknown = args.on_unknown or "count"
    if args.transactional:
        if deliver_at:
            raise UsageError("--transactional messages cannot be timer messages; drop --deliver-at/--delay-seconds")
        return _produce_transactional(args, body, keys, props, load)
    args.deliver_at_ms = deliver_at
    with Producer(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as producer:
        if load:
            return _produce_load(args, producer, body, keys, props)
        if body is not None:
            r = producer.send(args.topic, body, tags=args.tags, keys=keys, properties=props, queue_id=args.queue,
                              delay_level=args.delay_level, deliver_at=deliver_at or None)
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
                              delay_level=args.delay_level, deliver_at=deliver_at or None)
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
        _print_json({"transaction_id": r.half.transaction_id, "half_msg_id": r.half.msg_id, "state": "ROLLBACK"})
    else:
        print(f"rolled back transaction {r.half.transaction_id} (half message {r.half.msg_id})", flush=True)
    return 0


def _print_send(args: argparse.Namespace, r: SendResult) -> None:
    if args.json:
        _print_json(dataclasses.asdict(r))
    else:
        print(_send_line(r), flush=True)


class _LoadTally:
    """What a load run saw: acknowledged, unknown, failed and re-sent sends, the UNIQ_KEYs whose outcome is
    unknown, and the longest time without any acknowledgement (a failover shows up there)."""

    def __init__(self, start: float):
        self.ok = self.unknown = self.failed = self.retried = 0
        self.unknown_uniq_keys: list[str] = []
        self.resent_uniq_keys: list[str] = []  # unknown at first, re-sent and acknowledged: maybe stored twice
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


MAX_LOAD_RESENDS = 3  # per send: re-sends after a refusal (never stored) or, with --on-unknown retry, an unknown


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

    def send_once(n: int) -> None:
        if args.batch == 1:
            producer.send(args.topic, payload, tags=args.tags, keys=keys, properties=props, queue_id=args.queue,
                          delay_level=args.delay_level, deliver_at=deliver_at or None)
        else:
            producer.send_batch(args.topic, [msg] * n, queue_id=args.queue)

    def send(n: int) -> tuple[str, int, list[str], RaftmqError | None, int]:
        """(outcome, n, unknown UNIQ_KEYs, error, re-sends) of one send and its re-sends."""
        resends = 0
        unknown: list[str] = []
        while True:
            try:
                send_once(n)
                return ("ok" if not unknown else "ok-after-unknown"), n, unknown, None, resends
            except UnknownOutcomeError as exc:
                unknown.extend(exc.uniq_keys)
                if args.on_unknown != "retry" or resends >= MAX_LOAD_RESENDS:
                    return "unknown", n, unknown, exc, resends
            except UnavailableError as exc:  # refused or unreachable: nothing was stored
                if resends >= MAX_LOAD_RESENDS:
                    return "failed", n, unknown, exc, resends
            except RaftmqError as exc:  # a definite refusal (bad topic, body too large, ...): resending cannot help
                return "fatal", n, unknown, exc, resends
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
                outcome, n, unknown, exc, resends = fut.result()
                tally.retried += resends
                if outcome.startswith("ok"):
                    tally.acked(n)
                    # re-sent after an unknown outcome: acknowledged now, possibly stored twice
                    tally.resent_uniq_keys.extend(unknown)
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
               "resent_after_unknown_uniq_keys": tally.resent_uniq_keys,
               "body_bytes": len(payload), "batch": args.batch, "concurrency": args.concurrency,
               "seconds": round(elapsed, 3), "msgs_per_sec": round(tally.ok / elapsed, 1),
               "mib_per_sec": round(mib / elapsed, 3)}
    if tally.last_error is not None:
        summary["last_error"] = " ".join(str(tally.last_error).split())
    if args.json:
        _print_json(summary)
    else:
        print(f"sent {tally.ok}/{count} messages of {len(payload)} B ({mib:.2f} MiB) to {args.topic} in "
              f"{elapsed:.2f} s: {tally.ok / elapsed:,.0f} msg/s, {mib / elapsed:.2f} MiB/s "
              f"(batch {args.batch}, concurrency {args.concurrency})", flush=True)
        print(f"ok {tally.ok}, unknown {tally.unknown}, failed {tally.failed}, retried {tally.retried}"
              + (f", not sent {not_sent}" if not_sent else "")
              + f"; longest gap without an ack {tally.longest_gap:.2f} s (from {tally.longest_gap_at:.2f} s)",
              flush=True)
        if tally.unknown_uniq_keys:
            shown = tally.unknown_uniq_keys[:5]
            more = len(tally.unknown_uniq_keys) - len(shown)
            print(f"outcome unknown (may or may not be stored; --json lists all): UNIQ_KEY {', '.join(shown)}"
                  + (f" and {more} more" if more else ""), flush=True)
        if tally.resent_uniq_keys:
            print(f"{len(tally.resent_uniq_keys)} message(s) re-sent after an unknown outcome may be stored twice "
                  f"(--json lists their first UNIQ_KEYs)", flush=True)
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
    text = _sent_text(done, total, elapsed)
    if tally.unknown or tally.failed or tally.retried:
        text += f", unknown {tally.unknown}, failed {tally.failed}, retried {tally.retried}"
    gap = tally.current_gap()
    if gap >= 1.0:
        text += f", no ack for {gap:.1f} s"
    return text


# ---------------------------------------------------------------------- consume


def cmd_consume(args: argparse.Namespace) -> int:
    if args.ack_mode == "pop":
        from raftmq.client.pop_commands import cmd_consume_pop

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
                _print_json(message_json(m))
            else:
                print(_message_line(m, full=args.full), flush=True)
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
            _print_json(message_json(m))
        return 0
    if not msgs:
        print(f"no message with key {args.key!r} in topic {args.topic!r}", file=sys.stderr)
        return 0
    rows = [[m.msg_id, m.queue_id, m.queue_offset, _ms_to_text(m.store_timestamp), m.tags, " ".join(m.keys),
             _preview(m.body)] for m in msgs]
    print(render_table(["Message id", "Queue", "Offset", "Stored", "Tags", "Keys", "Body"], rows))
    return 0


def _preview(body: bytes, width: int = 40) -> str:
    text = body_text(body, one_line=True, text_limit=width)
    return text if len(text) <= width else text[: width - 3] + "..."


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
        _print_json(message_json(m))
        return 0
    fields = [("Message id", m.msg_id), ("Uniq key", m.uniq_key), ("Topic", m.topic), ("Queue", m.queue_id),
              ("Queue offset", m.queue_offset), ("Physical offset", m.physical_offset), ("Size", m.store_size),
              ("Tags", m.tags), ("Keys", " ".join(m.keys)), ("Born", f"{_ms_to_text(m.born_timestamp)} "
                                                                    f"from {m.born_host}"),
              ("Stored", f"{_ms_to_text(m.store_timestamp)} at {m.store_host}"),
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
        _print_json(out)
        return 0
    headers = ["Queue", "Min offset", "Max offset", "Messages", "Last stored"]
    table = [[r["queue_id"], r["min_offset"], r["max_offset"], r["max_offset"] - r["min_offset"],
              _ms_to_text(r["last_store_timestamp"])] for r in rows]
    if committed is not None:
        headers += ["Committed", "Lag"]
        for t, r in zip(table, rows, strict=True):
            t += ["-" if r["committed_offset"] is None else r["committed_offset"], r["lag"]]
    title = f"Topic: {args.topic}" + (f", group: {args.group} (total lag {total_lag})" if committed is not None
                                      else "")
    print(render_table(headers, table, title=title))
    return 0


# ---------------------------------------------------------------------- topics


def _topic_json(t) -> dict:
    d = dataclasses.asdict(t)
    d["perm_text"] = format_perm(t.perm)
    return d


def _topic_line(verb: str, t) -> str:
    return (f"{verb} topic {t.name}: read queues {t.read_queue_nums}, write queues {t.write_queue_nums}, "
            f"perm {format_perm(t.perm)}, order {'yes' if t.order else 'no'}, message type {t.message_type}")


def cmd_topic_create(args: argparse.Namespace) -> int:
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        t = admin.create_topic(args.name, queues=args.queues, read_queues=args.read_queues,
                               write_queues=args.write_queues, perm=args.perm, order=args.order,
                               message_type=args.message_type)
    _print_json(_topic_json(t)) if args.json else print(_topic_line("created", t))
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
    changes = [args.queues, args.read_queues, args.write_queues, args.perm, args.order, args.message_type]
    if all(c is None for c in changes):
        raise UsageError("nothing to update: give --queues, --read-queues, --write-queues, --perm, "
                         "--order/--no-order or --message-type")
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        _removed_queues_check(admin, args)
        t = admin.update_topic(args.name, queues=args.queues, read_queues=args.read_queues,
                               write_queues=args.write_queues, perm=args.perm, order=args.order,
                               message_type=args.message_type)
    _print_json(_topic_json(t)) if args.json else print(_topic_line("updated", t))
    return 0


def cmd_topic_list(args: argparse.Namespace) -> int:
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        topics = admin.list_topics(include_system=args.system)
    if args.json:
        _print_json([_topic_json(t) for t in topics])
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
        queues = admin.queue_offsets(args.name)
    if args.json:
        _print_json({**_topic_json(t), "queues": [dataclasses.asdict(q) for q in queues]})
        return 0
    stored = sum(q.max_offset - q.min_offset for q in queues)
    print(f"Topic: {t.name}\n  message type:  {t.message_type}\n  read queues:   {t.read_queue_nums}\n"
          f"  write queues:  {t.write_queue_nums}\n  perm:          {format_perm(t.perm)}\n"
          f"  order:         {'yes' if t.order else 'no'}\n  messages kept: {stored}")
    rows = [[q.queue_id, q.min_offset, q.max_offset, q.max_offset - q.min_offset, _ms_to_text(q.last_store_timestamp)]
            for q in queues]
    print(render_table(["Queue", "Min offset", "Max offset", "Messages", "Last stored"], rows, title="Queues"))
    return 0


def cmd_topic_delete(args: argparse.Namespace) -> int:
    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        admin.delete_topic(args.name)
    print(f"deleted topic {args.name}")
    return 0


# ---------------------------------------------------------------------- cluster


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


def cluster_table(status: ClusterStatus) -> str:
    """The ``cluster status`` table, one row per member, in the style of ``patronictl list``."""
    rows = []
    for m in sorted(status.members, key=lambda m: m.id):
        role = m.role.capitalize() if m.role else ""
        # an unreachable member's numbers are unknown, not zero
        numbers = ["-"] * 5 if m.role == "unreachable" else [m.term, m.commit_index, m.applied_offset,
                                                             m.dispatch_behind_bytes, m.lag_bytes]
        rows.append([m.id, m.grpc_address, role, *numbers, member_state(m)])
    title = (f"Cluster: {status.cluster_name or '?'} (leader: {status.leader_id or 'none'}, "
             f"durability: {status.durability or '?'})")
    headers = ["Member", "Address", "Role", "Term", "Commit index", "Applied offset", "Dispatch behind (B)",
               "Lag (B)", "State"]
    table = render_table(headers, rows, title=title)
    storage = [f"  {m.id}: {m.storage_integrity}" for m in sorted(status.members, key=lambda m: m.id)
               if m.storage_integrity]
    learners = [f"  {m.id}: {m.progress or m.error or 'catching up'}" for m in sorted(status.members, key=lambda m: m.id)
                if m.membership == "learner"]
    return (table + ("\nLearners (not voting yet):\n" + "\n".join(learners) if learners else "")
            + ("\nStorage integrity:\n" + "\n".join(storage) if storage else ""))


def _status_json(status: ClusterStatus) -> dict:
    d = dataclasses.asdict(status)
    for m, member in zip(d["members"], status.members, strict=True):
        m["state"] = member_state(member, full=True)
    return d


def cmd_cluster_status(args: argparse.Namespace) -> int:
    from raftmq.client.cluster_watch import Watch

    with Admin(servers_of(args), security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout) as admin:
        if args.watch is None:
            status = admin.cluster_status()
            _print_json(_status_json(status)) if args.json else print(cluster_table(status))
            return 0
        watch = None if args.json else Watch(admin.cluster_status, cluster_table)
        try:
            while True:
                _json_once(admin) if watch is None else watch.tick()
                time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0


def _json_once(admin: Admin) -> None:
    stamp = dt.datetime.now().isoformat(sep=" ", timespec="seconds")
    try:
        status = admin.cluster_status()
    except RaftmqError as exc:  # keep watching through a failover or a restart
        print(f"{stamp}  raftmq: error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return
    _print_json({"time": stamp, **_status_json(status)})


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


def cmd_group_describe(args: argparse.Namespace) -> int:
    """``group describe``: live members (from the leader), who owns which queue, committed offsets and lag."""
    d = describe_consumer_group(servers_of(args), args.group, security=security_of(args), timeout=args.timeout, retry_timeout=args.timeout)
    if args.json:
        _print_json(dataclasses.asdict(d))
        return 0
    total_lag = sum(q.lag for q in d.queues)
    print(f"Group: {d.group} ({len({m.client_id for m in d.members})} live members, total lag {total_lag}, "
          f"answered by {d.answered_by})")
    if d.settings is not None:
        print(_settings_line(d.settings))
    rows = [[m.topic, m.client_id, ",".join(map(str, m.queue_ids)) or "-", _ms_to_text(m.last_heartbeat_ms),
             f"{m.expires_in_ms / 1000:.1f}s"] for m in d.members]
    if rows:
        print(render_table(["Topic", "Member", "Queues", "Last heartbeat", "Expires in"], rows, title="Members"))
    rows = [[q.topic, q.queue_id, q.client_id or "-", q.committed_offset if q.committed else "-", q.max_offset,
             q.lag] for q in d.queues]
    if rows:
        print(render_table(["Topic", "Queue", "Owner", "Committed", "Max offset", "Lag"], rows, title="Queues"))
    return 0


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
        _print_json({"group": args.group, **dataclasses.asdict(s)})
    else:
        print(f"group {args.group}: {_settings_line(s)}")
    return 0


def _range_text(start: int, end: int) -> str:
    return f"[{start}, {end})"


def check_table(report: CheckReport) -> str:
    """The ``cluster check`` table: one row per member, its checked range, bytes and verdicts."""
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
    title = f"Commit-log check: {report.algorithm} in {report.chunk_bytes}-byte chunks"
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


def cmd_cluster_check(args: argparse.Namespace) -> int:
    progress = Progress(0, render=_checked_text)

    def show(done: int, total: int) -> None:
        progress.total = total
        progress.update(done)

    with ReplicaChecker(servers_of(args), secret=_read_secret(args), timeout=args.timeout,
                         security=security_of(args)) as checker:
        report = checker.check(from_offset=args.from_offset, max_bytes=args.bytes, chunk_bytes=args.chunk,
                               progress=show, queues=not args.no_queues, lag_wait_s=args.lag_wait)
    progress.finish()
    queues = any(m.queue_verdict for m in report.members)
    if args.json:
        _print_json(report.to_json())
    else:
        print(check_table(report))
        print(_check_summary(report))
        if queues:
            print(_queue_summary(report))
    for name in report.queues_not_everywhere:
        print(f"raftmq: warning: consume queue {name}: not compared (still dispatching, or lost there)",
              file=sys.stderr)
    lost = ", ".join(f"{m.id} ({m.address}): {m.error}" for m in report.unreachable)
    if report.lagging and report.difference is None and report.queue_difference is None:
        raise ReplicaLagsError("; ".join(f"{m.id} lags: {m.lag}" for m in report.lagging)
                               + " (rebuild a stuck member with `raftmq cluster rebuild-member`)"
                               + (f"; also unreachable: {lost}" if lost else ""))
    if report.difference is not None or report.queue_difference is not None:
        found = [_check_summary(report)] if report.difference is not None else []
        found += [_queue_summary(report)] if report.queue_difference is not None else []
        raise ReplicasDifferError("; ".join(found) + (f"; also unreachable: {lost}" if lost else ""))
    if lost:
        raise UnavailableError(f"member(s) not checked, unreachable: {lost}")
    if report.range_to <= report.range_from:
        print(f"raftmq: note: no committed commit-log bytes held by every member in "
              f"{_range_text(report.range_from, report.range_to)}: nothing to compare", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------- parser


def _common(*, json_flag: bool = True, key_alias: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("connection")
    g.add_argument("--server", "-s", action="append", type=server_list, metavar="HOST:PORT",
                   help=f"server address (repeatable or comma-separated); default ${SERVER_ENV} or "
                        f"{DEFAULT_SERVER}")
    g.add_argument("--timeout", type=_positive_float, default=10.0, metavar="SECONDS",
                   help="how long one request may take, retries included (default 10)")
    s = p.add_argument_group("security (docs/operations/security.md)")
    s.add_argument("--tls", action="store_true", default=None,
                   help=f"connect with TLS (system CAs unless --ca); default ${TLS_ENV}=1")
    s.add_argument("--ca", metavar="FILE", help=f"CA certificate(s) that signed the servers' certificates (${CA_ENV})")
    s.add_argument("--cert", metavar="FILE", help=f"client certificate for mutual TLS (${CERT_ENV})")
    s.add_argument(*(("--key", "--tls-key") if key_alias else ("--tls-key",)), dest="tls_key", metavar="FILE",
                   help=f"its private key (${KEY_ENV})")
    s.add_argument("--tls-server-name", metavar="NAME",
                   help=f"name expected in the server certificate, if not the address (${SERVER_NAME_ENV})")
    s.add_argument("--access-key", metavar="AK", help=f"sign requests as this user (${ACCESS_KEY_ENV})")
    s.add_argument("--secret-key", metavar="SK",
                   help=f"the user's secret key (prefer ${SECRET_KEY_ENV}: a flag shows in ps)")
    if json_flag:
        p.add_argument("--json", action="store_true", help="machine-readable JSON output")
    return p


def _add(sub, name: str, func: Callable[[argparse.Namespace], int], help_text: str, *,
         json_flag: bool = True, description: str | None = None, key_alias: bool = True) -> argparse.ArgumentParser:
    """``key_alias=False``: the command has its own --key, so the TLS key is only --tls-key there."""
    p = sub.add_parser(name, parents=[_common(json_flag=json_flag, key_alias=key_alias)], help=help_text,
                       description=description or help_text)
    p.set_defaults(func=func)
    return p


def _topic_options(p: argparse.ArgumentParser, *, update: bool) -> None:
    p.add_argument("name", metavar="TOPIC")
    p.add_argument("--queues", type=_positive_int, help="read and write queue count" +
                   ("" if update else " (default 4)"))
    p.add_argument("--read-queues", type=_positive_int, help="read queue count")
    p.add_argument("--write-queues", type=_positive_int, help="write queue count")
    p.add_argument("--perm", type=parse_perm, default=None if update else PERM_READ | PERM_WRITE,
                   help="rw, r, w or none (+inherit), or RocketMQ bits 0-7" + ("" if update else " (default rw)"))
    if update:
        p.add_argument("--order", action=argparse.BooleanOptionalAction, default=None, help="ordered topic")
        p.add_argument("--message-type", type=message_type_arg, metavar="TYPE",
                       help=f"what the topic takes from now on: {', '.join(MESSAGE_TYPES)}")
        p.add_argument("--force", action="store_true",
                       help="lower the read queue count even though the removed queues' messages become unreadable")
    else:
        p.add_argument("--order", action="store_true", help="ordered topic")
        p.add_argument("--message-type", type=message_type_arg, default="NORMAL", metavar="TYPE",
                       help="what the topic takes: NORMAL (default: no message group, delay or delivery time), "
                            "FIFO (a message group), DELAY (a delay level or delivery time), TRANSACTION "
                            "(transactional messages) or MIXED (every kind); a send of another kind is refused")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the client subcommands to ``raftmq``."""
    p = _add(sub, "produce", cmd_produce, "send messages",
             description="Send one message (--body/--file), one per stdin line, or a load (--count N [--size B]) "
                         "with progress on stderr and a throughput line at the end.")
    p.add_argument("topic", metavar="TOPIC")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--body", "-b", help="message body (text)")
    src.add_argument("--file", "-f", metavar="PATH", help="message body: the whole file")
    p.add_argument("--tags", "-t", help="message tag (property TAGS)")
    p.add_argument("--keys", "-k", action="append", default=[], metavar="KEY",
                   help="index key(s), space-separated or repeated")
    p.add_argument("--property", "-p", action="append", default=[], type=_property, metavar="KEY=VALUE",
                   help="user property (repeatable)")
    p.add_argument("--queue", type=_non_negative_int, metavar="ID", help="queue id (default: broker picks)")
    p.add_argument("--delay-level", type=_non_negative_int, default=0, metavar="N",
                   help="deliver after delay level N of the broker's store.message_delay_level (default levels: "
                        "1=1s 2=5s 3=10s 4=30s 5=1m ... 18=2h; a higher level is clamped to the last, 0 = now)")
    p.add_argument("--deliver-at", metavar="TIME",
                   help="timer message: deliver at TIME (ISO 8601 with a zone, e.g. 2030-01-02T03:04:05Z, ms "
                        "since the epoch, or from now: now+90s, now+10m, now+2h); at most the broker's "
                        "store.timer_max_delay_seconds ahead")
    p.add_argument("--delay-seconds", type=float, metavar="S",
                   help="timer message: deliver S seconds from now (like --deliver-at)")
    p.add_argument("--count", "-n", type=_positive_int, metavar="N", help="load: send N messages")
    p.add_argument("--size", type=_positive_int, metavar="BYTES", help="load: generated body size (default 128)")
    p.add_argument("--batch", type=_positive_int, default=1, metavar="K", help="load: messages per request")
    p.add_argument("--concurrency", "-c", type=_positive_int, default=1, metavar="C",
                   help="load: requests in flight (default 1)")
    p.add_argument("--on-unknown", choices=("count", "retry", "stop"),
                   help="load: a send whose outcome is unknown (the leader died mid-call) is counted and the load "
                        "goes on (count, default), re-sent (retry: it may then be stored twice), or stops the load "
                        "(stop). The summary lists every unknown UNIQ_KEY with --json; exit 7 when any remain")
    p.add_argument("--transactional", choices=("commit", "rollback"),
                   help="send one transactional message: a half message, then commit or roll it back")
    p.add_argument("--group", default="raftmq-cli", metavar="GROUP",
                   help="producer group of a --transactional message (default raftmq-cli)")

    p = _add(sub, "consume", cmd_consume, "consume a topic as a group",
             description="Print messages as they arrive and commit the group's offsets. Starts at the group's "
                         "committed offsets; with none, at the end (only new messages) or, with "
                         "--from-beginning, at the oldest stored message. Ctrl-C stops (exit 0).")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--from-beginning", action="store_true", help="with no committed offset, start at the oldest")
    p.add_argument("--max", type=_positive_int, metavar="N", help="stop after N messages")
    p.add_argument("--tags", default="*", metavar="EXPR", help="tag expression: '*' (default) or 'A || B'")
    p.add_argument("--idle-timeout", type=_positive_float, metavar="SECONDS",
                   help="stop after this long without a new message (default: follow forever)")
    p.add_argument("--no-commit", action="store_true", help="do not commit offsets")
    p.add_argument("--sql", default="", metavar="EXPR",
                   help="SQL92 filter on message properties, e.g. \"a > 5 AND TAGS IN ('A', 'B')\"")
    p.add_argument("--ack-mode", choices=("offset", "pop"), default="offset",
                   help="offset: pull and commit offsets (default); pop: receive with an invisible time and ack "
                        "each message (redelivered if not acked, dead-lettered after max attempts)")
    p.add_argument("--invisible", type=_positive_float, default=30.0, metavar="SECONDS",
                   help="--ack-mode pop: how long a received message stays invisible (default 30)")
    p.add_argument("--full", action="store_true",
                   help=f"print whole bodies (default: the first {LINE_LIMIT} characters, or 32 bytes of a binary "
                        "body in hex; control characters are always escaped)")

    p = _add(sub, "query", cmd_query, "find messages by key (and store-time range)", key_alias=False)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--key", "-k", required=True, help="the key to look up")
    p.add_argument("--begin", type=parse_time, metavar="TIME",
                   help="earliest store time: epoch ms, ISO-8601 (local time), now, now-10m/now-2h/now-1d")
    p.add_argument("--end", type=parse_time, metavar="TIME", help="latest store time (default now)")
    p.add_argument("--max", type=_positive_int, default=32, metavar="N", help="at most N messages (max 64)")

    p = _add(sub, "view", cmd_view, "show one message by msgId (or by UNIQ_KEY with --topic)")
    p.add_argument("msg_id", metavar="MSGID")
    p.add_argument("--topic", help="look MSGID up as a UNIQ_KEY in this topic")
    p.add_argument("--full", action="store_true",
                   help="print the whole body (default: 2048 characters of text, or a hexdump of 256 bytes of a "
                        "binary body; control characters are always escaped)")
    p.add_argument("--body-file", metavar="PATH", help="write the raw body to PATH ('-' for stdout, alone)")

    p = _add(sub, "offsets", cmd_offsets, "per-queue offsets of a topic (and a group's lag)")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--group", "-g", help="also show this group's committed offsets and lag")

    t = sub.add_parser("topic", help="create, update, list, delete topics")
    tsub = t.add_subparsers(dest="topic_command", metavar="{create,update,describe,list,delete}")
    tsub.required = True
    _topic_options(_add(tsub, "create", cmd_topic_create, "create a topic"), update=False)
    _topic_options(_add(tsub, "update", cmd_topic_update,
                        "change a topic's queues, permission, order or message type"), update=True)
    p = _add(tsub, "describe", cmd_topic_describe, "a topic's configuration and its queues")
    p.add_argument("name", metavar="TOPIC")
    p = _add(tsub, "list", cmd_topic_list, "list topics")
    p.add_argument("--system", action="store_true", help="include system topics")
    p = _add(tsub, "delete", cmd_topic_delete, "delete a topic and its consume queues", json_flag=False)
    p.add_argument("name", metavar="TOPIC")

    c = sub.add_parser("cluster", help="cluster status, replica check, leadership and membership")
    csub = c.add_subparsers(dest="cluster_command", metavar="{status,check,transfer-leader,rebuild-member,"
                                                            "add-member,remove-member,replace-member}")
    csub.required = True
    p = _add(csub, "status", cmd_cluster_status, "members, roles, terms, indexes and lag")
    p.add_argument("--watch", "-w", nargs="?", const=2.0, type=_positive_float, metavar="SECONDS",
                   help="refresh every SECONDS (default 2) until Ctrl-C")
    p = _add(csub, "check", cmd_cluster_check, "prove the members' commit logs byte-identical",
             description="Ask every member for SHA-256 digests of its commit log over the range all members have "
                         "committed and applied ([largest first retained offset, smallest applied end)), compare "
                         "them chunk by chunk and name the first differing 4 KiB block; then every consume queue over "
                         "the queue offsets all members have dispatched, down to the first differing unit. Progress "
                         "on stderr. Exit 0 "
                         "when all agree, 9 when they differ, 5 when a member cannot be reached (the others are "
                         "still compared), 11 when a member stays behind what the others had applied when the check "
                         "began for all of --lag-wait (stuck or far behind: the common range cannot vouch for it). "
                         f"The cluster secret, when set, comes from ${SECRET_ENV} or --secret-file.")
    p.add_argument("--from", dest="from_offset", type=_non_negative_int, default=0, metavar="OFFSET",
                   help="start at this commit-log offset (default: the first one every member holds)")
    p.add_argument("--bytes", type=_size, metavar="N", help="check at most N bytes (e.g. 64M; default: all)")
    p.add_argument("--chunk", type=_chunk_size, default=DEFAULT_CHUNK, metavar="N",
                   help="digest chunk size, 4K..16M (default 1M)")
    p.add_argument("--no-queues", action="store_true",
                   help="compare only the commit logs, not the consume queues")
    p.add_argument("--lag-wait", type=_non_negative_float, default=DEFAULT_LAG_WAIT_S, metavar="SECONDS",
                   help="how long a member behind the others may take to catch up before it LAGS (default 10)")
    p.add_argument("--secret-file", metavar="PATH", help=f"file holding cluster.secret (default ${SECRET_ENV})")
    p = _add(csub, "transfer-leader", cmd_transfer_leader, "hand leadership to another member", json_flag=False)
    p.add_argument("--to", metavar="ID", help="member id (default: any up-to-date follower)")
    p = _add(csub, "rebuild-member", cmd_rebuild_member, "rebuild a diverged or damaged member from its peers",
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
    p.add_argument("--wait-timeout", type=_positive_float, default=600.0, metavar="SECONDS",
                   help="how long to wait for it to be back (default 600)")
    from raftmq.client.member_commands import register as register_members

    register_members(csub)  # add-member, remove-member, replace-member (issue 39)

    g = sub.add_parser("group", help="consumer groups: members, queue ownership, lag, settings")
    gsub = g.add_subparsers(dest="group_command", metavar="{describe,update,reset-offsets}")
    gsub.required = True
    p = _add(gsub, "describe", cmd_group_describe, "a group's live members, their queues, offsets and lag",
             description="Ask the leader (which holds the membership) for GROUP's live consumers, the queues each "
                         "reads (AllocateMessageQueueAveragely over the sorted member ids), and per queue the "
                         "committed offset and lag.")
    p.add_argument("group", metavar="GROUP")
    p = _add(gsub, "update", cmd_group_update, "change how a group consumes, on every member, now",
             description="Set GROUP's own settings, replicated to every member and used at once (as RocketMQ's "
                         "updateSubGroup): FIFO consumption, deliveries before the dead-letter topic %%DLQ%%GROUP, "
                         "the back-off after a nack. Options left out keep their value; a group without settings "
                         "of its own follows the node configuration (node.max_delivery_attempts, "
                         "node.retry_backoff, node.group_policies) until its first update. RocketMQ 5 clients pick "
                         "the change up when they next send their settings.")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--fifo", action=argparse.BooleanOptionalAction, default=None,
                   help="consume in order per message group (one message of a group in flight at a time)")
    p.add_argument("--max-attempts", type=_positive_int, metavar="N",
                   help="deliveries before a message goes to the dead-letter topic (1..1000)")
    p.add_argument("--retry-backoff", metavar="DELAYS",
                   help="delays after a nack, by attempt, e.g. '1s 5s 30s 2m' (s, m, h, d; the last repeats)")
    p.add_argument("--reset", action="store_true",
                   help="drop the group's own settings: the node configuration applies again")

    from raftmq.client.pop_commands import (
        register as register_pop,  # dlq list|view|resend, group reset-offsets
    )

    register_pop(sub, gsub)

    from raftmq.client.acl_commands import register as register_acl

    register_acl(sub)

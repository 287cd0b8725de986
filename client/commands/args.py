"""What every ``raftmq`` client command shares: argument types, the connection and security options, and
``add_command`` that gives a subcommand both."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import time
from collections.abc import Callable

from raftmq.client.connection import DEFAULT_SERVER, parse_servers
from raftmq.client.errors import InvalidArgumentError
from raftmq.client.replica_check import MAX_CHUNK, MIN_CHUNK
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
from raftmq.client.types import MESSAGE_TYPES, PERM_INHERIT, PERM_READ, PERM_WRITE

SERVER_ENV = "RAFTMQ_SERVER"


class UsageError(Exception):
    """A malformed command line the parser could not catch by itself (exit 2)."""


# ---------------------------------------------------------------------- argument types


def server_list(value: str) -> list[str]:
    try:
        return parse_servers(value)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {n}")
    return n


def non_negative_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {n}")
    return n


_SIZE_UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}
_SIZE = re.compile(r"^(\d+)\s*([a-z]*)$")


def size_arg(value: str) -> int:
    """A byte count > 0: 4096, 64K, 1M, 2G (binary units)."""
    m = _SIZE.match(value.strip().lower())
    if not m or m.group(2) not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"expected a byte count such as 4096, 64K, 1M or 2G, got {value!r}")
    n = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a byte count > 0, got {value!r}")
    return n


def chunk_size_arg(value: str) -> int:
    n = size_arg(value)
    if not MIN_CHUNK <= n <= MAX_CHUNK:
        raise argparse.ArgumentTypeError(f"chunk size {value!r} must be 4K..16M")
    return n


def positive_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not x > 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {value!r}")
    return x


def non_negative_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not 0 <= x < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {value!r}")
    return x


def property_arg(value: str) -> tuple[str, str]:
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


def common_options(*, json_flag: bool = True, key_alias: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("connection")
    g.add_argument("--server", "-s", action="append", type=server_list, metavar="HOST:PORT",
                   help=f"server address (repeatable or comma-separated); default ${SERVER_ENV} or "
                        f"{DEFAULT_SERVER}")
    g.add_argument("--timeout", type=positive_float, default=10.0, metavar="SECONDS",
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


def add_command(sub, name: str, func: Callable[[argparse.Namespace], int], help_text: str, *,
                json_flag: bool = True, description: str | None = None, key_alias: bool = True) -> argparse.ArgumentParser:
    """``key_alias=False``: the command has its own --key, so the TLS key is only --tls-key there."""
    p = sub.add_parser(name, parents=[common_options(json_flag=json_flag, key_alias=key_alias)], help=help_text,
                       description=description or help_text)
    p.set_defaults(func=func)
    return p

"""The ``raftmq`` command: client subcommands plus those other packages contribute through the
``raftmq.commands`` entry-point group (``register(subparsers)``; each sets ``func(args) -> int``).

Errors are one line on stderr and a distinct exit status, never a traceback (set ``RAFTMQ_DEBUG=1`` to see it):

====  ==========================================================================
code  meaning
====  ==========================================================================
0     success
1     any other error (server-side failure, precondition, not the leader, ...)
2     usage error (bad option, bad address, malformed value)
3     not found (unknown topic, queue or message)
4     invalid argument (the server rejected a value: topic name, body, tags ...)
5     unavailable: server unreachable, not ready, no leader, busy, timed out
6     already exists (topic create)
7     outcome unknown: a write may or may not have been stored
8     permission denied or unauthenticated: the topic's perm or an access rule forbids it, credentials refused
9     replicas differ: ``cluster check`` found members whose committed bytes are not identical
130   interrupted (Ctrl-C) where that is not the normal way to stop
====  ==========================================================================
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator

import grpc

from raftmq.client import commands
from raftmq.client.commands.args import UsageError, server_list
from raftmq.client.diagnose import silent_peer
from raftmq.client.errors import NotRaftmqServerError, RaftmqError, UnknownOutcomeError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
PLUGIN_GROUP = "raftmq.commands"


def _warn(message: str) -> None:
    print(f"raftmq: warning: {_one_line(message)}", file=sys.stderr)


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line too (argparse prints the whole usage first); ``--help`` has the details."""

    argv: list[str] = []  # what run() parses: an option before the command is named when it is unknown

    def error(self, message: str):
        if "required: COMMAND" in message:  # argparse checks for the command before unknown options (issue 34)
            unknown = [a for a in self.argv if a.startswith("-") and a.split("=", 1)[0] not in
                       self._option_string_actions]
            if unknown:
                message = f"unrecognized arguments: {' '.join(unknown)} (options of a command go after it)"
        self.exit(EXIT_USAGE, f"{self.prog}: error: {_one_line(message)} (see {self.prog} --help)\n")


def _load_plugins(subparsers: argparse._SubParsersAction,
                  entry_points: Iterable[importlib.metadata.EntryPoint]) -> None:
    """Let each plugin add its subcommands; a plugin that cannot load costs one warning line, not the CLI."""
    for ep in sorted(entry_points, key=lambda e: e.name):
        try:
            register = ep.load()
            register(subparsers)
        except Exception as exc:  # noqa: BLE001 - any plugin failure must not break the client commands
            _warn(f"commands from plugin {ep.name!r} ({ep.value}) are unavailable: {type(exc).__name__}: {exc}")


def build_parser(entry_points: Iterable[importlib.metadata.EntryPoint] | None = None) -> argparse.ArgumentParser:
    """The full parser; ``entry_points`` defaults to the installed ``raftmq.commands`` plugins."""
    parser = _Parser(
        prog="raftmq",
        description="raftmq command line: produce, consume, query and administer a raftmq cluster.",
        epilog="Servers: --server host:port (repeatable or comma-separated), else $RAFTMQ_SERVER, else "
               "127.0.0.1:8081. Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 invalid argument, "
               "5 unavailable/unreachable (TLS mismatch too), 6 already exists, 7 write outcome unknown, "
               "8 permission denied / unauthenticated, 9 replicas differ (cluster check), 10 disk full (nothing "
               "stored, not retried).")
    try:
        version = importlib.metadata.version("raftmq")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    parser.add_argument("--version", action="version", version=f"raftmq {version}")
    # Also accepted before the command (`raftmq --server h:p topic list`); a --server after it wins.
    parser.add_argument("--server", "-s", action="append", type=server_list, dest="global_servers",
                        metavar="HOST:PORT", help="server address, as the commands' own --server")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    commands.register(sub)
    if entry_points is None:
        entry_points = importlib.metadata.entry_points(group=PLUGIN_GROUP)
    _load_plugins(sub, entry_points)
    return parser


def _second_look(exc: RaftmqError) -> RaftmqError:
    """A call that ran out of time at an address that accepts TCP but never speaks gRPC was not talking to
    raftmq at all (e.g. --server pointed at the Raft port): say so instead of "timed out" / "outcome unknown"."""
    if exc.code != grpc.StatusCode.DEADLINE_EXCEEDED or not exc.address or not silent_peer(exc.address):
        return exc
    text = (f"not a raftmq server at {exc.address}: it accepts TCP connections but never completed a gRPC "
            "handshake (the Raft port, or another service?); check --server (the gRPC port of a raftmq node, 8081 "
            "by default)")
    if isinstance(exc, UnknownOutcomeError) and exc.uniq_keys:
        text += f"; if it is a hung raftmq node, the write (UNIQ_KEY {', '.join(exc.uniq_keys[:3])}) may be stored"
    return NotRaftmqServerError(text, address=exc.address, code=exc.code)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """SIGTERM stops a command the way Ctrl-C does (a consumer commits its offsets, a load prints its summary)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(argv: list[str] | None = None,
        entry_points: Iterable[importlib.metadata.EntryPoint] | None = None) -> int:
    """Parse and run one command; returns the exit status."""
    parser = build_parser(entry_points)
    parser.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version exit 0, usage errors 2
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if getattr(args, "global_servers", None) and getattr(args, "server", "absent") is None:
        args.server = args.global_servers
    func = getattr(args, "func", None)
    if func is None:
        print(f"raftmq: error: command {args.command!r} is incomplete; see raftmq {args.command} --help",
              file=sys.stderr)
        return EXIT_USAGE
    debug = bool(os.environ.get("RAFTMQ_DEBUG"))
    try:
        with _stop_on_sigterm():
            code = func(args)
        sys.stdout.flush()
        return EXIT_OK if code is None else int(code)
    except UsageError as exc:
        print(f"raftmq: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except RaftmqError as exc:
        if debug:
            traceback.print_exc()
        exc = _second_look(exc)
        print(f"raftmq: error: {_one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("raftmq: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly; silence the flush at interpreter exit too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    except Exception as exc:  # noqa: BLE001 - one line for the user, the traceback only on request
        if debug:
            traceback.print_exc()
        print(f"raftmq: error: {type(exc).__name__}: {_one_line(exc)} (set RAFTMQ_DEBUG=1 for details)",
              file=sys.stderr)
        return EXIT_ERROR


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    sys.exit(run(argv))

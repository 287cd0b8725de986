"""``raftmq topic create --from-file``: a file of topics, one per line, read and checked whole before anything is
created (docs/guides/cli.md#many-topics-at-once).

A line is a topic name and, optionally, the options of ``raftmq topic create``::

    # name          options (those on the command line are the defaults of every line)
    orders          --queues 8 --message-type FIFO
    payments
    audit-log       --perm r

Blank lines and lines starting with ``#`` are skipped. Every problem is reported with its line number, and a file
with any is refused whole.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from raftmq.client.types import TopicConfig

MAX_NAME = 127  # as the broker (node/validation.py)
_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")


class TopicFileError(Exception):
    """The file cannot be used; ``problems`` holds one line per problem (``path:line: what``)."""

    def __init__(self, path: str, problems: list[str]):
        super().__init__(f"{len(problems)} problem(s) in {path}; nothing was created")
        self.problems = problems


class _LineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print the usage and exit
        raise ValueError(message)


def read_topic_file(path: str, add_options: Callable[[argparse.ArgumentParser], None],
                    defaults: dict) -> list[tuple[int, TopicConfig]]:
    """(line number, topic) for every topic of the file at ``path`` ("-": standard input); ``add_options`` adds
    ``topic create``'s options to a parser, ``defaults`` are their values from the command line."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TopicFileError(path, [f"{path}: cannot read it: {e}"]) from None
    parser = _LineParser(prog="line", add_help=False, exit_on_error=False)
    parser.add_argument("name")
    add_options(parser)
    parser.set_defaults(**{k: v for k, v in defaults.items() if v is not None})
    out: list[tuple[int, TopicConfig]] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            args = parser.parse_args(shlex.split(line))
            problem = _name_problem(args.name)
            if problem:
                raise ValueError(problem)
            if args.name in seen:
                raise ValueError(f"topic {args.name!r} is also on line {seen[args.name]}")
            seen[args.name] = number
            read = args.read_queues or args.queues or 0
            write = args.write_queues or args.queues or 0
            out.append((number, TopicConfig(args.name, read, write, args.perm, bool(args.order), args.message_type)))
        except (ValueError, argparse.ArgumentError) as e:
            problems.append(f"{path}:{number}: {e}")
    if problems:
        raise TopicFileError(path, problems)
    if not out:
        raise TopicFileError(path, [f"{path}: no topic in it (one name per line, options after it)"])
    return out


def _name_problem(name: str) -> str:
    if len(name) > MAX_NAME:
        return f"topic name is {len(name)} characters; the limit is {MAX_NAME}"
    if not _NAME.match(name):
        bad = "".join(sorted({c for c in name if not _NAME.match(c)}))
        return f"topic {name!r} contains {bad!r}; use only letters, digits, '%', '|', '_' and '-'"
    return ""

"""``raftmq node`` and ``raftmq config validate|sample``, plugged into the ``raftmq`` command.

The client's CLI finds ``register`` through the ``raftmq.commands`` entry point; ``python -m raftmq.node`` builds the
same subcommands on its own parser, so the broker can start even where the client package is not installed.
"""

from __future__ import annotations

import argparse
import logging
import resource
import sys

from raftmq.node import store_cli
from raftmq.node.config import ConfigError, load_config
from raftmq.node.config_docs import sample_yaml


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``node`` and ``config`` to the ``raftmq`` command."""
    p = subparsers.add_parser(
        "node",
        help="run a broker",
        description="Run a raftmq broker. Settings: the YAML file, then RAFTMQ_<SECTION>_<KEY> environment "
        "variables, then --set flags (later wins). Stops cleanly on SIGTERM or Ctrl-C.",
    )
    p.add_argument("--config", "-c", metavar="FILE", help="YAML configuration (see `raftmq config sample`)")
    p.add_argument(
        "--set", dest="assignments", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="override one setting, e.g. --set node.grpc_listen=127.0.0.1:8081 (repeatable; value is YAML)",
    )
    p.set_defaults(func=run_node)

    c = subparsers.add_parser("config", help="check or print a broker configuration")
    csub = c.add_subparsers(dest="config_command", metavar="{validate,sample}")
    csub.required = True
    v = csub.add_parser(
        "validate", help="check a configuration file (with the environment's RAFTMQ_* overrides)",
        description="Exit 0 when FILE (plus RAFTMQ_* environment overrides and --set flags) is valid; otherwise "
        "print one line per problem and exit 2.",
    )
    v.add_argument("file", metavar="FILE")
    v.add_argument("--set", dest="assignments", action="append", default=[], metavar="SECTION.KEY=VALUE")
    v.set_defaults(func=validate_config)
    s = csub.add_parser("sample", help="print a complete configuration with every default")
    s.set_defaults(func=print_sample)
    store_cli.register(subparsers)


def _load(args: argparse.Namespace):
    try:
        return load_config(getattr(args, "config", None) or getattr(args, "file", None),
                           assignments=args.assignments)
    except ConfigError as e:
        for problem in e.problems:
            print(f"config error: {problem}", file=sys.stderr)
        return None


def validate_config(args: argparse.Namespace) -> int:
    cfg = _load(args)
    if cfg is None:
        return 2
    small = cfg.volume_problem()
    if small:
        print(f"config error: store: {small}", file=sys.stderr)
        return 2
    print(f"{args.file}: ok (node {cfg.node.id}, gRPC {cfg.node.grpc_listen}, data {cfg.node.data_dir})")
    return 0


def print_sample(args: argparse.Namespace) -> int:
    sys.stdout.write(sample_yaml())
    return 0


def raise_descriptor_limit() -> None:
    """The soft descriptor limit (``ulimit -n``) up to the hard one: every mapped store file holds a descriptor,
    and a node with thousands of topics maps thousands of queue files (docs/operations/capacity.md#descriptors)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as e:  # some platforms cap it below an unlimited hard limit
        logging.getLogger("raftmq.node").warning("cannot raise the descriptor limit from %d: %s", soft, e)


def run_node(args: argparse.Namespace) -> int:
    cfg = _load(args)
    if cfg is None:
        return 2
    raise_descriptor_limit()
    from raftmq.node.server import run_broker

    return run_broker(cfg)


def main(argv: list[str] | None = None) -> int:
    """``python -m raftmq.node node --config FILE`` / ``python -m raftmq.node config validate FILE``."""
    parser = argparse.ArgumentParser(prog="python -m raftmq.node", description="raftmq broker commands")
    sub = parser.add_subparsers(dest="command", metavar="{node,config,store}")
    sub.required = True
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)

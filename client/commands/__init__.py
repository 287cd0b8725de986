"""The client subcommands of ``raftmq``, one module per command family: produce, messages (consume, query, view,
offsets), topic, cluster (with members), group, dlq, acl; args and output hold what they share.

Human-readable output on stdout by default, ``--json`` where a script wants it; progress on stderr. Failures
are raised (``RaftmqError``, ``UsageError``) and turned into one line and an exit code by ``client.cli``.
"""

from __future__ import annotations

import argparse

from raftmq.client.commands import acl, cluster, dlq, group, messages, produce, topic


def register(sub: argparse._SubParsersAction) -> None:
    """Add the client subcommands to ``raftmq`` (in the order ``raftmq --help`` lists them)."""
    for family in (produce, messages, topic, cluster, group, dlq, acl):
        family.register(sub)

"""``python -m raftmq.node ...``: the broker's subcommands without the client CLI (see node.cli.main)."""

import sys

from raftmq.node.cli import main

sys.exit(main())

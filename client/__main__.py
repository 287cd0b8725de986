"""``python -m raftmq.client`` runs the ``raftmq`` command (same as the console script)."""

from raftmq.client.cli import main

main()

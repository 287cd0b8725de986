"""``python -m client`` runs the ``raftmq`` command (same as the console script)."""

from client.cli import main

main()

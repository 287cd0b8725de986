"""The read-only web console every node serves on its HTTP port at ``/ui`` (see node.console.app)."""

from raftmq.node.console.app import Console

__all__ = ["Console"]

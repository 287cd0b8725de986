"""Which queue of which group a FIFO message group goes to, the same for the node and the SDK
(docs/design/scale-out.md#sends).

A topic has N queues in each of the cluster's G groups; the union, groups in configuration order, is G x N
queues. A message group's index in it is ``String.hashCode mod (G x N)``: for one group that is the queue the
node always chose (``hash mod N``), so a one-group cluster keeps every message group on its queue.
"""

from __future__ import annotations

from collections.abc import Sequence

from raftmq.java_hash import java_string_hash


def fifo_queue(message_group: str, groups: Sequence[str], nqueues: int) -> tuple[str, int]:
    """(group, queue id) of ``message_group`` over ``groups`` (in configuration order) of ``nqueues`` each."""
    if not groups or nqueues <= 0:
        raise ValueError(f"no queue to hash message group {message_group!r} to ({len(groups)} groups of {nqueues})")
    index = java_string_hash(message_group) % (len(groups) * nqueues)
    return groups[index // nqueues], index % nqueues

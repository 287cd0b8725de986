"""Which member of each group should lead: the groups' preferred leaders (docs/design/leader-balance.md).

Why: a leader does a group's writes in one interpreter, so G groups scale only while their leaders sit on
different machines. Elections put leaders wherever a failover left them; like Kafka's preferred replica, every
group has one member it should be led by, chosen by a rule every member computes alike from the configuration
alone; `raftmq cluster balance-leaders` and the automatic rebalance (node/leader_balancer.py) move leadership
back there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raftmq.node.config import GroupSpec


def preferred_leaders(groups: Sequence[GroupSpec]) -> dict[str, str]:
    """Group name -> member id, for every group in configuration order.

    A group's pinned ``preferred_leader`` is taken as it is (for a group learned by DNS discovery, whose members
    are known by address only, it is what the group itself answered). Every other group, in configuration order, takes
    the member whose machine (its ``host``, else its Raft address's host) holds the fewest preferred leaders
    chosen so far; ties go to the first in the group's member list rotated by the group's index (group i
    starts at its member i mod n), so groups listed alike (pod -0, -1, -2 of each StatefulSet) spread over the
    positions when no machine is known."""
    load: Counter[str] = Counter()
    chosen: dict[str, str] = {}
    for g in groups:
        pinned = next((m for m in g.members if g.preferred_leader and m.id == g.preferred_leader), None)
        if pinned is not None:
            chosen[g.name] = pinned.id
            load[pinned.machine] += 1
        elif g.preferred_leader and not any(m.id for m in g.members):
            chosen[g.name] = g.preferred_leader  # learned by discovery: members without ids, the group's own word
    for i, g in enumerate(groups):
        if g.name in chosen or not any(m.id for m in g.members):
            continue  # no members, or known by address only (discovery) without naming a preferred leader
        n = len(g.members)
        rotated = [g.members[(i + k) % n] for k in range(n)]
        best = min(range(n), key=lambda k: (load[rotated[k].machine], k))
        chosen[g.name] = rotated[best].id
        load[rotated[best].machine] += 1
    return {g.name: chosen[g.name] for g in groups if g.name in chosen}

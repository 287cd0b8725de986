"""Readiness rides through elections: a member that had a leader stays ready for a while without one.

In a rolling restart every restart is followed by an election; when /ready followed the leader at every instant,
all members of the StatefulSet went unready together each time a peer restarted (the Services emptied, the
rollout waited). ``node.ready_without_leader_seconds`` bounds how long a member stays ready without a leader.
"""

from __future__ import annotations

import pytest

from tests.support.processes import node_specs, start_nodes, stop_all
from tests.support.waiting import wait_for


def _ready_reason(node) -> str:
    status, reason = node.http_get("/ready", timeout=5)
    assert status == 200, f"{node.spec.id} went unready while its leader was away: {reason}"
    return reason.splitlines()[0]  # the verdict; the next line names the node and its pid


@pytest.mark.parametrize("grace", [3600.0, 2.0])
def test_member_stays_ready_for_the_grace_then_reports_no_leader(tmp_path, grace):
    nodes = start_nodes(node_specs(tmp_path, 3, node={"ready_without_leader_seconds": grace}))
    try:
        survivor = nodes[0]
        for n in nodes[1:]:
            assert n.stop() == 0  # the majority is gone: no leader can exist until one comes back
        if grace > 60:
            # ready the whole time, with the election named in the reason
            wait_for(lambda: "no leader for" in _ready_reason(survivor), timeout=120,
                     what="the survivor noticing it has no leader")
            for _ in range(20):
                assert "no leader for" in _ready_reason(survivor)
            nodes[1].start().wait_ready()
            wait_for(lambda: _ready_reason(survivor) == "ready", timeout=120, what="a leader again")
        else:
            status_reason = wait_for(lambda: (lambda s, r: (s, r) if s == 503 else None)(
                *survivor.http_get("/ready", timeout=5)), timeout=120, what="unready after the grace")
            assert "no leader" in status_reason[1]
    finally:
        stop_all(nodes)

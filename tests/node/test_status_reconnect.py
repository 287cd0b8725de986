"""``raftmq cluster status`` asked of the leader sees a restarted member as soon as it is back (issue 11).

The leader's status fan-out reuses one gRPC channel per peer. While a peer is down, gRPC's reconnect backoff
used to grow towards two minutes, and every status call in that window failed at once with the stale
"Connection refused": a restarted, ready member was shown unreachable for over a minute. The member here stays
down long enough for that backoff to grow well past the time we then give the leader to see it again.
"""

from __future__ import annotations

import time

import pytest
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

from tests.replication.cluster_util import wait_leader
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

DOWN_FOR_S = 40.0  # default gRPC backoff after this long: the next connect attempt is ~25 s away
SEEN_AGAIN_WITHIN_S = 10.0


def _row(leader, member_id: str) -> pb.MemberStatus:
    st = pb_grpc.AdminServiceStub(leader.channel()).ClusterStatus(pb.ClusterStatusRequest(), timeout=20)
    return next(m for m in st.members if m.id == member_id)


def test_leader_status_sees_a_restarted_member_promptly(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        leader = wait_leader(nodes)
        follower = next(n for n in nodes if n is not leader)
        fid = follower.spec.id
        assert _row(leader, fid).role != "unreachable"
        follower.kill()
        # keep asking while it is down, as an operator (or a dashboard) would: the channel keeps failing
        until = time.monotonic() + DOWN_FOR_S
        while time.monotonic() < until:
            _row(leader, fid)
            time.sleep(0.5)
        assert _row(leader, fid).role == "unreachable"
        follower.start().wait_ready(90)
        wait_for(lambda: _row(leader, fid).role != "unreachable",
                 f"the leader's status to see restarted member {fid}", timeout=SEEN_AGAIN_WITHIN_S, interval=0.2)

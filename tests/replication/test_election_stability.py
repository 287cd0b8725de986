"""Leadership stays put when a follower stalls and comes back (issue 11: pre-vote and stall grace).

A follower frozen (SIGSTOP) for longer than its election timeout wakes up with its election deadline long past
and its peers' heartbeats waiting unread in its socket. pysyncobj used to start an election at once, with a higher
term, which deposed the healthy leader (every flap fails in-flight writes as outcome-unknown). Now the stalled
tick first reads what is waiting (stall grace), and an election needs a majority of pre-votes, which members
that hear from the leader refuse: the leader and its term must survive any number of such stalls.
"""

from __future__ import annotations

import time

from raftmq.v1 import raftmq_pb2 as pb
from tests.replication.cluster_util import Producers, admin, create_topic, wait_applied_equal, wait_leader
from tests.replication.conftest import Cluster
from tests.replication.tcp_proxy import PausableProxy
from tests.support.processes import stop_all
from tests.support.waiting import wait_for

FROZEN_S = 3.2  # > raft_max_timeout (3.0): the follower's election timer has certainly fired meanwhile


def _term(node) -> int:
    st = admin(node).ClusterStatus(pb.ClusterStatusRequest(), timeout=20)
    return next(m.term for m in st.members if m.id == node.spec.id)


def test_a_stalled_follower_does_not_depose_a_healthy_leader(cluster_factory):
    c = cluster_factory()
    create_topic(c.nodes, "Calm", 2)
    leader = wait_leader(c.nodes)
    term = _term(leader)
    p = Producers(c.nodes, "Calm", n=2, queues=2).start()
    try:
        p.wait_acked(50)
        for i in range(3):
            follower = [n for n in c.nodes if n is not leader][i % 2]
            follower.freeze()
            time.sleep(FROZEN_S)
            follower.thaw()
            p.wait_acked(len(p.log.acked) + 50)
    finally:
        p.stop()
    wait_applied_equal(c.nodes)
    assert wait_leader(c.nodes) is leader
    assert [_term(n) for n in c.nodes] == [term] * 3, "an election happened"


def test_a_partitioned_member_returns_without_disrupting_the_leader(tmp_path):
    """Pre-vote: a member cut off from everyone keeps timing out, but it must not raise its term for that, so
    when it is reachable again the leader carries on in the same term. Each member's Raft port sits behind a
    pausable proxy; the isolated member has the smallest address, so pysyncobj (the larger address dials) only
    ever reaches it through its own proxy."""
    c = Cluster(tmp_path)
    proxies = {s.id: PausableProxy(s.raft_port) for s in c.specs}
    members = [{"id": s.id, "raft": f"127.0.0.1:{proxies[s.id].port}", "grpc": s.grpc_address} for s in c.specs]
    for s in c.specs:
        s.members = members
        s.overrides.setdefault("cluster", {})["raft_address"] = f"127.0.0.1:{proxies[s.id].port}"
    isolated_id = min(members, key=lambda m: m["raft"])["id"]
    try:
        c.start()
        leader = wait_leader(c.nodes)
        if leader.spec.id == isolated_id:
            other = next(m["id"] for m in members if m["id"] != isolated_id)
            admin(leader).TransferLeader(pb.TransferLeaderRequest(to_id=other), timeout=30)
            leader = wait_leader(c.nodes, exclude={isolated_id})
        isolated = c.by_id(isolated_id)
        term = _term(leader)

        proxies[isolated_id].pause()
        time.sleep(3 * 3.0)  # three maximal election timeouts: its timer fires again and again meanwhile
        assert wait_leader(c.nodes, exclude={isolated_id}) is leader
        proxies[isolated_id].resume()

        wait_applied_equal(c.nodes)
        wait_for(lambda: _leader_id(isolated) == leader.spec.id, "the returning member to follow the leader")
        assert wait_leader(c.nodes) is leader
        assert [_term(n) for n in c.nodes] == [term] * 3, "the returning member forced an election"
    finally:
        for px in proxies.values():
            px.close()
        stop_all(c.nodes, kill=True)


def _leader_id(node) -> str:
    return admin(node).ClusterStatus(pb.ClusterStatusRequest(), timeout=20).leader_id


def _role(node) -> str:
    st = admin(node).ClusterStatus(pb.ClusterStatusRequest(), timeout=20)
    return next(m.role for m in st.members if m.id == node.spec.id)


def test_a_leader_cut_off_from_its_majority_steps_down_and_rejoins(tmp_path):
    """The leader (isolated behind its Raft proxy, as above) stops believing it leads after its fallback timeout
    without answers from a majority, the others elect a new leader, and when the link returns the old leader
    follows the new one (the same Raft-proxy set-up as the pre-vote test)."""
    c = Cluster(tmp_path)
    proxies = {s.id: PausableProxy(s.raft_port) for s in c.specs}
    members = [{"id": s.id, "raft": f"127.0.0.1:{proxies[s.id].port}", "grpc": s.grpc_address} for s in c.specs]
    for s in c.specs:
        s.members = members
        s.overrides.setdefault("cluster", {})["raft_address"] = f"127.0.0.1:{proxies[s.id].port}"
    isolated_id = min(members, key=lambda m: m["raft"])["id"]
    try:
        c.start()
        leader = wait_leader(c.nodes)
        if leader.spec.id != isolated_id:
            admin(leader).TransferLeader(pb.TransferLeaderRequest(to_id=isolated_id), timeout=30)
        old = wait_leader(c.nodes)
        assert old.spec.id == isolated_id

        proxies[isolated_id].pause()
        wait_for(lambda: _role(old) != "leader", "the cut-off leader to step down", timeout=60, interval=0.1)
        new = wait_leader(c.nodes, exclude={isolated_id})
        assert new is not old
        proxies[isolated_id].resume()
        wait_for(lambda: _leader_id(old) == new.spec.id, "the old leader to follow the new one", timeout=60)
        wait_applied_equal(c.nodes)
    finally:
        for px in proxies.values():
            px.close()
        stop_all(c.nodes, kill=True)

"""``sync`` durability: the leader acknowledges only after a majority fsynced its Raft journal and commit log.

The followers' gRPC ports (where the leader asks them to fsync) sit behind pausable proxies while their Raft
ports stay direct. With the proxies paused, Raft still commits and every member applies the entry, yet a `sync`
leader must NOT acknowledge it (the durability round cannot reach a majority); an `async` leader does. This
shows the acknowledgement waits for the followers' fsync round, not just for Raft's in-memory majority.
"""

from __future__ import annotations

import time

import grpc
import pytest

from raftmq.v1 import raftmq_pb2 as pb
from tests.replication.cluster_util import admin, create_topic, messaging, wait_leader
from tests.replication.conftest import Cluster
from tests.replication.tcp_proxy import PausableProxy
from tests.support.processes import stop_all

pytestmark = pytest.mark.slow


def own_applied(node) -> int:
    st = admin(node).ClusterStatus(pb.ClusterStatusRequest(), timeout=10)
    return next(m for m in st.members if m.id == node.spec.id).applied_offset


def send(node, body: bytes, timeout: float = 20.0):
    return messaging(node).SendMessage(pb.SendMessageRequest(message=pb.Message(topic="SyncT", queue_id=0,
                                                                                body=body)), timeout=timeout)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_ack_waits_for_follower_fsync_round_only_in_sync_mode(tmp_path, durability):
    c = Cluster(tmp_path, durability, {"put_timeout_s": 4.0})
    proxies = {s.id: PausableProxy(s.grpc_port) for s in c.specs}
    members = [{"id": s.id, "raft": s.raft_address, "grpc": f"127.0.0.1:{proxies[s.id].port}"} for s in c.specs]
    for s in c.specs:
        s.members = members
    try:
        c.start()
        create_topic(c.nodes, "SyncT", 1)
        leader = wait_leader(c.nodes)
        followers = [n for n in c.nodes if n is not leader]
        send(leader, b"before")

        for f in followers:
            proxies[f.spec.id].pause()
        start = [own_applied(f) for f in followers]
        if durability == "sync":
            with pytest.raises(grpc.RpcError) as e:
                send(leader, b"during-pause")
            assert e.value.code() in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED), e.value
        else:
            send(leader, b"during-pause")
        # either way Raft itself went on: the followers applied the entry
        deadline = time.monotonic() + 20
        while any(own_applied(f) <= s0 for f, s0 in zip(followers, start, strict=True)):
            assert time.monotonic() < deadline, "followers did not apply the entry"
            time.sleep(0.1)

        for f in followers:
            proxies[f.spec.id].resume()
        r = send(leader, b"after")
        assert r.result.physical_offset > 0
    finally:
        for p in proxies.values():
            p.close()
        stop_all(c.nodes, kill=True)

"""``sync`` durability: the leader acknowledges only after a majority made the entry durable.

Followers of a ``sync`` cluster sync their Raft journal before they acknowledge entries and say so in the
acknowledgement (replication.raft_log, durable acks): a commit is then durable on the followers that made it,
and the leader's own fsync completes the majority. A peer that does not say so (an older member during a rolling
upgrade, or one configured ``async``) brings back the explicit fsync round over the replica service.

The followers' gRPC ports (where the leader asks them to fsync) sit behind pausable proxies while their Raft
ports stay direct. With the proxies paused, Raft still commits and every member applies the entry; a leader
whose followers do not acknowledge durably must NOT acknowledge it (the durability round cannot reach a
majority), while one whose followers do needs no round at all.
"""

from __future__ import annotations

import time

import grpc
import pytest

from raftmq.v1 import raftmq_pb2 as pb
from tests.replication.cluster_util import admin, create_topic, lead_by, messaging
from tests.replication.conftest import Cluster
from tests.replication.tcp_proxy import PausableProxy
from tests.support.metrics import metric_sum
from tests.support.processes import stop_all


def own_applied(node) -> int:
    st = admin(node).ClusterStatus(pb.ClusterStatusRequest(), timeout=10)
    return next(m for m in st.members if m.id == node.spec.id).applied_offset


def send(node, body: bytes, timeout: float = 20.0):
    return messaging(node).SendMessage(pb.SendMessageRequest(message=pb.Message(topic="SyncT", queue_id=0,
                                                                                body=body)), timeout=timeout)


@pytest.mark.parametrize("durability", ["sync", "sync-with-async-peers", "async"])
def test_ack_waits_for_follower_fsync_round_only_when_the_peers_do_not_ack_durably(tmp_path, durability):
    c = Cluster(tmp_path, "async" if durability == "async" else "sync", {"put_timeout_s": 4.0})
    proxies = {s.id: PausableProxy(s.grpc_port) for s in c.specs}
    members = [{"id": s.id, "raft": s.raft_address, "grpc": f"127.0.0.1:{proxies[s.id].port}"} for s in c.specs]
    for s in c.specs:
        s.members = members
        if durability == "sync-with-async-peers" and s.id != "n0":
            s.overrides["cluster"]["durability"] = "async"  # they acknowledge before any journal sync
    try:
        c.start()
        create_topic(c.nodes, "SyncT", 1)
        leader = lead_by(c.nodes, "n0")
        followers = [n for n in c.nodes if n is not leader]
        send(leader, b"before")
        rounds_before = metric_sum(leader, "raftmq_raft_durable_ack_rounds_total")

        for f in followers:
            proxies[f.spec.id].pause()
        start = [own_applied(f) for f in followers]
        if durability == "sync-with-async-peers":
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
        rounds = metric_sum(leader, "raftmq_raft_durable_ack_rounds_total") - rounds_before
        assert (rounds >= 2) if durability == "sync" else (rounds == 0), rounds  # "during-pause", "after"
    finally:
        for p in proxies.values():
            p.close()
        stop_all(c.nodes, kill=True)

"""``sync`` durability: the fsync round completes on the first replies that form a majority.

Issue 11: with the *first* peer of the leader's member list silent, every write used to wait for that peer's
own deadline (3 s) before the second peer's answer was even looked at. The followers' gRPC ports sit behind
pausable proxies (their Raft ports stay direct, so Raft itself keeps committing); pausing the first peer must
leave writes acknowledged by the leader + second peer, well inside a deadline shorter than that old per-peer
wait. Pausing the second peer is the control case that always worked.

The round is what a ``sync`` leader falls back to when its peers do not acknowledge durably (replication.raft_log:
an older member, or one configured ``async``), so the followers here are configured ``async`` and n0 leads.
"""

from __future__ import annotations

import pytest

from raftmq.v1 import raftmq_pb2 as pb
from tests.replication.cluster_util import create_topic, lead_by, messaging
from tests.replication.conftest import Cluster
from tests.replication.tcp_proxy import PausableProxy
from tests.support.processes import stop_all

# Shorter than the 3 s each peer used to get in turn; a healthy majority answers in milliseconds.
WRITE_DEADLINE_S = 2.5


@pytest.mark.parametrize("silent", [0, 1], ids=["first-peer-silent", "second-peer-silent"])
def test_sync_round_completes_with_any_majority(tmp_path, silent):
    c = Cluster(tmp_path, "sync", {"put_timeout_s": 8.0})
    proxies = {s.id: PausableProxy(s.grpc_port) for s in c.specs}
    members = [{"id": s.id, "raft": s.raft_address, "grpc": f"127.0.0.1:{proxies[s.id].port}"} for s in c.specs]
    for s in c.specs:
        s.members = members
        if s.id != "n0":
            s.overrides["cluster"]["durability"] = "async"  # no durable acks: the leader runs fsync rounds
    try:
        c.start()
        create_topic(c.nodes, "SyncM", 1)
        leader = lead_by(c.nodes, "n0")
        stub = messaging(leader)
        stub.SendMessage(pb.SendMessageRequest(message=pb.Message(topic="SyncM", body=b"warm-up")), timeout=20)
        peers = [m["id"] for m in members if m["id"] != leader.spec.id]  # the leader's list order
        proxies[peers[silent]].pause()
        for i in range(5):
            r = stub.SendMessage(pb.SendMessageRequest(message=pb.Message(topic="SyncM", body=b"m%d" % i)),
                                 timeout=WRITE_DEADLINE_S)
            assert r.result.physical_offset > 0
    finally:
        for p in proxies.values():
            p.close()
        stop_all(c.nodes, kill=True)

"""Three real node processes: Raft metrics on /metrics and ClusterStatus asking each peer for its own state."""

from __future__ import annotations

import functools

from raftmq.client.admin import Admin
from raftmq.client.commands.cluster import cluster_table
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from raftmq.v1 import replica_pb2, replica_pb2_grpc
from tests.support.metrics import samples
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for

RAFT_GAUGES = ("raftmq_raft_term", "raftmq_raft_commit_index", "raftmq_raft_applied_index",
               "raftmq_raft_has_leader", "raftmq_raft_is_leader")
RAFT_COUNTERS = ("raftmq_raft_leader_changes_total", "raftmq_raft_snapshot_installs_total",
                 "raftmq_raft_catch_up_bytes_total", "raftmq_raft_durable_ack_rounds_total")


def _scrape(node) -> dict[str, float]:
    """Sample name -> value of this node's raftmq_raft_* series (each must carry cluster and node_id)."""
    out = {}
    for s in samples(node):
        if s.name.startswith("raftmq_raft_"):
            assert s.labels.get("node_id") == node.spec.id and s.labels.get("cluster"), s
            out[s.name] = s.value
    return out


_wait = functools.partial(wait_for, timeout=60.0, interval=0.2)  # members restart and re-elect: be patient


def _status(node) -> pb.ClusterStatusResponse:
    return pb_grpc.AdminServiceStub(node.channel()).ClusterStatus(pb.ClusterStatusRequest(), timeout=20)


def test_raft_metrics_and_cluster_status_with_a_stopped_follower(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        # ---- metrics: every member exports the Raft series; exactly one says it leads
        scrapes = _wait(lambda: (lambda s: s if sum(x["raftmq_raft_is_leader"] for x in s) == 1
                                 and all(x["raftmq_raft_has_leader"] == 1 for x in s) else None)(
            [_scrape(n) for n in nodes]), "exactly one leader gauge at 1, all members knowing a leader")
        for s in scrapes:
            for name in RAFT_GAUGES + RAFT_COUNTERS:
                assert name in s, (name, sorted(s))
            assert s["raftmq_raft_term"] >= 1
            assert s["raftmq_raft_leader_changes_total"] >= 1
        leader = next(n for n, s in zip(nodes, scrapes, strict=True) if s["raftmq_raft_is_leader"] == 1)
        followers = [n for n in nodes if n is not leader]
        before = _scrape(leader)["raftmq_raft_commit_index"]

        admin = pb_grpc.AdminServiceStub(leader.channel())
        admin.CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(name="T")), timeout=20)
        send = pb_grpc.MessagingServiceStub(leader.channel()).SendMessage
        for i in range(5):
            send(pb.SendMessageRequest(message=pb.Message(topic="T", body=b"m%d" % i)), timeout=20)
        after = _scrape(leader)
        assert after["raftmq_raft_commit_index"] >= before + 6  # topic + 5 puts, one Raft entry each at least
        # the leader applied them before it answered; pysyncobj counts an entry applied only after the callback
        # that answers it returns, so a scrape right after the last answer may still see one entry less
        _wait(lambda: _scrape(leader)["raftmq_raft_applied_index"] >= before + 6, "the leader applies the new entries")
        # followers apply the same entries
        _wait(lambda: all(_scrape(f)["raftmq_raft_applied_index"] >= before + 6 for f in followers),
              "followers apply the new entries")

        # ---- cluster status: the leader asks each peer; all three are ready and healthy, nobody lags for good
        def all_caught_up():
            st = _status(leader)
            ok = len(st.members) == 3 and all(m.ready and m.healthy and not m.error and m.lag_bytes == 0
                                              for m in st.members)
            return st if ok else None

        st = _wait(all_caught_up, "every member ready, healthy and caught up as the leader sees it")
        assert st.leader_id == leader.spec.id
        roles = {m.id: m.role for m in st.members}
        assert roles[leader.spec.id] == "leader"
        assert all(roles[f.spec.id] == "follower" for f in followers)
        offsets = {m.applied_offset for m in st.members}
        assert len(offsets) == 1 and offsets.pop() > 0
        assert all(m.applied_index > 0 and m.commit_index > 0 for m in st.members)

        # the peer call behind it: the member's own /ready verdict; metadata only when asked for
        replica = replica_pb2_grpc.ReplicaServiceStub(followers[0].channel())
        quick = replica.GetReplicaStatus(replica_pb2.GetReplicaStatusRequest(skip_metadata=True), timeout=20)
        full = replica.GetReplicaStatus(replica_pb2.GetReplicaStatusRequest(), timeout=20)
        assert quick.HasField("ready") and quick.ready and not quick.not_ready_reason
        assert quick.metadata == b"" and b'topics' in full.metadata
        assert quick.commit_log_max_offset == full.commit_log_max_offset > 0

        # ---- one follower frozen (SIGSTOP): reported unreachable with the reason, no made-up lag
        frozen, alive = followers
        frozen.freeze()
        try:
            st = _status(leader)
            by_id = {m.id: m for m in st.members}
            f = by_id[frozen.spec.id]
            assert f.role == "unreachable" and not f.healthy and not f.ready, f
            assert f.error and "DEADLINE_EXCEEDED" in f.error, f
            assert f.lag_bytes == 0 and f.applied_offset == 0 and f.term == 0, f
            a = by_id[alive.spec.id]
            assert a.role == "follower" and a.healthy and a.ready and not a.error, a
            assert by_id[leader.spec.id].ready and by_id[leader.spec.id].role == "leader"

            # the CLI table says so too (numbers unknown, not zero)
            with Admin([leader.grpc_address], timeout=20, retry_timeout=20) as client_admin:
                table = cluster_table(client_admin.cluster_status())
            row = next(line for line in table.splitlines() if line.startswith(f"| {frozen.spec.id} "))
            assert "unreachable: no answer in time" in row and row.count(" - |") == 5, table  # the reason, short

            # a write still commits with the remaining majority while status is being asked for
            send(pb.SendMessageRequest(message=pb.Message(topic="T", body=b"during")), timeout=20)
        finally:
            frozen.thaw()

        # ---- a killed follower: refused connection, still unreachable with an error
        frozen.kill()
        st = _wait(lambda: (lambda s: s if {m.id: m for m in s.members}[frozen.spec.id].role == "unreachable"
                            else None)(_status(leader)), "a killed member is reported unreachable")
        f = {m.id: m for m in st.members}[frozen.spec.id]
        assert f.error and not f.ready and not f.healthy and f.lag_bytes == 0, f


def test_a_scrape_that_shows_a_leader_counts_its_taking_over(tmp_path):
    """The leader-change counter is taken from the same observation as the has_leader gauge, not by a background
    loop that may not have run yet: with that loop asleep (offsets_linger_s paces it), a follower that already
    knows the leader must not report zero leader changes."""
    with running_nodes(tmp_path, 3, cluster={"raft": {"offsets_linger_s": 30}}) as nodes:
        scrapes = _wait(lambda: (lambda s: s if all(x["raftmq_raft_has_leader"] == 1 for x in s) else None)(
            [_scrape(n) for n in nodes]), "all members knowing a leader")
        assert [s["raftmq_raft_leader_changes_total"] >= 1 for s in scrapes] == [True] * 3, scrapes

"""SDK failover against a real 3-member cluster (issue 11).

* A client cut off from the leader (its link to the leader paused; the members still talk to each other) keeps
  writing through the followers: at most the one write in flight when the link stopped fails (outcome unknown),
  the following ones succeed, forwarded by a follower.
* A stopped (SIGSTOP) leader: the SDK stops sending to it after one timeout; writes resume as soon as the other
  members have elected a new leader, while the old one is still stopped.
"""

from __future__ import annotations

from raftmq.client import Admin, Producer, errors
from tests.replication.cluster_util import wait_leader
from tests.replication.tcp_proxy import PausableProxy
from tests.support.processes import running_nodes

WRITE_TIMEOUT_S = 3.0


def _send_until(producer: Producer, topic: str, successes: int, max_attempts: int) -> tuple[int, list[str]]:
    """Send until ``successes`` writes in a row succeeded; returns (attempts, failures); fails after max_attempts."""
    in_a_row, failures = 0, []
    for attempt in range(1, max_attempts + 1):
        try:
            producer.send(topic, b"m%d" % attempt)
            in_a_row += 1
            if in_a_row >= successes:
                return attempt, failures
        except errors.RaftmqError as e:
            in_a_row = 0
            failures.append(f"{type(e).__name__}: {e}")
    raise AssertionError(f"no {successes} successful writes in a row within {max_attempts} attempts: {failures}")


def test_a_client_cut_off_from_the_leader_writes_through_followers(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        leader = wait_leader(nodes)
        proxies = {n.spec.id: PausableProxy(n.spec.grpc_port) for n in nodes}
        try:
            servers = [f"127.0.0.1:{proxies[leader.spec.id].port}"] + \
                [f"127.0.0.1:{proxies[n.spec.id].port}" for n in nodes if n is not leader]
            with Admin(servers[0]) as admin:
                admin.create_topic("Cut", queues=2)
            with Producer(servers, timeout=WRITE_TIMEOUT_S, retry_timeout=20) as p:
                p.send("Cut", b"before")
                proxies[leader.spec.id].pause()
                attempts, failures = _send_until(p, "Cut", successes=20, max_attempts=25)
                # one write may have been in flight at the leader when the link stopped; no more may fail
                assert len(failures) <= 1, failures
                assert all("UnknownOutcomeError" in f for f in failures), failures
                assert wait_leader(nodes) is leader  # the leader never changed: the writes were forwarded
        finally:
            for px in proxies.values():
                px.close()


def test_writes_resume_after_a_stopped_leader_is_replaced(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        leader = wait_leader(nodes)
        servers = [leader.grpc_address] + [n.grpc_address for n in nodes if n is not leader]
        with Admin(servers) as admin:
            admin.create_topic("Stop", queues=2)
        with Producer(servers, timeout=WRITE_TIMEOUT_S, retry_timeout=30) as p:
            p.send("Stop", b"before")
            leader.freeze()
            try:
                _, failures = _send_until(p, "Stop", successes=10, max_attempts=15)
                new_leader = wait_leader(nodes, exclude={leader.spec.id})
                assert new_leader is not leader
                assert len(failures) <= 3, failures
            finally:
                leader.thaw()

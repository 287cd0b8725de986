"""The SDK and CLI against a real 3-member cluster: redirects to the leader, leadership transfer, failover."""

from __future__ import annotations

import json
import subprocess
import sys

from raftmq.client import Admin, Producer, PullConsumer
from tests.client.test_cli_e2e import _env, eventually
from tests.support.processes import REPO_ROOT, running_nodes


def raftmq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args], capture_output=True, text=True, timeout=90,
                          env=_env(), cwd=REPO_ROOT)


def leader_of(nodes, admin: Admin):
    leader_id = admin.cluster_status().leader_id
    return next(n for n in nodes if n.spec.id == leader_id)


def read_all(servers, topic: str, expected: int) -> list:
    got = []
    with PullConsumer("checker", topic, servers, start_from="first", auto_commit=False) as c:
        for _ in range(60):
            got += c.poll(timeout=0.5)
            if len(got) >= expected:
                break
        got += c.poll(timeout=0.5)
    return got


def test_redirect_transfer_and_failover(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        everyone = [n.grpc_address for n in nodes]
        with Admin(everyone) as admin:
            leader = leader_of(nodes, admin)
            followers = [n for n in nodes if n is not leader]
            admin.create_topic("Fail", queues=2)

        # a producer that only knows a follower is redirected to the leader
        with Producer([followers[0].grpc_address]) as p:
            p.send("Fail", "m0")
            assert p.leader == leader.grpc_address

        # the CLI too, and cluster status from a follower names the leader
        r = raftmq("produce", "Fail", "--body", "m1", "--server", followers[1].grpc_address)
        assert r.returncode == 0, r.stderr
        status = json.loads(raftmq("cluster", "status", "--json", "-s", followers[1].grpc_address).stdout)
        assert status["leader_id"] == leader.spec.id and len(status["members"]) == 3

        # leadership moves on request; the old leader's address still works for writes (redirect)
        target = followers[0]
        r = raftmq("cluster", "transfer-leader", "--to", target.spec.id, "-s", leader.grpc_address)
        assert r.returncode == 0, r.stderr
        assert target.spec.id in r.stdout
        r = raftmq("produce", "Fail", "--body", "m2", "-s", leader.grpc_address)
        assert r.returncode == 0, r.stderr

        # kill the leader: a producer that knows every address carries on once a new leader is elected
        with Admin(everyone) as admin:
            current = leader_of(nodes, admin)
        current.kill()
        survivors = [n.grpc_address for n in nodes if n is not current]
        with Producer(everyone, retry_timeout=60) as p:
            sent = [p.send("Fail", f"after-{i}").uniq_key for i in range(5)]
            assert p.leader in survivors

        def dead_row() -> str:
            r = raftmq("cluster", "status", "-s", ",".join(survivors))
            assert r.returncode == 0, r.stderr
            return next(line for line in r.stdout.splitlines() if line.startswith(f"| {current.spec.id} "))

        assert "unreachable" in eventually(dead_row, lambda row: "unreachable" in row.lower()).lower()

        # a consumer whose first address is the dead member reads from the others
        got = read_all([current.grpc_address] + survivors, "Fail", 8)
        bodies = sorted(m.text for m in got)
        assert bodies == sorted(["m0", "m1", "m2"] + [f"after-{i}" for i in range(5)])
        assert {m.uniq_key for m in got} >= set(sent)

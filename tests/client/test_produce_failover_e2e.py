"""`raftmq produce --count` is an SRE's load generator: it rides through a SIGKILLed leader and accounts for every
message (ok / unknown / failed), never stopping at the first unknown outcome."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from raftmq.client import Admin
from tests.client.test_cli_e2e import _env
from tests.support.processes import REPO_ROOT, running_nodes
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

COUNT = 3000


def _stored(admin: Admin, topic: str) -> int:
    return sum(q.max_offset - q.min_offset for q in admin.queue_offsets(topic))


def test_load_rides_through_a_sigkilled_leader(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        everyone = ",".join(n.grpc_address for n in nodes)
        with Admin(everyone) as admin:
            admin.create_topic("Drill", queues=4)
            leader_id = admin.cluster_status().leader_id
        leader = next(n for n in nodes if n.spec.id == leader_id)
        survivors = [n.grpc_address for n in nodes if n is not leader]

        load = subprocess.Popen(
            [sys.executable, "-m", "raftmq.client", "produce", "Drill", "--count", str(COUNT), "--size", "64",
             "--concurrency", "4", "--json", "--server", everyone],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO_ROOT)
        try:
            with Admin(survivors) as followers:
                wait_for(lambda: _stored(followers, "Drill") >= 200, "the load to get going", timeout=120)
            leader.kill()
            out, err = load.communicate(timeout=600)
        finally:
            if load.poll() is None:
                load.kill()
                load.communicate()

        assert load.returncode in (0, 7), f"exit {load.returncode}\n{out}\n{err}"
        summary = json.loads(out.strip().splitlines()[-1])
        print({k: v for k, v in summary.items() if not k.endswith("uniq_keys")})
        assert summary["ok"] + summary["unknown"] + summary["failed"] == COUNT, summary
        assert summary["failed"] == 0 and summary["not_sent"] == 0, summary
        assert len(summary["unknown_uniq_keys"]) == summary["unknown"], summary
        assert (load.returncode == 7) == (summary["unknown"] > 0), (load.returncode, summary)
        assert summary["longest_gap_s"] > 0 and summary["sent"] == summary["ok"]

        # every acknowledged message is on the survivors; at most the unknown ones come on top
        with Admin(survivors) as admin:
            stored = wait_for(lambda: (n := _stored(admin, "Drill")) >= summary["ok"] and n, "acked messages",
                              timeout=60)
            assert summary["ok"] <= stored <= summary["ok"] + summary["unknown"], (stored, summary)

        # --server pointed at a member's Raft port by mistake: named as such, not an "outcome unknown"
        survivor = next(n for n in nodes if n is not leader)
        r = subprocess.run([sys.executable, "-m", "raftmq.client", "produce", "Drill", "--body", "x", "--timeout", "2",
                            "--server", survivor.spec.raft_address], capture_output=True, text=True, env=_env(),
                           cwd=REPO_ROOT, timeout=60)
        assert r.returncode == 5, r.stderr
        assert f"not a raftmq server at {survivor.spec.raft_address}" in r.stderr, r.stderr

"""A member that cannot catch up must say so: not ready, ``cluster status`` naming why, ``cluster check`` exit 11.

Issue 32: after a power cut one member had a compacted journal and no snapshot; it applied nothing more (applied
index 1, commit index 10,510) while it reported ready and healthy, served reads without the newer messages, and
``raftmq cluster check`` exited 0 because it compared only the range every member had applied. The state is made
here by hand on a stopped follower (snapshot deleted, applied index cut below the journal's start: no local
file can bring the missing entries, and the leader believes the follower's log matches, so it sends no
snapshot)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from raftmq.client import Admin, Producer
from raftmq.replication.pysyncobj_patches import journal_span
from tests.client.test_cli_e2e import _env
from tests.replication.cluster_util import create_topic, lead_by
from tests.replication.conftest import Cluster
from tests.support.processes import REPO_ROOT, stop_all


def raftmq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args], capture_output=True, text=True,
                          timeout=120, env=_env(), cwd=REPO_ROOT)


def test_a_member_that_cannot_apply_is_not_ready_and_fails_cluster_check(tmp_path):
    c = Cluster(tmp_path, "sync", {"compaction_min_entries": 100_000, "compaction_min_time": 3600.0})
    victim_spec = c.specs[0]  # only it compacts: the leader never does, so it never sends a snapshot
    cluster = victim_spec.overrides["cluster"]  # shared with the other specs: give it its own copy
    victim_spec.overrides["cluster"] = {**cluster, "raft": {**cluster["raft"], "compaction_min_entries": 50,
                                                            "compaction_min_time": 2.0}}
    try:
        c.start()
        run(c)
    finally:
        stop_all(c.nodes, kill=True)


def run(c: Cluster) -> None:
    servers = [n.grpc_address for n in c.nodes]
    create_topic(c.nodes, "Stuck", 2)
    leader = lead_by(c.nodes, "n1")
    victim = c.by_id("n0")
    journal = victim.spec.data_dir / "raft" / "raft.journal"
    with Producer(servers) as p:
        deadline = time.monotonic() + 90
        i = 0
        while journal_span(str(journal)).first[0] <= 1:  # until the follower compacted its journal
            assert time.monotonic() < deadline, "the follower never compacted its journal"
            for _ in range(20):
                p.send("Stuck", b"before-%d" % i)
                i += 1
    victim.stop()
    os.remove(victim.spec.data_dir / "raft" / "raft.dump")
    with open(victim.spec.data_dir / "raft" / "applied.idx", "r+b") as f:
        f.truncate(24)  # its store "applied" only the first entry
    victim.start()
    with Producer(servers) as p:
        for k in range(20):
            p.send("Stuck", b"after-%d" % k)

    with Admin([leader.grpc_address]) as admin:
        deadline = time.monotonic() + 60
        while True:
            row = next(m for m in admin.cluster_status().members if m.id == victim.spec.id)
            if "cannot apply" in row.error:
                break
            assert time.monotonic() < deadline, f"the stuck member was never reported: {row}"
            time.sleep(0.3)
    assert "rebuild-member" in row.error and row.ready is False
    code, body = victim.http_get("/ready")
    assert code != 200 and "cannot apply" in body

    r = raftmq("cluster", "check", "-s", leader.grpc_address, "--lag-wait", "3")
    assert r.returncode == 11, (r.returncode, r.stdout, r.stderr)
    assert "LAGS" in r.stdout and victim.spec.id in r.stderr and "cannot apply" in r.stderr

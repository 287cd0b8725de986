"""Anti-entropy (issue 33): how long a pass over a member's commit log takes, what it costs, what it costs writes.

Three figures against baselines from the same run (the box is shared: absolute numbers drift):

1. ``pass (unbounded)``: a 3-member cluster holding ``--log-mb`` of commit log restarts with an unlimited
   anti-entropy rate; every member runs its first pass at once (each digests its own log and answers its two peers'
   questions). Per member: the pass's wall time (``raftmq_anti_entropy_last_pass_duration_seconds``) and the CPU
   seconds its process used meanwhile, per GiB compared; the baseline is ``raftmq cluster check --no-queues`` over the
   same range (one comparison of all three members).
2. ``period``: what a pass takes at the default rate (log size / rate) plus the pause between passes.
3. ``put with anti-entropy``: SDK ``send_batch`` throughput (1 KiB messages, batches of 32) with anti-entropy off,
   and at the default rate comparing continuously (a 1 s pause between passes).

    .venv/bin/python bench/anti_entropy_bench.py [--log-mb 256] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto")]

from raftmq.client import Admin, Producer  # noqa: E402
from raftmq.replication.raft_write_path import RaftSettings  # noqa: E402
from tests.support.metrics import metric_sum  # noqa: E402
from tests.support.processes import node_specs, start_nodes, stop_all  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

STORE = {"mapped_file_size_commit_log": 64 << 20, "scrub_rate_bytes_per_s": 0, "max_hash_slot_num": 100_000,
         "max_message_size": 4 << 20, "mapped_file_size_consume_queue": 20 * 300_000,
         "max_index_num": 400_000}
DEFAULT_RATE = RaftSettings.anti_entropy_bytes_per_s
DEFAULT_INTERVAL = RaftSettings.anti_entropy_interval_s


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def restart(nodes, raft: dict) -> None:
    stop_all(nodes)
    for n in nodes:
        n.spec.overrides.setdefault("cluster", {})["raft"] = raft
    for n in nodes:
        n.start()
    for n in nodes:
        n.wait_ready(120)


def produce(servers: list[str], seconds: float, body: bytes) -> float:
    sent, t0 = 0, time.perf_counter()
    with Producer(servers) as p:
        while time.perf_counter() - t0 < seconds:
            p.send_batch("AE", [body] * 32)
            sent += 32
    return sent / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log-mb", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    body = os.urandom(1024)
    with tempfile.TemporaryDirectory(prefix="ae-bench-") as tmp:
        specs = node_specs(Path(tmp), 3, store=STORE, cluster={"raft": {"anti_entropy_bytes_per_s": 0}})
        nodes = start_nodes(specs)
        try:
            servers = [n.grpc_address for n in nodes]
            with Admin(servers) as admin:
                admin.create_topic("AE", queues=8)
            with Producer(servers) as p:
                while sum(metric_sum(n, "rocketmq_storage_size") for n in nodes[:1]) < args.log_mb << 20:
                    p.send_batch("AE", [body] * 256)
            off = produce(servers, args.seconds, body)
            size = metric_sum(nodes[0], "rocketmq_storage_size")
            env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'proto'}"}
            t0 = time.perf_counter()
            check = subprocess.run([sys.executable, "-m", "raftmq.client", "cluster", "check", "--no-queues", "-s",
                                    servers[0]], env=env, capture_output=True, text=True, timeout=3600)
            check_s = time.perf_counter() - t0
            assert check.returncode == 0, check.stdout + check.stderr

            restart(nodes, {"anti_entropy_bytes_per_s": 1 << 40, "anti_entropy_interval_s": 3600})
            wait_for(lambda: any(metric_sum(n, "raftmq_anti_entropy_bytes_total") > 0 for n in nodes),
                     "the first pass to start", timeout=120, interval=0.02)  # ~30 s after the start
            before = {n.spec.id: cpu_seconds(n.proc.pid) for n in nodes}
            wait_for(lambda: all(metric_sum(n, "raftmq_anti_entropy_passes_total") >= 1 for n in nodes),
                     "every member's first pass", timeout=3600, interval=0.5)
            gib = size / (1 << 30)
            print(f"commit log: {size / 1e6:.0f} MB per member, 3 members, 1 KiB messages")
            print(f"baseline: raftmq cluster check --no-queues over it: {check_s:.2f}s")
            for n in nodes:
                took = metric_sum(n, "raftmq_anti_entropy_last_pass_duration_seconds")
                cpu = cpu_seconds(n.proc.pid) - before[n.spec.id]
                print(f"pass (unbounded) on {n.spec.id}: {took:.2f}s ({size / 1e6 / took:.0f} MB/s, "
                      f"{took / check_s:.2f}x the check); process CPU during the passes {cpu:.2f}s = "
                      f"{cpu / gib:.1f} CPU-s per GiB compared (own pass + answering two peers)")
            print(f"period at the default rate ({DEFAULT_RATE >> 20} MiB/s, {DEFAULT_INTERVAL:.0f}s pause): "
                  f"{size / DEFAULT_RATE + DEFAULT_INTERVAL:.0f}s for this log; {(1 << 30) / DEFAULT_RATE:.0f}s per GiB "
                  "of commit log + the pause")

            restart(nodes, {"anti_entropy_bytes_per_s": DEFAULT_RATE, "anti_entropy_interval_s": 1})
            wait_for(lambda: all(metric_sum(n, "raftmq_anti_entropy_bytes_total") > 0 for n in nodes),
                     "anti-entropy comparing on every member", timeout=120)
            on = produce(servers, args.seconds, body)
            print(f"put, anti-entropy off: {off:.0f} msgs/s (1.00)")
            print(f"put, anti-entropy at {DEFAULT_RATE >> 20} MiB/s continuously: {on:.0f} msgs/s ({on / off:.2f})")
        finally:
            stop_all(nodes)


if __name__ == "__main__":
    main()

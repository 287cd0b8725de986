"""Idle-cluster stability under CPU load: does leadership stay put while other processes keep the cores busy?

Not a test: it prints numbers and never fails. A 3-member cluster of real node processes sits idle (no writes)
while ``--burners`` processes spin on the CPU for ``--seconds``; afterwards it prints, per member, the Raft term
changes, elections, pre-votes and tick-thread stalls it saw (from /metrics), and the time without a leader.
Issue 11 measured the term going from 1 to 25 in an hour on such a box before pre-vote and the stall fixes.

    .venv/bin/python bench/idle_stability_bench.py --seconds 1800 --burners 2     # the issue's 30 minutes
    .venv/bin/python bench/idle_stability_bench.py --seconds 120
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "proto"))

COUNTERS = ("raftmq_raft_term_changes_total", "raftmq_raft_elections_total", "raftmq_raft_pre_votes_total",
            "raftmq_raft_tick_stalls_total", "raftmq_raft_leaderless_seconds_total")


def burn(stop_at: float) -> None:
    x = 0
    while time.time() < stop_at:
        x += 1


def scrape(node) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    _, text = node.http_get("/metrics", timeout=10)
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in COUNTERS or s.name == "raftmq_raft_term":
                out[s.name] = s.value
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--burners", type=int, default=2, help="busy-looping processes (default 2: both cores)")
    ap.add_argument("--raft", default="{}", help="cluster.raft overrides as JSON")
    args = ap.parse_args()

    from tests.support.processes import node_specs, start_nodes, stop_all

    base = Path(tempfile.mkdtemp(prefix="raftmq-idle-"))
    specs = node_specs(base, 3, cluster={"raft": json.loads(args.raft)})
    nodes = start_nodes(specs, timeout=120)
    try:
        time.sleep(2.0)  # the first election settles
        before = {n.spec.id: scrape(n) for n in nodes}
        stop_at = time.time() + args.seconds
        burners = [multiprocessing.Process(target=burn, args=(stop_at,), daemon=True) for _ in range(args.burners)]
        for b in burners:
            b.start()
        for b in burners:
            b.join()
        after = {n.spec.id: scrape(n) for n in nodes}
        print(f"idle 3-member cluster, {args.burners} CPU burners, {args.seconds:.0f} s, raft={args.raft}")
        for nid in sorted(after):
            delta = {k.removeprefix("raftmq_raft_").removesuffix("_total"):
                     round(after[nid].get(k, 0) - before[nid].get(k, 0), 2) for k in COUNTERS}
            print(f"  {nid}: term {before[nid].get('raftmq_raft_term', 0):.0f} -> "
                  f"{after[nid].get('raftmq_raft_term', 0):.0f}  {delta}")
    finally:
        stop_all(nodes, kill=True)


if __name__ == "__main__":
    main()

"""How raftmq uses the cores it is given (issue 17): members pinned with ``taskset`` to 1 CPU and to 2, producers
through gRPC + the SDK, as a user runs them. For each run it prints msgs/s, the cores each member used, and where
the leader's and a follower's CPU went, per raftmq thread (their kernel names, see ``store.thread_name``: the main
thread runs the gRPC event loop). From the shares it projects what moving reput into its own process would give a
member with cores to spare: one interpreter runs Python on at most one core at a time, so a member whose Python
threads already fill one core gains at most ``1 / (1 - reput share)``. Never fails on time.

    .venv/bin/python bench/core_scaling_bench.py [--members 1,3] [--cpus 0/0-1] [--producers 64] [--batch 32]

``--cpus``: the CPU sets to pin every member to, separated by ``/`` (taskset's list syntax). Producers run on the
CPUs outside the set when there are any (so ``0`` means: members on CPU 0, producers on the rest), else beside
the members.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto"), str(REPO / "bench")]

import peer_bench  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from raftmq.store.thread_name import cpu_seconds_by_thread  # noqa: E402
from tests.support.processes import NodeProcess, node_specs, stop_all  # noqa: E402


def _is_leader(node: NodeProcess) -> bool:
    _, text = node.http_get("/metrics")
    for family in text_string_to_metric_families(text):
        if family.name == "raftmq_raft_is_leader":
            return any(sample.value == 1 for sample in family.samples)
    return False


def _start(base: Path, members: int, cpus: str) -> list[NodeProcess]:
    specs = node_specs(base, members, store=peer_bench.BENCH_STORE, node={"log_level": "WARNING"},
                       cluster={"durability": "async"})
    nodes = []
    try:
        for spec in specs:
            nodes.append(NodeProcess(spec).start(wrap=lambda argv: ["taskset", "-c", cpus, *argv]))
        for n in nodes:
            n.wait_ready(120)
    except BaseException:
        stop_all(nodes)
        raise
    return nodes


def _cpu_list(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def run(base: Path, members: int, cpus: str, producers: int, batch: int, args) -> dict:
    nodes = _start(base / f"m{members}-cpus{cpus.replace(',', '_')}", members, cpus)
    try:
        peer_bench.create_topic(nodes)
        pids = [n.proc.pid for n in nodes]
        leader = next((i for i, n in enumerate(nodes) if members == 1 or _is_leader(n)), 0)
        rest = set(range(os.cpu_count() or 1)) - _cpu_list(cpus)
        mine = os.sched_getaffinity(0)
        try:
            if rest:
                os.sched_setaffinity(0, rest)  # the producer processes inherit it
            r = peer_bench.drive_raftmq(nodes, producers, batch, args, pids,
                                        probe=lambda: (time.perf_counter(), [cpu_seconds_by_thread(p) for p in pids]))
        finally:
            os.sched_setaffinity(0, mine)
    finally:
        stop_all(nodes)
    (t0, before), (t1, after) = r.pop("probe")
    wall = t1 - t0
    per_member = [{k: v - b.get(k, 0.0) for k, v in a.items()} for a, b in zip(after, before, strict=True)]
    r["cores"] = [sum(m.values()) / wall for m in per_member]
    r["leader"] = per_member[leader]
    r["follower"] = next((m for i, m in enumerate(per_member) if i != leader), None)
    return r


def _shares(threads: dict[str, float], top: int = 6) -> str:
    total = sum(threads.values()) or 1.0
    ranked = sorted(threads.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{name} {v / total:.0%}" for name, v in ranked[:top])
    return shown + (f", other {sum(v for _, v in ranked[top:]) / total:.0%}" if len(ranked) > top else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", default="1,3")
    ap.add_argument("--cpus", default="0/0-1", help="CPU sets (taskset -c syntax) separated by /")
    ap.add_argument("--producers", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--client-procs", type=int, default=2, help="producer processes")
    peer_bench.add_sdk_arguments(ap)
    args = ap.parse_args()
    if shutil.which("taskset") is None:
        print("taskset (util-linux) is needed to pin the members", file=sys.stderr)
        return 2
    runs = [(int(m), c) for m in args.members.split(",") for c in args.cpus.split("/")]
    results = {}
    with tempfile.TemporaryDirectory(prefix="raftmq-core-scaling-") as d:
        for members, cpus in runs:
            results[(members, cpus)] = run(Path(d), members, cpus, args.producers, args.batch, args)
            print(f"members {members}, CPUs {cpus}: {results[(members, cpus)]['msgs_s']:.0f} msgs/s", flush=True)

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nraftmq members pinned with taskset, async durability, {args.producers} producers x {args.batch} messages "
          f"of {args.size} B per request, gRPC + SDK, {args.seconds:.0f} s per run, {os.cpu_count()} CPUs "
          f"(load average {load})\n")
    hdr = f"{'members':>7} {'CPUs':>5} {'msgs/s':>8} {'p99 ms':>7} {'srv us':>6}  cores used per member"
    print(hdr)
    print("-" * (len(hdr) + 12))
    for (members, cpus), r in results.items():
        print(f"{members:7d} {cpus:>5} {r['msgs_s']:8.0f} {r['p99_ms']:7.1f} {r['server_us']:6.0f}  "
              + " ".join(f"{c:.2f}" for c in r["cores"]))
    print("\nwhere the CPU went (share of the member's CPU seconds, by kernel thread name; main: the gRPC event loop):")
    for (members, cpus), r in results.items():
        print(f"  {members} member(s), CPUs {cpus}, leader: {_shares(r['leader'])}")
        if r["follower"]:
            print(f"  {members} member(s), CPUs {cpus}, follower: {_shares(r['follower'])}")
    print("\nreput in its own process (projection from these shares): the request process keeps everything but reput")
    for (members, cpus), r in results.items():
        for role in ("leader", "follower"):
            threads = r[role]
            if not threads:
                continue
            total = sum(threads.values()) or 1.0
            share = threads.get("reput", 0.0) / total
            print(f"  {members} member(s), CPUs {cpus}, {role}: reput {share:.0%} of its CPU -> at most "
                  f"{1 / (1 - share):.2f}x when the request process is the bottleneck and a core is free for reput")
    return 0


if __name__ == "__main__":
    sys.exit(main())

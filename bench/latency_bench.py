"""A lone send's latency and where it goes (issue 41): one producer, 3 members on loopback, async durability,
one message at a time through the SDK (``Producer.send``, waiting for each answer).

Prints the client's p50 / p90 / p99 and the breakdown of the mean send, from the leader's own instruments read
over ``/metrics`` before and after each run (no per-message tracing; docs/benchmarks.md#a-lone-send):

* **handler**: the leader's time in the send's RPC (``raftmq_rpc_latency_seconds``: ``SendStream.request`` for
  the default streaming producer, ``SendMessage`` for ``linger_ms=0``), split into
  * **group commit wait**, **propose** (screen, encode, frame), **Raft round** (followers' round trip and the
    commit notice) and **apply** (the leader's store append): ``raftmq_write_stage_seconds``, means per Raft
    entry, which for lone sends is one send;
  * **hand-back**: the rest of the put (``raftmq_put_latency_seconds``): the completion reaching the event loop;
  * **checks + answer**: the rest of the handler (prepare, convert, the response);
* **wire**: gRPC on both sides and loopback, estimated in the same run by a cheap unary call
  (``GetQueueOffsets``: its median client round trip minus its mean handler time);
* **SDK**: the rest of the client's time (the producer's threads, hand-offs, (de)serialization).

Several producer variants (``--variants stream,unary``) run interleaved, ``--rounds`` times each (A B A B ...);
``--raft KEY=V1,V2`` starts one group per value of that ``cluster.raft`` setting (all running at once) and runs
every producer variant against each, interleaved too: a same-run A/B of a server setting (half of the rounds
with the groups started in reverse order, so no value keeps the better-placed group). The table shows the
median of the rounds per row and each variant's ratio to the first. Also prints the three members' CPU per
message. Never fails on time.

    .venv/bin/python bench/latency_bench.py [--seconds 4] [--rounds 3] [--size 1024] [--variants stream,unary]
                                            [--raft inline_propose_bytes=0,65536] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto")]

from bench.peer_processes import cpu_seconds  # noqa: E402
from raftmq.client.producer import Producer  # noqa: E402
from raftmq.v1 import raftmq_pb2 as pb  # noqa: E402
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc  # noqa: E402
from tests.rocketmq5.raftmq_side import create_topic, leader_of  # noqa: E402
from tests.support.metrics import samples  # noqa: E402
from tests.support.processes import node_specs, start_nodes, stop_all  # noqa: E402

TOPIC = "latency"
STAGES = ("group_commit_wait", "propose", "raft_round", "apply")
VARIANTS = {"stream": None, "unary": 0.0}  # name -> the producer's linger_ms (None: the default, streaming)
HANDLER = {"stream": "SendStream.request", "unary": "SendMessage"}  # the rpc metric's method label
PROBE = "GetQueueOffsets"
STORE = {"mapped_file_size_commit_log": 64 << 20}


def server_figures(node) -> dict[str, tuple[float, float]]:
    """{series: (count, sum seconds)} of the leader's instruments the breakdown uses, now."""
    out: dict[str, list[float]] = {}

    def add(key: str, suffix: str, value: float) -> None:
        pair = out.setdefault(key, [0.0, 0.0])
        pair[0 if suffix == "_count" else 1] += value

    for s in samples(node):
        for suffix in ("_count", "_sum"):
            if not s.name.endswith(suffix):
                continue
            base = s.name.removesuffix(suffix)
            if base == "raftmq_rpc_latency_seconds" and s.labels.get("code") == "OK":
                add(f"rpc:{s.labels['method']}", suffix, s.value)
            elif base == "raftmq_put_latency_seconds":
                add("put", suffix, s.value)
            elif base == "raftmq_write_stage_seconds":
                add(f"stage:{s.labels['stage']}", suffix, s.value)
    return {k: (v[0], v[1]) for k, v in out.items()}


def mean_between(before: dict, after: dict, key: str) -> float:
    """Mean seconds of one series over the run (NaN when nothing was recorded)."""
    c0, s0 = before.get(key, (0.0, 0.0))
    c1, s1 = after.get(key, (0.0, 0.0))
    return (s1 - s0) / (c1 - c0) if c1 > c0 else float("nan")


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def probe_wire(leader, seconds: float) -> list[float]:
    """Client round trips of a cheap unary call to the leader (the wire estimate's numerator)."""
    stub = pb_grpc.MessagingServiceStub(leader.channel())
    req = pb.GetQueueOffsetsRequest(topic=TOPIC)
    out = []
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        t0 = time.perf_counter()
        stub.GetQueueOffsets(req, timeout=10)
        out.append(time.perf_counter() - t0)
    return out


def run_variant(name: str, servers: list[str], leader, nodes, size: int, seconds: float, threads: int) -> dict:
    """One closed-loop run of sends from ``threads`` threads sharing one producer of variant ``name`` (1: lone
    sends); client and server figures."""
    name = name.split(" ")[0]  # "stream raft.x=1": the producer variant, against the group of raft.x=1
    linger = VARIANTS[name]
    producer = Producer(servers) if linger is None else Producer(servers, linger_ms=linger)
    body = b"x" * size
    try:
        for _ in range(50):  # the stream / channel is open and warm before measuring
            producer.send(TOPIC, body)
        pids = [n.proc.pid for n in nodes]
        before = server_figures(leader)
        cpu0, client0 = cpu_seconds(pids), time.process_time()
        latencies: list[float] = []
        stop = time.monotonic() + seconds

        def sender() -> None:
            mine = []
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                producer.send(TOPIC, body)
                mine.append(time.perf_counter() - t0)
            latencies.extend(mine)

        senders = [threading.Thread(target=sender) for _ in range(threads)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        cpu1, client1 = cpu_seconds(pids), time.process_time()
        mid = server_figures(leader)
        probes = probe_wire(leader, min(1.0, seconds / 4))
        after = server_figures(leader)
    finally:
        producer.close()
    latencies.sort()
    n = len(latencies)
    fig = {"sends": n, "msgs_s": n / seconds, "p50": pct(latencies, 0.5), "p90": pct(latencies, 0.9),
           "p99": pct(latencies, 0.99), "client": statistics.fmean(latencies),
           "server_cpu_us": (cpu1 - cpu0) / n * 1e6, "client_cpu_us": (client1 - client0) / n * 1e6}
    fig["handler"] = mean_between(before, mid, f"rpc:{HANDLER[name]}")
    fig["put"] = mean_between(before, mid, "put")
    for stage in STAGES:
        fig[stage] = mean_between(before, mid, f"stage:{stage}")
    fig["wire"] = statistics.median(probes) - mean_between(mid, after, f"rpc:{PROBE}")
    fig["raft_round_only"] = fig["raft_round"] - fig["apply"]
    fig["hand_back"] = fig["put"] - fig["group_commit_wait"] - fig["propose"] - fig["raft_round"]
    fig["checks"] = fig["handler"] - fig["put"]
    fig["sdk"] = fig["client"] - fig["handler"] - fig["wire"]
    return fig


ROWS = (  # (label, key, indent): ms rows of the table
    ("client p50", "p50", 0), ("client p90", "p90", 0), ("client p99", "p99", 0), ("client mean", "client", 0),
    ("SDK (client - handler - wire)", "sdk", 1), ("wire (gRPC both sides, est.)", "wire", 1),
    ("handler (leader, RPC)", "handler", 1), ("checks + answer", "checks", 2),
    ("group commit wait", "group_commit_wait", 2), ("propose (screen, encode)", "propose", 2),
    ("Raft round (excl. apply)", "raft_round_only", 2), ("apply (leader's append)", "apply", 2),
    ("hand-back to the event loop", "hand_back", 2),
)


def report(results: dict[str, list[dict]], args: argparse.Namespace) -> None:
    names = list(results)
    med = {v: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for v, rs in results.items()}
    who = "lone sends: 1 thread" if args.threads == 1 else f"{args.threads} threads sharing it (sync sends)"
    print(f"== 1 producer, {who}, 3 members, async durability, {args.size} B bodies, {args.seconds:g} s x "
          f"{args.rounds} rounds per variant, interleaved; medians of the rounds (ms)")
    print("  " + "; ".join(f"{chr(65 + i)} = {v}" for i, v in enumerate(names)))
    names_ = [chr(65 + i) for i in range(len(names))]
    head = "".join(f"{v:>12}" for v in names_)
    ratios = "".join(f"{f'{v}/A':>14}" for v in names_[1:])
    print(f"  {'':<34}{head}{ratios}")
    for label, key, indent in ROWS:
        cells = "".join(f"{med[v][key] * 1e3:12.3f}" for v in names)
        rel = "".join(f"{med[v][key] / med[names[0]][key]:14.2f}" if med[names[0]][key] else f"{'-':>14}"
                      for v in names[1:])
        print(f"  {'  ' * indent + label:<34}{cells}{rel}")
    for label, key in (("sends/s", "msgs_s"), ("server CPU us/msg (3 members)", "server_cpu_us"),
                       ("bench process CPU us/msg", "client_cpu_us")):
        cells = "".join(f"{med[v][key]:12.0f}" for v in names)
        rel = "".join(f"{med[v][key] / med[names[0]][key]:14.2f}" for v in names[1:])
        print(f"  {label:<34}{cells}{rel}")
    print("  per round, client p50 ms: " + "; ".join(
        f"{v} " + " ".join(f"{r['p50'] * 1e3:.2f}" for r in rs) for v, rs in results.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="measured seconds per variant and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1, help="sending threads sharing the producer (1: lone sends)")
    ap.add_argument("--variants", default="stream,unary", help=f"producer variants, of {', '.join(VARIANTS)}")
    ap.add_argument("--raft", default="", help="KEY=V1,V2: one group per value of cluster.raft.KEY (an A/B)")
    args = ap.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    groups: list[tuple[str, dict]] = [("", {})]
    if args.raft:
        key, _, values = args.raft.partition("=")
        if not key or not values:
            ap.error("--raft takes KEY=V1,V2 (a cluster.raft setting and its values)")
        groups = [(f" raft.{key}={v}", {key: float(v) if "." in v else int(v)}) for v in values.split(",")]
    results: dict[str, list[dict]] = {}
    # groups of one run differ by where they happen to run (an A/A run showed 0.69x between two identical groups
    # on a loaded box), so with several groups the rounds are split in two and the groups started again in
    # reverse order for the second half: each value runs in each position
    halves = [groups] if len(groups) == 1 else [groups, groups[::-1]]
    with tempfile.TemporaryDirectory() as d:
        for h, order in enumerate(halves):
            rounds = args.rounds if len(halves) == 1 else (args.rounds + 1 - h) // 2
            run_groups(Path(d) / f"half{h}", order, variants, rounds, args, results)
    report(results, args)


def run_groups(base: Path, groups: list[tuple[str, dict]], variants: list[str], rounds: int,
               args: argparse.Namespace, results: dict[str, list[dict]]) -> None:
    """Start ``groups`` (3 members each, all at once) and run every variant against each, ``rounds`` times."""
    clusters: list[list] = []
    try:
        targets = []  # (variant label, servers, leader, nodes)
        for i, (label, raft) in enumerate(groups):
            nodes = start_nodes(node_specs(base / f"g{i}", 3, store=STORE, cluster={"raft": raft}))
            clusters.append(nodes)
            leader = leader_of(nodes)
            create_topic(leader, TOPIC)
            for v in variants:
                targets.append((v + label, [n.grpc_address for n in nodes], leader, nodes))
        for _ in range(rounds):
            for name, servers, leader, nodes in targets:
                results.setdefault(name, []).append(
                    run_variant(name, servers, leader, nodes, args.size, args.seconds, args.threads))
    finally:
        for nodes in clusters:
            stop_all(nodes)


if __name__ == "__main__":
    main()

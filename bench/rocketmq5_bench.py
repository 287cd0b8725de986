"""The official RocketMQ 5 Java and Python Producers against raftmq, next to raftmq's own SDK in the same run (issue 13).

Both send synchronously from ``threads`` threads (one send in flight per thread) for ``--seconds``, 1 KiB bodies
by default, to one node and to a 3-member group (async durability: acknowledged once a majority has it). The
Python client runs in its own venv and process (tests/rocketmq5/client_venv.py builds it, cached), the Java
client (rocketmq-client-java 5.0.8) in a JVM (tests/rocketmq5/java/build.sh builds its driver, cached); raftmq's
SDK rows use its unary path (``linger_ms=0``: one SendMessage per send, like the official client) and its
default streaming path. Then the same Java client against a real Apache RocketMQ 5 (name server + proxy with its
broker, from Maven Central: bench/rocketmq5_proxy.py; ASYNC_FLUSH, one broker), next to raftmq's single node.
Prints msgs/s and p50/p99 latency; never fails on time.

    .venv/bin/python bench/rocketmq5_bench.py [--seconds 5] [--size 1024] [--threads 8,64] [--members 1,3]
                                              [--skip-rocketmq]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto")]

from bench.rocketmq5_proxy import VERSION as ROCKETMQ_VERSION  # noqa: E402
from bench.rocketmq5_proxy import RocketMQ5  # noqa: E402
from raftmq.client.producer import Producer  # noqa: E402
from tests.rocketmq5.client_venv import DRIVERS, build_client_venv  # noqa: E402
from tests.rocketmq5.raftmq_side import create_topic, leader_of  # noqa: E402
from tests.support.processes import node_specs, start_nodes, stop_all  # noqa: E402


def official(python: Path, endpoints: str, topic: str, size: int, threads: int, seconds: float, home: Path) -> dict:
    plan = {"endpoints": endpoints, "topics": [topic], "request_timeout": 10,
            "steps": [{"op": "bench", "topic": topic, "size": size, "threads": threads, "seconds": seconds}]}
    home.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([str(python), str(DRIVERS / "producer.py"), json.dumps(plan)], cwd=home,
                         env={"HOME": str(home), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                         timeout=seconds + 120)
    for line in out.stdout.splitlines():
        if '"op": "bench"' in line:
            return json.loads(line)
    raise RuntimeError(f"the official client's bench printed nothing:\n{out.stderr[-2000:]}")


def java_official(classpath: str, endpoints: str, topic: str, size: int, threads: int, seconds: float) -> dict:
    out = subprocess.run(["java", "-cp", classpath, "io.raftmq.rmq5.Driver", "produce", f"endpoints={endpoints}",
                          f"topic={topic}", f"size={size}", f"threads={threads}", f"seconds={int(seconds)}",
                          "request_timeout_s=10"], capture_output=True, text=True, timeout=seconds + 120)
    for line in out.stdout.splitlines():
        r = json.loads(line)
        if r.get("op") == "bench":
            rate = r["msgs_s"] or 1e-9
            return {"sent": r["sent"], "errors": r["failed"], "first_error": [], "seconds": r["sent"] / rate,
                    "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]}
    raise RuntimeError(f"the Java client's bench printed nothing:\n{out.stderr[-2000:]}")


def java_receive(classpath: str, endpoints: str, topic: str, group: str, count: int) -> float:
    """msgs/s of the Java SimpleConsumer receiving (16 per call) and acking ``count`` stored messages."""
    out = subprocess.run(["java", "-cp", classpath, "io.raftmq.rmq5.Driver", "simple", f"endpoints={endpoints}",
                          f"topic={topic}", f"group={group}", f"count={count}", "quiet=true", "timeout_s=300"],
                         capture_output=True, text=True, timeout=400)
    for line in out.stdout.splitlines():
        r = json.loads(line)
        if r.get("op") == "drained":
            return r["msgs_s"]
    raise RuntimeError(f"the Java SimpleConsumer printed nothing:\n{out.stderr[-2000:]}")


def sdk_receive(servers: str, topic: str, group: str, count: int) -> float:
    """msgs/s of raftmq's own SimpleConsumer receiving (16 per call) and acking ``count`` stored messages."""
    from raftmq.client import SimpleConsumer

    got = 0
    t0 = time.monotonic()
    with SimpleConsumer(group, topic, servers.split(",")) as c:
        while got < count and time.monotonic() - t0 < 300:
            msgs = c.receive(16, 30)
            if msgs:
                c.ack(msgs)
                got += len(msgs)
    return got / (time.monotonic() - t0)


def sdk(servers: str, topic: str, size: int, threads: int, seconds: float, linger_ms: float | None) -> dict:
    producer = Producer(servers) if linger_ms is None else Producer(servers, linger_ms=linger_ms)
    body = b"x" * size
    stop_at = time.monotonic() + seconds
    latencies: list[float] = []
    errors: list[str] = []

    def worker():
        mine = []
        while time.monotonic() < stop_at:
            t0 = time.perf_counter()
            try:
                producer.send(topic, body)
                mine.append(time.perf_counter() - t0)
            except Exception as e:  # noqa: BLE001 - counted and shown
                errors.append(str(e)[:200])
        latencies.extend(mine)

    t0 = time.monotonic()
    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.monotonic() - t0
    producer.close()
    latencies.sort()
    pick = (lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000) if latencies else None
    return {"sent": len(latencies), "errors": len(errors), "first_error": errors[:1], "seconds": elapsed,
            "p50_ms": pick(0.5) if pick else None, "p99_ms": pick(0.99) if pick else None}


def row(label: str, r: dict, base: float | None) -> str:
    rate = r["sent"] / r["seconds"] if r["seconds"] else 0.0
    ratio = f"{rate / base:5.2f}" if base else "  -  "
    p50 = f"{r['p50_ms']:7.2f}" if r["p50_ms"] is not None else "      -"
    p99 = f"{r['p99_ms']:7.2f}" if r["p99_ms"] is not None else "      -"
    err = f"  errors {r['errors']} {r['first_error']}" if r["errors"] else ""
    return f"  {label:<34} {rate:9.0f} {p50} {p99}  {ratio}{err}"


def _offsets(servers: str, topic: str):
    from raftmq.client import Admin

    with Admin(servers.split(",")) as admin:
        return admin.queue_offsets(topic)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--threads", default="8,64")
    ap.add_argument("--members", default="1,3")
    ap.add_argument("--receive", type=int, default=5000, help="messages each consumer receives and acks")
    ap.add_argument("--skip-rocketmq", action="store_true", help="no rows against a real RocketMQ 5")
    args = ap.parse_args()
    java_rates: dict[tuple[int, str], float] = {}  # (members, what) -> msgs/s of the Java client on raftmq
    python = build_client_venv()
    classpath = subprocess.run([str(REPO / "tests/rocketmq5/java/build.sh")], capture_output=True, text=True,
                               check=True).stdout.strip().splitlines()[-1]
    for members in [int(x) for x in args.members.split(",")]:
        with tempfile.TemporaryDirectory() as d:
            nodes = start_nodes(node_specs(Path(d), members, store={"max_message_size": 4 << 20,
                                                                   "mapped_file_size_commit_log": 64 << 20}))
            try:
                create_topic(leader_of(nodes), "bench")
                endpoints = ";".join(n.grpc_address for n in nodes)
                servers = ",".join(n.grpc_address for n in nodes)
                print(f"== {members} member(s), {args.size} B bodies, {args.seconds:.0f} s per row, async durability")
                print(f"  {'client (sync sends)':<34} {'msgs/s':>9} {'p50 ms':>7} {'p99 ms':>7}  vs SDK unary")
                for threads in [int(x) for x in args.threads.split(",")]:
                    base = sdk(servers, "bench", args.size, threads, args.seconds, linger_ms=0)
                    base_rate = base["sent"] / base["seconds"]
                    print(row(f"raftmq SDK unary, {threads} threads", base, base_rate))
                    print(row(f"raftmq SDK stream, {threads} threads",
                              sdk(servers, "bench", args.size, threads, args.seconds, None), base_rate))
                    print(row(f"RocketMQ 5 Python client, {threads} thr",
                              official(python, endpoints, "bench", args.size, threads, args.seconds,
                                       Path(d) / f"home-{threads}"), base_rate))
                    java = java_official(classpath, endpoints, "bench", args.size, threads, args.seconds)
                    java_rates[(members, f"send {threads}")] = java["sent"] / java["seconds"]
                    print(row(f"RocketMQ 5 Java client, {threads} thr", java, base_rate))
                stored = sum(o.max_offset for o in _offsets(servers, "bench"))
                receive_n = min(stored, args.receive)
                sdk_rate = sdk_receive(servers, "bench", "sdk-receivers", receive_n)
                java_rate = java_receive(classpath, endpoints, "bench", "java-receivers", receive_n)
                print(f"  receive + ack {receive_n} stored messages, 16 per receive, 1 consumer:")
                print(f"  {'raftmq SDK SimpleConsumer':<34} {sdk_rate:9.0f}")
                print(f"  {'RocketMQ 5 Java SimpleConsumer':<34} {java_rate:9.0f}  {java_rate / sdk_rate:5.2f}")
                java_rates[(members, "receive")] = java_rate
            finally:
                stop_all(nodes)
    if not args.skip_rocketmq:
        rocketmq(classpath, args, java_rates)


def rocketmq(classpath: str, args: argparse.Namespace, java_rates: dict[tuple[int, str], float]) -> None:
    """The same Java client against Apache RocketMQ's own broker + proxy; ratios against raftmq's single node."""
    with RocketMQ5(topic="bench") as rmq:
        print(f"== Apache RocketMQ {ROCKETMQ_VERSION}: name server + proxy (local mode, broker inside), ASYNC_FLUSH, "
              f"{args.size} B bodies, {args.seconds:.0f} s per row")
        print(f"  {'client (sync sends)':<34} {'msgs/s':>9} {'p50 ms':>7} {'p99 ms':>7}  vs raftmq 1 node, same client")
        for threads in [int(x) for x in args.threads.split(",")]:
            r = java_official(classpath, rmq.endpoint, "bench", args.size, threads, args.seconds)
            print(row(f"RocketMQ 5 Java client, {threads} thr", r, java_rates.get((1, f"send {threads}"))))
        rate = java_receive(classpath, rmq.endpoint, "bench", "java-receivers", args.receive)
        ours = java_rates.get((1, "receive"))
        print(f"  {'RocketMQ 5 Java SimpleConsumer':<34} {rate:9.0f}" + (f"{'':18}{rate / ours:5.2f}" if ours else ""))


if __name__ == "__main__":
    main()

"""The official RocketMQ 5 Java and Python Producers against raftmq and against Apache RocketMQ 5 (issues 13, 41).

First the comparison: a real Apache RocketMQ 5.3.3 (name server + proxy in local mode with its broker inside,
ASYNC_FLUSH, one broker; started from Maven Central's jars, fetched once by Maven: bench/rocketmq5_proxy.py) and
raftmq (one node and a 3-member group, async durability: acknowledged once a majority applied it) run at the same
time; the same Java client (rocketmq-client-java 5.0.8, tests/rocketmq5/java/build.sh builds its driver, cached)
and the Python client (its own venv and process, tests/rocketmq5/client_venv.py) send synchronously from
``threads`` threads (one send in flight each, one message per SendMessage) for ``--seconds`` to each target in
turn, ``--rounds`` interleaved rounds after ``--warmup`` seconds of Java sends to each (not counted: RocketMQ's
JVMs compile their hot paths); prints the medians and raftmq's rate over RocketMQ's for each client.

Then every client against raftmq alone, next to raftmq's own SDK (its unary path, ``linger_ms=0``: one
SendMessage per send like the official clients, and its default streaming path), and the SimpleConsumers
receiving. Prints msgs/s and p50/p99 latency; never fails on time.

    .venv/bin/python bench/rocketmq5_bench.py [--seconds 5] [--size 1024] [--threads 8,64] [--members 1,3]
                                              [--rounds 3] [--warmup 5] [--only-compare] [--skip-rocketmq]
"""

from __future__ import annotations

import argparse
import json
import statistics
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
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the comparison with RocketMQ")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of Java sends to each target before the "
                    "comparison's rounds (not counted): RocketMQ's JVMs compile their hot paths")
    ap.add_argument("--only-compare", action="store_true", help="only the comparison with a real RocketMQ 5")
    args = ap.parse_args()
    python = build_client_venv()
    classpath = subprocess.run([str(REPO / "tests/rocketmq5/java/build.sh")], capture_output=True, text=True,
                               check=True).stdout.strip().splitlines()[-1]
    if not args.skip_rocketmq:
        compare(classpath, python, args)
    if args.only_compare:
        return
    java_rates = raftmq_clients(classpath, python, args)
    if not args.skip_rocketmq:
        rocketmq_receive(classpath, args, java_rates)


def raftmq_clients(classpath: str, python: Path, args: argparse.Namespace) -> dict[tuple[int, str], float]:
    """Every client against raftmq alone, ``--members`` by ``--threads``; the Java client's rates by (members,
    what)."""
    java_rates: dict[tuple[int, str], float] = {}  # (members, what) -> msgs/s of the Java client on raftmq
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
    return java_rates


def compare(classpath: str, python: Path, args: argparse.Namespace) -> None:
    """The official clients against Apache RocketMQ 5 and against raftmq, all running at once, each client's runs
    interleaved target by target, ``--rounds`` times: medians, and raftmq's rate over RocketMQ's."""
    members = [int(x) for x in args.members.split(",")]
    threads = [int(x) for x in args.threads.split(",")]
    clusters: list[list] = []
    with RocketMQ5(topic="bench") as rmq, tempfile.TemporaryDirectory() as d:
        try:
            targets = [("RocketMQ", rmq.endpoint)]
            for m in members:
                nodes = start_nodes(node_specs(Path(d) / f"group{m}", m, store={
                    "max_message_size": 4 << 20, "mapped_file_size_commit_log": 64 << 20}))
                clusters.append(nodes)
                create_topic(leader_of(nodes), "bench")
                targets.append((f"raftmq {m}", ";".join(n.grpc_address for n in nodes)))
            for _, endpoints in targets:  # JIT-compile RocketMQ's broker and proxy (and warm raftmq) first
                java_official(classpath, endpoints, "bench", args.size, max(threads), args.warmup)
            runs: dict[tuple[str, int, str], list[dict]] = {}
            for r in range(args.rounds):
                for t in threads:
                    for target, endpoints in targets:
                        runs.setdefault(("Java", t, target), []).append(
                            java_official(classpath, endpoints, "bench", args.size, t, args.seconds))
                        runs.setdefault(("Python", t, target), []).append(
                            official(python, endpoints, "bench", args.size, t, args.seconds,
                                     Path(d) / f"home-{r}-{t}-{len(runs)}"))
            _compare_table(runs, targets, threads, args)
        finally:
            for nodes in clusters:
                stop_all(nodes)


def _compare_table(runs: dict[tuple[str, int, str], list[dict]], targets: list[tuple[str, str]],
                   threads: list[int], args: argparse.Namespace) -> None:
    names = [name for name, _ in targets]
    print(f"== official RocketMQ 5 clients (sync sends, one per SendMessage): Apache RocketMQ {ROCKETMQ_VERSION} "
          f"(name server + proxy in local mode, ASYNC_FLUSH, one broker) vs raftmq (async durability), all running "
          f"together; {args.size} B bodies, {args.seconds:g} s per run, {args.rounds} interleaved rounds: medians")
    head = "".join(f"{n + ' msgs/s':>18}" for n in names) + "".join(f"{n + '/RocketMQ':>20}" for n in names[1:])
    print(f"  {'client':<18}{head}   (p50 ms in brackets)")
    for client in ("Java", "Python"):
        for t in threads:
            rates, cells = {}, ""
            for name in names:
                rs = runs[(client, t, name)]
                rates[name] = statistics.median(r["sent"] / r["seconds"] if r["seconds"] else 0.0 for r in rs)
                p50s = [r["p50_ms"] for r in rs if r["p50_ms"] is not None]
                p50 = f"({statistics.median(p50s):.2f})" if p50s else "(-)"
                errors = sum(r["errors"] for r in rs)
                cells += f"{rates[name]:>10.0f} {p50:>7}" + (f" errors {errors}" if errors else "")
            base = rates["RocketMQ"] or float("nan")
            ratios = "".join(f"{rates[n] / base:>20.2f}" for n in names[1:])
            print(f"  {f'{client}, {t} threads':<18}{cells}{ratios}")


def rocketmq_receive(classpath: str, args: argparse.Namespace, java_rates: dict[tuple[int, str], float]) -> None:
    """The Java SimpleConsumer against Apache RocketMQ's own broker + proxy; ratio against raftmq's single node."""
    with RocketMQ5(topic="bench") as rmq:
        java_official(classpath, rmq.endpoint, "bench", args.size, 8, args.seconds)  # messages to receive
        rate = java_receive(classpath, rmq.endpoint, "bench", "java-receivers", args.receive)
        ours = java_rates.get((1, "receive"))
        print(f"== Apache RocketMQ {ROCKETMQ_VERSION}: receive + ack {args.receive} stored messages, 16 per receive")
        print(f"  {'RocketMQ 5 Java SimpleConsumer':<34} {rate:9.0f}"
              + (f"  raftmq 1 node / RocketMQ {ours / rate:5.2f}" if ours else ""))


if __name__ == "__main__":
    main()

"""raftmq vs NATS JetStream and RocketMQ DLedger, all 3 replicas on this box, through the clients users run
(issue 17).

raftmq: 3 member processes on loopback, producers use the SDK: asyncio tasks awaiting one ``AsyncProducer`` per
process, as the nats-py producers run (``--sdk threads``: threads sharing one ``Producer``); either way their sends
share one SendStream per process. JetStream: 3 ``nats-server`` processes (v2.12, clustered, file storage, a
stream with 3 replicas), producers use ``nats-py`` and wait for every publish ack. Durability: ``async``
(raftmq: ack after a majority applied it; JetStream: default ``sync_interval``) and ``sync`` (raftmq: after a
majority fsynced it; JetStream: ``sync_interval: always``). Every case runs for ``--seconds``, producers ×
messages per request, 1 KiB bodies. Prints msgs/s, p99 per request, server CPU per message and, for raftmq, the
messages and requests that shared one Raft entry, and beside raftmq's figure the same case on raftmq's write path
alone (``bench/replication_bench.py``'s members: store + Raft in 3 processes, producers as threads inside the
leader calling ``put``, no gRPC and no SDK) with the share of it the gRPC path reaches: what the request path
still costs. Never fails on time.

    .venv/bin/python bench/peer_bench.py [--seconds 3] [--producers 8,64] [--batch 1,32] [--modes async,sync]
                                         [--rounds 1] [--skip-nats] [--skip-dledger] [--skip-engine]

nats-server: ``--nats-server PATH``, else ``nats-server`` 2.12 in ``$RAFTMQ_BENCH_GOBIN``
(default ``~/.cache/raftmq-bench/bin``), built there with ``go install`` when missing (Debian's 2.9 lacks
``sync_interval: always``). ``--skip-nats`` leaves it out. RocketMQ 4.9.7 DLedger (``bench/dledger_peer.py``: a
name server, 3 brokers of one DLedger group, RocketMQ's Java producer) runs the async cases when ``java`` and
``mvn`` are here (its jars come from Maven Central once); ``--skip-dledger`` leaves it out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto"), str(REPO / "bench")]

import dledger_peer  # noqa: E402
import replication_bench  # noqa: E402

from bench.grpc_bench import _pct  # noqa: E402
from bench.peer_processes import cpu_seconds, wait_port  # noqa: E402
from raftmq.client.producer import DEFAULT_STREAM_WINDOW  # noqa: E402
from raftmq.replication.raft_write_path import RaftSettings  # noqa: E402
from raftmq.v1 import raftmq_pb2 as pb  # noqa: E402
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc  # noqa: E402
from tests.support.metrics import samples  # noqa: E402
from tests.support.processes import free_ports, node_specs, start_nodes, stop_all  # noqa: E402

NATS_VERSION = "v2.12.15"
BENCH_STORE = {
    "mapped_file_size_commit_log": 256 << 20,
    "mapped_file_size_consume_queue": 20 * 300_000,
    "max_hash_slot_num": 500_000,
    "max_index_num": 2_000_000,
    "preallocate": False,
}
QUEUES = 8
TOPIC = "bench"


def at_least_one(unit: str = ""):
    """argparse type of a count that must be at least 1 (``unit`` is named in the refusal)."""
    def parse(text: str) -> int:
        value = int(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be at least 1{f' ({unit})' if unit else ''}, got {value}")
        return value
    return parse


def add_sdk_arguments(ap: argparse.ArgumentParser) -> None:
    """How the raftmq producers use the SDK (this bench and core_scaling_bench)."""
    ap.add_argument("--sdk", choices=("asyncio", "threads"), default="asyncio",
                    help="raftmq producers: tasks awaiting one AsyncProducer per process (like the nats-py "
                         "producers), or threads sharing one Producer")
    ap.add_argument("--stream-window", type=at_least_one("requests in flight"), default=DEFAULT_STREAM_WINDOW,
                    help="the SDK producer's stream_window (default: the SDK's own)")
    ap.add_argument("--linger-ms", type=float, default=0.1,
                    help="the SDK producer's linger (0: one unary RPC per send, the path before SendStream)")


# ------------------------------------------------------------------ client processes
def _raftmq_client(servers: list[str], producers: int, batch: int, size: int, seconds: float, start_at: float,
                   out, linger_ms: float = 0.1, stream_window: int = DEFAULT_STREAM_WINDOW,
                   sdk: str = "asyncio") -> None:
    """``producers`` closed-loop producers sharing one SDK producer (as an application would): tasks awaiting an
    ``AsyncProducer`` (``sdk="asyncio"``, the way the nats-py producers run), or threads calling a ``Producer``."""
    body = os.urandom(size)
    if sdk == "asyncio":
        result = asyncio.run(_raftmq_tasks(servers, producers, batch, body, seconds, start_at, linger_ms,
                                           stream_window))
    else:
        result = _raftmq_threads(servers, producers, batch, body, seconds, start_at, linger_ms, stream_window)
    out.send(result)
    out.close()


async def _raftmq_tasks(servers: list[str], tasks: int, batch: int, body: bytes, seconds: float, start_at: float,
                        linger_ms: float, stream_window: int) -> tuple:
    from raftmq.client import AsyncProducer

    async with AsyncProducer(servers, linger_ms=linger_ms, stream_window=stream_window) as p:
        await p.send(TOPIC, body)  # connect, find the leader
        if batch == 1:
            return await _closed_loop_tasks(tasks, batch, seconds, start_at, lambda: p.send(TOPIC, body))
        return await _closed_loop_tasks(tasks, batch, seconds, start_at, lambda: p.send_batch(TOPIC, [body] * batch))


async def _closed_loop_tasks(tasks: int, batch: int, seconds: float, start_at: float, request) -> tuple:
    """From ``start_at``, ``tasks`` tasks each await ``request()`` (one request of ``batch`` messages) back to back
    for ``seconds``: (messages sent, each request's latency, elapsed, CPU seconds of this process)."""
    lat: list[float] = []
    sent = 0
    await asyncio.sleep(max(0.0, start_at - time.time()))
    stop_at = time.perf_counter() + seconds

    async def producer() -> None:
        nonlocal sent
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await request()
            lat.append(time.perf_counter() - t0)
            sent += batch

    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(producer() for _ in range(tasks)))
    return sent, lat, time.perf_counter() - t0, time.process_time() - c0


def _raftmq_threads(servers: list[str], threads: int, batch: int, body: bytes, seconds: float, start_at: float,
                    linger_ms: float, stream_window: int) -> tuple:
    from raftmq.client import Producer

    lat: list[float] = []
    sent = [0]
    lock = threading.Lock()
    with Producer(servers, linger_ms=linger_ms, stream_window=stream_window) as p:
        p.send(TOPIC, body)  # connect, find the leader
        time.sleep(max(0.0, start_at - time.time()))
        stop_at = time.perf_counter() + seconds

        def work() -> None:
            mine: list[float] = []
            n = 0
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                if batch == 1:
                    p.send(TOPIC, body)
                else:
                    p.send_batch(TOPIC, [body] * batch)
                mine.append(time.perf_counter() - t0)
                n += batch
            with lock:
                lat.extend(mine)
                sent[0] += n

        t0, c0 = time.perf_counter(), time.process_time()
        ts = [threading.Thread(target=work) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return sent[0], lat, time.perf_counter() - t0, time.process_time() - c0


def _nats_client(servers: list[str], tasks: int, batch: int, size: int, seconds: float, start_at: float,
                 out) -> None:
    import nats

    async def run() -> tuple:
        body = os.urandom(size)
        nc = await nats.connect(servers=[f"nats://{s}" for s in servers])
        js = nc.jetstream(timeout=30)
        await _published_once(js, body)
        if batch == 1:
            result = await _closed_loop_tasks(tasks, batch, seconds, start_at, lambda: js.publish(TOPIC, body))
        else:  # nats-py has no batch publish: 32 publishes in flight at once
            result = await _closed_loop_tasks(
                tasks, batch, seconds, start_at, lambda: asyncio.gather(*(js.publish(TOPIC, body) for _ in range(batch))))
        await nc.close()
        return result

    out.send(asyncio.run(run()))
    out.close()


def _drive(target, servers: list[str], producers: int, batch: int, size: int, seconds: float, procs: int,
           server_pids: list[int], *extra, probe=None) -> dict:
    """Run one case; ``probe()`` (optional) is called when the producers start and when they are done, and
    ``r["probe"]`` is ``(first, second)`` of what it returned."""
    ctx = mp.get_context("spawn")
    nprocs = max(1, min(producers, procs))
    share = [producers // nprocs + (1 if i < producers % nprocs else 0) for i in range(nprocs)]
    start_at = time.time() + 2.0 + 0.5 * nprocs
    pipes, workers = [], []
    for n in share:
        recv, send = ctx.Pipe(duplex=False)
        w = ctx.Process(target=target, args=(servers, n, batch, size, seconds, start_at, send, *extra),
                       daemon=True)
        w.start()
        send.close()
        pipes.append(recv)
        workers.append(w)
    while time.time() < start_at:
        time.sleep(0.005)
    cpu0 = cpu_seconds(server_pids)
    first = probe() if probe is not None else None
    try:
        got = [p.recv() for p in pipes]
        second = probe() if probe is not None else None
    finally:
        for w in workers:
            w.join(timeout=60)
            if w.is_alive():
                w.kill()
    server_cpu = cpu_seconds(server_pids) - cpu0
    sent = sum(g[0] for g in got)
    lat = sorted(x for g in got for x in g[1])
    elapsed = max(g[2] for g in got)
    return {"msgs_s": sent / elapsed, "p50_ms": _pct(lat, 50) * 1e3, "p99_ms": _pct(lat, 99) * 1e3,
            "server_us": server_cpu / max(sent, 1) * 1e6, "client_us": sum(g[3] for g in got) / max(sent, 1) * 1e6,
            "probe": (first, second)}


# ------------------------------------------------------------------ raftmq
def _group_commit_counters(nodes) -> tuple[float, float, float]:
    commits = msgs = reqs = 0.0
    for n in nodes:
        for s in samples(n):
            if s.name == "raftmq_group_commits_total":
                commits += s.value
            elif s.name == "raftmq_group_commit_messages_total":
                msgs += s.value
            elif s.name == "raftmq_group_commit_requests_total":
                reqs += s.value
    return commits, msgs, reqs


def create_topic(nodes) -> None:
    """Create the bench topic on whoever leads (a follower answers FAILED_PRECONDITION)."""
    admin = pb_grpc.AdminServiceStub(nodes[0].channel())
    deadline = time.time() + 60
    while True:
        try:
            for n in nodes:
                try:
                    pb_grpc.AdminServiceStub(n.channel()).CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(
                        name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)), timeout=10)
                    break
                except Exception:
                    continue
            if admin.ListTopics(pb.ListTopicsRequest(), timeout=10).topics:
                return
        except Exception:
            if time.time() > deadline:
                raise
        time.sleep(0.2)


def drive_raftmq(nodes, producers: int, batch: int, args, pids: list[int], probe=None) -> dict:
    """One case through gRPC + SDK, with the messages and requests per Raft entry (group commit)."""
    before = _group_commit_counters(nodes)
    r = _drive(_raftmq_client, [n.grpc_address for n in nodes], producers, batch, args.size, args.seconds,
               args.client_procs, pids, args.linger_ms, args.stream_window, args.sdk, probe=probe)
    after = _group_commit_counters(nodes)
    commits = max(after[0] - before[0], 1)
    r["msgs_per_entry"] = (after[1] - before[1]) / commits
    r["reqs_per_entry"] = (after[2] - before[2]) / commits
    return r


def run_raftmq(base: Path, mode: str, cases: list[tuple[int, int]], args) -> dict:
    cluster: dict = {"durability": mode}
    if args.raft:  # cluster.raft overrides, e.g. max_inflight_batches=2
        cluster["raft"] = {k: type(getattr(RaftSettings(), k))(v) for k, v in (kv.split("=", 1) for kv in args.raft)}
    specs = node_specs(base / f"raftmq-{mode}", 3, store=BENCH_STORE, node={"log_level": "WARNING"},
                       cluster=cluster)
    nodes = start_nodes(specs, timeout=120)
    out = {}
    try:
        create_topic(nodes)
        pids = [n.proc.pid for n in nodes]
        for producers, batch in cases:
            out[(mode, producers, batch)] = drive_raftmq(nodes, producers, batch, args, pids)
    finally:
        stop_all(nodes)
    return out


def run_engine(base: Path, mode: str, cases: list[tuple[int, int]], seconds: float) -> dict:
    """raftmq's write path without the request path: 3 members (store + Raft), producers as threads inside the
    leader calling ``put`` with ``batch`` messages (replication_bench's cluster)."""
    cluster = replication_bench.Cluster(base / f"engine-{mode}", mode)
    out = {}
    try:
        leader = cluster.leader()
        cluster.ask(leader, "topic")
        for producers, batch in cases:
            r = json.loads(cluster.ask(leader, f"run {producers} {seconds} {batch}"))
            out[(mode, producers, batch)] = {"msgs_s": r["msgs_per_s"], "p99_ms": r["p99_ms"]}
    finally:
        cluster.close()
    return out


# ------------------------------------------------------------------ NATS JetStream
def nats_binary(explicit: str | None) -> str:
    if explicit:
        return explicit
    gobin = Path(os.environ.get("RAFTMQ_BENCH_GOBIN", Path.home() / ".cache" / "raftmq-bench" / "bin"))
    path = gobin / "nats-server"
    if not path.exists():
        if shutil.which("go") is None:
            raise RuntimeError("nats-server not found and no Go toolchain to build it; pass --nats-server or "
                               "--skip-nats")
        print(f"building nats-server {NATS_VERSION} into {gobin} (once) ...", flush=True)
        gobin.mkdir(parents=True, exist_ok=True)
        subprocess.run(["go", "install", f"github.com/nats-io/nats-server/v2@{NATS_VERSION}"], check=True,
                       env={**os.environ, "GOBIN": str(gobin)}, cwd=tempfile.gettempdir())
    return str(path)


def run_nats(base: Path, binary: str, mode: str, cases: list[tuple[int, int]], args) -> dict:
    ports = free_ports(6)
    client_ports, route_ports = ports[:3], ports[3:]
    procs = []
    out = {}
    try:
        for i in range(3):
            d = base / f"nats-{mode}" / f"n{i}"
            d.mkdir(parents=True, exist_ok=True)
            routes = ", ".join(f"nats-route://127.0.0.1:{p}" for j, p in enumerate(route_ports) if j != i)
            sync = "sync_interval: always\n" if mode == "sync" else ""
            conf = (f"server_name: n{i}\nlisten: 127.0.0.1:{client_ports[i]}\n"
                    f"jetstream {{\n store_dir: \"{d}\"\n {sync}}}\n"
                    f"cluster {{\n name: bench\n listen: 127.0.0.1:{route_ports[i]}\n routes: [{routes}]\n}}\n")
            (d / "nats.conf").write_text(conf)
            log = open(d / "nats.log", "w")  # noqa: SIM115 - closed with the process
            procs.append((subprocess.Popen([binary, "-c", str(d / "nats.conf")], stdout=log, stderr=log), log))
        for p in client_ports:
            wait_port(p, "nats-server", [proc for proc, _ in procs], timeout=30)
        servers = [f"127.0.0.1:{p}" for p in client_ports]
        asyncio.run(_nats_stream(servers))
        pids = [p.pid for p, _ in procs]
        for producers, batch in cases:
            out[(mode, producers, batch)] = _drive(_nats_client, servers, producers, batch, args.size, args.seconds,
                                                   args.client_procs, pids)
    finally:
        for p, _ in procs:
            p.terminate()
        for p, log in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
            log.close()
    return out


async def _nats_stream(servers: list[str]) -> None:
    """Create the R3 file stream once the cluster has a meta leader."""
    import nats
    from nats.js.api import StorageType, StreamConfig

    nc = await nats.connect(servers=[f"nats://{s}" for s in servers])
    js = nc.jetstream(timeout=10)
    deadline = time.time() + 60
    while True:
        try:
            await js.add_stream(StreamConfig(name="BENCH", subjects=[TOPIC], num_replicas=3,
                                             storage=StorageType.FILE))
            break
        except Exception:
            if time.time() > deadline:
                raise
            await asyncio.sleep(0.5)
    await _published_once(js, b"ready")
    await nc.close()


async def _published_once(js, body: bytes, timeout: float = 60.0) -> None:
    """Publish until the stream acknowledges: a new R3 stream answers "no responders" until its own Raft group
    has a leader, which comes after ``add_stream`` returns (a run once failed on its very first publish)."""
    import nats.errors
    import nats.js.errors

    deadline = time.time() + timeout
    while True:
        try:
            await js.publish(TOPIC, body)
            return
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError):
            if time.time() > deadline:
                raise
            await asyncio.sleep(0.2)


# ------------------------------------------------------------------ main
def median_round(figures: list[dict]) -> dict:
    """The round with the median msgs/s (the upper one of an even count): every column of a row comes from the
    same round."""
    return sorted(figures, key=lambda r: r["msgs_s"])[len(figures) // 2]


def print_spread(runs: dict[str, dict[tuple, list[dict]]], modes: list[str], cases: list[tuple[int, int]]) -> None:
    """msgs/s lowest-highest over the rounds, and raftmq / peer within each round (same moment of the box)."""
    print("\nover the rounds (lowest-highest msgs/s; ratios taken within each round):")
    print(f"{'case':16} {'raftmq':>15} {'engine':>15} {'share':>11} {'JetStream':>15} {'ratio':>11} "
          f"{'DLedger':>15} {'ratio':>11}")

    def span(values: list[float], fmt: str) -> str:
        return f"{min(values):{fmt}}-{max(values):{fmt}}" if values else "-"

    for mode in modes:
        for producers, batch in cases:
            key = (mode, producers, batch)
            own = [r["msgs_s"] for r in runs["raftmq"].get(key, [])]
            line = f"{mode + f' {producers} x {batch}':16} {span(own, '.0f'):>15}"
            for name in ("engine", "nats", "dledger"):
                peer = [r["msgs_s"] for r in runs[name].get(key, [])]
                ratios = [a / b for a, b in zip(own, peer, strict=True)] if peer else []
                line += f" {span(peer, '.0f'):>15} {span(ratios, '.2f'):>11}"
            print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--producers", default="8,64")
    ap.add_argument("--batch", default="1,32")
    ap.add_argument("--modes", default="async,sync")
    ap.add_argument("--client-procs", type=int, default=2, help="producer processes per case")
    ap.add_argument("--rounds", type=at_least_one(), default=1,
                    help="run everything this many times, the systems in turn, and print each case's median round "
                         "and the spread (this box's figures move by +-30%% between runs)")
    ap.add_argument("--nats-server", help="path of a nats-server 2.12 binary")
    ap.add_argument("--skip-nats", action="store_true")
    ap.add_argument("--skip-dledger", action="store_true", help="leave out RocketMQ 4.9.7 DLedger (async cases)")
    ap.add_argument("--skip-engine", action="store_true",
                    help="leave out raftmq's write path measured without gRPC (the engine column)")
    ap.add_argument("--raft", action="append", default=[], metavar="KEY=VALUE",
                    help="a cluster.raft setting for the raftmq members (repeatable), e.g. max_inflight_batches=2")
    add_sdk_arguments(ap)
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    cases = [(int(p), int(b)) for b in args.batch.split(",") for p in args.producers.split(",")]
    binary = None if args.skip_nats else nats_binary(args.nats_server)
    dledger = not args.skip_dledger and "async" in modes
    if dledger and (why := dledger_peer.available()) is not None:
        print(f"RocketMQ DLedger left out: {why}", flush=True)
        dledger = False
    # every round's figures per case, per system
    runs: dict[str, dict[tuple, list[dict]]] = {name: {} for name in ("raftmq", "engine", "nats", "dledger")}
    with tempfile.TemporaryDirectory(prefix="raftmq-peer-bench-") as d:
        for round_no in range(args.rounds):  # the systems take turns, so a busier moment of the box hits all
            base = Path(d) / f"round-{round_no}"
            for mode in modes:
                measured = {"raftmq": run_raftmq(base, mode, cases, args)}
                if not args.skip_engine:
                    measured["engine"] = run_engine(base, mode, cases, args.seconds)
                if binary:
                    measured["nats"] = run_nats(base, binary, mode, cases, args)
                if dledger and mode == "async":
                    measured["dledger"] = dledger_peer.run_dledger(base, cases, args.size, args.seconds, TOPIC,
                                                                   QUEUES)
                for name, figures in measured.items():
                    for key, r in figures.items():
                        runs[name].setdefault(key, []).append(r)
    results = {name: {key: median_round(rs) for key, rs in per_case.items()} for name, per_case in runs.items()}

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    sdk = (f"SDK {'AsyncProducer tasks' if args.sdk == 'asyncio' else 'Producer threads'} linger_ms={args.linger_ms:g}"
           + (" (unary)" if args.linger_ms == 0 else " (SendStream)"))
    rounds = f", the median of {args.rounds} rounds" if args.rounds > 1 else ""
    print(f"\nraftmq (3 members, gRPC + {sdk}) vs NATS JetStream {NATS_VERSION} R3 (nats-py) and RocketMQ "
          f"{dledger_peer.VERSION} DLedger (3 brokers, Java producer), {args.size} B bodies, {args.seconds:.0f} s per "
          f"case{rounds}, {os.cpu_count()} CPUs shared by servers and clients (load average {load})\n")
    hdr = (f"{'case':16} {'raftmq msgs/s':>13} {'p99 ms':>7} {'srv us':>6} {'cli us':>6} {'msgs/entry':>10} "
           f"{'reqs/entry':>10} {'engine msgs/s':>13} {'p99 ms':>7} {'share':>5} "
           f"{'JetStream msgs/s':>16} {'p99 ms':>7} {'srv us':>6} {'cli us':>6} {'ratio':>6} "
           f"{'DLedger msgs/s':>14} {'p99 ms':>7} {'srv us':>6} {'cli us':>6} {'ratio':>6}")
    print(hdr)
    print("-" * len(hdr))
    for mode in modes:
        for producers, batch in cases:
            key = (mode, producers, batch)
            r = results["raftmq"][key]
            line = f"{mode + f' {producers} x {batch}':16} "
            line += (f"{r['msgs_s']:13.0f} {r['p99_ms']:7.1f} {r['server_us']:6.0f} {r['client_us']:6.0f} "
                     f"{r['msgs_per_entry']:10.1f} {r['reqs_per_entry']:10.1f}")
            engine = results["engine"].get(key)
            if engine:
                line += f" {engine['msgs_s']:13.0f} {engine['p99_ms']:7.1f} {r['msgs_s'] / engine['msgs_s']:5.2f}"
            else:
                line += f" {'-':>13} {'-':>7} {'-':>5}"
            for name, width in (("nats", 16), ("dledger", 14)):
                peer = results[name].get(key)
                if peer:
                    line += (f" {peer['msgs_s']:{width}.0f} {peer['p99_ms']:7.1f} {peer['server_us']:6.0f} "
                             f"{peer['client_us']:6.0f} {r['msgs_s'] / peer['msgs_s']:6.2f}")
                else:
                    line += f" {'-':>{width}} {'-':>7} {'-':>6} {'-':>6} {'-':>6}"
            print(line)
    if args.rounds > 1:
        print_spread(runs, modes, cases)
    print("\nproducers x messages per request; p99: per request (a send or a batch), client side; srv us: CPU "
          "microseconds per\nmessage of all server processes; cli us: the same of the producer processes; "
          "msgs/entry, reqs/entry:\nmessages and send requests per Raft entry (group commit) on the leader; "
          "engine: raftmq's write path alone\n(3 members, producers as threads in the leader calling put: no gRPC, "
          "no SDK); share: raftmq through gRPC / engine;\nratio: raftmq / peer msgs/s. async: ack after a majority "
          "has it (JetStream: default sync_interval; DLedger: after\na majority appended it, flush asynchronous); "
          "sync: after a majority fsynced it (JetStream: sync_interval: always;\nDLedger has no such mode).")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Replication benchmark: 3-member Raft write path vs the single-node LocalWritePath, measured in the same run.

Not a test: it prints numbers and ratios and never fails on time. It measures the write path itself (group
commit, Raft over loopback, apply into real mmap'd commit logs on three real stores), not gRPC: each member is
its own process (store + RaftWritePath + ReplicaService); producers are threads inside the leader's process
calling ``put([one 1 KiB message])`` and waiting for the acknowledgement (closed loop). The baseline is the same
producers against ``LocalWritePath`` on one store.

    .venv/bin/python bench/replication_bench.py            # 1, 8, 64 producers x async, sync; ~3 minutes
    .venv/bin/python bench/replication_bench.py --seconds 3 --producers 8
    .venv/bin/python bench/replication_bench.py --raft-tls --modes async --batch 32   # + a cluster with Raft TLS
    (with --raft-tls both Raft clusters also set cluster.secret, as a secured cluster does)

Durability modes: ``async`` = committed by a majority in memory/page cache (flushed on an interval); ``sync`` =
a majority fsynced its Raft journal and commit log before the ack (Raft), or the store's group-commit fsync
(single node, flush_disk_type=SYNC).

Reading the ratio: all three members share this machine's cores, and every member applies and dispatches
(reput: consume queue + index) every message, so on a CPU-bound box the replicated figure is bounded by about a
third of the single-node one before any Raft cost; on three machines that factor goes away.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "proto"))

BODY = b"b" * 1024
TOPIC = "BenchRepl"
STORE_SIZES = dict(mapped_file_size_commit_log=256 << 20, mapped_file_size_consume_queue=300_000 * 20,
                   max_hash_slot_num=500_000, max_index_num=2_000_000, preallocate=False)


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_load(wp, producers: int, seconds: float, batch: int = 1) -> dict:
    """Closed-loop producers putting ``batch`` messages per call; throughput counts messages, latency calls."""
    from raftmq.store import Message

    lat: list[list[float]] = [[] for _ in range(producers)]
    errors = [0] * producers
    stop = threading.Event()

    def producer(i: int) -> None:
        q = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                wp.put([Message(topic=TOPIC, queue_id=q % 8, body=BODY) for _ in range(batch)]).result(30)
                lat[i].append(time.perf_counter() - t0)
            except Exception:
                errors[i] += 1
            q += 1

    threads = [threading.Thread(target=producer, args=(i,), daemon=True) for i in range(producers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    all_lat = sorted(x for part in lat for x in part)
    n = len(all_lat)
    return {"msgs": n * batch, "msgs_per_s": n * batch / elapsed, "errors": sum(errors),
            "p50_ms": 1000 * all_lat[n // 2] if n else 0.0,
            "p99_ms": 1000 * all_lat[min(n - 1, int(n * 0.99))] if n else 0.0,
            "mean_ms": 1000 * statistics.fmean(all_lat) if n else 0.0}


# ----------------------------------------------------------------------------------------------- member process
def member_main(args: argparse.Namespace) -> None:
    """One Raft member: store + RaftWritePath + ReplicaService; obeys 'run N SECONDS' / 'quit' on stdin."""
    import grpc

    from raftmq.replication import RaftSettings, RaftWritePath
    from raftmq.replication.replica_service import ReplicaServicer
    from raftmq.replication.write_path import MemberInfo
    from raftmq.store import MessageStore, StoreConfig
    from raftmq.store.topic_config import TopicConfig
    from raftmq.v1 import replica_pb2_grpc

    members = [MemberInfo(**m) for m in json.loads(args.members)]
    me = next(m for m in members if m.id == args.member)
    st = MessageStore(StoreConfig(root_dir=args.dir, **STORE_SIZES))
    st.open()
    holder: list = [None]
    loop = asyncio.new_event_loop()

    async def serve() -> None:
        server = grpc.aio.server()
        holder.append(server)  # keep a reference for the process lifetime
        replica_pb2_grpc.add_ReplicaServiceServicer_to_server(ReplicaServicer(lambda: holder[0]), server)
        server.add_insecure_port(me.grpc_address)
        await server.start()

    loop.run_until_complete(serve())
    threading.Thread(target=loop.run_forever, daemon=True).start()
    raft_tls = None
    if args.tls_dir:  # security.tls_raft: the node builds the same contexts from its security.tls_* files
        from raftmq.node.tls import CertificateFiles, RaftTlsContexts, TlsFiles
        from raftmq.replication.raft_tls import RaftTls

        d = Path(args.tls_dir)
        contexts = RaftTlsContexts(CertificateFiles(TlsFiles(str(d / "member.crt"), str(d / "member.key"),
                                                             str(d / "raftmq-test-ca.crt"))))
        raft_tls = RaftTls(contexts.server_context, contexts.client_context)
    wp = RaftWritePath(st, node_id=args.member, members=members, settings=RaftSettings(durability=args.durability),
                       secret=args.secret, raft_tls=raft_tls)
    holder[0] = wp
    wp.start()
    print("started", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "leader?":
            print("yes" if wp.is_writable() else "no", flush=True)
        elif cmd[0] == "topic":
            wp.create_topic(TopicConfig(topic_name=TOPIC, read_queue_nums=8, write_queue_nums=8))
            print("ok", flush=True)
        elif cmd[0] == "run":
            batches0, msgs0 = wp._committer.batches, wp._committer.batched_msgs  # counters span runs
            res = run_load(wp, int(cmd[1]), float(cmd[2]), int(cmd[3]))
            res["batches"] = wp._committer.batches - batches0
            res["batched_msgs"] = wp._committer.batched_msgs - msgs0
            print(json.dumps(res), flush=True)
    wp.stop()
    st.shutdown()


class Cluster:
    def __init__(self, base: Path, durability: str, tls_dir: Path | None = None, secret: str = ""):
        ports = free_ports(6)
        self.members = [{"id": f"n{i}", "raft_address": f"127.0.0.1:{ports[2 * i]}",
                         "grpc_address": f"127.0.0.1:{ports[2 * i + 1]}"} for i in range(3)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "proto")])}
        self.procs = [subprocess.Popen(
            [sys.executable, __file__, "--member", m["id"], "--members", json.dumps(self.members),
             "--dir", str(base / m["id"]), "--durability", durability,
             *(["--tls-dir", str(tls_dir)] if tls_dir else []), *(["--secret", secret] if secret else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
            for m in self.members]
        for p in self.procs:
            assert p.stdout.readline().strip() == "started", "member failed to start"

    def ask(self, p: subprocess.Popen, line: str) -> str:
        p.stdin.write(line + "\n")
        p.stdin.flush()
        return p.stdout.readline().strip()

    def leader(self, timeout: float = 60) -> subprocess.Popen:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if self.ask(p, "leader?") == "yes":
                    return p
            time.sleep(0.2)
        raise TimeoutError("no leader")

    def close(self) -> None:
        for p in self.procs:
            try:
                p.stdin.write("quit\n")
                p.stdin.flush()
            except OSError:
                pass
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def local_run(base: Path, durability: str, producers: int, seconds: float, batch: int) -> dict:
    from raftmq.replication import LocalWritePath
    from raftmq.store import MessageStore, StoreConfig
    from raftmq.store.topic_config import TopicConfig

    d = base / f"local-{durability}-{producers}-{batch}"
    st = MessageStore(StoreConfig(root_dir=str(d), flush_disk_type="SYNC" if durability == "sync" else "ASYNC",
                                  **STORE_SIZES))
    st.open()
    wp = LocalWritePath(st)
    wp.start()
    try:
        wp.create_topic(TopicConfig(topic_name=TOPIC, read_queue_nums=8, write_queue_nums=8))
        res = run_load(wp, producers, seconds, batch)
        res["batches"] = wp._committer.batches
        res["batched_msgs"] = wp._committer.batched_msgs
        return res
    finally:
        wp.stop()
        st.shutdown()
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--producers", type=int, nargs="*", default=[1, 8, 64])
    ap.add_argument("--modes", nargs="*", default=["async", "sync"])
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 32],
                    help="messages per put call (1 = single sends; 32 = batching producers)")
    ap.add_argument("--dir", default=None, help="where the stores live (a temp dir under it)")
    ap.add_argument("--member", help=argparse.SUPPRESS)
    ap.add_argument("--members", help=argparse.SUPPRESS)
    ap.add_argument("--durability", default="async", help=argparse.SUPPRESS)
    ap.add_argument("--raft-tls", action="store_true",
                    help="also run a cluster whose Raft port speaks mutual TLS (security.tls_raft); column 'tls/raft'")
    ap.add_argument("--tls-dir", help=argparse.SUPPRESS)
    ap.add_argument("--secret", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.member:
        return member_main(args)
    base = Path(tempfile.mkdtemp(prefix="raftmq-repl-bench-", dir=args.dir))
    print(f"1 KiB messages, closed-loop producers, {args.seconds:.0f} s per point, {os.cpu_count()} CPUs, "
          f"stores under {base}; latency is per put call")
    print(f"{'mode':6} {'prod':>4} {'batch':>5} | {'single msgs/s':>13} {'p50 ms':>7} {'p99 ms':>7} | "
          f"{'raft msgs/s':>11} {'p50 ms':>7} {'p99 ms':>7} {'msgs/batch':>10} | {'ratio':>5}"
          + (f" | {'raft-tls msgs/s':>15} {'p50 ms':>7} {'p99 ms':>7} | {'tls/raft':>8}" if args.raft_tls else ""))
    tls_dir = None
    if args.raft_tls:
        from tests.support.certs import CertificateAuthority

        tls_dir = base / "tls"
        tls_dir.mkdir()
        CertificateAuthority(tls_dir).issue("member")
    try:
        for mode in args.modes:
            # with --raft-tls both clusters use cluster.secret (pysyncobj's own encryption), as a secured cluster does
            secret = "bench-secret" if tls_dir else ""
            cluster = Cluster(base / f"raft-{mode}", mode, secret=secret)
            tls_cluster = Cluster(base / f"raft-tls-{mode}", mode, tls_dir, secret) if tls_dir else None
            try:
                leader = cluster.leader()
                cluster.ask(leader, "topic")
                tls_leader = tls_cluster.leader() if tls_cluster else None
                if tls_cluster:
                    tls_cluster.ask(tls_leader, "topic")
                for batch, n in itertools.product(args.batch, args.producers):
                    loc = local_run(base, mode, n, args.seconds, batch)
                    raft = json.loads(cluster.ask(leader, f"run {n} {args.seconds} {batch}"))
                    per_batch = raft["batched_msgs"] / max(1, raft["batches"])
                    line = (f"{mode:6} {n:4d} {batch:5d} | {loc['msgs_per_s']:13,.0f} {loc['p50_ms']:7.2f} "
                            f"{loc['p99_ms']:7.2f} | {raft['msgs_per_s']:11,.0f} {raft['p50_ms']:7.2f} "
                            f"{raft['p99_ms']:7.2f} {per_batch:10.1f} | "
                            f"{raft['msgs_per_s'] / max(1.0, loc['msgs_per_s']):5.2f}")
                    if tls_cluster:
                        t = json.loads(tls_cluster.ask(tls_leader, f"run {n} {args.seconds} {batch}"))
                        line += (f" | {t['msgs_per_s']:15,.0f} {t['p50_ms']:7.2f} {t['p99_ms']:7.2f} | "
                                 f"{t['msgs_per_s'] / max(1.0, raft['msgs_per_s']):8.2f}")
                    print(line + (f"  ({raft['errors']} raft errors)" if raft["errors"] else ""), flush=True)
            finally:
                cluster.close()
                if tls_cluster:
                    tls_cluster.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

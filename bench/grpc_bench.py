"""gRPC produce/pull throughput and latency of one real node, next to the store's own put speed.

Why the store figure in the same run: on a shared box absolute numbers drift; the ratio "gRPC / direct
MessageStore.put_messages" says what the network layer, the event loop and the write path cost on top of the
store. Durability: single node, ``async`` (flush_disk_type ASYNC: acknowledged once in the page cache).

    .venv/bin/python bench/grpc_bench.py [--seconds 3] [--size 1024] [--client-procs 2]

SDK rows: ``c`` threads sharing one ``client.Producer`` per producer process, so their sends coalesce into one
SendStream (``stream``), or with ``linger_ms=0`` one unary SendMessage per send (``unary``).

Producers: ``c`` concurrent senders, each with one request in flight, spread over ``min(c, --client-procs)``
client processes (grpc.aio tasks inside each), so a Python client's per-call cost (~200 us of its own GIL per
unary call) does not cap the figure at what one client process can issue. Client and node share the box's
cores, so both CPU costs are printed per message: ``node us`` from the node process's /proc/<pid>/stat (all its
threads: event loop, gRPC poller, committer, reput), ``client us`` from the producers' own process times.
``msgs/node-CPU-s`` (1e6 / node us) is the figure that least depends on what else runs on the box.

``--tls`` / ``--auth`` (issue 14): the same cases run a second time against a node with TLS on both ports (a CA
and certificate made for the run) and/or signed requests checked against an access rule, and each secured row
is printed with its ratio to the plaintext row of the same run ("vs plain").
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto")]

import grpc  # noqa: E402

from raftmq.store.thread_name import process_cpu_seconds as _cpu_seconds  # noqa: E402
from raftmq.v1 import raftmq_pb2 as pb  # noqa: E402
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc  # noqa: E402
from tests.support.processes import GRPC_OPTIONS, node_specs, start_nodes, stop_all  # noqa: E402

BENCH_STORE = {
    "mapped_file_size_commit_log": 64 << 20,
    "mapped_file_size_consume_queue": 20 * 300_000,
    "max_hash_slot_num": 500_000,
    "max_index_num": 2_000_000,
    "flush_disk_type": "ASYNC",
    "preallocate": False,
}
QUEUES = 8


def _pct(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, int(round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


def _channel(address: str, sec: dict | None) -> grpc.aio.Channel:
    """Plaintext, or TLS trusting ``sec["ca"]`` (the SDK's ClientSecurity does the same for sync channels)."""
    if not sec or not sec.get("ca"):
        return grpc.aio.insecure_channel(address, options=GRPC_OPTIONS)
    with open(sec["ca"], "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    return grpc.aio.secure_channel(address, creds, options=GRPC_OPTIONS)


class _Signature:
    """The SDK's signing (client.security): the two headers, recomputed once per second."""

    def __init__(self, sec: dict | None):
        self._ak, self._sk = (sec or {}).get("ak"), (sec or {}).get("sk")
        self._second, self._headers = -1, ()

    def __call__(self) -> tuple:
        if not self._ak:
            return ()
        now = int(time.time())
        if now != self._second:
            from raftmq.client.security import signed_headers

            self._second, self._headers = now, tuple(signed_headers(self._ak, self._sk))
        return self._headers


async def _produce_tasks(address: str, topic: str, tasks: int, first: int, batch: int, size: int,
                         seconds: float, start_at: float, sec: dict | None = None
                         ) -> tuple[int, list[float], float, float]:
    """``tasks`` senders in this process; returns (messages sent, latencies, elapsed, CPU seconds used)."""
    body = os.urandom(size)
    lat: list[float] = []
    sent = 0
    sig = _Signature(sec)
    async with _channel(address, sec) as ch:
        stub = pb_grpc.MessagingServiceStub(ch)
        await stub.SendMessage(pb.SendMessageRequest(message=pb.Message(topic=topic, body=body)),
                               metadata=sig())  # connect
        await asyncio.sleep(max(0.0, start_at - time.time()))  # every process starts together
        stop_at = time.perf_counter() + seconds

        async def producer(i: int) -> None:
            nonlocal sent
            if batch == 1:
                req = pb.SendMessageRequest(message=pb.Message(topic=topic, body=body, keys=[f"p{i}"]))
                call = stub.SendMessage
            else:
                msgs = [pb.Message(topic=topic, body=body, keys=[f"p{i}"]) for _ in range(batch)]
                req = pb.SendBatchRequest(messages=msgs)
                call = stub.SendBatch
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                await call(req, timeout=30, metadata=sig())
                lat.append(time.perf_counter() - t0)
                sent += batch

        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(producer(first + i) for i in range(tasks)))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    return sent, lat, elapsed, cpu


def _client_process(args: tuple, out) -> None:
    """One producer process: run its senders, send back (sent, latencies, elapsed, CPU seconds)."""
    out.send(asyncio.run(_produce_tasks(*args)))
    out.close()


def produce(address: str, topic: str, concurrency: int, batch: int, size: int, seconds: float, procs: int,
            node_pid: int, sec: dict | None = None) -> dict:
    """``concurrency`` senders over ``min(concurrency, procs)`` spawned processes (spawn: no gRPC state is
    inherited across fork)."""
    ctx = mp.get_context("spawn")
    nprocs = max(1, min(concurrency, procs))
    share = [concurrency // nprocs + (1 if i < concurrency % nprocs else 0) for i in range(nprocs)]
    start_at = time.time() + 1.5 + 0.3 * nprocs  # time for the interpreters to start and connect
    pipes, workers, first = [], [], 0
    for n in share:
        recv, send = ctx.Pipe(duplex=False)
        w = ctx.Process(target=_client_process, args=((address, topic, n, first, batch, size, seconds, start_at,
                                                             sec), send), daemon=True)
        w.start()
        send.close()
        pipes.append(recv)
        workers.append(w)
        first += n
    while time.time() < start_at:
        time.sleep(0.005)
    node0 = _cpu_seconds(node_pid)
    try:
        got = [p.recv() for p in pipes]
    finally:
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.kill()
    node_cpu = _cpu_seconds(node_pid) - node0  # includes the processes' warm-up call: negligible
    sent = sum(g[0] for g in got)
    lat = sorted(x for g in got for x in g[1])
    elapsed = max(g[2] for g in got)
    client_cpu = sum(g[3] for g in got)
    return {"msgs_s": sent / elapsed, "mb_s": sent * size / elapsed / 1e6, "p50_ms": _pct(lat, 50) * 1e3,
            "p99_ms": _pct(lat, 99) * 1e3, "requests": len(lat), "node_us": node_cpu / sent * 1e6,
            "client_us": client_cpu / sent * 1e6, "procs": nprocs}


async def pull_all(address: str, topic: str, concurrency: int, node_pid: int, sec: dict | None = None) -> dict:
    """Read every queue of ``topic`` from offset 0 to its end, 32 messages per pull (readers: tasks of this
    process; a pull carries 32 messages, so the client's per-call cost matters less than for sends)."""
    total = nbytes = 0
    lat: list[float] = []
    sig = _Signature(sec)
    async with _channel(address, sec) as ch:
        stub = pb_grpc.MessagingServiceStub(ch)
        queues = (await stub.GetQueueOffsets(pb.GetQueueOffsetsRequest(topic=topic), metadata=sig())).queues
        todo = [q for q in queues if q.max_offset > q.min_offset]

        async def reader(mine: list) -> None:
            nonlocal total, nbytes
            for q in mine:
                offset = q.min_offset
                while offset < q.max_offset:
                    t0 = time.perf_counter()
                    r = await stub.PullMessage(pb.PullMessageRequest(topic=topic, queue_id=q.queue_id, offset=offset,
                                                                     max_count=32), timeout=30,
                                           metadata=sig())
                    lat.append(time.perf_counter() - t0)
                    if r.status != pb.FOUND:
                        raise RuntimeError(f"pull queue {q.queue_id} at {offset}: {pb.PullStatus.Name(r.status)}")
                    total += len(r.messages)
                    nbytes += sum(len(m.body) for m in r.messages)
                    offset = r.next_offset

        t0, c0, n0 = time.perf_counter(), time.process_time(), _cpu_seconds(node_pid)
        await asyncio.gather(*(reader(todo[i::concurrency]) for i in range(concurrency)))
        elapsed, cpu, node_cpu = time.perf_counter() - t0, time.process_time() - c0, _cpu_seconds(node_pid) - n0
    lat.sort()
    return {"msgs_s": total / elapsed, "mb_s": nbytes / elapsed / 1e6, "p50_ms": _pct(lat, 50) * 1e3,
            "p99_ms": _pct(lat, 99) * 1e3, "requests": len(lat), "node_us": node_cpu / total * 1e6,
            "client_us": cpu / total * 1e6, "procs": 1}


def store_put(size: int, batch: int, seconds: float) -> dict:
    """Direct MessageStore.put_messages in this process (no gRPC, no write path), same record shape; its CPU
    (all threads of this process, reput included) is the baseline for the node's."""
    from raftmq.store import StoreConfig
    from raftmq.store.message import Message
    from raftmq.store.message_store import MessageStore

    body = os.urandom(size)
    with tempfile.TemporaryDirectory(prefix="raftmq-bench-store-") as d:
        st = MessageStore(StoreConfig(root_dir=d, **BENCH_STORE))
        st.open()
        try:
            lat: list[float] = []
            sent = 0
            i = 0
            stop_at = time.perf_counter() + seconds
            t0, c0 = time.perf_counter(), time.process_time()
            while time.perf_counter() < stop_at:
                msgs = [Message(topic="bench", body=body, queue_id=i % QUEUES,
                                properties={"KEYS": "p0", "UNIQ_KEY": f"U{i}-{j}"}) for j in range(batch)]
                t1 = time.perf_counter()
                st.put_messages(msgs)
                lat.append(time.perf_counter() - t1)
                sent += batch
                i += 1
            st.reput.wait_dispatched(timeout=30)  # the node's figure includes dispatch; so does this one
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        finally:
            st.shutdown()
    lat.sort()
    return {"msgs_s": sent / elapsed, "mb_s": sent * size / elapsed / 1e6, "p50_ms": _pct(lat, 50) * 1e3,
            "p99_ms": _pct(lat, 99) * 1e3, "requests": len(lat), "node_us": cpu / sent * 1e6,
            "client_us": float("nan"), "procs": 0}


def _security(pki: Path, tls: bool, auth: bool, allow_list: bool = False) -> tuple[dict, dict]:
    """Node config overrides and client settings for a secured run: a CA + server certificate made now, the
    bootstrap admin for setup, and a user "bench" allowed PUB and SUB on the topic (the ACL is evaluated); with
    ``allow_list`` the node-wide client allow-list (and, with auth, the bench user's own networks) are checked."""
    from tests.support.certs import CertificateAuthority

    node, client = {}, {}
    if tls:
        ca = CertificateAuthority(pki)
        server = ca.issue("bench-node")
        node.update(tls_cert_file=str(server.cert), tls_key_file=str(server.key))
        client["ca"] = str(ca.cert_file)
    if auth:
        node.update(auth_enabled=True, auth_admin_access_key="bench-admin", auth_admin_secret_key="bench-admin-key")
        client.update(ak="bench", sk="bench-secret-key")
    if allow_list:
        node.update(allowed_client_networks=["10.0.0.0/8", "127.0.0.0/8"], allowed_member_networks=["127.0.0.1/32"])
        client["networks"] = ["127.0.0.1/32"]
    return node, client


def node_cases(label: str, node_sec: dict | None, client_sec: dict | None, levels: list[int], args) -> list:
    """Start one node (plaintext, or with ``node_sec``), create the topic, run every send and pull case."""
    rows = []
    prefix = f"[{label}] " if label else ""
    with tempfile.TemporaryDirectory(prefix="raftmq-bench-") as d:
        overrides = {"store": BENCH_STORE, "node": {"log_level": "WARNING"}}
        if node_sec:
            overrides["security"] = dict(node_sec, tls_http=False)  # the harness probes /ready over plain HTTP
        [spec] = node_specs(Path(d), 1, **overrides)
        nodes = start_nodes([spec])
        try:
            addr, pid = nodes[0].grpc_address, nodes[0].proc.pid
            _setup(addr, client_sec or {}, bool(node_sec and node_sec.get("auth_enabled")))
            for batch in (1, 32):
                for c in levels:
                    r = produce(addr, "bench", c, batch, args.size, args.seconds, args.client_procs, pid, client_sec)
                    rows.append((f"{prefix}gRPC send {'single' if batch == 1 else 'batch32'} c={c}", r))
            if not args.skip_sdk and not client_sec:  # issue 17: SDK sends coalesce into SendStream (linger 0: unary)
                from bench.peer_bench import _drive, _raftmq_client

                for linger, name in ((0.1, "stream"), (0.0, "unary")):
                    for c in levels:
                        if c == 1 and linger == 0.0:
                            continue
                        r = _drive(_raftmq_client, [addr], c, 1, args.size, args.seconds, args.client_procs, [pid],
                                   linger)
                        r["mb_s"] = r["msgs_s"] * args.size / 1e6
                        r["node_us"] = r.pop("server_us")
                        rows.append((f"{prefix}SDK send single {name} c={c}", r))
            for c in (1, 4):
                rows.append((f"{prefix}gRPC pull 32/req c={c}", asyncio.run(pull_all(addr, "bench", c, pid,
                                                                                      client_sec))))
        finally:
            stop_all(nodes)
    return rows


def _setup(address: str, client_sec: dict, auth: bool) -> None:
    """The topic (and, with auth, the bench user and its rule) through the SDK, as an operator would."""
    from raftmq.client.acl import AclAdmin
    from raftmq.client.admin import Admin
    from raftmq.client.security import ClientSecurity

    tls = {"ca_file": client_sec["ca"]} if client_sec.get("ca") else {}
    admin_sec = ClientSecurity(**tls, **({"access_key": "bench-admin", "secret_key": "bench-admin-key"}
                                         if auth else {}))
    with Admin(address, security=admin_sec) as admin:
        admin.create_topic("bench", queues=QUEUES)
    if auth:
        with AclAdmin(address, security=admin_sec) as acl:
            acl.put_user("bench", "bench-secret-key", networks=client_sec.get("networks", ()))
            acl.add_rule("bench", "allow", ["PUB", "SUB"], ["topic:bench"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="duration of each produce run")
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--concurrency", default="1,8,64")
    ap.add_argument("--client-procs", type=int, default=2, help="producer processes (at most one per sender)")
    ap.add_argument("--tls", action="store_true", help="also run every case against a node with TLS")
    ap.add_argument("--auth", action="store_true", help="also run every case with signed requests + ACL")
    ap.add_argument("--allow-list", action="store_true",
                    help="also run every case with the node's client allow-list (and, with --auth, user networks)")
    ap.add_argument("--skip-sdk", action="store_true", help="skip the SDK rows (Producer threads, SendStream)")
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    rows: list[tuple[str, dict]] = [("store put_messages single", store_put(args.size, 1, args.seconds)),
                                    ("store put_messages batch32", store_put(args.size, 32, args.seconds))]
    base = {"single": rows[0][1], "batch32": rows[1][1]}

    rows += node_cases("", None, None, levels, args)
    plain = {name: r for name, r in rows}
    secured = []
    if args.tls or args.auth or args.allow_list:
        with tempfile.TemporaryDirectory(prefix="raftmq-bench-pki-") as pki:
            node_sec, client_sec = _security(Path(pki), args.tls, args.auth, args.allow_list)
            label = "+".join(x for x, on in (("tls", args.tls), ("auth", args.auth), ("allow", args.allow_list))
                             if on)
            secured = node_cases(label, node_sec, client_sec, levels, args)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nraftmq gRPC benchmark: {args.size} B bodies, single node, durability async, "
          f"{os.cpu_count()} CPUs shared by clients and node (load average {load}), "
          f"{args.seconds:.0f} s per produce run, up to {args.client_procs} producer processes\n")
    hdr = (f"{'case':28} {'msgs/s':>8} {'MB/s':>6} {'p50 ms':>7} {'p99 ms':>7} {'node us':>8} {'client us':>9} "
           f"{'msgs/CPU-s':>10} {'vs store':>8}")
    print(hdr)
    print("-" * len(hdr))
    for name, r in rows + secured:
        ref = base["single" if "single" in name else "batch32"]
        ratio = r["msgs_s"] / ref["msgs_s"] if ref["msgs_s"] else float("nan")
        line = (f"{name:28} {r['msgs_s']:8.0f} {r['mb_s']:6.1f} {r['p50_ms']:7.2f} {r['p99_ms']:7.2f} "
                f"{r['node_us']:8.0f} {r['client_us']:9.0f} {1e6 / r['node_us']:10.0f} {ratio:8.2f}")
        base_row = plain.get(name.split("] ", 1)[-1]) if name.startswith("[") else None
        if base_row:
            line += f"   vs plain {r['msgs_s'] / base_row['msgs_s']:.2f}"
        print(line)
    print("\nnode us / client us: CPU microseconds per message in the node process (store rows: this process, "
          "reput included)\nand in the producer processes; msgs/CPU-s = 1e6 / node us. vs store: msgs/s divided "
          "by the direct store put\nof the same batching (pull: by store batch32).")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""gRPC produce/pull throughput and latency of one real node, next to the store's own put speed.

Why the store figure in the same run: on a shared box absolute numbers drift; the ratio "gRPC / direct
MessageStore.put_messages" says what the network layer, the event loop and the write path cost on top of the
store. Durability: single node, ``async`` (flush_disk_type ASYNC: acknowledged once in the page cache).

    .venv/bin/python bench/grpc_bench.py [--seconds 3] [--size 1024]

Producers are asyncio tasks of one client process (grpc.aio), each sending one request at a time; the client's
own CPU use is part of the figure (the box has 2 cores shared by client and node).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto")]

import grpc  # noqa: E402
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


async def produce(address: str, topic: str, concurrency: int, batch: int, size: int, seconds: float) -> dict:
    body = os.urandom(size)
    lat: list[float] = []
    sent = 0
    async with grpc.aio.insecure_channel(address, options=GRPC_OPTIONS) as ch:
        stub = pb_grpc.MessagingServiceStub(ch)
        await stub.SendMessage(pb.SendMessageRequest(message=pb.Message(topic=topic, body=body)))  # warm up
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
                await call(req, timeout=30)
                lat.append(time.perf_counter() - t0)
                sent += batch

        t0 = time.perf_counter()
        await asyncio.gather(*(producer(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - t0
    lat.sort()
    return {"msgs_s": sent / elapsed, "mb_s": sent * size / elapsed / 1e6, "p50_ms": _pct(lat, 50) * 1e3,
            "p99_ms": _pct(lat, 99) * 1e3, "requests": len(lat)}


async def pull_all(address: str, topic: str, concurrency: int) -> dict:
    """Read every queue of ``topic`` from offset 0 to its end, 32 messages per pull."""
    total = nbytes = 0
    lat: list[float] = []
    async with grpc.aio.insecure_channel(address, options=GRPC_OPTIONS) as ch:
        stub = pb_grpc.MessagingServiceStub(ch)
        queues = (await stub.GetQueueOffsets(pb.GetQueueOffsetsRequest(topic=topic))).queues
        todo = [q for q in queues if q.max_offset > q.min_offset]

        async def reader(mine: list) -> None:
            nonlocal total, nbytes
            for q in mine:
                offset = q.min_offset
                while offset < q.max_offset:
                    t0 = time.perf_counter()
                    r = await stub.PullMessage(pb.PullMessageRequest(topic=topic, queue_id=q.queue_id, offset=offset,
                                                                     max_count=32), timeout=30)
                    lat.append(time.perf_counter() - t0)
                    if r.status != pb.FOUND:
                        raise RuntimeError(f"pull queue {q.queue_id} at {offset}: {pb.PullStatus.Name(r.status)}")
                    total += len(r.messages)
                    nbytes += sum(len(m.body) for m in r.messages)
                    offset = r.next_offset

        t0 = time.perf_counter()
        await asyncio.gather(*(reader(todo[i::concurrency]) for i in range(concurrency)))
        elapsed = time.perf_counter() - t0
    lat.sort()
    return {"msgs_s": total / elapsed, "mb_s": nbytes / elapsed / 1e6, "p50_ms": _pct(lat, 50) * 1e3,
            "p99_ms": _pct(lat, 99) * 1e3, "requests": len(lat)}


def store_put(size: int, batch: int, seconds: float) -> dict:
    """Direct MessageStore.put_messages in this process (no gRPC, no write path), same record shape."""
    from store import StoreConfig
    from store.message import Message
    from store.message_store import MessageStore

    body = os.urandom(size)
    with tempfile.TemporaryDirectory(prefix="raftmq-bench-store-") as d:
        st = MessageStore(StoreConfig(root_dir=d, **BENCH_STORE))
        st.open()
        try:
            lat: list[float] = []
            sent = 0
            i = 0
            stop_at = time.perf_counter() + seconds
            t0 = time.perf_counter()
            while time.perf_counter() < stop_at:
                msgs = [Message(topic="bench", body=body, queue_id=i % QUEUES,
                                properties={"KEYS": "p0", "UNIQ_KEY": f"U{i}-{j}"}) for j in range(batch)]
                t1 = time.perf_counter()
                st.put_messages(msgs)
                lat.append(time.perf_counter() - t1)
                sent += batch
                i += 1
            elapsed = time.perf_counter() - t0
        finally:
            st.shutdown()
    lat.sort()
    return {"msgs_s": sent / elapsed, "mb_s": sent * size / elapsed / 1e6, "p50_ms": _pct(lat, 50) * 1e3,
            "p99_ms": _pct(lat, 99) * 1e3, "requests": len(lat)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="duration of each produce run")
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--concurrency", default="1,8,64")
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    rows: list[tuple[str, dict]] = []

    store_single = store_put(args.size, 1, args.seconds)
    store_batch = store_put(args.size, 32, args.seconds)

    with tempfile.TemporaryDirectory(prefix="raftmq-bench-") as d:
        [spec] = node_specs(Path(d), 1, store=BENCH_STORE, node={"log_level": "WARNING"})
        nodes = start_nodes([spec])
        try:
            addr = nodes[0].grpc_address
            admin = pb_grpc.AdminServiceStub(nodes[0].channel())
            admin.CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(
                name="bench", read_queue_nums=QUEUES, write_queue_nums=QUEUES)), timeout=10)
            for batch in (1, 32):
                for c in levels:
                    r = asyncio.run(produce(addr, "bench", c, batch, args.size, args.seconds))
                    rows.append((f"gRPC send {'single' if batch == 1 else 'batch32'} c={c}", r))
            for c in (1, 4):
                rows.append((f"gRPC pull 32/req c={c}", asyncio.run(pull_all(addr, "bench", c))))
        finally:
            stop_all(nodes)

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nraftmq gRPC benchmark: {args.size} B bodies, single node, durability async, "
          f"{os.cpu_count()} CPUs shared by client and node (load average {load}), "
          f"{args.seconds:.0f} s per produce run\n")
    hdr = f"{'case':32} {'msgs/s':>10} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'vs store':>9}"
    print(hdr)
    print("-" * len(hdr))
    print(f"{'store put_messages single':32} {store_single['msgs_s']:10.0f} {store_single['mb_s']:8.1f} "
          f"{store_single['p50_ms']:8.3f} {store_single['p99_ms']:8.3f} {'1.00':>9}")
    print(f"{'store put_messages batch32':32} {store_batch['msgs_s']:10.0f} {store_batch['mb_s']:8.1f} "
          f"{store_batch['p50_ms']:8.3f} {store_batch['p99_ms']:8.3f} {'1.00':>9}")
    for name, r in rows:
        base = store_batch if "batch32" in name or "pull" in name else store_single
        ratio = r["msgs_s"] / base["msgs_s"] if base["msgs_s"] else float("nan")
        print(f"{name:32} {r['msgs_s']:10.0f} {r['mb_s']:8.1f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {ratio:9.2f}")
    print("\nvs store: gRPC msgs/s divided by the direct store put of the same batching (pull: by store batch32).")
    return 0


if __name__ == "__main__":
    sys.exit(main())

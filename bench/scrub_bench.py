"""Scrubber and start-up derived-file check: how fast they read, and what a running scrub costs the put path.

Three figures, each against a baseline measured in the same run (the box is shared: absolute numbers drift):

1. ``scrub (unbounded)``: ``Scrubber.run_pass`` over the sealed segments of a store with no rate limit, in MB per
   wall second and per CPU second of the scrubbing thread (record CRCs + consume-queue comparison) - the ceiling
   any ``scrub_rate_bytes_per_s`` is capped by.
2. ``start-up check``: ``check_consume_queues`` over the whole log (what ``check_derived_files_on_start`` adds to
   a start), in records and MB per second.
3. ``put with scrub``: SDK ``send_batch`` throughput against a real node (gRPC, single node, ASYNC) with the
   scrubber off, at the default rate and at a high rate, scrubbing continuously (``scrub_interval_s`` tiny).

    .venv/bin/python bench/scrub_bench.py [--log-mb 64] [--seconds 3] [--size 1024]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto")]

from raftmq.client import Admin, Producer  # noqa: E402
from raftmq.store import Message, MessageStore, StoreConfig  # noqa: E402
from raftmq.store.config import StoreConfig as _Cfg  # noqa: E402
from raftmq.store.derived_check import check_consume_queues  # noqa: E402
from raftmq.store.scrubber import Scrubber  # noqa: E402
from tests.support.processes import node_specs, start_nodes, stop_all  # noqa: E402

STORE = {"mapped_file_size_commit_log": 8 << 20, "mapped_file_size_consume_queue": 20 * 300_000,
         "max_hash_slot_num": 500_000, "max_index_num": 2_000_000, "preallocate": False}


def fill_store(root: str, mb: int, size: int) -> MessageStore:
    st = MessageStore(StoreConfig(root_dir=root, scrub_rate_bytes_per_s=0, **STORE))
    st.open()
    body = os.urandom(size)
    n = (mb << 20) // (size + 150)
    for start in range(0, n, 256):
        st.put_messages([Message(topic="Bench", queue_id=i % 8, body=body, properties={"KEYS": f"k{i}"})
                         for i in range(start, min(n, start + 256))])
    assert st.reput.wait_dispatched(timeout=600)
    return st


def bench_scrub(st: MessageStore) -> None:
    sc = Scrubber(st, 1 << 40, 3600)
    w0, c0 = time.perf_counter(), time.thread_time()
    problems = sc.run_pass()
    wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
    mb = sc.bytes_scrubbed / 1e6
    print(f"scrub (unbounded): {mb:.1f} MB of sealed segments in {wall:.2f}s wall / {cpu:.2f}s CPU = "
          f"{mb / wall:.1f} MB/s wall, {mb / cpu:.1f} MB/CPU-s ({problems} problems)")
    cl = st.commit_log
    w0, c0 = time.perf_counter(), time.thread_time()
    res = check_consume_queues(cl, st.consume_queues, cl.min_offset, cl.max_offset, whole_log=True)
    wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
    mb = (cl.max_offset - cl.min_offset) / 1e6
    print(f"start-up check: {res.records} records, {mb:.1f} MB in {wall:.2f}s wall / {cpu:.2f}s CPU = "
          f"{res.records / cpu:,.0f} records/CPU-s, {mb / cpu:.1f} MB/CPU-s")


def put_rate(tmp: Path, name: str, store: dict, seconds: float, size: int, prefill_mb: int) -> float:
    [spec] = node_specs(tmp / name, 1, store={**STORE, **store})
    [node] = start_nodes([spec])
    try:
        addr = node.grpc_address
        with Admin(addr) as admin:
            admin.create_topic("PutBench", queues=8)
        body = os.urandom(size)
        with Producer(addr) as p:
            for _ in range((prefill_mb << 20) // (size * 64)):  # sealed segments for the scrubber to read
                p.send_batch("PutBench", [body] * 64)
            sent = 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                p.send_batch("PutBench", [body] * 32)
                sent += 32
            elapsed = time.perf_counter() - t0
    finally:
        stop_all([node])
    return sent / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--log-mb", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        st = fill_store(os.path.join(d, "s"), args.log_mb, args.size)
        try:
            bench_scrub(st)
        finally:
            st.shutdown()
        default_rate = _Cfg().scrub_rate_bytes_per_s
        tmp = Path(d)
        configs = (("off", 0), ("default", default_rate), ("64 MiB/s", 64 << 20))
        rates: dict[str, list[float]] = {label: [] for label, _ in configs}
        for rep in range(2):  # alternated, so a busy neighbour weighs on every configuration alike
            for label, rate in configs:
                store = {"scrub_rate_bytes_per_s": rate, "scrub_interval_s": 0}
                rates[label].append(put_rate(tmp, f"{label.replace(' ', '').replace('/', '')}{rep}", store,
                                             args.seconds, args.size, 32))
        base = max(rates["off"])
        print(f"put, scrubber off: {base:,.0f} msgs/s (best of 2; {args.size} B, SDK send_batch of 32, one client)")
        for label, rate in configs[1:]:
            r = max(rates[label])
            print(f"put, scrubbing continuously at {label} ({rate / 2**20:.0f} MiB/s): {r:,.0f} msgs/s "
                  f"(best of 2) = {r / base:.2f}x off")

if __name__ == "__main__":
    main()

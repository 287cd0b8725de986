"""Cost of checking each record's CRC on the read path (``store.check_crc_on_read``), same data, same run.

Two figures, each with the check on and off, alternated (on, off, on, off) so drift on a shared box hits both:

* store: ``MessageStore.get_messages`` over every queue in this process (the check's own cost, no network);
* gRPC: ``PullMessage`` of 32 messages per request through a real node process (the path users take), the
  node restarted on the same data directory with the setting flipped.

    .venv/bin/python bench/read_crc_bench.py [--messages 200000] [--size 1024] [--rounds 2]
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
sys.path[:0] = [str(REPO), str(REPO / "proto"), str(REPO / "bench")]

from grpc_bench import BENCH_STORE, QUEUES, pull_all  # noqa: E402

from tests.support.processes import node_specs, start_nodes, stop_all  # noqa: E402


def fill(root: str, messages: int, size: int) -> None:
    from raftmq.store import StoreConfig
    from raftmq.store.message import Message
    from raftmq.store.message_store import MessageStore

    body = os.urandom(size)
    st = MessageStore(StoreConfig(root_dir=root, **BENCH_STORE))
    st.open()
    try:
        from raftmq.store.topic_config import TopicConfig

        st.topics.put(TopicConfig(topic_name="bench", read_queue_nums=QUEUES, write_queue_nums=QUEUES),
                      int(time.time() * 1000))
        for i in range(0, messages, 256):
            st.put_messages([Message(topic="bench", body=body, queue_id=(i // 256) % QUEUES,
                                     properties={"KEYS": "p0", "UNIQ_KEY": f"U{i}-{j}"}) for j in range(256)])
        st.reput.wait_dispatched(timeout=600)
    finally:
        st.shutdown()


def store_read(root: str, check: bool) -> dict:
    from raftmq.store import StoreConfig
    from raftmq.store.message_store import MessageStore

    st = MessageStore(StoreConfig(root_dir=root, **BENCH_STORE, check_crc_on_read=check))
    st.open()
    try:
        total = nbytes = 0
        t0, c0 = time.perf_counter(), time.process_time()
        for q in range(QUEUES):
            off, end = st.min_offset_in_queue("bench", q), st.max_offset_in_queue("bench", q)
            while off < end:
                g = st.get_messages("bench", q, off, max_count=32)
                total += len(g.messages)
                nbytes += sum(len(m.body) for m in g.messages)
                off = g.next_begin_offset
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        st.shutdown()
    return {"msgs_s": total / elapsed, "mb_s": nbytes / elapsed / 1e6, "us": cpu / total * 1e6}


def grpc_read(base: Path, root: str, check: bool) -> dict:
    [spec] = node_specs(base, 1, store={**BENCH_STORE, "check_crc_on_read": check}, node={"log_level": "WARNING"})
    spec.data_dir = Path(root)
    nodes = start_nodes([spec], timeout=300)
    try:
        r = asyncio.run(pull_all(nodes[0].grpc_address, "bench", 4, nodes[0].proc.pid))
    finally:
        stop_all(nodes)
    return {"msgs_s": r["msgs_s"], "mb_s": r["mb_s"], "us": r["node_us"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-grpc", action="store_true", help="store figures only")
    args = ap.parse_args()
    rows: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="raftmq-crc-bench-") as d:
        root = os.path.join(d, "store")
        fill(root, args.messages, args.size)
        for _ in range(args.rounds):
            for check in (True, False):
                rows.setdefault(f"store get_messages crc={'on' if check else 'off'}", []).append(
                    store_read(root, check))
                if not args.no_grpc:
                    rows.setdefault(f"gRPC pull 32/req c=4 crc={'on' if check else 'off'}", []).append(
                        grpc_read(Path(d), root, check))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nread-path CRC check: {args.messages} messages of {args.size} B, best of {args.rounds} rounds, "
          f"{os.cpu_count()} CPUs (load average {load})\n")
    hdr = f"{'case':34} {'msgs/s':>9} {'MB/s':>7} {'CPU us/msg':>10} {'vs off':>7}"
    print(hdr)
    print("-" * len(hdr))
    best = {k: max(v, key=lambda r: r["msgs_s"]) for k, v in rows.items()}
    for name, r in best.items():
        off = best[name.replace("crc=on", "crc=off")]
        print(f"{name:34} {r['msgs_s']:9.0f} {r['mb_s']:7.1f} {r['us']:10.1f} {r['msgs_s'] / off['msgs_s']:7.2f}")
    print("\nCPU us/msg: this process (store rows) or the node process (gRPC rows) per message read.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

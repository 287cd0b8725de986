"""Reput (dispatch) throughput: commit log -> consume queues + index, on one core.

Why the baselines in the same run: on a shared box absolute numbers drift, so rates are per CPU second of the
dispatching thread (``time.thread_time``: what one core does), and each is also given relative to the others.
``decode only`` runs the general record decoder (``check_message_and_return_size``, which builds a
DispatchRequest with the full property map) over the same records: reput used it for every record and still
uses it for the unusual ones (IPv6 hosts, the schedule topic, bad lengths), while its own loop reads the
common record with one unpack, so reput can beat this baseline. ``cq only`` adds the consume-queue writes;
``full`` adds the index (uniq key + 1 key per message).

    .venv/bin/python bench/reput_bench.py [--messages 200000] [--body 100]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

from raftmq.store.commit_log import CommitLog
from raftmq.store.config import StoreConfig
from raftmq.store.consume_queue import ConsumeQueueTable
from raftmq.store.index_service import IndexService
from raftmq.store.message import Message
from raftmq.store.reput import ReputMessageService

HOST = ("127.0.0.1", 10911)


def build(root: str, n: int, body: int) -> CommitLog:
    cfg = StoreConfig(
        root_dir=root,
        mapped_file_size_commit_log=64 << 20,
        max_hash_slot_num=500_000,
        max_index_num=2_000_000,
        preallocate=False,
    )
    cl = CommitLog(cfg)
    cl.load()
    payload = b"x" * body
    ts = int(time.time() * 1000)
    for start in range(0, n, 256):
        msgs = [
            Message(
                topic="BenchTopic",
                queue_id=i % 8,
                body=payload,
                properties={"TAGS": f"tag{i % 4}", "KEYS": f"order-{i}"},
                born_timestamp=ts,
            )
            for i in range(start, min(n, start + 256))
        ]
        cl.apply_batch(cl.encode_batch(msgs, ts, HOST, "DefaultCluster"))
    return cl


def run(cl: CommitLog, root: str, mode: str, rep: int) -> tuple[float, int]:
    cfg = cl.config
    if mode == "decode only":
        check = cl.check_message_and_return_size
        t = time.thread_time()
        offset, count, end = 0, 0, cl.max_offset
        while offset < end:
            view = cl.get_data(offset, end)
            if view is None:
                break
            pos, n = 0, len(view)
            while pos < n:
                dr = check(view, pos, n, False)
                if dr.msg_size == 0:
                    offset = cl.roll_next_file(offset + pos)
                    break
                pos += dr.msg_size
                count += 1
            else:
                offset += pos
            view.release()
        return time.thread_time() - t, count
    cqs = ConsumeQueueTable(f"{root}/cq-{mode[:2]}-{rep}", cfg.consume_queue_file_size, preallocate=False)
    index = None
    if mode == "full":
        index = IndexService(
            f"{root}/index-{rep}", cfg.max_hash_slot_num, cfg.max_index_num, preallocate=False
        )
    reput = ReputMessageService(cl, cqs, index)
    t = time.thread_time()
    count = reput.do_reput()
    elapsed = time.thread_time() - t
    cqs.close()
    if index is not None:
        index.close()
    return elapsed, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3, help="runs per mode; the best is reported (shared box)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="reput-bench-")
    try:
        cl = build(root, args.messages, args.body)
        print(f"{args.messages} messages, body {args.body} B, 8 queues, TAGS + KEYS + UNIQ_KEY each")
        base = None
        for mode in ("decode only", "cq only", "full"):
            rate = max(
                count / elapsed for elapsed, count in (run(cl, root, mode, r) for r in range(args.repeat))
            )
            base = base or rate
            print(f"  {mode:12s} {rate:10,.0f} msgs/s   ({rate / base:.2f} of decode only)")
        cl.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Receive+ack (pop) against pull+commit on the same store in the same run, through the SDK users take.

Both consume the same pre-loaded topic (1 KiB bodies by default, 4 queues) with batches of 32: pull+commit is a
``PullConsumer`` (poll, then commit the offsets every batch, as an at-least-once consumer would; also shown with
auto-commit every second, which may redeliver a second's worth after a crash); receive+ack is a
``SimpleConsumer`` (receive 32, ack the 32 handles in one call). Pop costs more by design: every receive and every
ack is a replicated decision (a Raft command on 3 members), where pull reads the queue and commits offsets
coalesced. The ratio is the figure to read; absolute numbers drift with whatever else runs on the box.

    .venv/bin/python bench/pop_bench.py [--messages 3000] [--size 1024] [--members 1,3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto")]

from raftmq.client import Admin, Producer, PullConsumer, SimpleConsumer  # noqa: E402
from raftmq.client.types import Message  # noqa: E402
from tests.support.processes import node_specs, start_nodes, stop_all  # noqa: E402

BENCH_STORE = {"mapped_file_size_commit_log": 64 << 20, "mapped_file_size_consume_queue": 20 * 300_000,
               "flush_disk_type": "ASYNC", "preallocate": False, "max_message_size": 4 << 20}
BATCH = 32


def load(servers: list[str], topic: str, n: int, size: int) -> None:
    body = b"x" * size
    with Producer(servers) as p:
        for q in range(4):
            for i in range(0, n // 4, BATCH):
                p.send_batch(topic, [Message(body)] * min(BATCH, n // 4 - i), queue_id=q)


def pull_commit(servers: list[str], topic: str, n: int, every_batch: bool) -> float:
    """Commit after every batch (what receive+ack guarantees), or auto-commit every second (weaker: a crash
    redelivers up to a second of messages)."""
    got = 0
    with PullConsumer(f"bench-pull-{int(every_batch)}", topic, servers, start_from="first",
                      auto_commit=not every_batch, auto_commit_interval=1.0, batch_size=BATCH, long_poll=0.5) as c:
        t0 = time.perf_counter()
        while got < n:
            msgs = c.poll(1.0)
            got += len(msgs)
            if msgs and every_batch:
                c.commit()
        return time.perf_counter() - t0


def receive_ack(servers: list[str], topic: str, n: int) -> float:
    got = 0
    with SimpleConsumer("bench-pop", topic, servers, await_duration=0.5) as c:
        t0 = time.perf_counter()
        while got < n:
            msgs = c.receive(BATCH, 60)
            if msgs:
                c.ack(msgs)
            got += len(msgs)
        return time.perf_counter() - t0


def run(members: int, n: int, size: int) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory(prefix="pop-bench-") as d:
        nodes = start_nodes(node_specs(Path(d), members, store=BENCH_STORE))
        try:
            servers = [x.grpc_address for x in nodes]
            with Admin(servers) as admin:
                admin.create_topic("PopBench", queues=4)
            load(servers, "PopBench", n, size)
            pull_s = pull_commit(servers, "PopBench", n, True)
            lazy_s = pull_commit(servers, "PopBench", n, False)
            pop_s = receive_ack(servers, "PopBench", n)
            return n / pull_s, n / lazy_s, n / pop_s
        finally:
            stop_all(nodes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--members", default="1,3", help="cluster sizes to run, comma-separated")
    args = ap.parse_args()
    print(f"{args.messages} messages of {args.size} B, batch {BATCH}, 4 queues, durability async")
    print(f"{'members':>8} {'pull+commit/batch':>18} {'pull+commit/1s':>15} {'receive+ack':>12} "
          f"{'ratio':>6} {'ratio/1s':>9}   (msg/s; ratio = receive+ack / pull+commit per batch)")
    for m in (int(x) for x in args.members.split(",")):
        pull, lazy, pop = run(m, args.messages, args.size)
        print(f"{m:>8} {pull:>18.0f} {lazy:>15.0f} {pop:>12.0f} {pop / pull:>6.2f} {pop / lazy:>9.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

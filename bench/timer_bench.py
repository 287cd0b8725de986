"""Timer messages (issue 13) through the SDK users take: send cost against plain sends, delivery lag, throughput.

In one run, against real node processes (1 or 3 members): send N plain messages (baseline), then N timer messages
(``Message(deliver_at_ms=...)``, batches of 32) whose delivery times spread evenly over ``--spread`` seconds
starting ``--lead`` seconds after the sends end, so N timers are pending at once. Then every delivered message is
pulled back and its lag computed from stored values: the delivered record's store timestamp minus its
TIMER_DELIVER_MS (never negative: a timer is never delivered early). Prints send rates and their ratio, lag
p50/p99/max, and the delivery rate while due timers kept coming. Numbers drift with whatever else runs on the box.

    .venv/bin/python bench/timer_bench.py [--timers 20000] [--size 128] [--spread 5] [--lead 3] [--members 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto")]

from raftmq.client import Admin, Producer, PullConsumer  # noqa: E402
from raftmq.client.types import Message  # noqa: E402
from tests.support.processes import node_specs, start_nodes, stop_all  # noqa: E402

BENCH_STORE = {"mapped_file_size_commit_log": 64 << 20, "mapped_file_size_consume_queue": 20 * 300_000,
               "flush_disk_type": "ASYNC", "preallocate": False}
BATCH = 32


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def send(servers: list[str], topic: str, msgs: list[Message]) -> float:
    """Seconds to send ``msgs`` in batches of ``BATCH``."""
    with Producer(servers) as p:
        t0 = time.perf_counter()
        for i in range(0, len(msgs), BATCH):
            p.send_batch(topic, msgs[i:i + BATCH], queue_id=0)
        return time.perf_counter() - t0


def pull_all(servers: list[str], topic: str, n: int, timeout_s: float) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    with PullConsumer("timer-bench", topic, servers, start_from="first", auto_commit=False, batch_size=256,
                      long_poll=0.5) as c:
        while len(got) < n and time.monotonic() < deadline:
            got += c.poll(1.0)
    return got


def pct(values: list[int], p: float) -> int:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timers", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--spread", type=float, default=5.0, help="seconds over which the timers fall due")
    ap.add_argument("--lead", type=float, default=3.0, help="seconds between the end of the sends and the first due")
    ap.add_argument("--members", type=int, default=1)
    args = ap.parse_args()
    n, body = args.timers, b"x" * args.size
    with tempfile.TemporaryDirectory() as tmp:
        nodes = start_nodes(node_specs(Path(tmp), args.members, store=BENCH_STORE))
        try:
            servers = [x.grpc_address for x in nodes]
            with Admin(servers) as admin:
                admin.create_topic("Plain", queues=1)
                admin.create_topic("Timed", queues=1)
            plain_s = send(servers, "Plain", [Message(body)] * n)
            # the sends take a while: estimate their length from the baseline so the first timer falls due
            # ``lead`` seconds after they end (a timer due during the sends would only make the lag look better)
            first_due = now_ms() + int((plain_s * 1.5 + args.lead) * 1000)
            step = args.spread * 1000 / n
            timers = [Message(body, deliver_at_ms=first_due + int(i * step)) for i in range(n)]
            timer_s = send(servers, "Timed", timers)
            sent_end = now_ms()
            got = pull_all(servers, "Timed", n, timeout_s=args.lead + args.spread + plain_s * 2 + 300)
            lags = [m.store_timestamp - int(m.properties["TIMER_DELIVER_MS"]) for m in got]
            print(f"timer_bench: {n} messages of {args.size} B, {args.members} member(s), async flush, batches of "
                  f"{BATCH}, box shared with other work")
            print(f"  send plain : {n / plain_s:9.0f} msg/s")
            print(f"  send timer : {n / timer_s:9.0f} msg/s   ratio timer/plain {plain_s / timer_s:.2f}")
            print(f"  pending at the first due time: {n if sent_end < first_due else 'fewer'} "
                  f"(sends ended {first_due - sent_end} ms before it)")
            if len(got) < n:
                print(f"  DELIVERED ONLY {len(got)} of {n} before the timeout")
            if lags:
                last = max(m.store_timestamp for m in got)
                window_s = max(0.001, (last - first_due) / 1000)
                print(f"  delivered {len(got)}; lag ms p50 {pct(lags, 0.5)}  p99 {pct(lags, 0.99)}  max {max(lags)}"
                      f"  min {min(lags)} (never < 0)")
                print(f"  delivery rate {len(got) / window_s:9.0f} msg/s over {window_s:.2f} s "
                      f"(timers fell due at {n / args.spread:.0f}/s)")
        finally:
            stop_all(nodes)


if __name__ == "__main__":
    main()

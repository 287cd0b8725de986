"""The SDK's PullConsumer on a pull stream vs queue-by-queue pulls, through a real node (issue 17, streaming consume).

Two cases, each for both paths in the same run, on one node started here (8 queues, 1 KiB messages):
* backlog: drain N stored messages: msgs/s and node + client CPU per message;
* tail: a producer sends at a steady rate while the consumer keeps up: end-to-end latency (send call start to
  hand-out by ``poll``) p50/p99, node CPU per message, and requests the node served per message.
Prints numbers and the stream/pull ratio; never fails on time.

    .venv/bin/python bench/consume_bench.py [--messages 40000] [--rate 2000] [--seconds 8]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.grpc_bench import _cpu_seconds, _pct  # noqa: E402
from raftmq.client import Admin, Message, Producer, PullConsumer  # noqa: E402
from tests.support.processes import running_nodes  # noqa: E402

QUEUES = 8
BODY = b"x" * 1024


def _requests(node) -> int:
    _, text = node.http_get("/metrics")
    counts = re.findall(r'^raftmq_rpc_latency_seconds_count\{[^}]*method="(PullMessage|PullStream)"[^}]*\} (\S+)$',
                        text, re.M)
    return int(sum(float(v) for _, v in counts))


def backlog(node, topic: str, n: int, streaming: bool) -> dict:
    with PullConsumer(f"backlog-{streaming}", topic, node.grpc_address, start_from="first", streaming=streaming,
                      auto_commit=False) as c:
        c.start()
        got = 0
        t0, c0, n0 = time.perf_counter(), time.process_time(), _cpu_seconds(node.proc.pid)
        while got < n:
            got += len(c.poll(timeout=1.0))
        elapsed = time.perf_counter() - t0
        cpu, node_cpu = time.process_time() - c0, _cpu_seconds(node.proc.pid) - n0
    return {"msgs_s": got / elapsed, "node_us": node_cpu / got * 1e6, "client_us": cpu / got * 1e6}


def tail(node, topic: str, rate: int, seconds: float, streaming: bool) -> dict:
    sent_at: dict[bytes, float] = {}
    lat: list[float] = []
    stop = threading.Event()

    def produce() -> None:
        with Producer(node.grpc_address) as p:
            i = 0
            start = time.perf_counter()
            while not stop.is_set():
                due = start + i / rate
                now = time.perf_counter()
                if due > now:
                    time.sleep(due - now)
                key = b"%d-%d" % (streaming, i)
                sent_at[key] = time.perf_counter()
                p.send_batch(topic, [Message(key + b"|" + BODY)], queue_id=i % QUEUES)
                i += 1

    with PullConsumer(f"tail-{streaming}", topic, node.grpc_address, start_from="last", streaming=streaming,
                      long_poll=5.0) as c:
        c.start()
        c.poll(timeout=0.2)
        r0, n0 = _requests(node), _cpu_seconds(node.proc.pid)
        t = threading.Thread(target=produce)
        t.start()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            for m in c.poll(timeout=0.5):
                key = m.body.split(b"|", 1)[0]
                if key in sent_at:
                    lat.append(time.perf_counter() - sent_at[key])
        stop.set()
        t.join()
        node_cpu = _cpu_seconds(node.proc.pid) - n0
    requests = _requests(node) - r0  # the stream counts once it ended (closed with the consumer)
    lat.sort()
    got = max(len(lat), 1)
    return {"msgs": len(lat), "p50_ms": _pct(lat, 50) * 1e3, "p99_ms": _pct(lat, 99) * 1e3,
            "node_us": node_cpu / got * 1e6, "req_per_msg": requests / got}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=40_000)
    ap.add_argument("--rate", type=int, default=2_000, help="tail case: messages per second sent")
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_nodes(Path(tmp), 1) as (node,):
        with Admin(node.grpc_address) as admin:
            admin.create_topic("backlog", queues=QUEUES)
            admin.create_topic("tail", queues=QUEUES)
        with Producer(node.grpc_address) as p:
            for start in range(0, args.messages, 256):
                for q in range(QUEUES):
                    p.send_batch("backlog", [Message(BODY)] * (min(256, args.messages - start) // QUEUES),
                                 queue_id=q)
        stored = sum(o.max_offset for o in Admin(node.grpc_address).queue_offsets("backlog"))
        rows = []
        for streaming in (False, True, False, True):  # interleaved rounds
            b = backlog(node, "backlog", stored, streaming)
            t = tail(node, "tail", args.rate, args.seconds, streaming)
            rows.append((streaming, b, t))
    print(f"PullConsumer, 1 node, {QUEUES} queues, 1 KiB; backlog {stored} msgs; tail {args.rate} msgs/s for "
          f"{args.seconds:.0f} s")
    print(f"{'path':8} {'backlog msgs/s':>14} {'node µs/msg':>11} {'client µs/msg':>13} | {'tail p50 ms':>11} "
          f"{'p99 ms':>7} {'node µs/msg*':>12} {'requests/msg':>12}")
    for streaming, b, t in rows:
        print(f"{'stream' if streaming else 'pull':8} {b['msgs_s']:14,.0f} {b['node_us']:11.1f} "
              f"{b['client_us']:13.1f} | {t['p50_ms']:11.1f} {t['p99_ms']:7.1f} {t['node_us']:12.1f} "
              f"{t['req_per_msg']:12.3f}")

    def best(streaming: bool, case: int, key: str) -> float:
        vals = [r[case][key] for r in rows if r[0] == streaming]
        return max(vals) if key == "msgs_s" else min(vals)

    print("* tail node CPU includes serving the producer's sends (one per message)")
    print(f"stream/pull: backlog throughput {best(True, 1, 'msgs_s') / best(False, 1, 'msgs_s'):.2f}x, "
          f"tail node CPU per message {best(True, 2, 'node_us') / best(False, 2, 'node_us'):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What de-duplication costs (issue 40): the write path with it on and off in the same run, and its memory.

1. Memory: a ``DedupWindow`` filled with ``--ids`` ids as the write path keys them (a topic name and a 32-hex
   UNIQ_KEY), measured with tracemalloc: bytes per id and per million ids, beside the window's own estimate
   (``raftmq_dedup_window_bytes``). And the rebuild a restart does: ``--rebuild-records`` records of 100 B
   written to a store, then read back into a window from the commit log.
2. The leader's CPU per message, in one process: a Raft group of one (real pysyncobj, real store) taking puts of
   1 and of 32 messages from 4 threads, with de-duplication on and off in turns (``--rounds``); process CPU time
   per message, which a busy box inflates far less than throughput. A third turn adds up the de-duplication
   code's own CPU time; each of its clock reads is a system call (about 0.7 us), which would be most of the
   figure at one message per put, so the reads are counted and taken off. Even so, at one message per put
   the threads' contention moves these figures by more than the code costs: the code alone, on one thread,
   gives that cost (``measure_code_alone``).
3. Write path: 3 member processes on loopback, producers through the SDK as in ``bench/peer_bench.py`` (1 KiB
   bodies, closed loop), once with ``node.dedup_max_entries: 0`` (off) and once with the defaults (on: every
   message keyed, screened on the leader, its id carried in the Raft command and added to every member's window).
   The two clusters take turns for ``--rounds`` rounds, so a busier moment of the box hits both; prints each case's
   median round, msgs/s on / off and server CPU per message. Never fails on time.

    .venv/bin/python bench/dedup_bench.py [--seconds 3] [--producers 64] [--batch 1,32] [--rounds 3]
                                          [--ids 1000000] [--skip-cluster]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto"), str(REPO / "bench")]

import peer_bench  # noqa: E402

from raftmq.replication.dedup_window import DedupWindow, TopicWindows  # noqa: E402
from tests.support.processes import node_specs, start_nodes, stop_all  # noqa: E402


def measure_memory(ids: int) -> dict:
    """Bytes the window holds for ``ids`` ids (tracemalloc), and the time to judge and add one without it."""
    window = DedupWindow(TopicWindows(_NoTopics(), 120), max_entries=ids + 1)
    uniq = [f"{0x0A00000200027A3C0000000000000000 + i:032X}" for i in range(ids)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    _fill(window, uniq)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(window) == ids
    estimate = window.approx_bytes()
    window.clear()
    gc.collect()
    t0 = time.perf_counter()
    _fill(window, uniq)
    elapsed = time.perf_counter() - t0
    return {"ids": ids, "bytes_per_id": held / ids, "estimate_per_id": estimate / ids, "add_us": elapsed / ids * 1e6}


class _NoTopics:
    """A topic table without topics: every topic has the node's window."""

    data_version = {"counter": 0}

    def get(self, name):
        return None

    def list(self):
        return []


def _fill(window: DedupWindow, uniq: list[str]) -> None:
    """What the members do per message: make its id from its properties (the leader screens it, every member
    adds it at apply), in batches of 32 with one store time."""
    step = 32
    for i in range(0, len(uniq), step):
        ids = [window.key_of("orders", {"UNIQ_KEY": u}) for u in uniq[i:i + step]]
        window.add([(k, 1_700_000_000_000 + i // 1000, i * 1024 + j) for j, k in enumerate(ids)])


def measure_code_alone(puts_of: int, batches: int = 3000) -> dict:
    """CPU microseconds per put that de-duplication adds, on one thread with nothing else running (the threaded
    measures below cannot resolve a few microseconds at one message per put): what the leader does for a group
    commit of puts of ``puts_of`` messages (screening, the ids of the command, framing them) and every member at
    apply (reading them back, adding them to the window), and the end of each put; against the same steps without
    it (messages, puts, an RPB1 command framed and read back, results resolved)."""
    from raftmq.replication.deduplicator import Deduplicator
    from raftmq.replication.group_commit import PendingPut
    from raftmq.replication.state_machine import frame_batch, unframe_batch
    from raftmq.store import Message
    from raftmq.store.commit_log import AppendResult

    per = max(1, 16 // puts_of)  # puts per group commit
    body, blob = os.urandom(1024), b"x" * (per * puts_of * 1200)
    seq = iter(range(1 << 62))

    def one_run(dedup: bool) -> float:
        d = Deduplicator(DedupWindow(TopicWindows(_NoTopics(), 120), 1_000_000), None) if dedup else None
        t0 = time.process_time()
        for _ in range(batches):
            puts = [PendingPut([Message(topic="orders", queue_id=0, body=body,
                                        properties={"UNIQ_KEY": f"0A0000020002{next(seq):020X}"})
                                for _ in range(puts_of)], 1200) for _ in range(per)]
            if d is not None:
                puts = d.screen(puts, 1_700_000_000_000)
            _body, keys, _term = unframe_batch(frame_batch(blob, d.keys_of(puts) if d else (), 5), 1)
            results = [AppendResult(i * 1200, i, 1200, 1_700_000_000_000, "orders", 0, "0A00000200002A9F")
                       for i in range(per * puts_of)]
            if d is not None:
                d.applied(keys, results)
            for i, p in enumerate(puts):
                p.resolve(results[i * puts_of:(i + 1) * puts_of])
        return (time.process_time() - t0) / (batches * per) * 1e6

    runs = {True: [], False: []}
    for _ in range(5):
        for dedup in (False, True):
            runs[dedup].append(one_run(dedup))
    on, off = (sorted(runs[k])[2] for k in (True, False))
    return {"puts_of": puts_of, "off_us": off, "added_us": on - off}


def measure_rebuild(records: int) -> dict:
    """Seconds to rebuild a window of ``records`` ids from a store's commit log (what a restart does)."""
    from raftmq.store import Message, MessageStore, StoreConfig

    with tempfile.TemporaryDirectory(prefix="raftmq-dedup-rebuild-") as d:
        st = MessageStore(StoreConfig(root_dir=d, mapped_file_size_commit_log=256 << 20, preallocate=False))
        st.open()
        try:
            for _ in range(0, records, 500):
                st.put_messages([Message(topic="orders", queue_id=0, body=b"x" * 100) for _ in range(500)])
            window = DedupWindow(TopicWindows(st.topics, 120), records + 1)
            t0 = time.perf_counter()
            found = window.rebuild(st)
            elapsed = time.perf_counter() - t0
        finally:
            st.shutdown()
    return {"records": found, "seconds": elapsed}


class _TimedDeduplicator:
    """A Deduplicator whose screening and the end of each put (leader) and apply (every member) CPU time is added
    up: the cost of de-duplication itself, which a busy box inflates far less than throughput or the process
    total."""

    def __new__(cls, *args, **kwargs):
        from raftmq.replication.deduplicator import Deduplicator

        class Timed(Deduplicator):
            cpu = 0.0
            calls = 0  # timed calls: each adds about one clock read to ``cpu`` (``clock_read_us``)

            def screen(self, puts, now_ms, term=0):
                t = time.thread_time()
                try:
                    return super().screen(puts, now_ms, term)
                finally:
                    Timed.cpu += time.thread_time() - t
                    Timed.calls += 1

            def keys_of(self, puts):
                t = time.thread_time()
                try:
                    return super().keys_of(puts)
                finally:
                    Timed.cpu += time.thread_time() - t
                    Timed.calls += 1

            def applied(self, keys, results):
                t = time.thread_time()
                try:
                    return super().applied(keys, results)
                finally:
                    Timed.cpu += time.thread_time() - t
                    Timed.calls += 1

            def _ended(self, ids, outcome):
                t = time.thread_time()
                try:
                    return super()._ended(ids, outcome)
                finally:
                    Timed.cpu += time.thread_time() - t
                    Timed.calls += 1

        return Timed(*args, **kwargs)


def clock_read_us() -> float:
    """CPU microseconds one ``time.thread_time()`` costs (a system call, not a vDSO read: about 0.7 us idle)."""
    n = 100_000
    t0 = time.perf_counter()
    for _ in range(n):
        time.thread_time()
    return (time.perf_counter() - t0) / n * 1e6


def measure_leader_cpu(base: Path, mode: str, batch: int, seconds: float) -> dict:
    """Process CPU microseconds per message of a Raft group of one under puts of ``batch`` messages (each with
    its own UNIQ_KEY, as the SDK sends them). ``mode``: "off", "on", or "timed": on, with the de-duplication
    code's own CPU time added up (its clock reads cost CPU too, so the process total of "timed" is not "on")."""
    import itertools
    import threading

    from raftmq.replication import RaftSettings, RaftWritePath
    from raftmq.replication.write_path import MemberInfo
    from raftmq.store import Message, MessageStore, StoreConfig
    from raftmq.store.topic_config import TopicConfig
    from tests.support.processes import free_ports

    st = MessageStore(StoreConfig(root_dir=str(base), mapped_file_size_commit_log=256 << 20, preallocate=False))
    st.open()
    raft, grpc_port = free_ports(2)
    window = DedupWindow(TopicWindows(st.topics, 120), 1_000_000)
    if mode == "timed":
        dd = _TimedDeduplicator(window, st)
        type(dd).cpu, type(dd).calls = 0.0, 0
    else:
        from raftmq.replication.deduplicator import Deduplicator

        dd = Deduplicator(window, st) if mode == "on" else None
    wp = RaftWritePath(st, node_id="n0", members=[MemberInfo("n0", f"127.0.0.1:{raft}", f"127.0.0.1:{grpc_port}")],
                       settings=RaftSettings(), dedup=dd)
    wp.start()
    try:
        deadline = time.monotonic() + 30
        while not wp.is_writable():
            assert time.monotonic() < deadline, "the group of one never became writable"
            time.sleep(0.01)
        wp.create_topic(TopicConfig(topic_name="orders", read_queue_nums=8, write_queue_nums=8))
        body = os.urandom(1024)
        sent = [0]
        stop = threading.Event()
        ids = itertools.count()

        def producer(t: int) -> None:
            n = 0
            while not stop.is_set():
                wp.put([Message(topic="orders", queue_id=t, body=body,
                                properties={"UNIQ_KEY": f"0A0000020002{t:04X}{next(ids):016X}"})
                        for _ in range(batch)]).result(30)
                n += batch
            sent[0] += n

        threads = [threading.Thread(target=producer, args=(t,)) for t in range(4)]
        cpu0, t0 = time.process_time(), time.monotonic()
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        cpu, elapsed = time.process_time() - cpu0, time.monotonic() - t0
    finally:
        wp.stop()
        st.shutdown()
    own, calls = (type(dd).cpu, type(dd).calls) if mode == "timed" else (0.0, 0)
    n = max(sent[0], 1)
    return {"cpu_us": cpu / n * 1e6, "dedup_us": own / n * 1e6, "reads": calls / n, "msgs_s": sent[0] / elapsed}


def run_cluster(base: Path, dedup: bool, cases: list[tuple[int, int]], args) -> dict:
    node = {"log_level": "WARNING"} if dedup else {"log_level": "WARNING", "dedup_max_entries": 0}
    specs = node_specs(base / ("on" if dedup else "off"), 3, store=peer_bench.BENCH_STORE, node=node,
                       cluster={"durability": "async"})
    nodes = start_nodes(specs, timeout=120)
    out = {}
    try:
        peer_bench.create_topic(nodes)
        pids = [n.proc.pid for n in nodes]
        for producers, batch in cases:
            out[(producers, batch)] = peer_bench.drive_raftmq(nodes, producers, batch, args, pids)
    finally:
        stop_all(nodes)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--producers", default="64")
    ap.add_argument("--batch", default="1,32")
    ap.add_argument("--client-procs", type=int, default=2, help="producer processes per case")
    ap.add_argument("--rounds", type=peer_bench.at_least_one(), default=3)
    ap.add_argument("--ids", type=peer_bench.at_least_one("ids"), default=1_000_000)
    ap.add_argument("--rebuild-records", type=peer_bench.at_least_one("records"), default=200_000)
    ap.add_argument("--skip-cluster", action="store_true", help="only the memory and rebuild figures")
    peer_bench.add_sdk_arguments(ap)
    args = ap.parse_args()

    m = measure_memory(args.ids)
    print(f"de-duplication window, {m['ids']:,} ids: {m['bytes_per_id']:.0f} B per id "
          f"({m['bytes_per_id'] * 1e6 / 2**20:.0f} MiB per million; the metric's estimate {m['estimate_per_id']:.0f} "
          f"B); making and adding one id {m['add_us']:.2f} us", flush=True)
    r = measure_rebuild(args.rebuild_records)
    print(f"rebuild from the commit log (a restart): {r['records']:,} ids in {r['seconds']:.2f} s, "
          f"{r['seconds'] / max(r['records'], 1) * 1e6:.1f} us per record (load average "
          f"{os.getloadavg()[0]:.1f})", flush=True)
    for puts_of in (1, 32):
        c = measure_code_alone(puts_of)
        print(f"the de-duplication code alone, one thread, puts of {puts_of}: {c['added_us']:.2f} us added per put "
              f"({c['added_us'] / puts_of:.2f} per message) to the {c['off_us']:.2f} us of the same steps without it; "
              f"median of 5", flush=True)
    with tempfile.TemporaryDirectory(prefix="raftmq-dedup-leader-") as d:
        read_us = clock_read_us()
        for batch in (1, 32):
            modes = ["on", "off", "timed"]
            got: dict[str, list[dict]] = {m: [] for m in modes}
            for round_no in range(args.rounds):
                for mode in modes[round_no % 3:] + modes[:round_no % 3]:  # each goes first in turn
                    got[mode].append(measure_leader_cpu(Path(d) / f"{batch}-{round_no}-{mode}", mode, batch,
                                                        args.seconds))
            on, off = (sorted(r["cpu_us"] for r in got[m])[args.rounds // 2] for m in ("on", "off"))
            timed = sorted(got["timed"], key=lambda r: r["dedup_us"])[args.rounds // 2]
            own = timed["dedup_us"] - timed["reads"] * read_us
            print(f"leader CPU per message, group of one, puts of {batch}: off {off:.1f} us, on {on:.1f} us "
                  f"({on / off - 1:+.1%}); the de-duplication code's own {own:.2f} us ({own / off:.1%} of off; "
                  f"{timed['dedup_us']:.2f} us measured, less its {timed['reads']:.2f} clock reads per message at "
                  f"{read_us:.2f} us); median of {args.rounds} rounds", flush=True)
    if args.skip_cluster:
        return 0

    cases = [(int(p), int(b)) for b in args.batch.split(",") for p in args.producers.split(",")]
    runs: dict[bool, dict[tuple, list[dict]]] = {True: {}, False: {}}
    with tempfile.TemporaryDirectory(prefix="raftmq-dedup-bench-") as d:
        for round_no in range(args.rounds):
            order = (True, False) if round_no % 2 == 0 else (False, True)
            for dedup in order:
                for key, r in run_cluster(Path(d) / f"round-{round_no}", dedup, cases, args).items():
                    runs[dedup].setdefault(key, []).append(r)
    on = {k: peer_bench.median_round(v) for k, v in runs[True].items()}
    off = {k: peer_bench.median_round(v) for k, v in runs[False].items()}
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nraftmq write path, 3 members (async), gRPC + SDK, {args.size} B bodies, {args.seconds:.0f} s per case, "
          f"median of {args.rounds} rounds, {os.cpu_count()} CPUs (load average {load})\n")
    hdr = (f"{'case':12} {'off msgs/s':>10} {'on msgs/s':>10} {'on/off':>7} {'off srv us':>10} {'on srv us':>10} "
           f"{'off p99 ms':>10} {'on p99 ms':>10}")
    print(hdr)
    print("-" * len(hdr))
    for producers, batch in cases:
        a, b = off[(producers, batch)], on[(producers, batch)]
        print(f"{f'{producers} x {batch}':12} {a['msgs_s']:10.0f} {b['msgs_s']:10.0f} {b['msgs_s'] / a['msgs_s']:7.3f} "
              f"{a['server_us']:10.0f} {b['server_us']:10.0f} {a['p99_ms']:10.1f} {b['p99_ms']:10.1f}")
    print("\nproducers x messages per request; off: node.dedup_max_entries 0; on: the defaults (120 s window); "
          "srv us: CPU\nmicroseconds per message of the 3 server processes; the rounds' spread on this box is "
          "+-10-30 %, so a ratio\nwithin that is no measured cost")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Store engine benchmark: put, reput, key query and recovery, each next to the raw disk in the same run.

Not a test: it prints numbers and ratios and never fails on time. Every put figure is also given as a ratio
of the disk baseline measured in the same run on the same filesystem (``bench/disk_baseline.py``): async
puts against sequential page-cache writes, sync puts against write+fsync of appends of the same size as
one put call. Next to msgs per CPU-second of the whole process (reput and flush threads included) it prints
msgs per CPU-second of the producer thread alone (``put-thread``: the put call's own cost). All data lives in a
temp directory under ``--dir`` and is deleted at the end.

    .venv/bin/python bench/store_bench.py --quick     # about a minute
    .venv/bin/python bench/store_bench.py             # full: 1,000,000 keys, 1 GiB commit log

Durability modes (docs/architecture.md#contracts, 3) are named next to every figure: ``async`` = in the page cache,
flushed on an interval; ``sync`` = fsynced before the put returns.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.disk_baseline import MIB, DiskBaseline, _datasync_speed, measure  # noqa: E402
from raftmq.store import MessageStore, StoreConfig  # noqa: E402
from raftmq.store.message import Message  # noqa: E402

BORN_HOST = ("10.0.0.1", 50000)
TOPIC = "BenchTopic"


@dataclass(frozen=True)
class Scale:
    put_seconds: float  # each put case runs this long (or until put_max messages)
    put_max: int
    batch: int
    segment: int  # commit-log segment size for put cases
    keys: int  # messages (one unique key each) for the query case
    queries: int
    recovery_bytes: int  # commit log size for the recovery case
    recovery_segment: int
    disk_mib: int
    fsync_seconds: float


QUICK = Scale(put_seconds=1.5, put_max=300_000, batch=64, segment=64 * MIB, keys=100_000, queries=2_000,
              recovery_bytes=128 * MIB, recovery_segment=64 * MIB, disk_mib=256, fsync_seconds=0.5)
FULL = Scale(put_seconds=6.0, put_max=3_000_000, batch=64, segment=1024 * MIB, keys=1_000_000, queries=20_000,
             recovery_bytes=1024 * MIB, recovery_segment=1024 * MIB, disk_mib=1024, fsync_seconds=2.0)


def cfg(root: str, **kw) -> StoreConfig:
    base = dict(root_dir=root, store_host="127.0.0.1:10911")
    base.update(kw)
    return StoreConfig(**base)


def messages(n: int, body: bytes, key_base: int = 0, with_keys: bool = False, queue_id: int = 0) -> list[Message]:
    out = []
    for i in range(n):
        props = {"TAGS": "TagA"}
        if with_keys:
            props["KEYS"] = f"k{key_base + i}"
        out.append(Message(topic=TOPIC, queue_id=queue_id, body=body, properties=props,
                           born_timestamp=1_700_000_000_000, born_host=BORN_HOST))
    return out


def wait_dispatched(st: MessageStore, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while st.dispatch_behind_bytes() > 0 and time.monotonic() < deadline:
        time.sleep(0.001)


# ---------------------------------------------------------------------------------------------- puts
def bench_put(work: str, scale: Scale, body_size: int, batched: bool,
              flush: str) -> tuple[float, float, int, float, float]:
    """(msgs/s, stored MB/s, bytes per put call, msgs per CPU-second, msgs per producer-thread CPU-second).

    Messages are built outside the clocks. CPU seconds count every thread of this process (flush, reput),
    so that figure says what the store costs even when other work on the box steals the wall clock; the
    producer thread's own CPU is the put call alone (encode + apply), without reput and flush.
    """
    root = tempfile.mkdtemp(prefix="put-", dir=work)
    st = MessageStore(cfg(root, mapped_file_size_commit_log=scale.segment, flush_disk_type=flush))
    st.open()
    try:
        body = random.Random(body_size).randbytes(body_size)
        per_call = scale.batch if batched else 1
        n = 0
        stored = 0
        t0 = time.perf_counter()
        c0 = time.process_time()
        p0 = time.thread_time()
        while True:
            # build the next 4096 messages outside the clock: encoding is the store's work, Message() is not
            t_build, c_build, p_build = time.perf_counter(), time.process_time(), time.thread_time()
            slab = [messages(per_call, body) for _ in range(4096 // per_call)]
            t0 += time.perf_counter() - t_build
            c0 += time.process_time() - c_build
            p0 += time.thread_time() - p_build
            for msgs in slab:
                if batched:
                    rs = st.put_messages(msgs)
                else:
                    rs = [st.put_message(msgs[0])]
                n += len(rs)
                stored += sum(r.wrote_bytes for r in rs)
            elapsed = time.perf_counter() - t0
            if elapsed >= scale.put_seconds or n >= scale.put_max:
                break
        cpu = time.process_time() - c0
        put_cpu = time.thread_time() - p0
        bytes_per_call = stored // max(1, n) * per_call
    finally:
        st.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    return n / elapsed, stored / elapsed / 1e6, bytes_per_call, n / cpu, n / put_cpu


# ---------------------------------------------------------------------------------------------- reput
def bench_reput(work: str, scale: Scale, n: int, body_size: int) -> list[tuple[float, float]]:
    """Rebuild consume queue + index from ``n`` messages: [(msgs/s, msgs/CPU-s) with index, same without]."""
    root = tempfile.mkdtemp(prefix="reput-", dir=work)
    try:
        st = MessageStore(cfg(root, mapped_file_size_commit_log=scale.segment))
        st.open()
        body = b"r" * body_size
        for i in range(0, n, 256):
            st.put_messages(messages(min(256, n - i), body, key_base=i, with_keys=True, queue_id=(i // 256) % 4))
        wait_dispatched(st)
        st.shutdown()
        rates = []
        for index_on in (True, False):
            for sub in ("consumequeue", "index"):
                shutil.rmtree(os.path.join(root, sub), ignore_errors=True)
            for f in ("checkpoint", "abort"):
                Path(root, f).unlink(missing_ok=True)
            st = MessageStore(cfg(root, mapped_file_size_commit_log=scale.segment, message_index_enable=index_on))
            t0, c0 = time.perf_counter(), time.process_time()
            st.open()
            wait_dispatched(st)
            rates.append((n / (time.perf_counter() - t0), n / (time.process_time() - c0)))
            st.shutdown()
        return rates
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- query
def bench_query(work: str, scale: Scale) -> tuple[float, float, float, int]:
    """Query-by-key latency over ``scale.keys`` unique keys: (p50 ms, p99 ms, max ms, misses)."""
    root = tempfile.mkdtemp(prefix="query-", dir=work)
    try:
        st = MessageStore(cfg(root, mapped_file_size_commit_log=scale.segment))
        st.open()
        body = b"q" * 32
        for i in range(0, scale.keys, 512):
            st.put_messages(messages(min(512, scale.keys - i), body, key_base=i, with_keys=True))
        wait_dispatched(st)
        rnd = random.Random(7)
        lat = []
        misses = 0
        for _ in range(scale.queries):
            k = rnd.randrange(scale.keys)
            t0 = time.perf_counter()
            got = st.query_messages(TOPIC, f"k{k}", 32, 0, 1 << 62)
            lat.append(time.perf_counter() - t0)
            if len(got) != 1:
                misses += 1
        st.shutdown()
        lat.sort()
        return (lat[len(lat) // 2] * 1e3, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, lat[-1] * 1e3,
                misses)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- recovery
_FILLER = r"""
import os, sys
sys.path.insert(0, {repo!r})
from raftmq.store import MessageStore, StoreConfig
from raftmq.store.message import Message
st = MessageStore(StoreConfig(root_dir={root!r}, mapped_file_size_commit_log={seg}, store_host="127.0.0.1:10911"))
st.open()
body = os.urandom(1024)
target = {target}
i = 0
while st.commit_log_max_offset < target:
    st.put_messages([Message(topic={topic!r}, queue_id=i % 4, body=body,
                             properties={{"TAGS": "T", "KEYS": "k%d" % (i * 64 + j)}},
                             born_timestamp=1, born_host=("10.0.0.1", 1)) for j in range(64)])
    i += 1
while st.dispatch_behind_bytes() > 0:
    pass
st.flush()
print("filled", flush=True)
{after}
"""


def bench_recovery(work: str, scale: Scale) -> tuple[float, float, float, float, int]:
    """Open time after a clean shutdown and after SIGKILL (abnormal recovery), with the time until reput caught up.

    Returns (normal open s, normal ready s, abnormal open s, abnormal ready s, commit-log bytes).
    """
    root = tempfile.mkdtemp(prefix="recovery-", dir=work)
    repo = str(Path(__file__).resolve().parent.parent)
    try:
        code = _FILLER.format(repo=repo, root=root, seg=scale.recovery_segment, target=scale.recovery_bytes,
                              topic=TOPIC, after="st.shutdown()")
        subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
        c = cfg(root, mapped_file_size_commit_log=scale.recovery_segment)

        def timed_open() -> tuple[float, float, int]:
            st = MessageStore(c)
            t0 = time.perf_counter()
            st.open()
            t_open = time.perf_counter() - t0
            wait_dispatched(st)
            t_ready = time.perf_counter() - t0
            size = st.commit_log_max_offset
            st.shutdown()
            return t_open, t_ready, size

        n_open, n_ready, size = timed_open()
        # abnormal: a writer that is SIGKILLed while the store is open (abort file left behind)
        code = _FILLER.format(repo=repo, root=root, seg=scale.recovery_segment, target=0, topic=TOPIC,
                              after="import time\ntime.sleep(600)")
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            assert p.stdout is not None and p.stdout.readline().strip() == "filled"
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
        a_open, a_ready, _ = timed_open()
        return n_open, n_ready, a_open, a_ready, size
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description="raftmq store benchmark (prints numbers; never fails on time)")
    ap.add_argument("--quick", action="store_true", help="scaled down: about a minute")
    ap.add_argument("--dir", default="data/bench", help="work directory (same filesystem as a store would use)")
    ap.add_argument("--only", default="", help="comma list of: put,reput,query,recovery (default all)")
    args = ap.parse_args()
    scale = QUICK if args.quick else FULL
    only = set(filter(None, args.only.split(","))) or {"put", "reput", "query", "recovery"}
    os.makedirs(args.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="store-bench-", dir=args.dir)
    print(f"# raftmq store bench ({'quick' if args.quick else 'full'}), python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}, work dir {work}")
    try:
        disk: DiskBaseline = measure(work, scale.disk_mib * MIB, scale.fsync_seconds)
        for line in disk.lines():
            print(line)
        if "put" in only:
            print("\n## put (one producer thread; stored MB/s counts whole records)")
            print(f"{'body':>6} {'call':>8} {'mode':>5} {'msgs/s':>10} {'MB/s':>8} {'msgs/cpu-s':>10} "
                  f"{'put-thread':>10}  ratio of disk")
            for flush in ("ASYNC", "SYNC"):
                for body_size in (128, 1024, 4096):
                    for batched in (False, True):
                        rate, mb_s, per_call, per_cpu, per_put_cpu = bench_put(work, scale, body_size, batched,
                                                                               flush)
                        call = f"batch{scale.batch}" if batched else "single"
                        if flush == "ASYNC":
                            ratio = f"{mb_s / disk.write_mb_s:6.1%} of sequential write ({disk.write_mb_s:,.0f} MB/s)"
                        else:
                            # measured right after the case: the shared disk's sync speed drifts a lot
                            scratch = tempfile.mkdtemp(dir=work)
                            _, base = _datasync_speed(os.path.join(scratch, "f"), scale.fsync_seconds, per_call)
                            shutil.rmtree(scratch)
                            ratio = (f"{mb_s / base:6.1%} of preallocated write+fdatasync of {per_call} B "
                                     f"({base:,.2f} MB/s)")
                        mode = "async" if flush == "ASYNC" else "sync"
                        print(f"{body_size:>6} {call:>8} {mode:>5} {rate:>10,.0f} {mb_s:>8,.1f} {per_cpu:>10,.0f} "
                              f"{per_put_cpu:>10,.0f}  "
                              f"{ratio}",
                              flush=True)
        if "reput" in only:
            n = scale.keys
            (with_idx, with_cpu), (without, without_cpu) = bench_reput(work, scale, n, 128)
            print(f"\n## reput (rebuild CQ+index from {n:,} messages of 128 B, 4 queues, 1 key each)")
            print(f"reput with index: {with_idx:,.0f} msgs/s ({with_cpu:,.0f} per cpu-s); consume queue only: "
                  f"{without:,.0f} msgs/s ({without_cpu:,.0f} per cpu-s) (target >= 100,000)")
        if "query" in only:
            p50, p99, mx, misses = bench_query(work, scale)
            print(f"\n## query by key ({scale.keys:,} unique keys, {scale.queries:,} random queries)")
            print(f"p50 {p50:.3f} ms, p99 {p99:.3f} ms, max {mx:.3f} ms, wrong answers {misses} "
                  "(target p99 < 2 ms)")
        if "recovery" in only:
            n_open, n_ready, a_open, a_ready, size = bench_recovery(work, scale)
            print(f"\n## recovery ({size / MIB:,.0f} MiB commit log, {scale.recovery_segment // MIB} MiB segments, "
                  "1 KiB messages)")
            print(f"normal (clean shutdown): open {n_open:.2f} s, reput caught up {n_ready:.2f} s")
            print(f"abnormal (SIGKILL):      open {a_open:.2f} s, reput caught up {a_ready:.2f} s")
        print(f"\n# load average at the end: {os.getloadavg()[0]:.1f} (other processes share these cpus)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

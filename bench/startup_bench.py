"""Store start-up: where the time goes, and what the proportional derived-file check saves (issue 33 item 7).

Builds a store of ``--records`` messages (default 600,000 of 1 KiB, default sizes: one 1 GiB segment, 8 queues,
two keys each) once under ``--dir``, then opens it in five situations, each timed by phase:

* ``clean stop``: the stop left ``dispatched.json``: the start checks only what is new (nothing);
* ``clean stop, whole-log check`` (the baseline, what every start did before): the marker removed;
* ``process crash``: ``abort`` left by a process of this boot (page cache intact);
* ``machine crash``: ``abort`` from before this boot (dirty pages may be lost: re-dispatch from the checkpoint);
* ``rebuild``: consume queues and index deleted; timed until reput has dispatched everything.

    .venv/bin/python bench/startup_bench.py [--records 600000] [--dir /tmp/raftmq-startup-bench]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto")]

from raftmq.store import Message, MessageStore, StoreConfig, commit_log, message_store  # noqa: E402

PHASES = {  # (object, method) -> label
    (commit_log.CommitLog, "verify_before_recovery"): "commit-log check (CRC, newest segments)",
    (message_store.MessageStore, "_check_derived_files"): "derived-file check",
}


def build(root: Path, records: int) -> None:
    st = MessageStore(StoreConfig(root_dir=str(root), scrub_rate_bytes_per_s=0))
    st.open()
    body = os.urandom(1024)
    for start in range(0, records, 256):
        st.put_messages([Message(topic="Big", queue_id=i % 8, body=body,
                                 properties={"KEYS": f"k{i}", "UNIQ_KEY": f"{i:032X}", "TAGS": "A"})
                         for i in range(start, min(records, start + 256))])
    assert st.reput.wait_dispatched(timeout=3600)
    st.shutdown()


def timed_open(root: Path, wait_dispatch: bool = False) -> tuple[float, dict[str, float], int]:
    spent: dict[str, float] = {}
    originals = []
    for (obj, name), label in PHASES.items():
        f = getattr(obj, name)
        originals.append((obj, name, f))

        def wrap(*a, _f=f, _label=label, **k):
            t = time.perf_counter()
            try:
                return _f(*a, **k)
            finally:
                spent[_label] = spent.get(_label, 0.0) + time.perf_counter() - t

        setattr(obj, name, functools.wraps(f)(wrap))
    try:
        st = MessageStore(StoreConfig(root_dir=str(root), scrub_rate_bytes_per_s=0))
        t = time.perf_counter()
        st.open()
        if wait_dispatch:
            assert st.reput.wait_dispatched(timeout=3600)
        total = time.perf_counter() - t
        records = st.start_check_records
        st.shutdown()
    finally:
        for obj, name, f in originals:
            setattr(obj, name, f)
    return total, spent, records


def boot_time() -> float:
    with open("/proc/stat") as f:
        return float(next(line.split()[1] for line in f if line.startswith("btime ")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=600_000)
    ap.add_argument("--dir", default="/tmp/raftmq-startup-bench")
    args = ap.parse_args()
    root = Path(args.dir) / f"store-{args.records}"
    if not (root / "commitlog").is_dir():
        shutil.rmtree(root, ignore_errors=True)
        t = time.perf_counter()
        build(root, args.records)
        print(f"built {args.records} records in {time.perf_counter() - t:.1f}s under {root}")
    timed_open(root)  # leaves the marker, warms the page cache
    results = []

    def run(label: str, prepare=None, wait: bool = False) -> None:
        if prepare is not None:
            prepare()
        results.append((label, *timed_open(root, wait)))

    run("clean stop")
    run("clean stop, whole-log check (before)", lambda: (root / "dispatched.json").unlink())
    run("process crash", lambda: (root / "abort").touch())

    def machine_crash() -> None:
        (root / "abort").touch()
        before_boot = boot_time() - 60
        os.utime(root / "abort", (before_boot, before_boot))

    run("machine crash", machine_crash)
    def rebuild() -> None:
        for name in ("consumequeue", "index"):
            shutil.rmtree(root / name)

    run("rebuild (queues and index deleted)", rebuild, wait=True)
    baseline = results[1][1]
    print(f"{'start after':38s} {'total':>7s} {'vs before':>9s} {'records checked':>16s}  phases")
    for label, total, spent, records in results:
        phases = ", ".join(f"{k} {v:.2f}s" for k, v in spent.items())
        print(f"{label:38s} {total:6.2f}s {total / baseline:8.2f}x {records:16d}  {phases}")


if __name__ == "__main__":
    main()

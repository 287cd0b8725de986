"""Check a store's commit log, and its consume queues and index files against it; list every problem.

Commit log first: every segment is scanned in parallel with the store's own integrity check
(``store.integrity.scan_segment``: magic, calMsgLength, body CRC, each record's own PHYSICALOFFSET, resync after
damage), one ``commitlog ...`` line per damaged range. A torn tail beyond the checkpoint's flushed offset (what a
crash leaves; recovery cuts it) is a note, not a difference; below it, it is damage.

The expected files are rebuilt from the commit log exactly as ``reindex`` does (into a scratch directory),
then compared with the store's: each consume-queue unit (phy offset, size, tagsCode) by queue offset, each
index file's header fields, hash slots and entries. Exit code 0 when everything matches, 1 when there are
differences (each printed on its own line), 2 on bad input.

A many-group layout (members' stores of several Raft groups) verifies every member store, each against its own
commit log, reported per group; the exit code covers all of them.

Run it on a stopped store, or accept that units the live broker wrote after the scan are reported.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from typing import Any

from raftmq.pipeline.jobs.common import (
    JobContext,
    add_spark_options,
    add_store_geometry,
    add_stores,
    delay_levels,
    group_heading,
    resolve_geometry,
    standalone_main,
)

HELP = "check consume queues and index files against the commit log, list every difference"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_stores(p)
    p.add_argument("--no-index", action="store_true", help="check consume queues only")
    p.add_argument("--scratch", default=None,
                   help="directory for the rebuilt files (default: a temporary directory, removed afterwards)")
    p.add_argument("--limit", type=int, default=0, metavar="N",
                   help="print at most N differences (default 0 = all); the total is always printed")
    add_store_geometry(p)
    add_spark_options(p)


def run(args: Any) -> int:
    from raftmq.pipeline.groups import group_stores, per_group
    from raftmq.pipeline.layout import open_layout

    if not per_group(args.stores):
        layout = open_layout(args.stores[0])
        with JobContext("verify", args) as ctx:
            return 1 if _verify_one(ctx, layout, "", "") else 0
    failed = []
    groups = group_stores(args.stores)
    with JobContext("verify", args) as ctx:
        for g in groups:  # every member: each one's queues and index against its own commit log
            for m in g.members:
                print(group_heading(g, m))
                if _verify_one(ctx, m.layout, "  ", m.label.replace(os.sep, "-")):
                    failed.append(f"{m.label} (group at {g.name})")
    if failed:
        print(f"verdict: DIFFERENT in {len(failed)} member store(s): {', '.join(failed)}")
        return 1
    print("verdict: OK in every member store of every group")
    return 0


def _verify_one(ctx: JobContext, layout: Any, indent: str, scratch_name: str) -> bool:
    """Verify one store, printing its differences and verdict; True when it has differences. ``scratch_name``:
    its own directory inside --scratch (a many-group layout verifies several stores)."""
    from raftmq.pipeline.layout import prepare_output

    args = ctx.args
    cq_size, geometry = resolve_geometry(layout, args)
    given = os.path.join(args.scratch, scratch_name) if args.scratch and scratch_name else args.scratch
    scratch = prepare_output(given or tempfile.mkdtemp(prefix="raftmq-verify-"), overwrite=True)
    try:
        ctx.progress.phase("scanning the commit log for damaged records")
        damage = commit_log_damage(layout)
        diffs = damage + verify(ctx, layout, scratch, cq_size, None if args.no_index else geometry, delay_levels(args))
    finally:
        if args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    shown = diffs if args.limit <= 0 else diffs[: args.limit]
    for line in shown:
        print(indent + line)
    if len(shown) < len(diffs):
        print(f"{indent}... {len(diffs) - len(shown)} more")
    verdict = "OK" if not diffs else "DIFFERENT"
    print(f"{indent}verdict: {verdict}: {len(diffs)} difference(s) between {layout.root} and its commit log")
    return bool(diffs)


def verify(ctx: JobContext, layout: Any, scratch: str, cq_size: int, geometry: Any, delay_ms: list[int]) -> list[str]:
    """Every difference, consume queues first (sorted by queue), then index files in name order."""
    from raftmq.pipeline.compare import diff_consume_queue, diff_index_file
    from raftmq.pipeline.jobs.reindex import reindex

    names = layout.index_file_names()
    result = reindex(ctx, layout, scratch, cq_size, geometry, names, delay_ms)
    ctx.progress.phase("comparing consume queues")
    expected_queues = set()
    cq_root = os.path.join(scratch, "consumequeue")
    if os.path.isdir(cq_root):
        for topic in os.listdir(cq_root):
            for q in os.listdir(os.path.join(cq_root, topic)):
                expected_queues.add((topic, int(q)))
    queues = sorted(expected_queues | set(layout.consume_queues()))
    sc = ctx.spark.sparkContext
    root = layout.root
    cq_diffs = (sc.parallelize(queues, max(1, min(len(queues), sc.defaultParallelism * 4)))
                .flatMap(lambda tq: [(tq, d) for d in diff_consume_queue(scratch, root, tq[0], tq[1])])
                .collect())
    out = [d for _, d in sorted(cq_diffs, key=lambda x: x[0])]
    if geometry is not None:
        ctx.progress.phase("comparing index files")
        exp_dir, act_dir = os.path.join(scratch, "index"), layout.index_dir
        expected_files = result.index_files
        pairs = []
        for i in range(max(len(expected_files), len(names))):
            e = os.path.join(exp_dir, expected_files[i]) if i < len(expected_files) else None
            a = os.path.join(act_dir, names[i]) if i < len(names) else None
            label = f"#{i} ({names[i] if i < len(names) else expected_files[i]})"
            pairs.append((i, e, a, label))
        slots = geometry.hash_slot_num
        idx_diffs = (sc.parallelize(pairs, max(1, min(len(pairs), sc.defaultParallelism * 4)))
                     .flatMap(lambda p: [(p[0], d) for d in diff_index_file(p[1], p[2], slots, p[3])])
                     .collect())
        out += [d for _, d in sorted(idx_diffs, key=lambda x: x[0])]
    return out


def _scan_one(item: tuple[str, int, bool]) -> list[tuple[int, int, str, str, bool]]:
    """Spark task: ``(start, end, path, reason, is_tail)`` of every damaged range in one segment."""
    import mmap

    from raftmq.store.integrity import scan_segment

    path, base, is_last = item
    with open(path, "rb") as fh:
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        s = scan_segment(buf, base, path, is_last)
    finally:
        buf.close()
    out = [(r.start, r.end, r.path, r.reason, False) for r in s.damaged]
    if s.tail is not None:
        out.append((s.tail.start, s.tail.end, s.tail.path, s.tail.reason, True))
    return out


def commit_log_damage(layout: Any) -> list[str]:
    """One line per damaged commit-log range (segments scanned in parallel on the active Spark session)."""
    from pyspark.sql import SparkSession

    from raftmq.store.checkpoint import read_flushed_offset

    segs = list(layout.segments)
    last = len(segs) - 1
    while last > 0 and _first_word_zero(segs[last].path):
        last -= 1  # trailing segments that hold no data yet
    items = [(s.path, s.base, i == last) for i, s in enumerate(segs[: last + 1])]
    if not items:
        return []
    sc = SparkSession.getActiveSession().sparkContext
    found = sorted(sc.parallelize(items, max(1, min(len(items), sc.defaultParallelism * 4)))
                   .flatMap(_scan_one).collect())
    flushed = read_flushed_offset(os.path.join(layout.root, "checkpoint"))
    out = []
    for start, end, path, reason, is_tail in found:
        if is_tail and start >= flushed:
            print(f"note: torn tail at physical offset {start} ({reason}) beyond the flushed offset {flushed}: "
                  "never acknowledged as durable, recovery cuts it", file=sys.stderr)
            continue
        out.append(f"commitlog {os.path.basename(path)} [{start}, {end}): damaged record(s), {end - start} "
                   f"byte(s): {reason}")
    return out


def _first_word_zero(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(8) == bytes(8)


def main(argv: list[str] | None = None) -> int:
    return standalone_main("verify", add_arguments, run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())

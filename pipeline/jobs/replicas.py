"""Compare the commit logs of several replicas: per-segment checksums and the first difference.

Every replica's segments are hashed in parallel in chunks (``--split-size``); a segment's checksum is the
SHA-256 of its chunks' SHA-256 digests, so equal checksums mean equal bytes. For a segment that differs,
the first differing byte is found and explained: its physical offset and the record it falls in (topic,
queue, queue offset) in the first replica. Raft keeps replicas byte-identical, so any difference below
the shorter replica's end of data is a real divergence; a replica that only lacks the newest bytes is behind.

Members of several Raft groups (a many-group layout: directories holding the members' stores) are grouped by
the STOREHOST their records carry and compared within each group only (pipeline/groups.py).

Exit code 0 when all replicas agree, 1 when they differ (in any group), 2 on bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from raftmq.pipeline.jobs.common import JobContext, add_spark_options, standalone_main

HELP = "compare several replicas' commit logs (per-segment checksums, first difference)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("stores", nargs="+", metavar="STORE",
                   help="store root directories of the replicas (two or more), or directories holding members' "
                        "stores; members of several Raft groups are compared within each group only")
    add_spark_options(p)


def run(args: Any) -> int:
    from raftmq.pipeline.errors import PipelineError
    from raftmq.pipeline.groups import group_stores, is_store

    if all(is_store(s) for s in args.stores) and len(args.stores) < 2:
        raise PipelineError("give at least two replica store directories to compare (or a directory holding "
                            "the members' stores)")
    groups = group_stores(args.stores, allow_empty=True)
    # stores given one by one of (at most) one group are compared as given, as before groups: a replica whose
    # first record is damaged is still compared with the others
    if all(is_store(s) for s in args.stores) and len({g.store_host for g in groups if g.store_host}) <= 1:
        with JobContext("replicas", args) as ctx:
            report = compare(ctx, args.stores)
        for line in report["lines"]:
            print(line)
        print("verdict: replicas agree" if report["agree"] else "verdict: replicas DIFFER")
        return 0 if report["agree"] else 1
    return _compare_groups(args, groups)


def _compare_groups(args: Any, groups: list) -> int:
    """Issue 38: each group's members compared among themselves (stores of different groups never match: each
    group holds its own messages); the verdict covers every group and names the groups that differ."""
    differ, alone = [], []
    with JobContext("replicas", args) as ctx:
        for g in groups:
            print(f"== group at {g.name}: {len(g.members)} member store(s): "
                  + ", ".join(m.label for m in g.members))
            if len(g.members) < 2:
                alone.append(g.name)
                print("  only one member store of this group given: nothing to compare")
                continue
            report = compare(ctx, [m.layout.root for m in g.members])
            for line in report["lines"]:
                print("  " + line)
            print(f"  group at {g.name}: " + ("replicas agree" if report["agree"] else "replicas DIFFER"))
            if not report["agree"]:
                differ.append(g.name)
    if differ:
        print(f"verdict: replicas DIFFER in {len(differ)} group(s): " + "; ".join(f"group at {n}" for n in differ))
        return 1
    if len(alone) == len(groups):
        from raftmq.pipeline.errors import PipelineError

        raise PipelineError("no group has two member stores given: nothing to compare (give every member's store, "
                            "or the directory holding them)")
    print(f"verdict: replicas agree in every group compared ({len(groups) - len(alone)} of {len(groups)})")
    return 0


def _labels(roots: list[str]) -> list[str]:
    names = [os.path.basename(r.rstrip("/")) for r in roots]
    return names if len(set(names)) == len(names) else roots


def compare(ctx: JobContext, stores: list[str]) -> dict[str, Any]:
    """``{"agree": bool, "segments": [...], "lines": [...]}``; segments hold per-replica checksums."""
    from raftmq.pipeline.commitlog import record_containing
    from raftmq.pipeline.compare import chunk_digest, first_difference
    from raftmq.pipeline.errors import EmptyStoreError, PipelineError
    from raftmq.pipeline.layout import open_layout
    from raftmq.pipeline.reader import scan_boundaries

    layouts = [open_layout(s, allow_empty=True) for s in stores]
    if all(not lay.segments for lay in layouts):
        raise EmptyStoreError("empty stores: none of the replicas has a commit-log segment")
    sizes = {lay.segment_size for lay in layouts if lay.segments}
    if len(sizes) > 1:
        raise PipelineError(f"replicas use different commit-log segment sizes {sorted(sizes)}; they cannot match")
    seg_size = sizes.pop()
    labels = _labels([lay.root for lay in layouts])
    chunk = min(ctx.args.split_size, seg_size)
    tasks = [(r, seg.base, seg.path, off, min(chunk, seg_size - off))
             for r, lay in enumerate(layouts) for seg in lay.segments for off in range(0, seg_size, chunk)]
    ctx.progress.phase(f"hashing {len(tasks)} chunk(s) of {len(layouts)} replica(s)")
    sc = ctx.spark.sparkContext
    digests = (sc.parallelize(tasks, max(1, min(len(tasks), sc.defaultParallelism * 4)))
               .map(lambda t: ((t[0], t[1], t[3]), chunk_digest(t[2], t[3], t[4]))).collect())
    by_seg: dict[int, dict[int, list[tuple[int, str]]]] = {}
    for (r, base, off), d in digests:
        by_seg.setdefault(base, {}).setdefault(r, []).append((off, d))
    ends = []
    for lay in layouts:
        if lay.segments:
            b = scan_boundaries(ctx.spark, lay, ctx.args.split_size, ctx.progress)
            ends.append(b.data_end)
        else:
            ends.append(0)
    import hashlib

    lines = [f"{label}: {lay.root}, data ends at physical offset {end}"
             for label, lay, end in zip(labels, layouts, ends, strict=True)]
    agree = len(set(ends)) == 1
    segments = []
    for base in sorted(by_seg):
        per = by_seg[base]
        sums = {}
        for r in range(len(layouts)):
            if r in per:
                parts = [d for _, d in sorted(per[r])]
                sums[r] = hashlib.sha256("".join(parts).encode()).hexdigest()
        row = "  ".join(f"{labels[r]}={sums[r][:16] if r in sums else 'missing'}" for r in range(len(layouts)))
        same = len(sums) == len(layouts) and len(set(sums.values())) == 1
        seg = {"segment": f"{base:020d}", "checksums": {labels[r]: sums.get(r) for r in range(len(layouts))},
               "agree": same}
        segments.append(seg)
        if same:
            lines.append(f"segment {base:020d}: {row}  agree")
            continue
        agree = False
        lines.append(f"segment {base:020d}: {row}  DIFFER")
        ref = min(sums)
        ref_chunks = dict(per[ref])
        for r in sorted(sums):
            if r == ref or sums[r] == sums[ref]:
                continue
            other = dict(per[r])
            off = next(o for o in sorted(ref_chunks) if ref_chunks[o] != other.get(o))
            a_path = next(s.path for s in layouts[ref].segments if s.base == base)
            b_path = next(s.path for s in layouts[r].segments if s.base == base)
            pos = first_difference(a_path, b_path, off, min(chunk, seg_size - off))
            if pos is None:
                continue
            where = f"first difference {labels[ref]} vs {labels[r]} at physical offset {base + pos}"
            rec = record_containing(a_path, seg_size, pos)
            if rec is not None and rec[1].message is not None:
                m = rec[1].message
                where += (f", inside the record at {base + rec[0]} (topic {m.topic}, queue {m.queue_id}, "
                          f"queue offset {m.queue_offset}, byte {pos - rec[0]} of {rec[1].size})")
            elif base + pos >= min(ends[ref], ends[r]):
                where += f", past the end of data of {labels[ref] if ends[ref] <= ends[r] else labels[r]} (it is behind)"
            seg["firstDifference"] = base + pos
            lines.append(f"  {where}")
        for r in range(len(layouts)):
            if r not in sums:
                lines.append(f"  {labels[r]} has no segment {base:020d}")
    return {"agree": agree, "segments": segments, "lines": lines, "dataEnds": dict(zip(labels, ends, strict=True))}


def main(argv: list[str] | None = None) -> int:
    return standalone_main("replicas", add_arguments, run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())

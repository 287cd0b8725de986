"""Rebuild a store's ConsumeQueue and IndexFile files from its commit log into an output directory.

The output (``OUT/consumequeue/...`` and ``OUT/index/...``) is byte-identical to what the broker's reput
writes; copy it into a stopped store's root to replace lost or damaged queues and index. A many-group layout
(members' stores of several Raft groups) rebuilds every member's into ``OUT/<group>/<member>/``.
"""

from __future__ import annotations

import argparse
import os
import sys
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

HELP = "rebuild consume queues and index files from the commit log (byte-identical to the broker's)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_stores(p)
    p.add_argument("output", help="directory to write consumequeue/ and index/ into (must be empty); for a "
                                  "many-group layout, each member's into OUTPUT/<group>/<member>/")
    p.add_argument("--overwrite", action="store_true", help="allow a non-empty output directory")
    p.add_argument("--no-index", action="store_true", help="rebuild consume queues only")
    p.add_argument("--index-names", choices=("store", "time"), default="store",
                   help="name index files like the store's existing ones (default) or by record time")
    add_store_geometry(p)
    add_spark_options(p)


def run(args: Any) -> int:
    from raftmq.pipeline.groups import group_stores, per_group
    from raftmq.pipeline.layout import open_layout, prepare_output

    if not per_group(args.stores):
        targets = [(open_layout(args.stores[0]), args.output, "")]
    else:
        targets = [(m.layout, os.path.join(args.output, g.dir_name, m.label.replace(os.sep, "-")),
                    group_heading(g, m)) for g in group_stores(args.stores) for m in g.members]
    for layout, _, _ in targets:
        if os.path.abspath(args.output) == layout.root:
            from raftmq.pipeline.errors import OutputError

            raise OutputError("output must not be the store itself; write elsewhere and copy the files in")
    prepare_output(args.output, overwrite=args.overwrite)
    with JobContext("reindex", args) as ctx:
        for layout, output, heading in targets:
            if heading:
                print(heading)
            out = prepare_output(output, overwrite=args.overwrite)
            cq_size, geometry = resolve_geometry(layout, args)
            result = reindex(ctx, layout, out, cq_size, None if args.no_index else geometry,
                             layout.index_file_names() if args.index_names == "store" else [], delay_levels(args))
            ctx.progress.phase(
                f"done: {result.queues} queue(s) / {result.cq_files} CQ file(s), {len(result.index_files)} index "
                f"file(s) written to {out}")
            if heading:
                print(f"  {result.queues} queue(s), {result.cq_files} CQ file(s), {len(result.index_files)} index "
                      f"file(s) written to {out}")
    return 0


def reindex(ctx: JobContext, layout: Any, out: str, cq_size: int, geometry: Any, index_names: list[str],
            delay_ms: list[int]) -> Any:
    """The job body (also used by ``verify`` to build the expected files)."""
    from raftmq.pipeline.reader import dispatch_df, scan_boundaries
    from raftmq.pipeline.rebuild import rebuild

    b = scan_boundaries(ctx.spark, layout, ctx.args.split_size, ctx.progress)
    if b.records == 0:
        from raftmq.pipeline.errors import EmptyStoreError

        raise EmptyStoreError(f"empty store: {layout.commit_log_dir} holds no message")
    disp = dispatch_df(ctx.spark, b, delay_ms)
    return rebuild(ctx.spark, disp, out, cq_file_size=cq_size, geometry=geometry,
                   existing_index_names=index_names, progress=ctx.progress)


def main(argv: list[str] | None = None) -> int:
    return standalone_main("reindex", add_arguments, run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())

"""Export every message of a store to Parquet, partitioned by topic and store date (UTC).

Columns are the reader's explicit schema (topic, queueId, queueOffset, physicalOffset, storeTimestamp,
bornTimestamp, bornHost, storeHost, sysFlag, tags, keys, uniqKey, properties, body, bodyCrcOk, ...) plus
``date`` (``yyyy-MM-dd`` of storeTimestamp in UTC). Read it back with
``spark.read.parquet(OUT)`` (topic and date come back from the directory names). A many-group layout (members'
stores of several Raft groups) exports each group once, from one of its members, under ``OUT/group=<group>/``,
so ``group`` comes back as a column too.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from raftmq.pipeline.jobs.common import (
    JobContext,
    add_spark_options,
    add_stores,
    group_heading,
    standalone_main,
)

HELP = "write messages to Parquet partitioned by topic and date"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_stores(p)
    p.add_argument("output", help="Parquet output directory (must not exist or be empty); for a many-group layout, "
                                  "each group's messages under OUTPUT/group=<group>/ (a partition column)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    p.add_argument("--topic", action="append", default=None, help="only this topic (repeatable)")
    p.add_argument("--compression", default="zstd", choices=("zstd", "snappy", "gzip", "none"),
                   help="Parquet compression (default zstd)")
    add_spark_options(p)


def run(args: Any) -> int:
    import os

    from raftmq.pipeline.groups import group_stores, per_group
    from raftmq.pipeline.layout import open_layout, prepare_output

    if not per_group(args.stores):
        layout = open_layout(args.stores[0])
        out = prepare_output(args.output, overwrite=args.overwrite)
        with JobContext("export", args) as ctx:
            n = export(ctx, layout, out, args.topic, args.compression)
            ctx.progress.phase(f"done: {n} message(s) written to {out}")
        return 0
    groups = group_stores(args.stores)
    out = prepare_output(args.output, overwrite=args.overwrite)
    with JobContext("export", args) as ctx:
        for g in groups:  # a group's replicas hold the same messages: its first member's are exported
            member = g.members[0]
            print(group_heading(g, member))
            target = os.path.join(out, f"group={g.dir_name}")
            n = export(ctx, member.layout, target, args.topic, args.compression)
            print(f"  {n} message(s) written to {target}")
    return 0


def export(ctx: JobContext, layout: Any, out: str, topics: list[str] | None, compression: str) -> int:
    from pyspark.sql import functions as F

    from raftmq.pipeline.errors import EmptyStoreError
    from raftmq.pipeline.reader import messages_df, scan_boundaries

    b = scan_boundaries(ctx.spark, layout, ctx.args.split_size, ctx.progress)
    if b.records == 0:
        raise EmptyStoreError(f"empty store: {layout.commit_log_dir} holds no message")
    df = messages_df(ctx.spark, b)
    if topics:
        df = df.filter(F.col("topic").isin(topics))
    df = df.withColumn("date", F.date_format(F.timestamp_millis("storeTimestamp"), "yyyy-MM-dd"))
    counter = ctx.spark.sparkContext.accumulator(0)

    def count(batches):  # noqa: ANN001, ANN202 - mapInArrow pass-through that counts rows
        for batch in batches:
            counter.add(batch.num_rows)
            yield batch

    df = df.mapInArrow(count, df.schema)
    ctx.progress.phase("writing Parquet")
    (df.write.mode("overwrite").option("compression", compression)
     .partitionBy("topic", "date").parquet(out))
    return counter.value


def main(argv: list[str] | None = None) -> int:
    return standalone_main("export", add_arguments, run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())

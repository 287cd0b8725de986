"""Per-topic and per-queue counts, bytes, time ranges and key cardinality of a store's commit log.

Counts are records in the commit log, grouped by the topic and queue written in each record (transaction
half/rollback records included, under the topic they were stored in). ``--json`` prints one JSON object.
A many-group layout (members' stores of several Raft groups) is reported per group, each from one of its
members (``{"groups": [...]}`` with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

from raftmq.pipeline.jobs.common import (
    JobContext,
    add_spark_options,
    add_stores,
    group_heading,
    standalone_main,
)

HELP = "per-topic and per-queue counts, bytes, time ranges and key cardinality"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_stores(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_spark_options(p)


def run(args: Any) -> int:
    from raftmq.pipeline.groups import group_stores, per_group
    from raftmq.pipeline.layout import open_layout

    if not per_group(args.stores):
        layout = open_layout(args.stores[0])
        with JobContext("stats", args) as ctx:
            result = compute(ctx, layout)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print_tables(result)
        return 0
    groups = group_stores(args.stores)
    results = []
    with JobContext("stats", args) as ctx:
        for g in groups:  # a group's replicas hold the same bytes: its first member speaks for it
            member = g.members[0]
            results.append((g, member, compute(ctx, member.layout)))
    if args.json:
        print(json.dumps({"groups": [{"group": g.name, "storeHost": g.store_host, "member": m.label,
                                      "members": [x.label for x in g.members], **r} for g, m, r in results]},
                         indent=2))
        return 0
    for g, m, r in results:
        print(group_heading(g, m))
        print_tables(r)
        print()
    return 0


def compute(ctx: JobContext, layout: Any) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from raftmq.pipeline.errors import EmptyStoreError
    from raftmq.pipeline.reader import messages_df, scan_boundaries

    b = scan_boundaries(ctx.spark, layout, ctx.args.split_size, ctx.progress)
    if b.records == 0:
        raise EmptyStoreError(f"empty store: {layout.commit_log_dir} holds no message")
    df = messages_df(ctx.spark, b).select(
        "topic", "queueId", "queueOffset", "storeSize", "storeTimestamp", "keys", "uniqKey", "tags",
        F.length("body").alias("bodyBytes"), "bodyCrcOk",
    ).cache()
    try:
        ctx.progress.phase("aggregating per topic")
        topics = (
            df.groupBy("topic").agg(
                F.count(F.lit(1)).alias("messages"),
                F.sum("storeSize").alias("bytes"),
                F.sum("bodyBytes").alias("bodyBytes"),
                F.min("storeTimestamp").alias("firstStoreTimestamp"),
                F.max("storeTimestamp").alias("lastStoreTimestamp"),
                F.countDistinct("queueId").alias("queues"),
                F.count_distinct(F.col("uniqKey")).alias("distinctUniqKeys"),
                F.countDistinct("tags").alias("distinctTags"),
                F.sum(F.when(~F.col("bodyCrcOk"), 1).otherwise(0)).alias("badBodyCrc"),
            ).orderBy("topic").collect()
        )
        keys = {r.topic: r.n for r in df.select("topic", F.explode("keys").alias("key")).groupBy("topic")
                .agg(F.countDistinct("key").alias("n")).collect()}
        ctx.progress.phase("aggregating per queue")
        queues = (
            df.groupBy("topic", "queueId").agg(
                F.count(F.lit(1)).alias("messages"),
                F.sum("storeSize").alias("bytes"),
                F.min("queueOffset").alias("minQueueOffset"),
                F.max("queueOffset").alias("maxQueueOffset"),
                F.min("storeTimestamp").alias("firstStoreTimestamp"),
                F.max("storeTimestamp").alias("lastStoreTimestamp"),
            ).orderBy("topic", "queueId").collect()
        )
    finally:
        df.unpersist()
    return {
        "store": layout.root,
        "records": b.records,
        "dataEnd": b.data_end,
        "problems": b.problems,
        "topics": [{**r.asDict(), "distinctKeys": keys.get(r.topic, 0)} for r in topics],
        "queues": [r.asDict() for r in queues],
    }


def _ts(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [headers, *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, r in enumerate(cells):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def print_tables(result: dict[str, Any]) -> None:
    print(f"store {result['store']}: {result['records']} record(s), data ends at physical offset {result['dataEnd']}")
    for p in result["problems"]:
        print(f"warning: {p}")
    print()
    _table(["topic", "messages", "bytes", "body bytes", "queues", "distinct keys", "distinct uniq keys",
            "distinct tags", "bad CRC", "first stored (UTC)", "last stored (UTC)"],
           [[t["topic"], t["messages"], t["bytes"], t["bodyBytes"], t["queues"], t["distinctKeys"],
             t["distinctUniqKeys"], t["distinctTags"], t["badBodyCrc"], _ts(t["firstStoreTimestamp"]),
             _ts(t["lastStoreTimestamp"])] for t in result["topics"]])
    print()
    _table(["topic", "queue", "messages", "bytes", "min offset", "max offset", "first stored (UTC)",
            "last stored (UTC)"],
           [[q["topic"], q["queueId"], q["messages"], q["bytes"], q["minQueueOffset"], q["maxQueueOffset"],
             _ts(q["firstStoreTimestamp"]), _ts(q["lastStoreTimestamp"])] for q in result["queues"]])


def main(argv: list[str] | None = None) -> int:
    return standalone_main("stats", add_arguments, run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())

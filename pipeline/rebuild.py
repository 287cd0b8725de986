"""Rebuilding ConsumeQueue and IndexFile files from the commit log, in parallel, byte-identical to reput's.

Consume queues: every unit carries its queue offset, so each ``(topic, queueId)`` is written by one task,
records in commit-log order, through the store's own ``ConsumeQueue.put_message_position_info`` (same
skip / fillPreBlank rules as the broker).

Index files follow the commit-log order and the geometry: a file takes ``index_num - 1`` keys (entry 0 is never
used), a record's keys may straddle two files, and a new file is seeded with the previous file's last entry
(docs/design/store-formats.md#index-files). So the driver first counts keys per split (splits are in commit-log order), turns that into a
global key number per key, and from it the file each key lands in and each file's seed; then every file is
written by one task with the store's own ``IndexFile``. A full file followed by any further dispatched record
makes the broker open one more (possibly empty) file; that is reproduced too.

Index file names are creation timestamps (``yyyyMMddHHmmssSSS``, local time). When the store being rebuilt
has index files, their names are reused in order; files beyond those are named after the store timestamp
of the record that made the broker open them, bumped to stay unique and sorted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from raftmq.pipeline.layout import IndexGeometry
from raftmq.pipeline.progress import Progress
from raftmq.pipeline.schema import arrow_schema, spark_schema

_CQ_RESULT_FIELDS = [("topic", "string", False), ("queueId", "int", False), ("units", "long", False),
                     ("files", "int", False)]
_INDEX_RESULT_FIELDS = [("file", "int", False), ("name", "string", False), ("entries", "long", False)]


@dataclass(slots=True)
class RebuildResult:
    queues: int = 0
    units: int = 0
    cq_files: int = 0
    index_files: list[str] = field(default_factory=list)
    index_entries: int = 0


@dataclass(frozen=True, slots=True)
class IndexPlan:
    """Where the keys go: ``bases[split]`` is the global number of the split's first key."""

    bases: dict[int, int]
    total_keys: int
    files: int
    per_file: int


def plan_index(split_stats: list[tuple[int, int, int, int]], geometry: IndexGeometry) -> IndexPlan:
    """``split_stats``: ``(split, records, keys, last_key_seq)`` (last_key_seq = -1 without keys)."""
    per_file = geometry.index_num - 1
    bases: dict[int, int] = {}
    total = 0
    records = 0
    records_after_last_key = 0
    for split, n_records, n_keys, last_key_seq in sorted(split_stats):
        bases[split] = total
        total += n_keys
        records += n_records
        if n_keys:
            records_after_last_key = n_records - 1 - last_key_seq
        else:
            records_after_last_key += n_records
    if records == 0:
        files = 0
    elif total == 0:
        files = 1  # the first dispatched record opens a file even when it has no key
    else:
        files = -(-total // per_file)
        if total % per_file == 0 and records_after_last_key > 0:
            files += 1  # the next record finds the file full and opens another one
    return IndexPlan(bases, total, files, per_file)


def rebuild(spark: SparkSession, disp: DataFrame, out_root: str, *, cq_file_size: int,
            geometry: IndexGeometry | None, existing_index_names: list[str], progress: Progress,
            preallocate: bool = False) -> RebuildResult:
    """Write ``out_root/consumequeue`` and ``out_root/index`` from a dispatch DataFrame (``reader.dispatch_df``)."""
    result = RebuildResult()
    disp = disp.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        progress.phase("consume queues: writing one task per queue")
        cq_dir = os.path.join(out_root, "consumequeue")
        rows = (
            disp.filter("toConsumeQueue")
            .select("topic", "queueId", "queueOffset", "physicalOffset", "size", "tagsCode")
            # an explicit partition count: adaptive execution would otherwise coalesce this small shuffle
            # into a single task and write every queue serially
            .repartition(max(2, spark.sparkContext.defaultParallelism * 2), "topic", "queueId")
            .sortWithinPartitions("topic", "queueId", "physicalOffset")
            .mapInArrow(_cq_writer(cq_dir, cq_file_size, preallocate), spark_schema(_CQ_RESULT_FIELDS))
            .collect()
        )
        result.queues = len(rows)
        result.units = sum(r.units for r in rows)
        result.cq_files = sum(r.files for r in rows)
        progress.phase(f"consume queues: {result.queues} queue(s), {result.units} unit(s), {result.cq_files} file(s)")
        if geometry is not None:
            _rebuild_index(spark, disp, out_root, geometry, existing_index_names, progress, preallocate, result)
    finally:
        disp.unpersist()
    return result


def _rebuild_index(spark: SparkSession, disp: DataFrame, out_root: str, geometry: IndexGeometry,
                   existing_names: list[str], progress: Progress, preallocate: bool, result: RebuildResult) -> None:
    stats = (
        disp.groupBy("split")
        .agg(F.count(F.lit(1)).alias("records"),
             F.sum(F.size("keyHashes")).alias("keys"),
             F.max(F.when(F.size("keyHashes") > 0, F.col("seq"))).alias("lastKey"))
        .collect()
    )
    plan = plan_index([(r.split, r.records, int(r["keys"] or 0), -1 if r.lastKey is None else r.lastKey)
                       for r in stats], geometry)
    progress.phase(f"index: {plan.total_keys} key(s) into {plan.files} file(s) of {plan.per_file} entries")
    if plan.files == 0:
        return
    # global key number = keys of the earlier splits + keys of the earlier records of the split + position
    bases = F.create_map(*[F.lit(x) for kv in sorted(plan.bases.items()) for x in kv])
    keys = (
        disp.filter(F.size("keyHashes") > 0)
        .select("split", "keyBase", "physicalOffset", "storeTimestamp", F.posexplode("keyHashes").alias("pos", "hash"))
        .withColumn("gseq", bases[F.col("split")].cast("long") + F.col("keyBase").cast("long") + F.col("pos"))
        .withColumn("file", F.expr(f"cast(gseq div {plan.per_file} as int)"))
        .select("file", "gseq", "hash", "physicalOffset", "storeTimestamp")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        # One small query for both: the last key of each file seeds the next file, the first key names it.
        lasts = [f * plan.per_file - 1 for f in range(1, plan.files)]
        firsts_at = [f * plan.per_file for f in range(plan.files)]
        seeds = {0: (0, 0)}
        firsts: dict[int, int] = {}
        boundary_rows = keys.filter(F.col("gseq").isin(lasts + firsts_at)).select("gseq", "physicalOffset",
                                                                                   "storeTimestamp")
        for r in boundary_rows.collect():
            if (r.gseq + 1) % plan.per_file == 0:
                seeds[(r.gseq + 1) // plan.per_file] = (r.physicalOffset, r.storeTimestamp)
            if r.gseq % plan.per_file == 0:
                firsts[r.gseq // plan.per_file] = r.storeTimestamp
        if 0 not in firsts:  # no key at all: the first record opened the file
            firsts[0] = disp.agg(F.min("storeTimestamp")).first()[0] or 0
        names = _index_names(plan.files, existing_names, firsts, seeds)
        index_dir = os.path.join(out_root, "index")
        os.makedirs(index_dir, exist_ok=True)
        written = (
            keys.repartition(max(1, min(plan.files, spark.sparkContext.defaultParallelism * 2)), "file")
            .sortWithinPartitions("file", "gseq")
            .mapInArrow(_index_writer(index_dir, names, seeds, geometry, preallocate),
                        spark_schema(_INDEX_RESULT_FIELDS))
            .collect()
        )
        done = {r.file for r in written}
        for f in range(plan.files):  # files without keys (the empty trailing file, or a key-less store)
            if f not in done:
                _write_index_file(os.path.join(index_dir, names[f]), seeds.get(f, (0, 0)), geometry, [], preallocate)
        result.index_files = names
        result.index_entries = sum(r.entries for r in written)
        progress.phase(f"index: {len(names)} file(s), {result.index_entries} entr(y/ies)")
    finally:
        keys.unpersist()


def _index_names(files: int, existing: list[str], firsts: dict[int, int], seeds: dict[int, tuple[int, int]]) -> list[str]:
    from raftmq.store.java import time_millis_to_human_string

    names: list[str] = []
    for f in range(files):
        if f < len(existing):
            name = existing[f]
        else:
            ts = firsts.get(f) or seeds.get(f, (0, 0))[1]
            name = time_millis_to_human_string(ts)
        if names and int(name) <= int(names[-1]):
            name = str(int(names[-1]) + 1)
        names.append(name)
    return names


def _write_index_file(path: str, seed: tuple[int, int], geometry: IndexGeometry,
                      entries: list[tuple[int, int, int]], preallocate: bool) -> int:
    from raftmq.store.index_file import IndexFile

    f = IndexFile(path, geometry.hash_slot_num, geometry.index_num, seed[0], seed[1], preallocate=preallocate)
    try:
        for h, phy, ts in entries:
            if not f.put_hash(h, phy, ts):
                raise RuntimeError(f"index file {path} filled up before its planned last key")
        f.flush()  # a clean broker shutdown flushes every index file, rewriting the whole header
    finally:
        f.close()
    return len(entries)


def _index_writer(index_dir: str, names: list[str], seeds: dict[int, tuple[int, int]], geometry: IndexGeometry,
                  preallocate: bool):  # noqa: ANN202
    schema = arrow_schema(_INDEX_RESULT_FIELDS)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        current: int | None = None
        entries: list[tuple[int, int, int]] = []
        done: list[tuple[int, int]] = []
        for batch in batches:
            d = batch.to_pydict()
            for file_no, h, phy, ts in zip(d["file"], d["hash"], d["physicalOffset"], d["storeTimestamp"],
                                           strict=True):
                if file_no != current:
                    if current is not None:
                        done.append((current, _write_index_file(os.path.join(index_dir, names[current]),
                                                                seeds[current], geometry, entries, preallocate)))
                    current, entries = file_no, []
                entries.append((h, phy, ts))
        if current is not None:
            done.append((current, _write_index_file(os.path.join(index_dir, names[current]), seeds[current],
                                                    geometry, entries, preallocate)))
        if done:
            yield pa.RecordBatch.from_pydict(
                {"file": [f for f, _ in done], "name": [names[f] for f, _ in done], "entries": [n for _, n in done]},
                schema=schema)

    return run


def _cq_writer(cq_dir: str, file_size: int, preallocate: bool):  # noqa: ANN202
    schema = arrow_schema(_CQ_RESULT_FIELDS)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from raftmq.store.consume_queue import ConsumeQueue

        done: list[tuple[str, int, int, int]] = []
        cq = None
        key: tuple[str, int] | None = None
        units = 0

        def finish() -> None:
            if cq is not None:
                cq.flush_all()
                files = len(cq.mapped_file_queue.mapped_files)
                cq.close()
                done.append((key[0], key[1], units, files))

        for batch in batches:
            d = batch.to_pydict()
            for topic, qid, qoff, phy, size, tags in zip(d["topic"], d["queueId"], d["queueOffset"],
                                                         d["physicalOffset"], d["size"], d["tagsCode"], strict=True):
                if (topic, qid) != key:
                    finish()
                    key, units = (topic, qid), 0
                    cq = ConsumeQueue(topic, qid, cq_dir, file_size, preallocate=preallocate)
                    cq.load()
                if not cq.put_message_position_info(phy, size, tags, qoff):
                    raise RuntimeError(f"could not write consume queue unit {topic}-{qid}@{qoff}")
                units += 1
        finish()
        if done:
            yield pa.RecordBatch.from_pydict(
                {"topic": [t for t, _, _, _ in done], "queueId": [q for _, q, _, _ in done],
                 "units": [u for _, _, u, _ in done], "files": [f for _, _, _, f in done]}, schema=schema)

    return run

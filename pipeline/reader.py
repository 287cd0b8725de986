"""Commit-log DataFrames: the boundary pass, then one decode task per exact split (see ``pipeline.commitlog``).

Rows are built in the Python workers with the store's own decoders and shipped as Arrow batches
(``mapInArrow``), which is several times cheaper than pickling Row objects.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from raftmq.pipeline.commitlog import (
    Boundaries,
    ExactSplit,
    iter_records,
    open_segment,
    plan_splits,
    stitch,
    walk_split,
)
from raftmq.pipeline.layout import StoreLayout
from raftmq.pipeline.progress import Progress
from raftmq.pipeline.schema import (
    DISPATCH_ARROW,
    DISPATCH_SCHEMA,
    MESSAGE_ARROW,
    MESSAGE_SCHEMA,
    SPLIT_SCHEMA,
)

DEFAULT_SPLIT_BYTES = 64 << 20
BATCH_ROWS = 2048
BATCH_BYTES = 32 << 20  # bodies can be 4 MiB each: bound an Arrow batch by bytes as well as rows


def scan_boundaries(spark: SparkSession, layout: StoreLayout, split_bytes: int = DEFAULT_SPLIT_BYTES,
                    progress: Progress | None = None) -> Boundaries:
    """Run the boundary pass over every split in parallel and stitch the exact ranges on the driver."""
    splits = plan_splits(layout, split_bytes)
    if progress:
        progress.phase(f"boundary pass: {len(layout.segments)} segment(s) in {len(splits)} split(s)")
    walks = spark.sparkContext.parallelize(splits, len(splits)).map(walk_split).collect()
    b = stitch(splits, walks)
    if progress:
        for line in b.corrections + b.problems:
            progress.note(line)
        progress.phase(f"boundary pass: {b.records} record(s), data ends at physical offset {b.data_end}")
    return b


def _splits_df(spark: SparkSession, b: Boundaries) -> DataFrame:
    rows = [(s.index, s.path, s.base, s.size, s.first, s.stop, [g[0] for g in s.gaps], [g[1] for g in s.gaps])
            for s in b.splits]
    rdd = spark.sparkContext.parallelize(rows, max(1, len(rows)))
    return spark.createDataFrame(rdd, SPLIT_SCHEMA)


def _exact_splits(batches: Iterator[pa.RecordBatch]) -> Iterator[ExactSplit]:
    for batch in batches:
        for r in batch.to_pylist():
            yield ExactSplit(r["index"], r["path"], r["base"], r["size"], r["first"], r["stop"],
                             tuple(zip(r["gapFrom"], r["gapTo"], strict=True)))


def messages_df(spark: SparkSession, b: Boundaries) -> DataFrame:
    """Every message record as a row of ``MESSAGE_SCHEMA`` (bodies included, CRC checked per row)."""
    return _splits_df(spark, b).mapInArrow(_decode_messages, MESSAGE_SCHEMA)


def dispatch_df(spark: SparkSession, b: Boundaries, delay_level_ms: list[int]) -> DataFrame:
    """What the reput thread would dispatch for every record, in commit-log order (``DISPATCH_SCHEMA``)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _decode_dispatch(batches, delay_level_ms)

    return _splits_df(spark, b).mapInArrow(run, DISPATCH_SCHEMA)


def _host(h: tuple[str, int]) -> str:
    return f"[{h[0]}]:{h[1]}" if ":" in h[0] else f"{h[0]}:{h[1]}"


def _decode_messages(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from raftmq.store.java import masked_crc32

    names = MESSAGE_ARROW.names
    for split in _exact_splits(batches):
        cols: dict[str, list] = {n: [] for n in names}
        batch_bytes = 0
        for _pos, r in iter_records(split, read_body=True):
            m = r.message
            if m is None:
                continue  # length mismatch: skipped like reput does; the boundary pass reported damage
            cols["topic"].append(m.topic)
            cols["queueId"].append(m.queue_id)
            cols["queueOffset"].append(m.queue_offset)
            cols["physicalOffset"].append(m.physical_offset)
            cols["storeSize"].append(m.store_size)
            cols["storeTimestamp"].append(m.store_timestamp)
            cols["bornTimestamp"].append(m.born_timestamp)
            cols["bornHost"].append(_host(m.born_host))
            cols["storeHost"].append(_host(m.store_host))
            cols["sysFlag"].append(m.sys_flag)
            cols["flag"].append(m.flag)
            cols["reconsumeTimes"].append(m.reconsume_times)
            cols["preparedTransactionOffset"].append(m.prepared_transaction_offset)
            cols["bodyCrc"].append(m.body_crc)
            cols["bodyCrcOk"].append(masked_crc32(m.body) == m.body_crc)
            cols["tags"].append(m.tags)
            cols["keys"].append(m.keys)
            cols["uniqKey"].append(m.uniq_key)
            cols["msgId"].append(m.msg_id)
            cols["properties"].append(list(m.properties.items()))
            cols["body"].append(m.body)
            batch_bytes += m.store_size
            if len(cols["topic"]) >= BATCH_ROWS or batch_bytes >= BATCH_BYTES:
                yield pa.RecordBatch.from_pydict(cols, schema=MESSAGE_ARROW)
                cols = {n: [] for n in names}
                batch_bytes = 0
        if cols["topic"]:
            yield pa.RecordBatch.from_pydict(cols, schema=MESSAGE_ARROW)


def index_hashes(topic: str, uniq_key: str | None, keys: str | None) -> list[int]:
    """Index hashes of one record in ``IndexService.build_index`` order: the uniq key, then each KEYS piece."""
    from raftmq.store.index_file import index_key_hash

    out: list[int] = []
    if uniq_key is not None:
        out.append(index_key_hash(topic, uniq_key))
    if keys:
        out.extend(index_key_hash(topic, k) for k in keys.split(" ") if k)
    return out


def _decode_dispatch(batches: Iterator[pa.RecordBatch], delay_level_ms: list[int]) -> Iterator[pa.RecordBatch]:
    from raftmq.store.message import decode_dispatch

    names = DISPATCH_ARROW.names
    for split in _exact_splits(batches):
        cols: dict[str, list] = {n: [] for n in names}
        seq = key_base = 0
        gaps = dict(split.gaps)
        pos = split.first
        buf = open_segment(split.path)
        try:
            while pos < split.stop:
                if pos in gaps:
                    pos = gaps[pos]
                    continue
                req = decode_dispatch(buf, pos, check_crc=False, limit=split.size, delay_level_ms=delay_level_ms)
                if not req.success or req.msg_size <= 0:
                    if req.msg_size > 0:  # length mismatch: reput skips it
                        pos += req.msg_size
                        continue
                    break
                to_index = req.goes_to_index
                hashes = index_hashes(req.topic, req.uniq_key, req.keys) if to_index else []
                cols["split"].append(split.index)
                cols["seq"].append(seq)
                cols["topic"].append(req.topic)
                cols["queueId"].append(req.queue_id)
                cols["queueOffset"].append(req.consume_queue_offset)
                cols["physicalOffset"].append(req.commit_log_offset)
                cols["size"].append(req.msg_size)
                cols["tagsCode"].append(req.tags_code)
                cols["storeTimestamp"].append(req.store_timestamp)
                cols["sysFlag"].append(req.sys_flag)
                cols["toConsumeQueue"].append(req.goes_to_consume_queue)
                cols["toIndex"].append(to_index)
                cols["keyBase"].append(key_base)
                key_base += len(hashes)
                cols["keyHashes"].append(hashes)
                seq += 1
                pos += req.msg_size
                if len(cols["split"]) >= BATCH_ROWS:
                    yield pa.RecordBatch.from_pydict(cols, schema=DISPATCH_ARROW)
                    cols = {n: [] for n in names}
        finally:
            buf.close()
        if cols["split"]:
            yield pa.RecordBatch.from_pydict(cols, schema=DISPATCH_ARROW)

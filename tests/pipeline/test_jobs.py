"""The pipeline jobs end to end on a real store, Spark in local mode (one shared session)."""

from __future__ import annotations

import filecmp
import json
import os
import struct
from datetime import UTC, datetime

import pytest

from raftmq.pipeline.main import main as pipeline_main
from tests.pipeline.conftest import SEGMENT

pytestmark = pytest.mark.spark

SMALL = ["--split-size", "3000", "--quiet"]  # ranges inside every segment: exercises resync + stitching


def tree(root: str) -> dict[str, str]:
    return {os.path.relpath(os.path.join(d, f), root): os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}


def assert_same_files(expected_root: str, actual_root: str) -> int:
    exp, act = tree(expected_root), tree(actual_root)
    assert sorted(act) == sorted(exp)
    for rel, path in exp.items():
        assert filecmp.cmp(path, act[rel], shallow=False), f"{rel} differs"
    return len(exp)


def test_reindex_is_byte_identical_to_the_brokers_reput(spark, built_store, tmp_path) -> None:
    out = str(tmp_path / "rebuilt")
    assert pipeline_main(["reindex", built_store.root, out, *SMALL]) == 0
    n_cq = assert_same_files(os.path.join(built_store.root, "consumequeue"), os.path.join(out, "consumequeue"))
    n_idx = assert_same_files(os.path.join(built_store.root, "index"), os.path.join(out, "index"))
    assert n_cq > len(built_store.queue_counts)  # some queues span several CQ files
    assert n_idx >= 2


def test_reindex_without_existing_index_names_files_by_time(spark, built_store, store_copy, tmp_path) -> None:
    """A store that lost its index: the rebuilt files have the broker's bytes, named by record time."""
    root = store_copy()
    names = sorted(os.listdir(os.path.join(root, "index")))
    for n in names:
        os.remove(os.path.join(root, "index", n))
    out = str(tmp_path / "rebuilt")
    assert pipeline_main(["reindex", root, out, "--index-slots", "16", "--index-num", "100", *SMALL]) == 0
    rebuilt = sorted(os.listdir(os.path.join(out, "index")))
    assert len(rebuilt) == len(names)
    for old, new in zip(names, rebuilt, strict=True):
        assert filecmp.cmp(os.path.join(built_store.root, "index", old), os.path.join(out, "index", new),
                           shallow=False)


def test_export_round_trips_every_message(spark, built_store, tmp_path) -> None:
    out = str(tmp_path / "parquet")
    assert pipeline_main(["export", built_store.root, out, *SMALL]) == 0
    assert sorted(n for n in os.listdir(out) if n.startswith("topic=")) == [
        "topic=Audit", "topic=Orders", "topic=Payments"]
    rows = {r.physicalOffset: r for r in spark.read.parquet(out).collect()}
    assert len(rows) == len(built_store.puts)
    for p in built_store.puts:
        r = rows[p.physical_offset]
        assert (r.topic, r.queueId, r.queueOffset) == (p.topic, p.queue_id, p.queue_offset)
        assert r.body == p.body and r.bodyCrcOk
        assert r.msgId == p.msg_id
        assert (r.bornTimestamp, r.storeTimestamp) == (p.born_timestamp, p.store_timestamp)
        assert r.tags == p.properties["TAGS"]
        assert r.keys == [k for k in p.properties.get("KEYS", "").split(" ") if k]
        props = dict(r.properties)
        assert {k: props[k] for k in p.properties} == p.properties
        assert r.uniqKey == props["UNIQ_KEY"]
        assert r.date == datetime.fromtimestamp(p.store_timestamp / 1000, UTC).date()


def test_stats_match_the_stores_own_counts(spark, built_store, capsys) -> None:
    assert pipeline_main(["stats", built_store.root, "--json", *SMALL]) == 0
    result = json.loads(capsys.readouterr().out)
    queues = {(q["topic"], q["queueId"]): q for q in result["queues"]}
    assert {k: q["messages"] for k, q in queues.items()} == built_store.queue_counts
    for (topic, qid), q in queues.items():
        assert q["minQueueOffset"] == 0 and q["maxQueueOffset"] == built_store.queue_counts[(topic, qid)] - 1
    topics = {t["topic"]: t for t in result["topics"]}
    for topic, t in topics.items():
        puts = [p for p in built_store.puts if p.topic == topic]
        assert t["messages"] == len(puts)
        assert t["bodyBytes"] == sum(len(p.body) for p in puts)
        assert t["firstStoreTimestamp"] == min(p.store_timestamp for p in puts)
        keys = {k for p in puts for k in p.properties.get("KEYS", "").split(" ") if k}
        assert t["distinctKeys"] == len(keys)
        assert t["badBodyCrc"] == 0


def test_verify_finds_a_corrupted_consume_queue_entry(spark, built_store, store_copy, capsys) -> None:
    assert pipeline_main(["verify", built_store.root, *SMALL]) == 0
    capsys.readouterr()
    root = store_copy()
    victim = next(p for p in built_store.puts if p.topic == "Payments" and p.queue_id == 1 and p.queue_offset == 44)
    cq_file = os.path.join(root, "consumequeue", "Payments", "1", f"{40 * 20:020d}")  # units 40..79
    with open(cq_file, "r+b") as f:
        f.seek((44 - 40) * 20)
        f.write(struct.pack(">q", victim.physical_offset + 1))
    index_files = sorted(os.listdir(os.path.join(root, "index")))
    entries_at = 40 + 4 * 16  # header + hash slots of the test geometry
    with open(os.path.join(root, "index", index_files[1]), "r+b") as f:
        f.seek(entries_at + 7 * 20 + 4)  # entry 7's phy offset
        phy = struct.unpack(">q", f.read(8))[0]
        f.seek(entries_at + 7 * 20 + 4)
        f.write(struct.pack(">q", phy + 3))
    assert pipeline_main(["verify", root, *SMALL]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[2] == f"verdict: DIFFERENT: 2 difference(s) between {root} and its commit log"
    assert lines[0].startswith(f"consumequeue Payments/1 offset 44: expected (phy={victim.physical_offset}, ")
    assert f"store has (phy={victim.physical_offset + 1}, " in lines[0]
    assert lines[1].startswith(f"index file #1 ({index_files[1]}) entry 7: expected (keyHash=")
    assert f"phy={phy}," in lines[1] and f"phy={phy + 3}," in lines[1]


def test_torn_tail_is_reported_not_crashed(spark, built_store, store_copy, tmp_path, capsys) -> None:
    root = store_copy()
    seg = sorted(os.listdir(os.path.join(root, "commitlog")))[-1]
    path = os.path.join(root, "commitlog", seg)
    with open(path, "r+b") as f:
        data = f.read()
        pos = 0
        while struct.unpack_from(">ii", data, pos) != (0, 0):
            pos += struct.unpack_from(">i", data, pos)[0]
        f.seek(pos)
        f.write(struct.pack(">ii", 500, -626843481) + b"\x05" * 30)  # a record cut short by a crash
    out = str(tmp_path / "rebuilt")
    assert pipeline_main(["reindex", root, out, "--split-size", "3000"]) == 0
    err = capsys.readouterr().err
    assert f"torn tail at physical offset {int(seg) + pos}" in err
    assert_same_files(os.path.join(built_store.root, "consumequeue"), os.path.join(out, "consumequeue"))
    assert pipeline_main(["stats", root, "--json", *SMALL]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["records"] == len(built_store.puts)


def test_replicas_agree_then_one_byte_differs(spark, built_store, store_copy, capsys) -> None:
    a, b = store_copy("n1"), store_copy("n2")
    assert pipeline_main(["replicas", built_store.root, a, b, *SMALL]) == 0
    out = capsys.readouterr().out
    assert "DIFFER" not in out and out.splitlines()[-1] == "verdict: replicas agree"
    victim = sorted(built_store.puts, key=lambda p: p.physical_offset)[200]
    seg = sorted(os.listdir(os.path.join(b, "commitlog")))
    base = max(int(s) for s in seg if int(s) <= victim.physical_offset)
    target = victim.physical_offset + 150 - base  # inside the record (body or properties)
    with open(os.path.join(b, "commitlog", f"{base:020d}"), "r+b") as f:
        f.seek(target)
        byte = f.read(1)
        f.seek(target)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert pipeline_main(["replicas", built_store.root, a, b, *SMALL]) == 1
    out = capsys.readouterr().out
    assert f"segment {base:020d}:" in out and "DIFFER" in out
    assert f"first difference n0 vs n2 at physical offset {victim.physical_offset + 150}" in out
    assert f"inside the record at {victim.physical_offset} (topic {victim.topic}, queue {victim.queue_id}, " \
           f"queue offset {victim.queue_offset}" in out
    assert "n0 vs n1" not in out


@pytest.mark.parametrize("job", ["reindex", "export", "stats", "verify"])
def test_bad_paths_give_one_line_and_exit_2(spark, tmp_path, capsys, job: str) -> None:
    out = ["OUT"] if job in ("reindex", "export") else []
    missing = str(tmp_path / "missing")
    assert pipeline_main([job, missing, *[str(tmp_path / o) for o in out], "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"raftmq pipeline {job}: error: not a store directory: {missing} does not exist"]
    empty = tmp_path / "empty"
    (empty / "commitlog").mkdir(parents=True)
    (empty / "commitlog" / f"{0:020d}").write_bytes(b"\0" * 4096)  # a pre-allocated, never written segment
    assert pipeline_main([job, str(empty), *[str(tmp_path / o) for o in out], "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"raftmq pipeline {job}: error: empty store:")


def test_unwritable_output_is_refused_before_any_work(built_store, tmp_path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert pipeline_main(["reindex", built_store.root, str(blocker / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not writable" in err[0]


def test_verify_reports_damaged_commit_log_records(spark, built_store, store_copy, capsys) -> None:
    """Issue 10: a corrupted copy used to verify as "0 difference(s)", exit 0."""
    root = store_copy()
    victim = sorted(built_store.puts, key=lambda p: p.physical_offset)[30]
    seg = victim.physical_offset - victim.physical_offset % SEGMENT
    with open(os.path.join(root, "commitlog", f"{seg:020d}"), "r+b") as f:
        f.seek(victim.physical_offset - seg + 4)  # the magic code: the record cannot be read at all
        f.write(b"\x00\x11\x22\x33" + bytes(60))
    assert pipeline_main(["verify", root, *SMALL]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"commitlog {seg:020d} [{victim.physical_offset}, ") and "damaged" in lines[0], lines

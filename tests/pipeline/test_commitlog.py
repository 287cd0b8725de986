"""Commit-log splitting without Spark: exact boundaries, resync false positives, torn tails, bad paths."""

from __future__ import annotations

import os
import struct

import pytest

from raftmq.pipeline.commitlog import Split, iter_records, plan_splits, resync, stitch, walk_split
from raftmq.pipeline.errors import EmptyStoreError, NotAStoreError, OutputError
from raftmq.pipeline.layout import infer_index_geometry, open_layout, prepare_output
from raftmq.store import MessageStore, StoreConfig
from raftmq.store.message import Message, encode_record
from tests.pipeline.conftest import INDEX_NUM, INDEX_SLOTS, SEGMENT


def sequential_records(layout) -> list[int]:  # noqa: ANN001
    """Physical offsets of every record, walking each segment from offset 0 (the ground truth)."""
    out = []
    for seg in layout.segments:
        whole = Split(0, seg.path, seg.base, seg.size, 0, seg.size)
        w = walk_split(whole)
        b = stitch([whole], [w])
        for s in b.splits:
            out += [seg.base + pos for pos, r in iter_records(s, read_body=False) if r.ok]
    return out


def split_records(layout, split_bytes: int):  # noqa: ANN001, ANN201
    splits = plan_splits(layout, split_bytes)
    b = stitch(splits, [walk_split(s) for s in splits])
    offsets = [s.base + pos for s in b.splits for pos, r in iter_records(s, read_body=False) if r.ok]
    return b, offsets


@pytest.mark.parametrize("split_bytes", [97, 1000, 4096, SEGMENT])
def test_every_split_size_reads_each_record_exactly_once(built_store, split_bytes: int) -> None:
    layout = open_layout(built_store.root)
    truth = sequential_records(layout)
    assert truth == sorted(p.physical_offset for p in built_store.puts)
    b, offsets = split_records(layout, split_bytes)
    assert offsets == truth
    assert b.records == len(truth)
    assert b.problems == [] and b.torn_tail is None


def test_record_lookalike_inside_a_body_is_overruled_by_the_chain(tmp_path) -> None:
    """A body holding a perfectly valid record for its own position fools resync; stitching must not be fooled."""
    cfg = StoreConfig(root_dir=str(tmp_path / "s"), mapped_file_size_commit_log=SEGMENT, preallocate=False)
    st = MessageStore(cfg)
    st.open()
    try:
        st.put_message(Message(topic="T", body=b"first"))
        next_offset = st.commit_log_max_offset
        pad = 40
        fake_at = next_offset + 88 + pad  # v4 hosts: the body starts 88 bytes into a record
        fake = encode_record(topic="Fake", body=b"not a real record", properties="", physical_offset=fake_at)
        body = b"p" * pad + fake + b"\0" * 64  # zeros after it: a "clean end" for the chain check
        st.put_message(Message(topic="T", body=body))
        for i in range(5):
            st.put_message(Message(topic="T", body=f"after {i}".encode()))
    finally:
        st.shutdown()
    layout = open_layout(cfg.root_dir)
    seg = layout.segments[0]
    start = next_offset + 10  # a range starting inside the record that carries the lookalike
    with open(seg.path, "rb") as f:
        import mmap

        buf = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        assert resync(buf, seg.base, seg.size, start, seg.size)[0] == fake_at  # resync alone is fooled
        buf.close()
    splits = [Split(0, seg.path, seg.base, seg.size, 0, start), Split(1, seg.path, seg.base, seg.size, start, seg.size)]
    b = stitch(splits, [walk_split(s) for s in splits])
    assert b.corrections, "the disagreement must be reported"
    offsets = [s.base + pos for s in b.splits for pos, r in iter_records(s) if r.ok]
    assert offsets == sequential_records(layout)
    assert len(offsets) == 7 and fake_at not in offsets


def test_torn_tail_is_reported_and_earlier_records_survive(built_store, store_copy) -> None:
    root = store_copy()
    layout = open_layout(root)
    _, before = split_records(layout, 4096)
    seg = layout.segments[-1]
    # a half-written record after the last one: a header claiming 300 bytes, then a few bytes of body
    with open(seg.path, "r+b") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        data_end = _data_end(f, size)
        f.seek(data_end)
        f.write(struct.pack(">ii", 300, -626843481) + b"\x01" * 40)
    b, offsets = split_records(open_layout(root), 4096)
    assert offsets == before
    assert b.torn_tail is not None and b.torn_tail[0] == seg.base + data_end
    assert any("torn tail" in p for p in b.problems)


def _data_end(f, size: int) -> int:  # noqa: ANN001
    pos = 0
    while pos + 8 <= size:
        f.seek(pos)
        total, magic = struct.unpack(">ii", f.read(8))
        if total == 0 and magic == 0:
            return pos
        pos += total
    raise AssertionError("no end of data in the last segment")


def test_corrupt_length_mid_log_is_skipped_and_reported(built_store, store_copy) -> None:
    root = store_copy()
    victim = sorted(built_store.puts, key=lambda p: p.physical_offset)[50]
    layout = open_layout(root)
    seg = next(s for s in layout.segments if s.base <= victim.physical_offset < s.base + s.size)
    with open(seg.path, "r+b") as f:
        f.seek(victim.physical_offset - seg.base + 2)
        f.write(b"\x7f")  # TOTALSIZE now points into the middle of nowhere
    b, offsets = split_records(open_layout(root), 4096)
    expected = sorted(p.physical_offset for p in built_store.puts if p is not victim)
    assert offsets == expected
    assert any(f"[{victim.physical_offset}," in p for p in b.problems)


def test_not_a_store_empty_store_and_bad_output(tmp_path) -> None:
    with pytest.raises(NotAStoreError, match="does not exist"):
        open_layout(str(tmp_path / "nope"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(NotAStoreError, match="no commitlog/"):
        open_layout(str(tmp_path / "plain"))
    (tmp_path / "empty" / "commitlog").mkdir(parents=True)
    with pytest.raises(EmptyStoreError):
        open_layout(str(tmp_path / "empty"))
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OutputError, match="is a file"):
        prepare_output(str(tmp_path / "afile"))
    with pytest.raises(OutputError, match="not writable"):
        prepare_output(str(tmp_path / "afile" / "sub"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(OutputError, match="not empty"):
        prepare_output(str(tmp_path / "full"))


def test_index_geometry_is_inferred_from_full_index_files(built_store) -> None:
    g = infer_index_geometry(open_layout(built_store.root))
    assert g is not None and (g.hash_slot_num, g.index_num) == (INDEX_SLOTS, INDEX_NUM)

"""Damaged commit logs on a single node (issue 10): refuse without touching anything, check, repair, reads.

Every case writes a real store, damages its segment files with real byte writes, and reopens it. On the old
code each of these destroyed intact records (truncation at the damage) or returned corrupt bytes.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from raftmq.store import MessageStore, StoreConfig
from raftmq.store.integrity import CorruptionError, CorruptReadError
from tests.store import crash_writer as cw
from tests.store.store_helpers import tree_bytes, wait_dispatched

SEG = 64 * 1024
CONFIG = {
    "mapped_file_size_commit_log": SEG,
    "mapped_file_size_consume_queue": 50 * 20,
    "max_hash_slot_num": 64,
    "max_index_num": 256,
    "preallocate": False,
}
ROOT = Path(__file__).resolve().parents[2]


def _write(root: Path, n: int) -> tuple[StoreConfig, list]:
    cfg = StoreConfig(root_dir=str(root), **CONFIG)
    st = MessageStore(cfg)
    st.open()
    try:
        results = [st.put_message(cw.make_message(s, "DmgT", s % 3)) for s in range(n)]
        wait_dispatched(st)
    finally:
        st.shutdown()
    return cfg, results


def _patch(cfg: StoreConfig, offset: int, data: bytes) -> None:
    path = Path(cfg.commit_log_dir) / f"{offset - offset % SEG:020d}"
    with open(path, "r+b") as f:
        f.seek(offset % SEG)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _segment_of(offset: int) -> int:
    return offset // SEG


def _cli(*args: str) -> subprocess.CompletedProcess:
    if args[0] == "repair":  # the store settings the derived files are rebuilt with, as a node config would say
        sets = [f"--set=store.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in CONFIG.items()]
        args = (args[0], *sets, *args[1:])
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'proto'}"}
    return subprocess.run([sys.executable, "-m", "raftmq.node", "store", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def _refuses(cfg: StoreConfig, offset_in: int) -> CorruptionError:
    before = tree_bytes(cfg.root_dir)
    with pytest.raises(CorruptionError) as ei:
        MessageStore(cfg).open()
    err = ei.value
    assert any(r.start <= offset_in < r.end or r.start == offset_in for r in err.records), err.records
    assert f"raftmq store repair {cfg.root_dir}" in str(err)
    after = tree_bytes(cfg.root_dir)
    assert {k: v for k, v in after.items() if k != "lock"} == {k: v for k, v in before.items() if k != "lock"}
    return err


def _damaged_seqs(results: list, start: int, end: int) -> set[int]:
    return {i for i, r in enumerate(results) if r.physical_offset < end and r.physical_offset + r.wrote_bytes > start}


def _check_repaired(cfg: StoreConfig, results: list, lost: set[int]) -> None:
    """Every intact message is where it was (offset, queue offset, body); lost ones are gone; nothing reused."""
    st = MessageStore(cfg)
    st.open()
    try:
        wait_dispatched(st)
        for s, r in enumerate(results):
            m = st.view_message(r.physical_offset)
            if s in lost:
                assert m is None
                continue
            assert m is not None and m.body == cw.body_for(s) and m.queue_offset == r.queue_offset
        pulled: dict[int, list] = {}
        for qid in range(3):
            got, off = [], 0
            while True:
                g = st.get_messages("DmgT", qid, off, max_count=32)
                got += [int(m.body[4:13]) for m in g.messages]
                if g.next_begin_offset == off or g.next_begin_offset >= st.max_offset_in_queue("DmgT", qid):
                    break
                off = g.next_begin_offset
            pulled[qid] = got
        expect = {q: [s for s in range(len(results)) if s % 3 == q and s not in lost] for q in range(3)}
        assert pulled == expect
        for q in range(3):
            assert st.max_offset_in_queue("DmgT", q) == len([s for s in range(len(results)) if s % 3 == q])
        r = st.put_message(cw.make_message(len(results), "DmgT", 0))
        last = results[-1]
        assert r.physical_offset == last.physical_offset + last.wrote_bytes  # after everything, nothing reused
        assert r.queue_offset == len([s for s in range(len(results)) if s % 3 == 0])
    finally:
        st.shutdown()


def test_64_random_bytes_in_the_first_segment_refuse_then_check_and_repair(tmp_path: Path) -> None:
    cfg, results = _write(tmp_path / "s", 330)
    assert _segment_of(results[-1].physical_offset) >= 2  # three segments: recovery scans the first
    victim = results[10]
    at = victim.physical_offset + 40
    _patch(cfg, at, random.Random(7).randbytes(64))
    err = _refuses(cfg, at)
    assert err.records[0].path.endswith(f"{0:020d}")
    chk = _cli("check", cfg.root_dir)
    assert chk.returncode == 1, chk.stderr
    lines = chk.stdout.strip().splitlines()
    assert lines and lines[0].startswith("commitlog:") and f"{0:020d}" in lines[0] and str(victim.physical_offset) in lines[0]
    js = json.loads(_cli("check", "--json", cfg.root_dir).stdout)
    dmg = [p for p in js["problems"] if p["kind"] == "commitlog"]
    assert dmg[0]["start"] == victim.physical_offset
    before = tree_bytes(cfg.root_dir)
    dry = _cli("repair", "--dry-run", cfg.root_dir)
    assert dry.returncode == 0 and "would quarantine" in dry.stdout, dry.stdout + dry.stderr
    assert tree_bytes(cfg.root_dir) == before
    rep = _cli("repair", cfg.root_dir)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    qdirs = list((Path(cfg.root_dir) / "quarantine").iterdir())
    manifest = json.loads((qdirs[0] / "manifest.json").read_text())
    rng = manifest["ranges"][0]
    original = before[f"commitlog/{0:020d}"][rng["start"]:rng["end"]]
    assert (qdirs[0] / rng["quarantine_file"]).read_bytes() == original
    assert _cli("check", cfg.root_dir).returncode == 0
    _check_repaired(cfg, results, _damaged_seqs(results, rng["start"], rng["end"]))


def test_4k_of_zeros_in_the_middle_segment_refuse_then_repair(tmp_path: Path) -> None:
    cfg, results = _write(tmp_path / "s", 330)
    mid = [r for r in results if _segment_of(r.physical_offset) == 1]
    at = mid[len(mid) // 2].physical_offset + 100
    _patch(cfg, at, bytes(4096))
    err = _refuses(cfg, at)
    assert err.records[0].path.endswith(f"{SEG:020d}")
    assert _cli("check", cfg.root_dir).returncode == 1
    assert _cli("repair", cfg.root_dir).returncode == 0
    assert _cli("check", cfg.root_dir).returncode == 0
    lost = _damaged_seqs(results, at, at + 4096)
    assert 4 <= len(lost) < 20
    _check_repaired(cfg, results, lost)


def test_a_deleted_middle_segment_refuses_and_repair_says_why(tmp_path: Path) -> None:
    cfg, results = _write(tmp_path / "s", 330)
    middle = Path(cfg.commit_log_dir) / f"{SEG:020d}"
    middle.unlink()
    err = _refuses(cfg, SEG)
    assert "missing" in err.records[0].reason and str(middle) == err.records[0].path
    chk = _cli("check", cfg.root_dir)
    assert chk.returncode == 1 and "missing" in chk.stdout
    rep = _cli("repair", cfg.root_dir)
    assert rep.returncode == 1 and "missing" in rep.stderr
    assert not middle.exists() and (Path(cfg.commit_log_dir) / f"{2 * SEG:020d}").exists()


def test_a_segment_of_the_wrong_size_refuses(tmp_path: Path) -> None:
    cfg, results = _write(tmp_path / "s", 330)
    with open(Path(cfg.commit_log_dir) / f"{0:020d}", "r+b") as f:
        f.truncate(SEG - 4096)
    _refuses(cfg, 0)


def test_flipped_body_byte_pull_view_and_query_refuse_it(tmp_path: Path) -> None:
    """A body byte rots on disk while the node runs (recovery cannot see it): reads check the CRC and refuse the
    record with an error naming its offset, never return its bytes (the old pull path returned them)."""
    cfg, results = _write(tmp_path / "s", 330)
    victim_seq = 4
    victim = results[victim_seq]
    st = MessageStore(cfg)
    st.open()
    try:
        wait_dispatched(st)
        _patch(cfg, victim.physical_offset + 88 + 12, b"\x5a")  # a real write to the file under the mapping
        qid = victim_seq % 3
        g = st.get_messages("DmgT", qid, 0, max_count=32)
        assert [m.body for m in g.messages] == [cw.body_for(s) for s in range(qid, victim_seq, 3)]
        assert g.next_begin_offset == victim.queue_offset
        with pytest.raises(CorruptReadError) as ei:
            st.get_messages("DmgT", qid, victim.queue_offset, max_count=32)
        assert str(victim.physical_offset) in str(ei.value) and "CRC" in str(ei.value)
        with pytest.raises(CorruptReadError):
            st.view_message(victim.physical_offset)
        with pytest.raises(CorruptReadError):
            st.query_messages("DmgT", cw.key_for(victim_seq), 4, 0, 1 << 62)
        assert st.view_message(results[victim_seq + 1].physical_offset).body == cw.body_for(victim_seq + 1)
    finally:
        st.shutdown()


def test_store_check_reports_a_consume_queue_unit_that_disagrees_with_the_log(tmp_path: Path) -> None:
    cfg, results = _write(tmp_path / "s", 60)
    assert _cli("check", cfg.root_dir).returncode == 0
    victim = results[9]  # queue 0, queue offset 3
    qfile = Path(cfg.consume_queue_dir) / "DmgT" / "0" / f"{0:020d}"
    with open(qfile, "r+b") as f:
        f.seek(victim.queue_offset * 20)
        f.write((victim.physical_offset + 8).to_bytes(8, "big"))
    chk = _cli("check", "--json", cfg.root_dir)
    assert chk.returncode == 1
    [p] = json.loads(chk.stdout)["problems"]
    assert p["kind"] == "consumequeue" and p["path"].endswith("DmgT/0") and f"queue offset {victim.queue_offset}" in p["detail"]


def test_a_damaged_flushed_last_record_refuses_then_repair_fills_it_and_its_offset_is_not_reused(tmp_path: Path) -> None:
    cfg, results = _write(tmp_path / "s", 60)
    last = results[-1]
    _patch(cfg, last.physical_offset + 88 + 30, b"\x00\xff\x00")
    _refuses(cfg, last.physical_offset)
    rep = _cli("repair", cfg.root_dir)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert _cli("check", cfg.root_dir).returncode == 0
    st = MessageStore(cfg)
    st.open()
    try:
        wait_dispatched(st)
        assert st.view_message(last.physical_offset) is None
        assert st.view_message(results[-2].physical_offset).body == cw.body_for(58)
        r = st.put_message(cw.make_message(60, "DmgT", last.queue_id))
        assert r.physical_offset >= last.physical_offset + last.wrote_bytes
        assert r.queue_offset == last.queue_offset + 1
    finally:
        st.shutdown()


def _repair_cli(*args: str) -> subprocess.CompletedProcess:
    """``raftmq store repair`` exactly as an operator types it (no settings added)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'proto'}"}
    return subprocess.run([sys.executable, "-m", "raftmq.node", "store", "repair", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_repair_without_config_rebuilds_the_index_with_the_geometry_of_its_files(tmp_path: Path) -> None:
    """Issue 33 item 4: the default geometry gave a 420 MB index that neither RocketMQ nor the node (with the
    store's real settings) read; the geometry is read from the existing index files."""
    from raftmq.store.index_file import index_file_size

    cfg = StoreConfig(root_dir=str(tmp_path / "s"), **{**CONFIG, "max_hash_slot_num": 512, "max_index_num": 200})
    st = MessageStore(cfg)
    st.open()
    try:
        results = [st.put_message(cw.make_message(s, "DmgT", s % 3)) for s in range(330)]
        wait_dispatched(st)
    finally:
        st.shutdown()
    assert len(os.listdir(cfg.index_dir)) >= 2  # full files and the current one
    victim = results[40]
    _patch(cfg, victim.physical_offset + 40, random.Random(3).randbytes(64))
    rep = _repair_cli(cfg.root_dir)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    sizes = {os.path.getsize(Path(cfg.index_dir) / n) for n in os.listdir(cfg.index_dir)}
    assert sizes == {index_file_size(512, 200)}
    assert "index files of 512 slots x 200 entries" in rep.stdout, rep.stdout
    st = MessageStore(cfg)  # the store's real settings load the rebuilt index and find keys through it
    st.open()
    try:
        for s in (5, 200, 329):
            got = st.query_messages("DmgT", cw.key_for(s), 32, 0, 1 << 62)
            assert [m.body for m in got] == [cw.body_for(s)]
    finally:
        st.shutdown()


def test_repair_refuses_when_the_index_geometry_cannot_be_read_and_takes_it_from_set(tmp_path: Path) -> None:
    cfg, results = _write(tmp_path / "s", 330)
    _patch(cfg, results[40].physical_offset + 40, random.Random(4).randbytes(64))
    for name in os.listdir(cfg.index_dir):  # index files lost: nothing tells the geometry the store used
        os.unlink(Path(cfg.index_dir) / name)
    before = tree_bytes(cfg.root_dir)
    rep = _repair_cli(cfg.root_dir)
    assert rep.returncode == 1, rep.stdout + rep.stderr
    assert "cannot read the index geometry" in rep.stderr and "--config" in rep.stderr, rep.stderr
    assert tree_bytes(cfg.root_dir) == before  # refused before anything changed
    rep = _repair_cli("--set", "store.max_hash_slot_num=64", "--set", "store.max_index_num=256", cfg.root_dir)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "segments of 65536 bytes" in rep.stdout, rep.stdout  # the rest still read from the files
    _check_repaired(cfg, results, _damaged_seqs(results, results[40].physical_offset, results[41].physical_offset))

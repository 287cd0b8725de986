"""Crash tests: SIGKILL a writer subprocess at random points, recover, and check what the store holds.

After every kill the recovered store must hold exactly a prefix of the planned messages (no gap, no garbage,
no reordering), every put that returned before the kill must be in it with the offsets it reported, and the
consume queues and index must agree with a fresh rebuild from the commit log alone. Torn and corrupt tails
are truncated at the first bad record, with a log line that names the offset and the reason.
"""

from __future__ import annotations

import json
import logging
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raftmq.store import Message, MessageStore, StoreConfig, TagFilter
from raftmq.store.checkpoint import StoreCheckpoint
from raftmq.store.integrity import CorruptionError
from tests.store import crash_writer as cw
from tests.store.store_helpers import read_commit_log_files, segment_files, tree_bytes, wait_dispatched

WRITER = Path(cw.__file__)
REPO = Path(__file__).resolve().parents[2]
CRASH_CONFIG = {
    "mapped_file_size_commit_log": 16 * 1024,  # a batch (up to 39 x ~800 B) can span segments
    "mapped_file_size_consume_queue": 8 * 20,
    "max_hash_slot_num": 16,
    "max_index_num": 64,
    "flush_interval_commit_log": 5,
    "flush_interval_consume_queue": 5,
    "flush_consume_queue_thorough_interval": 20,
    "preallocate": False,
}


# ---------------------------------------------------------------------------------------------- writer process
class Writer:
    """The crash_writer subprocess and the acks it reported."""

    def __init__(self, root: Path, seed: int, start: int, config: dict) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, str(WRITER), "--root", str(root), "--seed", str(seed), "--start", str(start),
             "--config", json.dumps(config)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO)
        self.acks: list[tuple[int, int, int, int, str]] = []
        line = self.proc.stdout.readline()
        if line != b"ready\n":
            self.proc.kill()
            raise AssertionError(f"writer did not start: {line!r} {self.proc.stderr.read().decode()[-2000:]}")

    def _parse(self, line: bytes) -> None:
        parts = line.split()
        if parts and parts[0] == b"ack":
            self.acks.append((int(parts[1]), int(parts[2]), int(parts[3]), int(parts[4]), parts[5].decode()))

    def _drain_for(self, seconds: float) -> None:
        """Keep reading acks for ``seconds`` (a full pipe would stall the writer)."""
        deadline = time.monotonic() + seconds
        fd = self.proc.stdout.fileno()
        buf = b""
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            *lines, buf = (buf + chunk).split(b"\n")
            for line in lines:
                self._parse(line + b"\n")
        self._pending = buf

    def kill_after(self, acks: int, extra_s: float) -> None:
        """Read until ``acks`` puts returned, wait ``extra_s`` more, SIGKILL, then collect what was reported."""
        try:
            while len(self.acks) < acks:
                line = self.proc.stdout.readline()
                if not line:
                    raise AssertionError(f"writer died: {self.proc.stderr.read().decode()[-2000:]}")
                self._parse(line)
            self._drain_for(extra_s)
        finally:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        rest = getattr(self, "_pending", b"") + self.proc.stdout.read()
        for line in rest.splitlines(keepends=True):
            self._parse(line)  # lines written before the kill are still in the pipe
        self.proc.stdout.close()
        self.proc.stderr.close()


# ---------------------------------------------------------------------------------------------- checks
def seq_of(body: bytes) -> int:
    assert body.startswith(b"seq="), body[:20]
    return int(body[4:13])


def check_prefix(root: Path, placement: dict[int, tuple[str, int]], acks: list) -> int:
    """The commit-log files hold messages 0..n-1 exactly (content, placement, queue offsets); returns n."""
    msgs, _end = read_commit_log_files(root)
    seqs = [seq_of(m.body) for m in msgs]
    assert seqs == list(range(len(seqs))), f"not a prefix: {seqs[:5]}...{seqs[-5:]}"
    next_qo: dict[tuple[str, int], int] = {}
    for s, m in zip(seqs, msgs, strict=True):
        assert (m.topic, m.queue_id) == placement[s], s
        assert m.body == cw.body_for(s)
        assert (m.tags, m.keys, m.uniq_key) == (cw.tags_for(s), [cw.key_for(s), "all"], cw.uniq_key_for(s))
        assert m.born_timestamp == cw.BORN_TIMESTAMP + s
        key = (m.topic, m.queue_id)
        assert m.queue_offset == next_qo.get(key, 0), f"queue offset gap at message {s}"
        next_qo[key] = m.queue_offset + 1
    n = len(seqs)
    for first, count, qo, phy, status in acks:
        assert status == "PUT_OK", (first, status)
        assert first + count <= n, f"acknowledged messages {first}..{first + count - 1} lost (store has {n})"
        assert (msgs[first].queue_offset, msgs[first].physical_offset) == (qo, phy)
    return n


def check_store_reads(st: MessageStore, placement: dict[int, tuple[str, int]], n: int) -> None:
    """Consume queues, index and msgIds of the open store answer for every recovered message."""
    by_queue: dict[tuple[str, int], list[int]] = {}
    for s in range(n):
        by_queue.setdefault(placement[s], []).append(s)
    for (topic, qid), seqs in by_queue.items():
        assert st.max_offset_in_queue(topic, qid) == len(seqs), (topic, qid)
        got: list[int] = []
        offset = 0
        while offset < len(seqs):
            g = st.get_messages(topic, qid, offset, max_count=32, tag_filter=TagFilter.parse("*"))
            assert g.status.name == "FOUND", (topic, qid, offset, g.status)
            got += [seq_of(m.body) for m in g.messages]
            offset = g.next_begin_offset
        assert got == seqs
    # every key of a small store; of a large one the oldest 500 (the ones abnormal recovery could drop),
    # the newest 200 and every 7th in between
    keyed = range(n) if n <= 1500 else sorted({*range(500), *range(n - 200, n), *range(500, n, 7)})
    for s in keyed:
        topic = placement[s][0]
        found = st.query_messages(topic, cw.key_for(s), 32, 0, 1 << 62)
        assert [seq_of(m.body) for m in found] == [s], f"key of message {s}"
        found = st.query_messages(topic, cw.uniq_key_for(s), 32, 0, 1 << 62)
        assert [seq_of(m.body) for m in found] == [s], f"uniq key of message {s}"


def check_against_rebuild(root: Path, work: Path, config: dict, placement, n: int) -> None:
    """Copy only the commit log to a new directory, let reput rebuild there, compare CQ bytes and index answers."""
    fresh = work / "rebuild"
    shutil.rmtree(fresh, ignore_errors=True)
    shutil.copytree(root / "commitlog", fresh / "commitlog")
    a = MessageStore(StoreConfig(root_dir=str(root), **config))
    b = MessageStore(StoreConfig(root_dir=str(fresh), **config))
    a.open()
    b.open()
    try:
        wait_dispatched(a)
        wait_dispatched(b)
        for topic in cw.TOPICS:
            assert a.queue_ids(topic) == b.queue_ids(topic)
            for key in ("all", *(cw.key_for(s) for s in range(max(0, n - 50), n))):
                qa = [m.physical_offset for m in a.query_messages(topic, key, 64, 0, 1 << 62)]
                qb = [m.physical_offset for m in b.query_messages(topic, key, 64, 0, 1 << 62)]
                assert qa == qb, (topic, key)
    finally:
        a.shutdown()
        b.shutdown()
    # stale bytes after the end of a file are not data: compare the written part of every CQ file
    cq_a, cq_b = tree_bytes(root / "consumequeue"), tree_bytes(fresh / "consumequeue")
    assert sorted(cq_a) == sorted(cq_b)
    for name in cq_a:
        assert cq_a[name] == cq_b[name], f"consume queue file {name} differs from a rebuild"


# ---------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("flush", ["SYNC", "ASYNC"])
def test_sigkill_leaves_exact_prefix(tmp_path: Path, flush: str) -> None:
    """Several kill/recover rounds in one directory; every round continues from what the last recovered."""
    config = {**CRASH_CONFIG, "flush_disk_type": flush}
    root = tmp_path / "store"
    seed = 1234 if flush == "SYNC" else 4321
    rnd = random.Random(seed)
    placement: dict[int, tuple[str, int]] = {}
    all_acks: list = []
    start = 0
    for round_no in range(5):
        w = Writer(root, seed, start, config)
        w.kill_after(rnd.randrange(1, 25), rnd.uniform(0, 0.03))
        placement.update(cw.placement(seed, start, start + 100_000))
        all_acks += w.acks
        if round_no == 3:  # recover this one as after a machine restart (RocketMQ's full abnormal path)
            os.utime(root / "abort", (1_000_000, 1_000_000))
        if round_no % 2 == 0:
            # recover a copy here; the next writer recovers the killed original itself
            probe = tmp_path / f"probe{round_no}"
            shutil.copytree(root, probe)
            st = MessageStore(StoreConfig(root_dir=str(probe), **config))
            st.open()
            st.shutdown()
            n = check_prefix(probe, placement, all_acks)
            shutil.rmtree(probe)
        else:
            st = MessageStore(StoreConfig(root_dir=str(root), **config))
            st.open()
            try:
                wait_dispatched(st)
                n = check_prefix(root, placement, all_acks)
                check_store_reads(st, placement, n)
            finally:
                st.shutdown()
        assert n >= start, "recovery lost messages of an earlier round"
        # placement of messages beyond n belongs to the killed plan; the next writer plans from n
        placement = {s: p for s, p in placement.items() if s < n}
        start = n
    check_against_rebuild(root, tmp_path, config, placement, start)


def _write(root: Path, n: int, **extra) -> tuple[StoreConfig, list]:
    cfg = StoreConfig(root_dir=str(root), **{**CRASH_CONFIG, **extra})
    st = MessageStore(cfg)
    st.open()
    try:
        results = [st.put_message(cw.make_message(s, "CrashA", s % 2)) for s in range(n)]
        wait_dispatched(st)
    finally:
        st.shutdown()
    return cfg, results


def _check_truncated_at(cfg: StoreConfig, results: list, bad: int, caplog) -> None:
    """After reopening: the log ends at record ``bad``, logged; earlier data is intact; writing continues."""
    cut = results[bad].physical_offset
    st = MessageStore(cfg)
    with caplog.at_level(logging.WARNING):
        st.open()
    try:
        logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and str(cut) in
                  r.getMessage()]
        assert logged, f"no warning naming offset {cut}: {[r.getMessage() for r in caplog.records]}"
        assert st.commit_log_max_offset == cut
        wait_dispatched(st)
        for s in range(bad):
            m = st.view_message(results[s].physical_offset)
            assert m is not None and m.body == cw.body_for(s)
            assert [x.physical_offset for x in st.query_messages("CrashA", cw.key_for(s), 4, 0, 1 << 62)] == \
                [results[s].physical_offset]
        assert st.view_message(cut) is None
        assert st.query_messages("CrashA", cw.key_for(bad), 4, 0, 1 << 62) == []
        for qid in (0, 1):
            assert st.max_offset_in_queue("CrashA", qid) == len([s for s in range(bad) if s % 2 == qid])
        # the next message takes the cut record's place and is readable through its queue
        r = st.put_message(cw.make_message(bad, "CrashA", bad % 2))
        assert (r.physical_offset, r.queue_offset) == (cut, results[bad].queue_offset)
        wait_dispatched(st, timeout=5)
        g = st.get_messages("CrashA", bad % 2, r.queue_offset, max_count=1)
        assert g.status.name == "FOUND" and g.messages[0].body == cw.body_for(bad)
    finally:
        st.shutdown()


def _patch(cfg: StoreConfig, offset: int, data: bytes) -> None:
    fs = cfg.mapped_file_size_commit_log
    path = Path(cfg.commit_log_dir) / f"{offset - offset % fs:020d}"
    with open(path, "r+b") as f:
        f.seek(offset % fs)
        f.write(data)


def _unflush(cfg: StoreConfig, offset: int) -> None:
    """Make the checkpoint say the commit log was durable only up to ``offset``: what a crash leaves when the
    records after it were still in the page cache (the checkpoint is written by the periodic thorough flush)."""
    ckpt = StoreCheckpoint(cfg.checkpoint_path)
    ckpt.flushed_offset = offset
    ckpt.shutdown()


def _expect_corruption(cfg: StoreConfig, start: int) -> None:
    """Opening refuses with CorruptionError naming the file and ``start``; no file under the root changes."""
    before = tree_bytes(cfg.root_dir)
    with pytest.raises(CorruptionError) as ei:
        MessageStore(cfg).open()
    fs = cfg.mapped_file_size_commit_log
    assert any(r.start == start and r.path.endswith(f"{start - start % fs:020d}") for r in ei.value.records), \
        ei.value.records
    assert f"raftmq store repair {cfg.root_dir}" in str(ei.value)
    after = tree_bytes(cfg.root_dir)
    assert {k: v for k, v in after.items() if k != "lock"} == {k: v for k, v in before.items() if k != "lock"}


@pytest.mark.parametrize("exit_kind", ["clean", "process-crash", "machine-restart"])
def test_corrupt_body_of_last_record_is_truncated(tmp_path: Path, caplog, exit_kind: str) -> None:
    """A bad last record that was never flushed (the checkpoint ends before it) is a torn tail: cut."""
    cfg, results = _write(tmp_path, 30)
    last = results[-1]
    # the body starts at byte 88 of a record with IPv4 hosts; flipping bytes there breaks BODYCRC
    _patch(cfg, last.physical_offset + 88 + 4, b"\xff\x00\xee")
    _unflush(cfg, last.physical_offset)
    if exit_kind != "clean":
        _mark_crashed(cfg, reboot=exit_kind == "machine-restart")
    _check_truncated_at(cfg, results, len(results) - 1, caplog)


@pytest.mark.parametrize("exit_kind", ["clean", "process-crash", "machine-restart"])
def test_corrupt_body_of_a_flushed_last_record_refuses_to_open(tmp_path: Path, exit_kind: str) -> None:
    """The same damage to a record the checkpoint shows flushed is corruption: refuse, change nothing."""
    cfg, results = _write(tmp_path, 30)
    last = results[-1]
    _patch(cfg, last.physical_offset + 88 + 4, b"\xff\x00\xee")
    if exit_kind != "clean":
        _mark_crashed(cfg, reboot=exit_kind == "machine-restart")
    _expect_corruption(cfg, last.physical_offset)


def test_torn_last_record_is_truncated(tmp_path: Path, caplog) -> None:
    """The last record's second half never reached the disk (zeros from the middle of its body)."""
    cfg, results = _write(tmp_path, 30)
    last = results[-1]
    half = last.wrote_bytes // 2
    _patch(cfg, last.physical_offset + half, bytes(last.wrote_bytes - half))
    _unflush(cfg, last.physical_offset)
    _mark_crashed(cfg, reboot=True)
    _check_truncated_at(cfg, results, len(results) - 1, caplog)


def test_garbage_header_mid_log_refuses_to_open(tmp_path: Path) -> None:
    """A damaged record in the middle of flushed data is corruption: the store refuses and deletes nothing
    (it used to truncate there, destroying every later record)."""
    cfg, results = _write(tmp_path, 30)
    victim = 27
    _patch(cfg, results[victim].physical_offset, b"\x00\x00\x00\x05garbage")
    _expect_corruption(cfg, results[victim].physical_offset)
    msgs, _ = read_commit_log_files(tmp_path)
    assert [seq_of(m.body) for m in msgs] == list(range(victim))  # the reader stops there, the bytes are kept
    fs = cfg.mapped_file_size_commit_log
    assert (Path(cfg.commit_log_dir) / f"{results[29].physical_offset // fs * fs:020d}").exists()


def test_garbage_mid_log_beyond_the_flushed_offset_after_a_reboot_truncates_there(tmp_path: Path, caplog) -> None:
    """After a machine restart, dirty pages beyond the flushed offset may be lost in any order: damage there
    followed by valid records is a lost write, cut as RocketMQ does (nothing acknowledged as durable is lost)."""
    cfg, results = _write(tmp_path, 30)
    victim = 27
    _patch(cfg, results[victim].physical_offset, b"\x00\x00\x00\x05garbage")
    _unflush(cfg, results[victim].physical_offset)
    _mark_crashed(cfg, reboot=True)
    _check_truncated_at(cfg, results, victim, caplog)


def _mark_crashed(cfg: StoreConfig, reboot: bool) -> None:
    """Leave ``abort`` as a crash does; with ``reboot``, dated before the machine booted (dirty pages may be lost,
    so the store takes RocketMQ's full abnormal path: index files newer than the checkpoint are dropped)."""
    Path(cfg.abort_path).touch()
    if reboot:
        os.utime(cfg.abort_path, (1_000_000, 1_000_000))


@pytest.mark.parametrize("reboot", [False, True], ids=["process-crash", "machine-restart"])
def test_index_survives_crash_after_checkpoint(tmp_path: Path, reboot: bool) -> None:
    """Keys stored long before a crash stay queryable after abnormal recovery.

    Store timestamps are set through the split write path (encode_batch/apply_batch), one second apart, so
    the checkpoint's 'everything before this is flushed' time lies well after the first messages, as it does
    in a broker that has run for a while. Index files are large enough never to fill.
    """
    cfg = StoreConfig(root_dir=str(tmp_path), **{**CRASH_CONFIG, "max_hash_slot_num": 1000,
                                                 "max_index_num": 4000, "flush_disk_type": "SYNC"})
    st = MessageStore(cfg)
    st.open()
    t0 = 1_700_000_000_000
    n = 120
    try:
        for s in range(n):
            st.apply_batch(st.encode_batch([cw.make_message(s, "CrashA", 0)], store_timestamp=t0 + s * 1000))
        wait_dispatched(st)
        st.flush()
    finally:
        st.shutdown()
    _mark_crashed(cfg, reboot)  # killed right after everything was flushed
    st = MessageStore(cfg)
    st.open()
    try:
        wait_dispatched(st)
        missing = [s for s in range(n) if len(st.query_messages("CrashA", cw.key_for(s), 4, 0, 1 << 62)) != 1]
        assert missing == [], f"{len(missing)} of {n} keys lost from the index after abnormal recovery"
    finally:
        st.shutdown()


def test_segment_files_stay_full_size(tmp_path: Path) -> None:
    """Recovery never shortens a segment (RocketMQ refuses to load a file of the wrong size)."""
    cfg, results = _write(tmp_path, 40)
    Path(cfg.abort_path).touch()
    st = MessageStore(cfg)
    st.open()
    st.shutdown()
    sizes = {p.stat().st_size for p in segment_files(cfg.commit_log_dir)}
    assert sizes == {cfg.mapped_file_size_commit_log}


def test_second_opener_is_refused_while_writer_runs(tmp_path: Path) -> None:
    """The lock holds against another process; after the SIGKILL it is free again."""
    from raftmq.store import StoreLockedError

    w = Writer(tmp_path, 5, 0, CRASH_CONFIG)
    try:
        st = MessageStore(StoreConfig(root_dir=str(tmp_path), **CRASH_CONFIG))
        with pytest.raises(StoreLockedError):
            st.open()
    finally:
        w.kill_after(1, 0)
    st = MessageStore(StoreConfig(root_dir=str(tmp_path), **CRASH_CONFIG))
    st.open()
    st.shutdown()


def test_writer_plan_is_reproducible() -> None:
    """The parent regenerates the writer's plan; if this drifted, every other check here would be void."""
    a = cw.placement(9, 100, 400)
    assert a == cw.placement(9, 100, 400) and sorted(a)[:300] == list(range(100, 400))
    assert isinstance(cw.make_message(3, "CrashA", 1), Message)


@pytest.mark.parametrize("where", ["commitlog", "consumequeue", "index"])
def test_kill_while_creating_a_segment(tmp_path: Path, where: str) -> None:
    """A SIGKILL between creating a segment file and sizing it leaves an empty file; the store must still open.

    The random-kill test above hit this for real: ``commitlog/00000000000000245760`` of 0 bytes made every later
    open fail with StoreLoadError, although the file can hold no data.
    """
    cfg, results = _write(tmp_path, 30)
    if where == "commitlog":
        fs = cfg.mapped_file_size_commit_log
        last = results[-1].physical_offset
        empty = Path(cfg.commit_log_dir) / f"{last - last % fs + fs:020d}"
    elif where == "consumequeue":
        qdir = Path(cfg.consume_queue_dir) / "CrashA" / "0"
        files = segment_files(qdir)
        empty = qdir / f"{int(files[-1].name) + cfg.consume_queue_file_size:020d}"
    else:
        files = segment_files(cfg.index_dir)
        empty = Path(cfg.index_dir) / str(int(files[-1].name) + 1)
    empty.touch()
    Path(cfg.abort_path).touch()
    st = MessageStore(cfg)
    st.open()
    try:
        wait_dispatched(st)
        assert st.commit_log_max_offset == results[-1].physical_offset + results[-1].wrote_bytes
        for s in (0, 29):
            assert st.view_message(results[s].physical_offset).body == cw.body_for(s)
            assert len(st.query_messages("CrashA", cw.key_for(s), 4, 0, 1 << 62)) == 1
        assert st.max_offset_in_queue("CrashA", 0) == 15
        r = st.put_message(cw.make_message(30, "CrashA", 0))
        assert r.queue_offset == 15
    finally:
        st.shutdown()


def test_kill_between_copy_and_offset_patch(tmp_path: Path) -> None:
    """A record whose QUEUEOFFSET/PHYSICALOFFSET were never patched must not survive recovery as if valid.

    ``CommitLog._apply`` copies the encoded records (offsets 0) into the mapping and patches the two offset
    fields afterwards; a SIGKILL between the two leaves records with a good BODYCRC and offsets 0 (the
    random-kill test found such a record: message 507 at queue offset 0 of a queue already at 58). Here the
    last record's offset fields are zeroed by hand, as that kill leaves them.
    """
    cfg, results = _write(tmp_path, 30)
    last = results[-1]
    _patch(cfg, last.physical_offset + 20, bytes(16))  # QUEUEOFFSET (int64 at 20) and PHYSICALOFFSET (at 28)
    _unflush(cfg, last.physical_offset)  # killed inside apply: that record was never flushed
    Path(cfg.abort_path).touch()
    st = MessageStore(cfg)
    st.open()
    try:
        wait_dispatched(st)
        m = st.view_message(last.physical_offset)
        if m is None:  # dropped: the log ends where the unpatched record began
            assert st.commit_log_max_offset == last.physical_offset
            assert st.max_offset_in_queue("CrashA", 1) == last.queue_offset
        else:  # or repaired: then it must be where it says and in its queue
            assert (m.physical_offset, m.queue_offset) == (last.physical_offset, last.queue_offset)
            assert st.max_offset_in_queue("CrashA", 1) == last.queue_offset + 1
        r = st.put_message(cw.make_message(30, "CrashA", 1))
        wait_dispatched(st)
        assert r.queue_offset == st.max_offset_in_queue("CrashA", 1) - 1
        g = st.get_messages("CrashA", 1, r.queue_offset, max_count=1)
        assert g.status.name == "FOUND" and g.messages[0].physical_offset == r.physical_offset
    finally:
        st.shutdown()


def test_truncate_to_inside_a_record_is_refused(tmp_path: Path) -> None:
    """``truncate_to`` takes a record boundary; any other offset must be refused without touching the store.

    Accepting it cuts a record in half: the next put then lands inside the old record, and the next open
    finds a broken record at the start of the log and truncates everything, acknowledged puts included.
    """
    from raftmq.store.errors import StoreError

    cfg = StoreConfig(root_dir=str(tmp_path), **CRASH_CONFIG)
    st = MessageStore(cfg)
    st.open()
    try:
        results = [st.put_message(cw.make_message(s, "CrashA", 0)) for s in range(3)]
        end = st.commit_log_max_offset
        for bad in (5, results[1].physical_offset + 1, results[2].physical_offset - 1):
            with pytest.raises(StoreError):
                st.truncate_to(bad)
            assert st.commit_log_max_offset == end
        st.truncate_to(results[2].physical_offset)  # a boundary is fine
        r = st.put_message(cw.make_message(3, "CrashA", 0))
        assert (r.physical_offset, r.queue_offset) == (results[2].physical_offset, 2)
    finally:
        st.shutdown()
    st = MessageStore(cfg)
    st.open()
    try:
        wait_dispatched(st)
        assert st.max_offset_in_queue("CrashA", 0) == 3
        assert [seq_of(m.body) for m in st.get_messages("CrashA", 0, 0).messages] == [0, 1, 3]
    finally:
        st.shutdown()


def test_sync_put_returns_only_after_its_bytes_are_flushed(tmp_path: Path) -> None:
    """SYNC durability: when a put returns PUT_OK its last byte is below the flushed offset."""
    st = MessageStore(StoreConfig(root_dir=str(tmp_path), **{**CRASH_CONFIG, "flush_disk_type": "SYNC"}))
    st.open()
    try:
        for s in range(0, 60, 3):
            msgs = [cw.make_message(x, "CrashA", 0) for x in range(s, s + 3)]
            rs = st.put_messages(msgs) if s % 2 else [st.put_message(m) for m in msgs]
            assert {r.status.name for r in rs} == {"PUT_OK"}
            assert st.flushed_offset >= rs[-1].physical_offset + rs[-1].wrote_bytes
    finally:
        st.shutdown()


_OFFSET_WRITER = """
import os, sys
from raftmq.store import MessageStore, StoreConfig
st = MessageStore(StoreConfig(root_dir=sys.argv[1], mapped_file_size_commit_log=4096))
st.open()
start = int(sys.argv[2])
os.write(1, b"ready\\n")
for i in range(start, start + 10**7):
    st.consumer_offsets.commit("g1", "TopicX", {0: i, 1: 2 * i})
    st.consumer_offsets.persist()
    os.write(1, f"{i}\\n".encode())
"""


def test_consumer_offsets_file_survives_sigkill(tmp_path: Path) -> None:
    """Killed in the middle of persisting consumerOffset.json, the store still opens with an offset at least as
    new as the last persist that returned (the safe write keeps a .bak to fall back on)."""
    rnd = random.Random(99)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = 0
    for _ in range(6):
        p = subprocess.Popen([sys.executable, "-c", _OFFSET_WRITER, str(tmp_path), str(start)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            assert p.stdout.readline() == b"ready\n", p.stderr.read().decode()[-2000:]
            time.sleep(rnd.uniform(0.05, 0.3))
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
        lines = p.stdout.read().split()
        p.stdout.close()
        p.stderr.close()
        last = int(lines[-1]) if lines else start - 1
        st = MessageStore(StoreConfig(root_dir=str(tmp_path), mapped_file_size_commit_log=4096))
        st.open()
        try:
            got = st.consumer_offsets.offsets("g1", "TopicX")
        finally:
            st.shutdown()
        if last >= 0:
            assert got.get(0, -1) in (last, last + 1), (got, last)
            assert got[1] == 2 * got[0]
        start = got.get(0, -1) + 1


def test_sigkill_after_seconds_of_writing_keeps_every_key(tmp_path: Path) -> None:
    """Writers killed after seconds of fast writing, with index files far larger than the crash tests above:
    after recovery every key and every UNIQ_KEY must still be found.

    A kill while reput is in the middle of indexing used to leave an index file whose header (entry count,
    end offset) lags the entries and slots already written; the file was kept after the process crash, so
    slots pointing past the stale count were ignored and re-indexing overwrote entries that chains still
    used: scattered keys, old ones included, vanished (e.g. header count 87,535 with slots up to 87,856).
    Three kills, because each one lands at a random point of reput's work (test_sigkill_while_rebuilding_the_index
    pins the same fault down reliably).
    """
    rnd = random.Random(5)
    # larger segments than the other crash tests: seconds of writing into 16 KiB segments make thousands of
    # files, two file descriptors each (the store's and mmap's own), and run into the open-files limit
    config = {**CRASH_CONFIG, "max_hash_slot_num": 5_000, "max_index_num": 20_000, "flush_disk_type": "ASYNC",
              "flush_commit_log_thorough_interval": 50, "mapped_file_size_commit_log": 256 * 1024,
              "mapped_file_size_consume_queue": 2000 * 20}
    for attempt in range(3):
        root = tmp_path / f"run{attempt}"
        w = Writer(root, 77 + attempt, 0, config)
        w.kill_after(1, rnd.uniform(1.0, 2.5))
        msgs, _ = read_commit_log_files(root)
        placement = cw.placement(77 + attempt, 0, len(msgs) + 100)
        st = MessageStore(StoreConfig(root_dir=str(root), **config))
        st.open()
        try:
            wait_dispatched(st)
            n = check_prefix(root, placement, w.acks)
            assert n > 100
            check_store_reads(st, placement, n)
        finally:
            st.shutdown()
        shutil.rmtree(root)


_OPENER = """
import os, sys, json, time
from raftmq.store import MessageStore, StoreConfig
st = MessageStore(StoreConfig(root_dir=sys.argv[1], **json.loads(sys.argv[2])))
st.open()
os.write(1, b"ready\\n")
time.sleep(600)
"""


def test_sigkill_while_rebuilding_the_index(tmp_path: Path) -> None:
    """Kill a process while its open() re-dispatches a large backlog, then recover: every key is still found.

    The backlog is a commit log copied without consume queues or index, so the killed process was certainly in
    the middle of building index files (the point where a lagging index header used to be left on disk; see
    test_sigkill_after_seconds_of_writing_keeps_every_key).
    """
    config = {**CRASH_CONFIG, "max_hash_slot_num": 5_000, "max_index_num": 20_000,
              "mapped_file_size_commit_log": 256 * 1024, "mapped_file_size_consume_queue": 2000 * 20}
    src = tmp_path / "src"
    cfg = StoreConfig(root_dir=str(src), **config)
    st = MessageStore(cfg)
    st.open()
    n = 12_000
    try:
        for s in range(0, n, 100):
            st.put_messages([cw.make_message(x, "CrashA", x % 3) for x in range(s, s + 100)])
        wait_dispatched(st)
    finally:
        st.shutdown()
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def opener(root: Path) -> subprocess.Popen:
        shutil.copytree(src / "commitlog", root / "commitlog")
        return subprocess.Popen([sys.executable, "-c", _OPENER, str(root), json.dumps(config)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)

    # how long a whole open (start-up + rebuild) takes here, so the kills land inside the rebuild
    p = opener(tmp_path / "calibrate")
    t0 = time.monotonic()
    try:
        assert p.stdout.readline() == b"ready\n", p.stderr.read().decode()[-2000:]
        t_ready = time.monotonic() - t0
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        p.stderr.close()
    rnd = random.Random(11)
    for attempt in range(5):
        root = tmp_path / f"rebuild{attempt}"
        p = opener(root)
        try:
            time.sleep(t_ready * rnd.uniform(0.55, 0.95))
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
            p.stdout.close()
            p.stderr.close()
        st = MessageStore(StoreConfig(root_dir=str(root), **config))
        st.open()
        try:
            wait_dispatched(st)
            missing = [s for s in range(n) if [m.body for m in st.query_messages(
                "CrashA", cw.key_for(s), 4, 0, 1 << 62)] != [cw.body_for(s)]]
            missing += [s for s in range(n) if [m.body for m in st.query_messages(
                "CrashA", cw.uniq_key_for(s), 4, 0, 1 << 62)] != [cw.body_for(s)]]
            assert missing == [], f"attempt {attempt}: {len(missing)} keys lost, e.g. {missing[:5]}"
            for qid in range(3):
                assert st.max_offset_in_queue("CrashA", qid) == len(range(qid, n, 3))
        finally:
            st.shutdown()

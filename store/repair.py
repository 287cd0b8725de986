"""Offline check and repair of a single node's store directory (``raftmq store check`` / ``store repair``).

Check reads every commit-log segment (``store.integrity.scan_commit_log``) and compares every consume-queue unit
with the record it points at; nothing is written.

Repair (the store must not be open) quarantines each damaged commit-log range:

1. the original bytes are copied to ``{root}/quarantine/{UTC time}/{start}-{end}.bin`` and described in that
   folder's ``manifest.json`` (file, range, reason, sha256), fsynced before anything in the log changes;
2. the range is overwritten *in place* with filler records of exactly its length, so every intact record
   after it keeps its original offset and no offset or msgId is ever handed out again.

Why filler records and not zeros or a skip marker: every reader of the log - this store's recovery and reput,
the pipeline, and RocketMQ's own ``checkMessageAndReturnSize`` - walks TOTALSIZE from one record to the next,
and zeros or an unknown magic would end its walk (RocketMQ's recovery would even cut the log there). A filler
is a valid 4.9 message record (magic, calMsgLength, body CRC, its own PHYSICALOFFSET) in the system topic
``RMQ_SYS_QUARANTINE`` with the sysflag of a *rolled-back transaction*: RocketMQ's and our reput put neither
into a consume queue nor into the index, and it advances no queue offset. Its body says where the original
bytes went; ranges longer than ``FILLER_MAX`` are split into several fillers.

3. Derived files are rebuilt: ``consumequeue/`` and ``index/`` move into the quarantine folder, the store is
   opened (reput rebuilds them from the log), and each queue is padded with blank units up to the offset it
   had reached before, so the queue offsets of lost messages are never reused either.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import mmap
import os
import shutil
import struct
from collections import Counter
from dataclasses import dataclass, field

from raftmq.store.checkpoint import StoreCheckpoint, read_flushed_offset
from raftmq.store.config import CQ_STORE_UNIT_SIZE, StoreConfig
from raftmq.store.consume_queue import BLANK_UNIT_SIZE
from raftmq.store.dispatch import TRANSACTION_ROLLBACK_TYPE
from raftmq.store.index_file import index_geometry_of
from raftmq.store.integrity import (
    QUARANTINE_TOPIC,
    CommitLogScan,
    CorruptRecord,
    scan_commit_log,
    segment_names,
)
from raftmq.store.json_file import fsync_dir
from raftmq.store.message import RecordStatus, check_frame, encode_record

QUARANTINE_DIR = "quarantine"
FILLER_MAX = 1 << 20
_UNIT = struct.Struct(">qiq")
_SIZE_MAGIC = struct.Struct(">ii")


@dataclass(slots=True)
class Problem:
    """One line of ``store check``: ``kind`` is commitlog, torn-tail, consumequeue or layout."""

    kind: str
    path: str
    detail: str
    start: int | None = None
    end: int | None = None

    def line(self) -> str:
        where = f" [{self.start}, {self.end})" if self.start is not None else ""
        return f"{self.kind}: {self.path}{where}: {self.detail}"

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "path": self.path, "start": self.start, "end": self.end, "detail": self.detail}


@dataclass(slots=True)
class CheckReport:
    root: str
    segment_size: int
    scan: CommitLogScan
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def damaged_ranges(self) -> list[CorruptRecord]:
        return [r for r in self.scan.damaged if r.end > r.start and "missing" not in r.reason
                and "bytes, the segment size" not in r.reason]


def infer_segment_size(commit_log_dir: str) -> int:
    """The commit-log segment size of an existing store: the most common file size among its segments."""
    sizes = Counter(os.path.getsize(os.path.join(commit_log_dir, n)) for n in segment_names(commit_log_dir))
    sizes.pop(0, None)
    if not sizes:
        return StoreConfig.mapped_file_size_commit_log
    return sizes.most_common(1)[0][0]


def _infer_cq_size(root: str) -> int:
    """Consume-queue file size of an existing store (most common size of its queue files)."""
    sizes: Counter[int] = Counter()
    cq_root = os.path.join(root, "consumequeue")
    for dirpath, _dirs, files in os.walk(cq_root):
        for n in files:
            if n.isdigit():
                sizes[os.path.getsize(os.path.join(dirpath, n))] += 1
    sizes.pop(0, None)
    return sizes.most_common(1)[0][0] if sizes else StoreConfig.mapped_file_size_consume_queue


def check_store(root: str, segment_size: int | None = None) -> CheckReport:
    """Every damaged commit-log range and every consume-queue unit that disagrees with the log (read-only)."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root} is not a directory")
    cl_dir = os.path.join(root, "commitlog")
    if not os.path.isdir(cl_dir):
        raise FileNotFoundError(f"{root} has no commitlog directory: not a store data directory")
    size = segment_size or infer_segment_size(cl_dir)
    scan = scan_commit_log(cl_dir, size)
    rep = CheckReport(root, size, scan)
    flushed = _flushed_offset(root)
    for r in scan.damaged:
        rep.problems.append(Problem("commitlog", r.path, r.reason, r.start, r.end))
    if scan.tail is not None:
        t = scan.tail
        if t.start >= flushed:
            rep.notes.append(f"torn tail at {t.start} ({t.reason}) beyond the flushed offset {flushed}: never "
                             "acknowledged as durable; recovery cuts it")
        else:
            rep.problems.append(Problem("commitlog", t.path, t.reason + f" (below the flushed offset {flushed})",
                                        t.start, t.end))
    elif scan.data_end < flushed:
        rep.problems.append(Problem("commitlog", cl_dir, f"the log ends at {scan.data_end} but the checkpoint says "
                                    f"{flushed} bytes were flushed", scan.data_end, flushed))
    rep.problems.extend(_check_consume_queues(root, scan))
    return rep


def _flushed_offset(root: str) -> int:
    return read_flushed_offset(os.path.join(root, "checkpoint"))


def _check_consume_queues(root: str, scan: CommitLogScan) -> list[Problem]:
    """Each unit must point at a valid record of its size in its topic and queue with its queue offset."""
    out: list[Problem] = []
    cq_root = os.path.join(root, "consumequeue")
    if not os.path.isdir(cq_root):
        return out
    segs = {s.base: s for s in scan.segments}
    maps: dict[int, mmap.mmap] = {}
    damaged = scan.damaged + ([scan.tail] if scan.tail else [])
    try:
        for topic in sorted(os.listdir(cq_root)):
            tdir = os.path.join(cq_root, topic)
            if not os.path.isdir(tdir):
                continue
            for qname in sorted(os.listdir(tdir)):
                qdir = os.path.join(tdir, qname)
                if not qname.isdigit() or not os.path.isdir(qdir):
                    continue
                bad = 0
                first: str | None = None
                for fname in sorted(n for n in os.listdir(qdir) if n.isdigit()):
                    fpath = os.path.join(qdir, fname)
                    with open(fpath, "rb") as fh:
                        data = fh.read()
                    for pos in range(0, len(data) - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE):
                        phy, size, _tags = _UNIT.unpack_from(data, pos)
                        if phy == 0 and size == 0:
                            break
                        if size == BLANK_UNIT_SIZE:
                            continue
                        qo = (int(fname) + pos) // CQ_STORE_UNIT_SIZE
                        why = _unit_problem(phy, size, topic, int(qname), qo, scan, segs, maps, damaged)
                        if why:
                            bad += 1
                            if first is None:
                                first = f"queue offset {qo} (unit at byte {pos} of {fname}): {why}"
                if bad:
                    out.append(Problem("consumequeue", qdir, f"{bad} unit(s) disagree with the commit log; first: "
                                       f"{first}"))
    finally:
        for m in maps.values():
            m.close()
    return out


def _unit_problem(phy: int, size: int, topic: str, qid: int, qo: int, scan: CommitLogScan,
                  segs: dict, maps: dict[int, mmap.mmap], damaged: list[CorruptRecord]) -> str:
    for d in damaged:
        if d.start <= phy < d.end:
            return f"points at damaged commit-log range [{d.start}, {d.end})"
    base = phy - phy % scan.file_size
    if base not in segs:
        if phy < (scan.segments[0].base if scan.segments else 0):
            return ""  # expired by retention: the reader skips it
        return f"points at {phy}, in no commit-log segment"
    buf = maps.get(base)
    if buf is None:
        with open(segs[base].path, "rb") as fh:
            buf = maps[base] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    pos = phy - base
    try:
        status, total, reason, parts = check_frame(buf, pos, len(buf), False)
    except (struct.error, IndexError, ValueError) as e:
        return f"points at {phy}, no record there ({e})"
    if status != RecordStatus.OK or parts is None:
        return f"points at {phy}, no record there ({reason})"
    f, _bw, _bp, _bl, tpos, tlen, _pp, _pl = parts
    if total != size:
        return f"size {size} but the record at {phy} has {total} bytes"
    rtopic = bytes(buf[tpos + 1 : tpos + 1 + tlen]).decode("utf-8", "replace")
    if (rtopic, f[3], f[5], f[6]) != (topic, qid, qo, phy):
        return f"the record at {phy} is {rtopic}-{f[3]} queue offset {f[5]}"
    return ""


# ---------------------------------------------------------------------------------------------- repair
def filler_records(start: int, end: int, note: str, store_timestamp: int,
                   store_host: tuple[str, int]) -> list[bytes]:
    """Valid rolled-back records in ``QUARANTINE_TOPIC`` covering exactly ``[start, end)`` (see module doc)."""
    out: list[bytes] = []
    pos = start
    empty = len(_filler(pos, b"", note, store_timestamp, store_host))
    while pos < end:
        remaining = end - pos
        n = min(remaining, FILLER_MAX)
        if remaining - n and remaining - n < empty:  # leave room for a last filler of at least the minimum
            n = remaining - empty
        if n < empty:
            raise ValueError(f"damaged range [{start}, {end}) is shorter than a filler record ({empty} bytes)")
        rec = _filler(pos, b"", note, store_timestamp, store_host)
        body = (f"raftmq quarantine: {note}".encode()[: n - len(rec)]).ljust(n - len(rec), b" ")
        rec = _filler(pos, body, note, store_timestamp, store_host)
        assert len(rec) == n
        out.append(rec)
        pos += n
    return out


def min_filler_length() -> int:
    """Bytes of the smallest filler record (empty body)."""
    return len(_filler(0, b"", "", 0, ("127.0.0.1", 0)))


def _filler(pos: int, body: bytes, note: str, ts: int, host: tuple[str, int]) -> bytes:
    return encode_record(topic=QUARANTINE_TOPIC, body=body, properties="", physical_offset=pos,
                         sys_flag=TRANSACTION_ROLLBACK_TYPE, born_timestamp=ts, store_timestamp=ts,
                         store_host=host, born_host=host)


@dataclass(slots=True)
class RepairAction:
    record: CorruptRecord
    quarantine_file: str

    def line(self) -> str:
        r = self.record
        return (f"quarantine {r.path} [{r.start}, {r.end}) ({r.length} bytes: {r.reason}) -> {self.quarantine_file};"
                " replace with filler records of the same length")


class RepairRefused(Exception):
    """Repair cannot proceed safely (e.g. missing segments); the message says why and what to do."""


def plan_repair(report: CheckReport, quarantine: str) -> list[RepairAction]:
    layout = [r for r in report.scan.damaged if r not in report.damaged_ranges]
    if layout:
        raise RepairRefused("; ".join(r.describe() for r in layout) + ": whole segments are missing or mis-sized; "
                            "restore them from a backup or a replica (store repair only replaces damaged records "
                            "inside segments)")
    flushed = _flushed_offset(report.root)
    ranges = list(report.damaged_ranges)
    scan = report.scan
    tail_start = scan.tail.start if scan.tail is not None else scan.data_end
    if tail_start < flushed:
        # the end of the log below the flushed offset is damaged or zeros: fill it up to the flushed offset at
        # least (those offsets were handed out), and to a whole filler record at least
        fs = report.segment_size
        path = scan.tail.path if scan.tail is not None else os.path.join(report.root, "commitlog",
                                                                          f"{tail_start - tail_start % fs:020d}")
        end = max(flushed, scan.tail.end if scan.tail is not None else 0, tail_start + min_filler_length())
        seg_end = tail_start - tail_start % fs + fs
        if end > seg_end - 8:
            raise RepairRefused(f"the damaged end of the log [{tail_start}, {end}) reaches past its segment "
                                f"{path}; restore the segment from a backup or a replica")
        reason = scan.tail.reason if scan.tail is not None else "zeros where flushed records must be"
        ranges.append(CorruptRecord(path, tail_start, end, f"{reason} (end of the log, below the flushed "
                                    f"offset {flushed})"))
    return [RepairAction(r, os.path.join(quarantine, f"{r.start:020d}-{r.end:020d}.bin")) for r in ranges]


def rebuild_config(root: str, segment_size: int, explicit: dict[str, object] | None = None) -> StoreConfig:
    """The store settings the derived files are rebuilt with: ``explicit`` ones (the node's config file,
    environment and ``--set``) win; segment sizes and the index geometry not given there are read from the
    files, never taken from defaults (an index rebuilt with another geometry is one RocketMQ, and the node,
    read wrongly or refuse). Raises ``RepairRefused`` when the index geometry can be neither read nor is given."""
    given = dict(explicit or {})
    values: dict[str, object] = {"mapped_file_size_commit_log": segment_size,
                                 "mapped_file_size_consume_queue": _infer_cq_size(root)}
    index_dir = os.path.join(root, "index")
    wants_index = given.get("message_index_enable", True)
    if wants_index and not {"max_hash_slot_num", "max_index_num"} <= given.keys():
        geometry = index_geometry_of(index_dir)
        if geometry is None:
            raise RepairRefused(
                f"cannot read the index geometry from {index_dir} (no index file with entries there, or files that "
                "disagree): give the node's configuration with --config, or --set store.max_hash_slot_num=N "
                "--set store.max_index_num=M with the values the store was written with")
        values["max_hash_slot_num"], values["max_index_num"] = geometry
    values.update(given)
    values["root_dir"] = root
    return StoreConfig(**values)


def repair_store(root: str, *, dry_run: bool = False, segment_size: int | None = None,
                 explicit: dict[str, object] | None = None) -> tuple[list[RepairAction], CheckReport, StoreConfig | None]:
    """Quarantine every damaged commit-log range, then rebuild derived files (see the module docstring).

    Returns the actions, the check report and the settings the derived files are (or would be) rebuilt with
    (None when there is nothing to do)."""
    report = check_store(root, segment_size)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    qdir = os.path.join(root, QUARANTINE_DIR, stamp)
    actions = plan_repair(report, qdir)
    derived = any(p.kind == "consumequeue" for p in report.problems)
    if not actions and not derived:
        return actions, report, None
    cfg = rebuild_config(root, report.segment_size, explicit)
    if dry_run:
        return actions, report, cfg
    from raftmq.store.file_lock import StoreLock

    fillers = [_filler_bytes(a, report.segment_size, stamp, cfg.store_host_addr) for a in actions]
    lock = StoreLock(cfg.lock_path)
    lock.acquire()  # refuses while a node has the store open
    try:
        os.makedirs(qdir, exist_ok=True)
        manifest = []
        for a in actions:
            r = a.record
            with open(r.path, "rb") as fh:
                fh.seek(r.start % report.segment_size)
                original = fh.read(r.length)
            with open(a.quarantine_file, "wb") as out:
                out.write(original)
                out.flush()
                os.fsync(out.fileno())
            manifest.append({**r.as_dict(), "quarantine_file": os.path.basename(a.quarantine_file),
                             "sha256": hashlib.sha256(original).hexdigest()})
        old_max = _queue_max_offsets(root)
        with open(os.path.join(qdir, "manifest.json"), "w") as f:
            json.dump({"store": os.path.abspath(root), "created": stamp, "segment_size": report.segment_size,
                       "ranges": manifest, "queue_max_offsets": old_max}, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(qdir)
        for a, data in zip(actions, fillers, strict=True):
            _write_at(a.record.path, a.record.start % report.segment_size, data)
        for name in ("consumequeue", "index"):
            src = os.path.join(root, name)
            if os.path.isdir(src):
                shutil.move(src, os.path.join(qdir, f"{name}.before-repair"))
        ckpt = StoreCheckpoint(cfg.checkpoint_path)
        ckpt.logics_msg_timestamp = ckpt.index_msg_timestamp = 0
        ckpt.shutdown()
        fsync_dir(root)
    finally:
        lock.release()
    _rebuild_derived(cfg, old_max)
    return actions, report, cfg


def _filler_bytes(a: RepairAction, segment_size: int, stamp: str, host: tuple[str, int]) -> bytes:
    """The filler records for one action (built before anything is written: a range they cannot cover exactly
    refuses the whole repair)."""
    r = a.record
    ts = _timestamp_before(r.path, r.start % segment_size)
    note = f"{r.length} damaged bytes [{r.start}, {r.end}) moved to quarantine/{stamp}/{os.path.basename(a.quarantine_file)}"
    try:
        data = b"".join(filler_records(r.start, r.end, note, ts, host))
    except ValueError as e:
        raise RepairRefused(str(e)) from None
    assert len(data) == r.length
    return data


def _write_at(path: str, pos: int, data: bytes) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, data, pos)
        os.fsync(fd)
    finally:
        os.close(fd)


def _timestamp_before(path: str, pos: int) -> int:
    """STORETIMESTAMP of the last valid record before ``pos`` in the segment (keeps store times monotonic)."""
    with open(path, "rb") as fh:
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        p, ts = 0, 0
        while p < pos:
            status, size, _r, parts = check_frame(buf, p, len(buf), False)
            if status != RecordStatus.OK or parts is None:
                break
            ts = parts[0][11]
            p += size
        return ts
    finally:
        buf.close()


def _queue_max_offsets(root: str) -> dict[str, int]:
    """``topic/queueId`` -> next queue offset from the consume-queue files (last non-zero unit + 1)."""
    out: dict[str, int] = {}
    cq_root = os.path.join(root, "consumequeue")
    if not os.path.isdir(cq_root):
        return out
    for topic in os.listdir(cq_root):
        tdir = os.path.join(cq_root, topic)
        for qname in (os.listdir(tdir) if os.path.isdir(tdir) else []):
            qdir = os.path.join(tdir, qname)
            files = sorted(n for n in os.listdir(qdir) if n.isdigit()) if os.path.isdir(qdir) else []
            best = 0
            for fname in files:
                with open(os.path.join(qdir, fname), "rb") as fh:
                    data = fh.read()
                for pos in range(0, len(data) - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE):
                    if data[pos : pos + CQ_STORE_UNIT_SIZE] != bytes(CQ_STORE_UNIT_SIZE):
                        best = max(best, (int(fname) + pos) // CQ_STORE_UNIT_SIZE + 1)
            if best and qname.isdigit():
                out[f"{topic}/{qname}"] = best
    return out


def _rebuild_derived(cfg: StoreConfig, old_max: dict[str, int]) -> None:
    """Open the store (reput rebuilds consume queues and index), then keep every queue at its old high mark."""
    from raftmq.store.message_store import MessageStore

    st = MessageStore(cfg)
    st.open()
    try:
        assert st.reput is not None
        st.reput.wait_dispatched(timeout=3600)
        for key, upto in old_max.items():
            topic, qid = key.rsplit("/", 1)
            st.reserve_queue_offsets(topic, int(qid), upto)
    finally:
        st.shutdown()

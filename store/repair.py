"""Offline check and repair of a single node's store directory (``raftmq store check`` / ``store repair``).

Check reads every commit-log segment (``store.integrity.scan_commit_log``) and compares every consume-queue unit
with the record it points at; nothing is written.

Repair (the store must not be open) quarantines each damaged commit-log range:

1. the original bytes are copied to ``{root}/quarantine/{UTC time}/{start}-{end}.bin`` and described in that
   folder's ``manifest.json`` (file, range, reason, sha256), fsynced before anything in the log changes;
2. the range is overwritten *in place* with valid records of exactly its length (``store.quarantine``): a
   tombstone for each message of a consume queue the range held (same topic, queue id and queue offset, empty
   body, property ``RAFTMQ_QUARANTINED``), then rolled-back filler records. Every intact record after it keeps its
   original offset, so no offset or msgId is ever handed out again, and every queue offset keeps a record, so
   whoever rebuilds the consume queues from the log (this store, RocketMQ) gets them right.

Which messages the range held: the units of the old consume queues that point into it, and the queue offsets
the surviving records of each queue skip (or leave out at its end, up to the offset the queue had reached),
placed in the damaged range between their neighbours.

3. Derived files are rebuilt: ``consumequeue/`` and ``index/`` move into the quarantine folder, the store is
   opened (reput rebuilds them from the log, tombstones included), each queue is padded up to the offset it had
   reached before, and every padding or blank unit is made to point at a quarantine record (RocketMQ's reader
   skips the intact messages that follow a blank unit ``(0, 0x7FFFFFFF, 0)`` in the same pull).
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

from raftmq.store import dispatch_marker
from raftmq.store.checkpoint import StoreCheckpoint, read_flushed_offset
from raftmq.store.config import CQ_STORE_UNIT_SIZE, StoreConfig
from raftmq.store.consume_queue import BLANK_UNIT_SIZE
from raftmq.store.dispatch import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_TYPE_MASK
from raftmq.store.index_file import index_geometry_of
from raftmq.store.integrity import (
    CommitLogScan,
    CorruptRecord,
    is_quarantine_record,
    scan_commit_log,
    segment_names,
)
from raftmq.store.json_file import fsync_dir
from raftmq.store.message import RecordStatus, check_frame, decode_record
from raftmq.store.quarantine import LostMessage, min_filler_length, quarantine_records

QUARANTINE_DIR = "quarantine"
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
        m = decode_record(buf, pos, check_crc=False, read_body=False).message
        if m is not None and is_quarantine_record(m.topic, m.properties):
            return ""  # a lost message's offset, kept by pointing at a quarantine record (store repair)
        return f"the record at {phy} is {rtopic}-{f[3]} queue offset {f[5]}"
    return ""


# ---------------------------------------------------------------------------------------------- repair
@dataclass(slots=True)
class RepairAction:
    record: CorruptRecord
    quarantine_file: str

    def line(self) -> str:
        r = self.record
        return (f"quarantine {r.path} [{r.start}, {r.end}) ({r.length} bytes: {r.reason}) -> {self.quarantine_file};"
                " replace with records of the same length (a tombstone per lost message, then filler)")


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

    old = _read_queues(root)
    log_records = _log_records(report)
    lost = _place_lost(actions, log_records, old)
    built = [_filler_bytes(a, report.segment_size, stamp, cfg.store_host_addr, lost.get(i, []))
             for i, a in enumerate(actions)]
    fillers = [data for data, _refs in built]
    refs = sorted(log_records.quarantine + [ref for _data, written in built for ref in written])
    old_max = old.max_offsets
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
                             "sha256": hashlib.sha256(original).hexdigest(),
                             "lost_messages": [f"{t}/{q}@{o}" for t, q, o in lost.get(len(manifest), [])]})
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
        dispatch_marker.take(root)  # it described the files just moved away
        ckpt = StoreCheckpoint(cfg.checkpoint_path)
        ckpt.logics_msg_timestamp = ckpt.index_msg_timestamp = 0
        ckpt.shutdown()
        fsync_dir(root)
    finally:
        lock.release()
    _rebuild_derived(cfg, old_max, refs)
    return actions, report, cfg


def _filler_bytes(a: RepairAction, segment_size: int, stamp: str, host: tuple[str, int],
                  lost: list[LostMessage]) -> tuple[bytes, list[tuple[int, int]]]:
    """The tombstones and fillers for one action, and the ``(offset, size)`` of each (built before anything is
    written: a range they cannot cover exactly refuses the whole repair)."""
    r = a.record
    ts = _timestamp_before(r.path, r.start % segment_size)
    note = f"{r.length} damaged bytes [{r.start}, {r.end}) moved to quarantine/{stamp}/{os.path.basename(a.quarantine_file)}"
    try:
        data, written, left = quarantine_records(r.start, r.end, lost, note, ts, host)
    except ValueError as e:
        raise RepairRefused(str(e)) from None
    if left:  # kept by padding units pointing at a quarantine record instead
        shown = ", ".join(f"{t}/{q}@{o}" for t, q, o in left[:5])
        print(f"store repair: [{r.start}, {r.end}) is too short for a tombstone of every lost message; "
              f"{len(left)} keep their queue offset through a unit pointing at a quarantine record ({shown})")
    return data, written


@dataclass(slots=True)
class _OldQueues:
    """What the consume queues said before the repair: next offset per ``topic/queueId``, the non-blank units and
    the queue offsets that blank units reserved."""

    max_offsets: dict[str, int] = field(default_factory=dict)
    units: dict[tuple[str, int], dict[int, int]] = field(default_factory=dict)  # queue offset -> commit-log offset
    reserved: set[LostMessage] = field(default_factory=set)


def _read_queues(root: str) -> _OldQueues:
    out = _OldQueues()
    cq_root = os.path.join(root, "consumequeue")
    if not os.path.isdir(cq_root):
        return out
    for topic in os.listdir(cq_root):
        tdir = os.path.join(cq_root, topic)
        for qname in (os.listdir(tdir) if os.path.isdir(tdir) else []):
            qdir = os.path.join(tdir, qname)
            if not qname.isdigit() or not os.path.isdir(qdir):
                continue
            qid, best, units = int(qname), 0, {}
            for fname in sorted(n for n in os.listdir(qdir) if n.isdigit()):
                with open(os.path.join(qdir, fname), "rb") as fh:
                    data = fh.read()
                for pos in range(0, len(data) - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE):
                    phy, size, _tags = _UNIT.unpack_from(data, pos)
                    if phy == 0 and size == 0:
                        continue
                    qo = (int(fname) + pos) // CQ_STORE_UNIT_SIZE
                    best = max(best, qo + 1)
                    if size == BLANK_UNIT_SIZE:
                        out.reserved.add((topic, qid, qo))
                    elif size > 0 and phy >= 0:
                        units[qo] = phy
            if best:
                out.max_offsets[f"{topic}/{qname}"] = best
            out.units[(topic, qid)] = units
    return out


@dataclass(slots=True)
class _LogRecords:
    """The records that survive in the log: ``(queue offset, commit-log offset)`` per queue, and where the
    quarantine records of earlier repairs lie."""

    queues: dict[tuple[str, int], list[tuple[int, int]]] = field(default_factory=dict)
    quarantine: list[tuple[int, int]] = field(default_factory=list)  # (offset, size)


def _log_records(report: CheckReport) -> _LogRecords:
    """Walk every segment record by record, jumping over the damaged ranges."""
    out = _LogRecords()
    damaged = sorted(report.scan.problems, key=lambda r: r.start)
    for seg in report.scan.segments:
        skips = {r.start - seg.base: r.end - seg.base for r in damaged if seg.base <= r.start < seg.base + seg.file_size}
        with open(seg.path, "rb") as fh:
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            pos = 0
            while pos < seg.data_end:
                if pos in skips:
                    pos = skips[pos]
                    continue
                status, size, _reason, parts = check_frame(buf, pos, len(buf), False)
                if status != RecordStatus.OK or parts is None:
                    break
                f = parts[0]
                m = decode_record(buf, pos, check_crc=False, read_body=False).message
                if m is not None and is_quarantine_record(m.topic, m.properties):
                    out.quarantine.append((seg.base + pos, size))
                if m is not None and f[7] & TRANSACTION_TYPE_MASK in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
                    out.queues.setdefault((m.topic, f[3]), []).append((f[5], seg.base + pos))
                pos += size
        finally:
            buf.close()
    return out


def _place_lost(actions: list[RepairAction], records: _LogRecords, old: _OldQueues) -> dict[int, list[LostMessage]]:
    """Which lost messages (queue offsets no surviving record holds) each damaged range held: those an old unit
    points into it, then the offsets the surviving records of a queue skip (or leave out at its end, up to its old
    next offset), put in the first damaged range between their neighbours."""
    ranges = sorted((a.record.start, a.record.end, i) for i, a in enumerate(actions))
    out: dict[int, set[LostMessage]] = {}

    def range_in(lo: int, hi: int | None) -> int | None:
        return next((i for s, e, i in ranges if s >= lo and (hi is None or e <= hi)), None)

    for key in set(records.queues) | set(old.units):
        topic, qid = key
        have = dict(records.queues.get(key, []))
        placed: set[int] = set()
        for qo, phy in old.units.get(key, {}).items():
            where = next((i for s, e, i in ranges if s <= phy < e), None)
            if qo not in have and where is not None:
                out.setdefault(where, set()).add((topic, qid, qo))
                placed.add(qo)
        survivors = sorted(have.items())
        end_mark = old.max_offsets.get(f"{topic}/{qid}", 0)
        bounds = [*survivors, (max(end_mark, survivors[-1][0] + 1 if survivors else 0), None)]
        for (qa, pa), (qb, pb) in zip(bounds, bounds[1:], strict=False):
            missing = [q for q in range(qa + 1, qb) if q not in placed and (topic, qid, q) not in old.reserved]
            where = range_in(pa, pb) if missing else None
            if where is not None:
                out.setdefault(where, set()).update((topic, qid, q) for q in missing)
    return {i: sorted(v) for i, v in out.items()}


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


def _rebuild_derived(cfg: StoreConfig, old_max: dict[str, int], refs: list[tuple[int, int]]) -> None:
    """Open the store (reput rebuilds consume queues and index), keep every queue at its old high mark, and make
    every blank unit point at a quarantine record (the nearest one at or after the queue's previous unit)."""
    import bisect

    from raftmq.store.message_store import MessageStore

    st = MessageStore(cfg)
    st.open()
    try:
        assert st.reput is not None
        st.reput.wait_dispatched(timeout=3600)
        for key, upto in old_max.items():
            topic, qid = key.rsplit("/", 1)
            st.reserve_queue_offsets(topic, int(qid), upto)
        if refs:
            for cq in list(st.consume_queues.queues()):
                last = 0
                for qo in range(cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()):
                    unit = cq.unit_at(qo)
                    if unit is None:
                        continue
                    if unit[1] != BLANK_UNIT_SIZE:
                        last = unit[0]
                        continue
                    ref = refs[min(bisect.bisect_left(refs, (last, 0)), len(refs) - 1)]
                    cq.rewrite_unit(qo, (ref[0], ref[1], 0))
            st.consume_queues.flush_all()
    finally:
        st.shutdown()

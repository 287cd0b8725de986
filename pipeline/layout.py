"""What a store directory holds, read without opening it as a store (no lock, works on a live broker's files).

A store directory has RocketMQ's layout: ``commitlog/`` with equal-sized segments named by their 20-digit base
offset, ``consumequeue/{topic}/{queueId}/`` and ``index/``. The geometry a rebuild needs (consume-queue file
size, index slots and entries) is not written anywhere in the directory, so it is taken from the options, or
inferred from the files that are there (see ``infer_index_geometry``).
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass

from raftmq.pipeline.errors import EmptyStoreError, NotAStoreError, OutputError

_NAME20 = re.compile(r"\d{20}")
_INDEX_NAME = re.compile(r"\d{17}")
INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
CQ_UNIT_SIZE = 20
_INDEX_COUNT = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class Segment:
    """One commit-log segment file: ``base`` is its first physical offset, ``size`` the configured file size."""

    path: str
    base: int
    size: int


@dataclass(frozen=True, slots=True)
class StoreLayout:
    root: str
    segments: tuple[Segment, ...]
    segment_size: int

    @property
    def commit_log_dir(self) -> str:
        return os.path.join(self.root, "commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.root, "consumequeue")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.root, "index")

    @property
    def min_offset(self) -> int:
        return self.segments[0].base

    def index_file_names(self) -> list[str]:
        """Names of the store's existing index files, oldest first (RocketMQ loads them in name order)."""
        if not os.path.isdir(self.index_dir):
            return []
        return sorted(n for n in os.listdir(self.index_dir) if _INDEX_NAME.fullmatch(n))

    def consume_queues(self) -> list[tuple[str, int]]:
        """Every ``(topic, queueId)`` that has a consume-queue directory (non-integer names are skipped)."""
        out: list[tuple[str, int]] = []
        if not os.path.isdir(self.consume_queue_dir):
            return out
        for topic in sorted(os.listdir(self.consume_queue_dir)):
            tdir = os.path.join(self.consume_queue_dir, topic)
            if not os.path.isdir(tdir):
                continue
            for q in os.listdir(tdir):
                if q.isdigit() and os.path.isdir(os.path.join(tdir, q)):
                    out.append((topic, int(q)))
        return sorted(out)


def open_layout(root: str, *, allow_empty: bool = False) -> StoreLayout:
    """Describe the store at ``root`` or raise a one-line error that says what is wrong with the path."""
    root = os.path.abspath(root)
    if not os.path.exists(root):
        raise NotAStoreError(f"not a store directory: {root} does not exist")
    if not os.path.isdir(root):
        raise NotAStoreError(f"not a store directory: {root} is a file, expected a store root with commitlog/")
    cl_dir = os.path.join(root, "commitlog")
    if not os.path.isdir(cl_dir):
        raise NotAStoreError(
            f"not a store directory: {root} has no commitlog/ folder (pass the store root, e.g. data/n0)"
        )
    names = sorted(n for n in os.listdir(cl_dir) if _NAME20.fullmatch(n))
    segments: list[Segment] = []
    sizes = {os.path.getsize(os.path.join(cl_dir, n)) for n in names}
    if len(sizes) > 1:
        raise NotAStoreError(
            f"not a readable store: commit-log segments in {cl_dir} have different sizes {sorted(sizes)}"
        )
    size = sizes.pop() if sizes else 0
    for n in names:
        base = int(n)
        if segments and base != segments[-1].base + size:
            raise NotAStoreError(
                f"not a readable store: commit-log segment {n} does not follow {segments[-1].base:020d} "
                f"(segment size {size}); a segment is missing"
            )
        if size and base % size:
            raise NotAStoreError(f"not a readable store: segment {n} is not aligned to the segment size {size}")
        segments.append(Segment(os.path.join(cl_dir, n), base, size))
    if not segments or size == 0:
        if allow_empty:
            return StoreLayout(root, tuple(segments), size)
        raise EmptyStoreError(f"empty store: {cl_dir} has no commit-log segment, nothing to read")
    return StoreLayout(root, tuple(segments), size)


def first_word_is_zero(segment: Segment) -> bool:
    """True when the segment starts with zeros, i.e. holds no record (a pre-allocated or empty file)."""
    with open(segment.path, "rb") as f:
        return f.read(8) == b"\0" * 8


def prepare_output(path: str, *, overwrite: bool = False, must_be_empty: bool = True) -> str:
    """Create ``path`` (and parents) and prove it is writable; refuse to mix output with existing files."""
    path = os.path.abspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(f"output {path} exists and is a file; give a directory")
    if must_be_empty and os.path.isdir(path) and os.listdir(path) and not overwrite:
        raise OutputError(f"output {path} is not empty; choose an empty directory or pass --overwrite")
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".raftmq-write-probe-{os.getpid()}")
        with open(probe, "wb") as f:
            f.write(b"ok")
        os.remove(probe)
    except OSError as e:
        raise OutputError(f"output {path} is not writable: {e.strerror or e}") from None
    return path


@dataclass(frozen=True, slots=True)
class IndexGeometry:
    hash_slot_num: int
    index_num: int

    @property
    def file_size(self) -> int:
        return INDEX_HEADER_SIZE + INDEX_SLOT_SIZE * self.hash_slot_num + INDEX_ENTRY_SIZE * self.index_num


def infer_index_geometry(layout: StoreLayout) -> IndexGeometry | None:
    """Recover ``(maxHashSlotNum, maxIndexNum)`` from the store's index files, or None if it cannot be known.

    The file size is ``40 + 4*slots + 20*num``. A full (non-last) file stores ``indexCount == num`` in its
    header, which pins both numbers. With a single file, RocketMQ's default ratio ``num = 4*slots`` is assumed
    when the size fits it exactly; otherwise the caller must pass the geometry.
    """
    names = layout.index_file_names()
    if not names:
        return None
    paths = [os.path.join(layout.index_dir, n) for n in names]
    size = os.path.getsize(paths[0])
    for p in paths[:-1]:
        with open(p, "rb") as f:
            f.seek(36)
            num = _INDEX_COUNT.unpack(f.read(4))[0]
        rest = size - INDEX_HEADER_SIZE - INDEX_ENTRY_SIZE * num
        if num > 1 and rest > 0 and rest % INDEX_SLOT_SIZE == 0:
            return IndexGeometry(rest // INDEX_SLOT_SIZE, num)
    if (size - INDEX_HEADER_SIZE) % 84 == 0 and size > INDEX_HEADER_SIZE:
        slots = (size - INDEX_HEADER_SIZE) // 84
        return IndexGeometry(slots, 4 * slots)
    return None


def infer_cq_file_size(layout: StoreLayout) -> int | None:
    """The consume-queue file size used by the store (every CQ file has it), or None if there is no CQ file."""
    for topic, qid in layout.consume_queues():
        qdir = os.path.join(layout.consume_queue_dir, topic, str(qid))
        for n in sorted(os.listdir(qdir)):
            if _NAME20.fullmatch(n):
                return os.path.getsize(os.path.join(qdir, n))
    return None

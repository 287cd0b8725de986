"""Raw speed of the disk under a directory, measured from Python.

Why: a put figure means little on its own on a shared box; reported as a ratio of what plain Python can push to
the same filesystem in the same run, it says how much the store itself costs. Three baselines:

* ``write``: sequential ``os.write`` of 1 MiB chunks into the page cache (what an async-flush put can hope for);
* ``mmap``: sequential copy into an mmap'd file of the same size (what the store's mapped files actually do);
* ``write_fsync``: small appends each followed by ``os.fsync`` (every append also changes the file size);
* ``prealloc_fdatasync``: the same writes into a preallocated file, each followed by ``os.fdatasync`` — what a
  sync-flush put into a preallocated mapped segment costs at best, so the ratio for sync puts uses this one.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import tempfile
import time
from dataclasses import dataclass

MIB = 1 << 20


@dataclass(frozen=True)
class DiskBaseline:
    """Measured raw speeds; MB means 10**6 bytes."""

    write_mb_s: float
    mmap_mb_s: float
    fsync_per_s: float
    fsync_chunk: int
    fsync_mb_s: float
    datasync_per_s: float
    datasync_mb_s: float

    def lines(self) -> list[str]:
        return [
            f"disk: sequential write (page cache, 1 MiB chunks): {self.write_mb_s:,.1f} MB/s",
            f"disk: sequential mmap copy (1 MiB chunks):         {self.mmap_mb_s:,.1f} MB/s",
            f"disk: write+fsync of {self.fsync_chunk} B appends:       "
            f"{self.fsync_per_s:,.0f} fsyncs/s = {self.fsync_mb_s:,.2f} MB/s",
            f"disk: preallocated write+fdatasync of {self.fsync_chunk} B: "
            f"{self.datasync_per_s:,.0f} syncs/s = {self.datasync_mb_s:,.2f} MB/s",
        ]


def _write_speed(path: str, total: int) -> float:
    chunk = os.urandom(MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(total // MIB):
            os.write(fd, chunk)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
    return total / elapsed / 1e6


def _mmap_speed(path: str, total: int) -> float:
    chunk = os.urandom(MIB)
    with open(path, "w+b") as f:
        f.truncate(total)
        with mmap.mmap(f.fileno(), total) as mm:
            t0 = time.perf_counter()
            for pos in range(0, total, MIB):
                mm[pos : pos + MIB] = chunk
            elapsed = time.perf_counter() - t0
    return total / elapsed / 1e6


def _fsync_speed(path: str, seconds: float, chunk_size: int) -> tuple[float, float]:
    chunk = os.urandom(chunk_size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    n = 0
    try:
        t0 = time.perf_counter()
        while True:
            os.write(fd, chunk)
            os.fsync(fd)
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                break
    finally:
        os.close(fd)
    return n / elapsed, n * chunk_size / elapsed / 1e6


def _datasync_speed(path: str, seconds: float, chunk_size: int, prealloc: int = 256 * MIB) -> tuple[float, float]:
    """Sequential pwrite + fdatasync into a file whose blocks were allocated first (no size change per write)."""
    chunk = os.urandom(chunk_size)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    n = 0
    try:
        os.posix_fallocate(fd, 0, prealloc)
        os.fsync(fd)
        pos = 0
        t0 = time.perf_counter()
        while True:
            if pos + chunk_size > prealloc:
                pos = 0
            os.pwrite(fd, chunk, pos)
            os.fdatasync(fd)
            pos += chunk_size
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                break
    finally:
        os.close(fd)
    return n / elapsed, n * chunk_size / elapsed / 1e6


def measure(directory: str, total_bytes: int = 256 * MIB, fsync_seconds: float = 2.0,
            fsync_chunk: int = 4096) -> DiskBaseline:
    """Measure the disk that holds ``directory``; scratch files go in a temp dir inside it and are removed."""
    os.makedirs(directory, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="disk-baseline-", dir=directory)
    try:
        total = max(MIB, total_bytes // MIB * MIB)
        write = _write_speed(os.path.join(scratch, "write"), total)
        os.unlink(os.path.join(scratch, "write"))
        mm = _mmap_speed(os.path.join(scratch, "mmap"), total)
        os.unlink(os.path.join(scratch, "mmap"))
        per_s, mb_s = _fsync_speed(os.path.join(scratch, "fsync"), fsync_seconds, fsync_chunk)
        os.unlink(os.path.join(scratch, "fsync"))
        d_per_s, d_mb_s = _datasync_speed(os.path.join(scratch, "datasync"), fsync_seconds, fsync_chunk)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return DiskBaseline(write, mm, per_s, fsync_chunk, mb_s, d_per_s, d_mb_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="data/bench", help="directory on the disk to measure")
    ap.add_argument("--mib", type=int, default=256, help="MiB written by the sequential tests")
    ap.add_argument("--fsync-seconds", type=float, default=2.0)
    args = ap.parse_args()
    for line in measure(args.dir, args.mib * MIB, args.fsync_seconds).lines():
        print(line)


if __name__ == "__main__":
    main()

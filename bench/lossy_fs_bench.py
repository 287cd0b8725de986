"""Speed of the power-loss tier's filesystem (tests/support/lossy_fs) against the disk under it, same run.

Why: the tier runs real nodes on it, so it must keep up with what they do: sequential writes with an fsync,
writes into mapped segments with an msync per flush, a sync per small append (``sync`` durability), and reads
after a remount (recovery). Each case runs on a directory of the plain disk first (the baseline), then on a
lossy_fs mount whose durable state lives on that same disk; the ratio is lossy_fs / disk.
Run: ``.venv/bin/python bench/lossy_fs_bench.py [--dir data/bench] [--mib 64] [--mode strict|any-fsync]``.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.lossy_fs import STRICT, LossyFs, fuse_missing  # noqa: E402
from tests.support.lossy_fs.namespace import MODES  # noqa: E402

MIB = 1 << 20
SEGMENT = 4 * MIB  # a commit-log segment of the size the tier runs with
SMALL = 4096  # one small message


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sequential_write(directory: Path, total: int) -> tuple[float, str]:
    """1 MiB writes, one fsync at the end."""
    chunk = os.urandom(MIB)
    fd = os.open(directory / "seq", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(total // MIB):
            os.write(fd, chunk)
        os.fsync(fd)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
    _fsync_dir(directory)
    return total / elapsed / 1e6, "MB/s"


def mapped_segments(directory: Path, total: int) -> tuple[float, str]:
    """Segments created at full size and mapped; 64 KiB copies, an msync(MS_SYNC) per 256 KiB written."""
    piece, flush_every = os.urandom(64 * 1024), 256 * 1024
    t0 = time.perf_counter()
    for n in range(max(1, total // SEGMENT)):
        with open(directory / f"{n * SEGMENT:020d}", "w+b") as f:
            f.truncate(SEGMENT)
            with mmap.mmap(f.fileno(), SEGMENT) as m:
                flushed = 0
                for pos in range(0, SEGMENT, len(piece)):
                    m[pos : pos + len(piece)] = piece
                    if pos + len(piece) - flushed >= flush_every:
                        m.flush(flushed, pos + len(piece) - flushed)
                        flushed = pos + len(piece)
    elapsed = time.perf_counter() - t0
    return max(1, total // SEGMENT) * SEGMENT / elapsed / 1e6, "MB/s"


def _timed_loop(seconds: float, step: Callable[[int], None]) -> float:
    n = 0
    t0 = time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        step(n)
        n += 1
    return n / elapsed


def small_write_fdatasync(directory: Path, seconds: float) -> tuple[float, str]:
    """4 KiB pwrite + fdatasync into a file allocated first (a sync-durability append)."""
    chunk = os.urandom(SMALL)
    fd = os.open(directory / "small", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, SEGMENT)
        os.fsync(fd)
        rate = _timed_loop(seconds, lambda n: (os.pwrite(fd, chunk, n * SMALL % SEGMENT), os.fdatasync(fd)))
    finally:
        os.close(fd)
    return rate, "syncs/s"


def small_mapped_msync(directory: Path, seconds: float) -> tuple[float, str]:
    """4 KiB copies into a mapped segment, each followed by msync(MS_SYNC) of its page."""
    chunk = os.urandom(SMALL)
    with open(directory / "mapped-small", "w+b") as f:
        f.truncate(SEGMENT)
        with mmap.mmap(f.fileno(), SEGMENT) as m:
            def step(n: int) -> None:
                pos = n * SMALL % SEGMENT
                m[pos : pos + SMALL] = chunk
                m.flush(pos, SMALL)

            rate = _timed_loop(seconds, step)
    return rate, "msyncs/s"


def read_back(directory: Path) -> tuple[float, str]:
    """Read every file written above once, in 1 MiB reads (after a remount: nothing cached)."""
    total = 0
    t0 = time.perf_counter()
    for path in sorted(directory.iterdir()):
        with open(path, "rb", buffering=0) as f:
            while block := f.read(MIB):
                total += len(block)
    return total / (time.perf_counter() - t0) / 1e6, "MB/s"


def run_cases(directory: Path, total: int, seconds: float, remount: Callable[[], None]) -> dict[str, tuple]:
    results = {
        "sequential 1 MiB writes + fsync": sequential_write(directory, total),
        "mapped 4 MiB segments, msync per 256 KiB": mapped_segments(directory, total),
        "4 KiB pwrite + fdatasync": small_write_fdatasync(directory, seconds),
        "4 KiB into a mapping + msync": small_mapped_msync(directory, seconds),
    }
    remount()
    results["read back (lossy_fs: after a remount)"] = read_back(directory)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="data/bench", help="a directory on the disk to measure (scratch inside)")
    ap.add_argument("--mib", type=int, default=64, help="MiB written by the sequential cases")
    ap.add_argument("--seconds", type=float, default=2.0, help="duration of each sync-per-write case")
    ap.add_argument("--mode", choices=MODES, default=STRICT)
    args = ap.parse_args()
    if (reason := fuse_missing()) is not None:
        sys.exit(f"lossy_fs_bench: {reason}")
    os.makedirs(args.dir, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="lossy-fs-bench-", dir=args.dir))
    total = max(SEGMENT, args.mib * MIB)
    try:
        (scratch / "disk").mkdir()
        disk = run_cases(scratch / "disk", total, args.seconds, lambda: None)
        with LossyFs(scratch / "lossy.backing", scratch / "lossy", args.mode) as fs:
            lossy = run_cases(fs.mountpoint, total, args.seconds, lambda: (fs.unmount(), fs.remount()))
            counters = fs.counters()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"lossy_fs ({args.mode}) against the disk under {args.dir}, {total // MIB} MiB per sequential case")
    print(f"{'case':44} {'disk':>12} {'lossy_fs':>12} {'ratio':>7}")
    for case, (value, unit) in disk.items():
        print(f"{case:44} {value:>12,.1f} {lossy[case][0]:>12,.1f} {lossy[case][0] / value:>7.2f}  {unit}")
    print(f"lossy_fs read calls after the remount: {counters.get('reads', 0)}, "
          f"{counters.get('read_bytes', 0) / counters.get('reads', 1) / 1024:,.0f} KiB each")


if __name__ == "__main__":
    main()

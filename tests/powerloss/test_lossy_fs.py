"""The lose-unsynced-writes filesystem itself (tests/support/lossy_fs), validated before any tier relies on it.

Each test writes through a real mount, takes a power cut (``LossyFs.cut``) and reads what came back: what was
fsynced is there, what was not is gone; names follow the mode (``strict``: only a directory's own fsync makes
its entries durable; ``any-fsync``: any fsync does).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lossy_fs import ANY_FSYNC, STRICT, cut_together
from tests.support.lossy_fs.file_data import CHUNK

PAGE = mmap.PAGESIZE


def put(path: Path, data: bytes, *, sync: bool = True, sync_dir: bool = True) -> None:
    """Write ``path`` (created or truncated); fsync it and its directory unless told not to."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if sync_dir:
        fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_back(mountpoint: Path) -> None:
    """syncfs(2) of the mount alone: the kernel writes its dirty pages back (what its flusher does within ~30 s)."""
    fd = os.open(mountpoint, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs")
    finally:
        os.close(fd)


def content(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


# ---------------------------------------------------------------------- file data
def test_a_write_without_fsync_is_gone_after_a_cut(lossy_mount):
    fs = lossy_mount()
    a, b = fs.mountpoint / "a", fs.mountpoint / "b"
    put(a, b"durable")
    put(b, b"never synced", sync=False)  # its name is durable (the directory fsync), its bytes are not
    with open(a, "ab") as f:
        f.write(b" and more")
    assert content(a) == b"durable and more"  # before the cut, readers see every write

    report = fs.cut()
    assert content(a) == b"durable"
    assert content(b) == b""
    assert report.unsynced_bytes == len(b" and more") + len(b"never synced")
    assert report.files == {"/a": {"size": 16, "durable_size": 7, "unsynced_bytes": 9},
                            "/b": {"size": 12, "durable_size": 0, "unsynced_bytes": 12}}


@pytest.mark.parametrize("sync", [os.fsync, os.fdatasync], ids=["fsync", "fdatasync"])
def test_a_synced_write_is_kept(lossy_mount, sync):
    fs = lossy_mount()
    path = fs.mountpoint / "log"
    data = os.urandom(3 * CHUNK + 123)  # several chunks and a partial one
    put(path, b"")
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, 0)
        sync(fd)
        os.pwrite(fd, b"X" * 10, CHUNK - 5)  # straddles two chunks, never synced
    finally:
        os.close(fd)

    report = fs.cut()
    assert content(path) == data
    assert report.files == {"/log": {"size": len(data), "durable_size": len(data), "unsynced_bytes": 10}}


def test_mmap_msync_is_kept_and_pages_never_msynced_are_gone(lossy_mount):
    fs = lossy_mount()
    path = fs.mountpoint / "segment"
    size = 64 * PAGE
    put(path, bytes(size))
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), size) as m:
        m[0:PAGE] = b"A" * PAGE
        m.flush(0, PAGE)  # msync(MS_SYNC): reaches the filesystem as an fsync
        m[size // 2 : size // 2 + PAGE] = b"B" * PAGE  # dirty, never msynced
    write_back(fs.mountpoint)  # the kernel writes the dirty page back now: into the volatile layer, not the disk
    assert fs.counters()["unsynced_bytes"] >= PAGE

    fs.cut()
    after = content(path)
    assert after[:PAGE] == b"A" * PAGE
    assert after[PAGE:] == bytes(size - PAGE)


KILLED_WRITER = """
import mmap, os, sys, time
path, size, page = sys.argv[1], int(sys.argv[2]), mmap.PAGESIZE
m = mmap.mmap(os.open(path, os.O_RDWR), size)
m[0:page] = b"A" * page
m.flush(0, page)
m[size // 2 : size // 2 + page] = b"B" * page
m[size - page : size] = b"C" * page
sys.stdout.write("written\\n")
sys.stdout.flush()
time.sleep(600)
"""


def test_a_killed_process_dirty_mapping_never_reaches_the_disk(lossy_mount):
    """The tier's cut: a SIGKILLed process leaves dirty pages in the kernel's page cache; the unmount writes them
    back into the frozen filesystem, and the remount shows only what the process msynced."""
    fs = lossy_mount()
    path = fs.mountpoint / "segment"
    size = 4 * CHUNK
    put(path, bytes(size))
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path), str(size)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert writer.stdout.readline() == "written\n"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        writer.stdout.close()

    report = fs.cut()
    after = content(path)
    assert after[:PAGE] == b"A" * PAGE
    assert after[PAGE:] == bytes(size - PAGE)
    assert report.files.get("/segment", {}).get("unsynced_bytes", 0) <= 2 * PAGE  # the rest came at the unmount


def test_a_frozen_filesystem_makes_nothing_durable(lossy_mount):
    """After the cut's instant (freeze), even an fsync that completes is not durable: it fails with EIO."""
    fs = lossy_mount()
    path = fs.mountpoint / "f"
    put(path, b"old")
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"new", 0)
        fs.freeze()
        with pytest.raises(OSError) as raised:
            os.fsync(fd)
        assert raised.value.errno == errno.EIO
    finally:
        os.close(fd)
    fs.unmount()
    fs.remount()
    assert content(path) == b"old"


def test_cut_together_cuts_every_mount(lossy_mount):
    mounts = [lossy_mount("a"), lossy_mount("b", ANY_FSYNC)]
    for fs in mounts:
        put(fs.mountpoint / "f", b"synced")
        (fs.mountpoint / "f").write_bytes(b"unsynced")
    reports = cut_together(mounts)
    assert [content(fs.mountpoint / "f") for fs in mounts] == [b"synced", b"synced"]
    assert [r.unsynced_bytes for r in reports] == [len(b"unsynced")] * 2
    assert all(fs.mounted for fs in mounts)


# ---------------------------------------------------------------------- sizes
def test_truncate_and_extend_are_volatile_until_fsynced(lossy_mount):
    fs = lossy_mount()
    path = fs.mountpoint / "f"
    put(path, b"x" * 100)

    os.truncate(path, 10)
    fs.cut()
    assert content(path) == b"x" * 100

    os.truncate(path, 10)
    os.truncate(path, 50)  # the cut bytes must not reappear: zeros from 10 on
    assert content(path) == b"x" * 10 + bytes(40)
    fs.cut()
    assert content(path) == b"x" * 100

    with open(path, "r+b") as f:
        f.truncate(10)
        f.truncate(3 * CHUNK)
        os.fsync(f.fileno())
    fs.cut()
    assert content(path) == b"x" * 10 + bytes(3 * CHUNK - 10)

    put(path, b"short", sync=False, sync_dir=False)  # O_TRUNC open and a write, never synced
    fs.cut()
    assert content(path) == b"x" * 10 + bytes(3 * CHUNK - 10)

    with open(path, "r+b") as f:
        os.posix_fallocate(f.fileno(), 0, 4 * CHUNK)
        assert os.fstat(f.fileno()).st_size == 4 * CHUNK
    fs.cut()
    assert os.stat(path).st_size == 3 * CHUNK


def test_any_fsync_mode_makes_a_truncate_durable_with_any_fsync(lossy_mount):
    """ext4 journals a size change with the next commit; written data still needs the file's own fsync."""
    fs = lossy_mount(mode=ANY_FSYNC)
    path, other = fs.mountpoint / "f", fs.mountpoint / "other"
    put(path, b"x" * 100)
    put(other, b"")
    with open(path, "r+b") as f:
        f.truncate(10)
        f.truncate(4 * CHUNK)
        f.seek(20)
        f.write(b"never synced")
    put(other, b"synced")  # any fsync commits the size, not the data
    fs.cut()
    assert content(path) == b"x" * 10 + bytes(4 * CHUNK - 10)


# ---------------------------------------------------------------------- names
@pytest.mark.parametrize("mode", [STRICT, ANY_FSYNC])
def test_a_created_file_needs_a_directory_fsync_in_strict_mode_and_any_fsync_in_any_fsync_mode(lossy_mount, mode):
    fs = lossy_mount(mode=mode)
    root = fs.mountpoint
    put(root / "other", b"old")
    put(root / "synced", b"data", sync_dir=False)  # its bytes are durable, its name is not
    put(root / "empty", b"never synced", sync=False, sync_dir=False)
    os.mkdir(root / "d")
    put(root / "d" / "inner", b"inner", sync_dir=False)
    put(root / "other", b"new", sync_dir=False)  # some other file's fsync

    report = fs.cut()
    assert content(root / "other") == b"new"
    if mode == STRICT:
        assert sorted(os.listdir(root)) == ["other"]
        assert report.dirs == {"/": ["+d", "+empty", "+synced"], "/d": ["+inner"]}
    else:
        assert sorted(os.listdir(root)) == ["d", "empty", "other", "synced"]
        assert content(root / "synced") == b"data"
        assert content(root / "empty") == b""  # a durable name whose bytes never were: empty
        assert content(root / "d" / "inner") == b"inner"
        assert report.dirs == {}


def test_a_rename_without_directory_fsync_is_undone_in_strict_mode(lossy_mount):
    fs = lossy_mount()
    root = fs.mountpoint
    put(root / "current", b"v1")
    put(root / "moved", b"m")

    put(root / "current.tmp", b"v2", sync_dir=False)  # the safe-write pattern, missing its directory fsync
    os.replace(root / "current.tmp", root / "current")
    os.rename(root / "moved", root / "renamed")
    assert content(root / "current") == b"v2"
    report = fs.cut()
    assert report.dirs == {"/": ["~current", "-moved", "+renamed"]}
    assert sorted(os.listdir(root)) == ["current", "moved"]
    assert content(root / "current") == b"v1"
    assert content(root / "moved") == b"m"

    put(root / "current.tmp", b"v2", sync_dir=False)
    os.replace(root / "current.tmp", root / "current")
    os.rename(root / "moved", root / "renamed")
    fsync_dir(root)
    fs.cut()
    assert sorted(os.listdir(root)) == ["current", "renamed"]
    assert content(root / "current") == b"v2"
    assert content(root / "renamed") == b"m"


def test_a_rename_is_kept_in_any_fsync_mode_after_another_fsync(lossy_mount):
    fs = lossy_mount(mode=ANY_FSYNC)
    root = fs.mountpoint
    put(root / "a", b"a")
    put(root / "other", b"o")
    os.rename(root / "a", root / "b")
    fs.cut()
    assert sorted(os.listdir(root)) == ["a", "other"]

    os.rename(root / "a", root / "b")
    put(root / "other", b"o2", sync_dir=False)
    fs.cut()
    assert sorted(os.listdir(root)) == ["b", "other"]
    assert content(root / "b") == b"a"


def test_a_directory_fsync_persists_its_entries_and_only_its_own(lossy_mount):
    fs = lossy_mount()
    root = fs.mountpoint
    os.makedirs(root / "d" / "e")
    put(root / "d" / "e" / "f", b"f")  # fsyncs e, not d nor the root
    fs.cut()
    assert os.listdir(root) == []  # d was never made durable in the root

    os.makedirs(root / "d" / "e")
    put(root / "d" / "e" / "f", b"f")
    fsync_dir(root / "d")
    fsync_dir(root)
    put(root / "gone", b"g")
    fs.cut()
    assert content(root / "d" / "e" / "f") == b"f"

    os.unlink(root / "gone")
    os.unlink(root / "d" / "e" / "f")
    fs.cut()
    assert content(root / "gone") == b"g"  # an unlink is a name change too
    assert content(root / "d" / "e" / "f") == b"f"

    os.unlink(root / "gone")
    os.unlink(root / "d" / "e" / "f")
    os.rmdir(root / "d" / "e")
    fsync_dir(root)
    fsync_dir(root / "d")
    fs.cut()
    assert os.listdir(root) == ["d"]
    assert os.listdir(root / "d") == []


def test_a_file_keeps_its_durable_bytes_across_renames_and_unlinks(lossy_mount):
    """Durability belongs to the inode: bytes fsynced after a rename are what the old, durable name shows."""
    fs = lossy_mount()
    root = fs.mountpoint
    put(root / "a", b"v1")
    os.rename(root / "a", root / "b")
    fd = os.open(root / "b", os.O_WRONLY)
    try:
        os.write(fd, b"v2")
        os.fsync(fd)
        os.unlink(root / "b")  # still open: its bytes live on until the cut
        os.write(fd, b"+")
        os.fsync(fd)
    finally:
        os.close(fd)
    fs.cut()
    assert os.listdir(root) == ["a"]
    assert content(root / "a") == b"v2+"


# ---------------------------------------------------------------------- what raftmq and pysyncobj use
LOCKER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
except OSError:
    sys.exit(3)
sys.exit(0)
"""


def test_what_the_store_and_the_raft_journal_use_works(lossy_mount):
    fs = lossy_mount()
    root = fs.mountpoint
    lock_path = root / "lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)  # store/file_lock.py
        assert subprocess.run([sys.executable, "-c", LOCKER, str(lock_path)]).returncode == 3
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
        assert subprocess.run([sys.executable, "-c", LOCKER, str(lock_path)]).returncode == 0
    finally:
        os.close(fd)

    journal = root / "raft.journal"  # pysyncobj's journal: a mapping grown with mmap.resize (ftruncate + mremap)
    put(journal, bytes(1024))
    os.chmod(journal, 0o600)  # inode metadata: durable with the file's next fsync
    with open(journal, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
        m[0:5] = b"first"
        m.resize(3 * CHUNK)
        m[2 * CHUNK : 2 * CHUNK + 6] = b"second"
        m.flush()
        m.close()
    assert (st := os.statvfs(root)).f_bavail > 0 and st.f_namemax > 0

    os.link(journal, root / "hard")
    os.symlink("raft.journal", root / "soft")
    assert os.readlink(root / "soft") == "raft.journal"
    assert os.stat(root / "hard").st_nlink == 2
    fsync_dir(root)
    fs.cut()
    data = content(journal)
    assert len(data) == 3 * CHUNK and data[:5] == b"first" and data[2 * CHUNK : 2 * CHUNK + 6] == b"second"
    assert os.path.samefile(root / "hard", journal) and content(root / "soft") == data
    assert os.stat(journal).st_mode & 0o777 == 0o600

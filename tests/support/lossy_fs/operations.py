"""The FUSE side: each call of libfuse3's high-level API, through mfusepy, mapped onto the ``Namespace``.

Why mfusepy: it is pure Python (ctypes) over Debian's own ``libfuse3-3``, so nothing is compiled and libfuse 3
gives 1 MiB requests (libfuse 2, which fusepy binds, never asks the kernel for more than 128 KiB). pyfuse3 ships
no wheel: it would be compiled at install time (a C compiler, the libfuse3 headers, pkg-config), and its
low-level, trio-based API pays off only for workloads far bigger than a test's. ``mfusepy.FUSE`` drops two
arguments this filesystem needs (the file handle of an ftruncate, the flags of renameat2): ``_FUSE`` passes them
on.

libfuse runs the calls on several threads; one lock serialises them (the GIL would anyway).
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from typing import Any

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")  # mfusepy would load libfuse 2 first when both are installed
import mfusepy  # noqa: E402

from tests.support.lossy_fs.namespace import Namespace, Node, fs_error  # noqa: E402

MAX_IO = 1 << 20  # bytes per FUSE read or write request (libfuse 3's and the kernel's ceiling)
FUSE_CAP_AUTO_INVAL_DATA = 1 << 12  # fuse_common.h
CACHE_S = 3600.0  # the kernel may cache names and attributes: nothing else changes this tree behind its back

for _name in ("truncate_fuse_3", "rename_fuse_3", "fgetattr"):
    if not hasattr(mfusepy.FUSE, _name):
        raise ImportError(f"mfusepy {getattr(mfusepy, '__version__', '?')} has no FUSE.{_name}: "
                          "pin the version in pyproject.toml's dev extra")


class _FUSE(mfusepy.FUSE):
    """mfusepy's FUSE, passing the file handle of an ftruncate and the flags of a rename on."""

    def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
        fh = fip.contents.fh if fip else None
        return self.operations.truncate(None if path is None else path.decode(), length, fh)

    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        return self.operations.rename(old.decode(), new.decode(), flags)


class LossyOperations(mfusepy.Operations):
    """The filesystem's calls; ``on_ready`` runs once the kernel has connected (the mount is usable)."""

    use_ns = True  # times in nanoseconds

    def __init__(self, namespace: Namespace, on_ready: Callable[[], None]) -> None:
        self.ns = namespace
        self._on_ready = on_ready
        self._mutex = threading.Lock()

    def init_with_config(self, conn: Any, config: Any) -> None:
        conn.max_write = MAX_IO
        # Only this mount changes these files, so the kernel's page cache stays valid: without these, every open
        # (the store reopens a segment for each flush) and every changed mtime dropped it and mapped segments
        # were read back in full (20 bytes read per byte written by a node in sync mode).
        conn.want &= ~FUSE_CAP_AUTO_INVAL_DATA
        config.kernel_cache = 1
        config.nullpath_ok = 1  # calls on an open file name it by handle only (no path to build, unlinked is fine)
        config.hard_remove = 1  # unlink an open file for real (no .fuse_hidden renames in the tree)
        config.use_ino = 1
        config.entry_timeout = config.attr_timeout = config.negative_timeout = CACHE_S
        self._on_ready()

    def _node(self, path: str | None, fh: int | None) -> Node:
        return self.ns.lookup(path) if path is not None else self.ns.handle(fh)

    # ------------------------------------------------------------------ attributes and names
    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, int]:
        with self._mutex:
            return self.ns.attributes(self._node(path, fh))

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self.ns.backing)
        return {key: getattr(st, key) for key in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                                  "f_files", "f_ffree", "f_favail", "f_namemax")}

    def opendir(self, path: str) -> int:
        with self._mutex:
            node = self.ns.lookup(path)
            if not node.is_dir:
                raise fs_error(errno.ENOTDIR)
            return self.ns.open(node)

    def readdir(self, path: str | None, fh: int) -> list[tuple[str, dict[str, int], int]]:
        with self._mutex:
            node = self.ns.handle(fh)
            entries = [(".", node.ino, node.mode), ("..", node.ino, node.mode), *self.ns.listing(node)]
        return [(name, {"st_ino": ino, "st_mode": mode}, 0) for name, ino, mode in entries]

    def releasedir(self, path: str | None, fh: int) -> int:
        with self._mutex:
            self.ns.release(fh)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        with self._mutex:
            self.ns.fsync(self.ns.handle(fh))
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        uid, gid, _ = mfusepy.fuse_get_context()
        with self._mutex:
            self.ns.mkdir(path, mode, uid, gid)
        return 0

    def rmdir(self, path: str) -> int:
        with self._mutex:
            self.ns.rmdir(path)
        return 0

    def unlink(self, path: str) -> int:
        with self._mutex:
            self.ns.unlink(path)
        return 0

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        with self._mutex:
            self.ns.rename(old, new, flags)
        return 0

    def symlink(self, target: str, source: str) -> int:
        """``ln -s source target``: the link is at ``target``."""
        uid, gid, _ = mfusepy.fuse_get_context()
        with self._mutex:
            self.ns.symlink(target, source, uid, gid)
        return 0

    def readlink(self, path: str) -> str:
        with self._mutex:
            return self.ns.lookup(path).target or ""

    def link(self, target: str, source: str) -> int:
        """``ln source target``."""
        with self._mutex:
            self.ns.link(source, target)
        return 0

    def chmod(self, path: str | None, mode: int) -> int:
        if path is not None:
            with self._mutex:
                self.ns.set_mode(path, mode)
        return 0

    def chown(self, path: str | None, uid: int, gid: int) -> int:
        if path is not None:
            with self._mutex:
                self.ns.set_owner(path, uid, gid)
        return 0

    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        if path is not None:  # None: the times part of an ftruncate, which already touched the file
            with self._mutex:
                self.ns.set_times(path, times)
        return 0

    # ------------------------------------------------------------------ files
    def create(self, path: str, mode: int, flags: int) -> int:
        uid, gid, _ = mfusepy.fuse_get_context()
        with self._mutex:
            return self.ns.open(self.ns.create(path, mode, uid, gid))

    def open(self, path: str, flags: int) -> int:
        with self._mutex:
            return self.ns.open(self.ns.lookup(path), truncate=bool(flags & os.O_TRUNC))

    def release(self, path: str | None, fh: int) -> int:
        with self._mutex:
            self.ns.release(fh)
        return 0

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        with self._mutex:
            return self.ns.read(self.ns.handle(fh), offset, size)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            return self.ns.write(self.ns.handle(fh), offset, data)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self._mutex:
            self.ns.truncate(self._node(path, fh), length)
        return 0

    def fallocate(self, path: str | None, mode: int, offset: int, size: int, fh: int) -> int:
        with self._mutex:
            self.ns.allocate(self.ns.handle(fh), mode, offset, size)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        with self._mutex:
            self.ns.fsync(self.ns.handle(fh))
        return 0

    # ------------------------------------------------------------------ control (from the daemon's own thread)
    def freeze(self) -> dict[str, Any]:
        with self._mutex:
            return self.ns.freeze()

    def stats(self) -> dict[str, Any]:
        with self._mutex:
            return self.ns.stats()


def serve(operations: LossyOperations, mountpoint: str) -> None:
    """Mount and serve until unmounted (or SIGINT/SIGTERM, on which libfuse unmounts)."""
    # max_idle_threads: without it Debian's libfuse 3.14.0 warns at every mount about its own unset default
    _FUSE(operations, mountpoint, foreground=True, fsname="lossy_fs", subtype="lossy_fs", max_idle_threads=8)

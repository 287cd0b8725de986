"""The file tree the mount shows (volatile) and the part of it that survives a power cut (durable).

Inodes, as on a disk: a directory maps names to inode numbers, a file is its bytes (``FileData``), a name is
only a reference. The current tree lives in memory. The durable tree is kept under the backing directory:

* ``namespace.json``: every durable inode (kind, mode, owner; a directory's durable entries; a symlink's target).
* ``data/<ino>``: the durable bytes of file ``<ino>`` (written by its fsync, whatever its names).

What becomes durable when (``mode``):

* fsync/fdatasync of a file: its bytes and size. Never a name.
* ``strict``: fsync of a directory: that directory's current entries (names created, renamed in or out, removed).
  Nothing else makes a name durable, so a file created and fsynced in a directory never fsynced is lost.
* ``any-fsync`` (ext4-like journal): any fsync, of a file or a directory, also makes every pending name change
  of every directory durable, and the sizes set by truncate/fallocate (not written data).

A file whose name became durable but whose bytes never were comes back empty (or with its last durable bytes).
Restarting from the backing directory (``Namespace.load``) is the power cut: nothing volatile is read back.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from collections import Counter
from typing import Any

from tests.support.lossy_fs.file_data import FileData

STRICT = "strict"
ANY_FSYNC = "any-fsync"
MODES = (STRICT, ANY_FSYNC)
ROOT = 1
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
FALLOC_FL_KEEP_SIZE = 0x01
UNCHANGED_ID = 0xFFFFFFFF  # chown's -1 as the kernel's unsigned uid_t
BLOCK_SIZE = 128 * 1024  # st_blksize: buffered writers (Python's io, stdio) then write in big pieces


def fs_error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


class Node:
    """A current inode: a directory (``entries``), a regular file (``data``) or a symlink (``target``)."""

    __slots__ = ("ino", "mode", "uid", "gid", "atime", "mtime", "ctime", "nlink", "opened", "entries", "data",
                 "target")

    def __init__(self, ino: int, mode: int, uid: int, gid: int) -> None:
        self.ino, self.mode, self.uid, self.gid = ino, mode, uid, gid
        self.atime = self.mtime = self.ctime = time.time_ns()
        self.nlink = 0  # names referring to it in the current tree
        self.opened = 0  # open handles
        self.entries: dict[str, int] | None = {} if stat.S_ISDIR(mode) else None
        self.data: FileData | None = None
        self.target: str | None = None

    @property
    def is_dir(self) -> bool:
        return self.entries is not None

    def touch(self) -> None:
        self.mtime = self.ctime = time.time_ns()


class Namespace:
    """The current tree over the durable one kept under ``backing``; every method is called under one lock."""

    def __init__(self, backing: str, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
        self.mode = mode
        self.backing = backing
        self._data_dir = os.path.join(backing, "data")
        self._namespace_file = os.path.join(backing, "namespace.json")
        self.nodes: dict[int, Node] = {}
        self._durable: dict[int, dict[str, Any]] = {}  # ino -> record, as in namespace.json
        self._durable_refs: Counter[int] = Counter()  # ino -> durable entries naming it
        self._pending_dirs: set[int] = set()  # directories whose entries differ from their durable ones
        self._pending_sizes: set[int] = set()  # files whose truncate/fallocate is not durable
        self._handles: dict[int, Node] = {}
        self._next_fh = 1
        self._next_ino = ROOT + 1
        self.frozen = False
        self.counters: Counter[str] = Counter()
        self._load()

    # ------------------------------------------------------------------ loading (the power comes back)
    def _load(self) -> None:
        os.makedirs(self._data_dir, exist_ok=True)
        try:
            with open(self._namespace_file, encoding="utf-8") as f:
                doc = json.load(f)
            records = {int(k): v for k, v in doc["inodes"].items()}
            self._next_ino = doc["next_ino"]
        except FileNotFoundError:
            records = {ROOT: {"kind": "dir", "mode": stat.S_IFDIR | 0o755, "uid": os.getuid(), "gid": os.getgid(),
                              "entries": {}}}
        # Keep what is reachable from the root; a directory reachable under two names (a cross-directory rename
        # of which only the target directory was synced) keeps the first, as fsck would.
        reachable: dict[int, dict[str, Any]] = {ROOT: records[ROOT]}
        queue = [ROOT]
        while queue:
            rec = reachable[queue.pop()]
            for name, ino in list(rec["entries"].items()):
                child = records.get(ino)
                if child is None or (child["kind"] == "dir" and ino in reachable):
                    del rec["entries"][name]
                    continue
                if ino not in reachable:
                    reachable[ino] = child
                    if child["kind"] == "dir":
                        queue.append(ino)
        self._durable = reachable
        for name in os.listdir(self._data_dir):
            if not name.isdigit() or int(name) not in reachable:
                os.unlink(os.path.join(self._data_dir, name))
        for ino, rec in reachable.items():
            node = self.nodes[ino] = Node(ino, rec["mode"], rec["uid"], rec["gid"])
            if rec["kind"] == "dir":
                node.entries = dict(rec["entries"])
            elif rec["kind"] == "file":
                node.data = FileData(self._data_path(ino))
                node.mtime = node.ctime = os.stat(self._data_path(ino)).st_mtime_ns
            else:
                node.target = rec["target"]
        for rec in reachable.values():
            for ino in rec.get("entries", {}).values():
                self._durable_refs[ino] += 1
                self.nodes[ino].nlink += 1
        self._next_ino = max(self._next_ino, max(reachable) + 1)
        self._persist()

    def _data_path(self, ino: int) -> str:
        return os.path.join(self._data_dir, str(ino))

    def _persist(self) -> None:
        """Write the durable tree (tmp + rename: the backing disk itself never loses power in a test)."""
        tmp = self._namespace_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"next_ino": self._next_ino, "inodes": self._durable}, f)
        os.replace(tmp, self._namespace_file)

    # ------------------------------------------------------------------ lookups
    def lookup(self, path: str) -> Node:
        node = self.nodes[ROOT]
        for name in path.split("/"):
            if not name:
                continue
            if node.entries is None:
                raise fs_error(errno.ENOTDIR)
            ino = node.entries.get(name)
            if ino is None:
                raise fs_error(errno.ENOENT)
            node = self.nodes[ino]
        return node

    def _parent(self, path: str) -> tuple[Node, str]:
        head, name = path.rstrip("/").rsplit("/", 1)
        parent = self.lookup(head)
        if parent.entries is None:
            raise fs_error(errno.ENOTDIR)
        return parent, name

    def handle(self, fh: int) -> Node:
        try:
            return self._handles[fh]
        except KeyError:
            raise fs_error(errno.EBADF) from None

    def attributes(self, node: Node) -> dict[str, int]:
        if node.entries is not None:
            size = 4096
            nlink = 2 + sum(1 for ino in node.entries.values() if self.nodes[ino].is_dir)
        else:
            size = node.data.size if node.data is not None else len(node.target or "")
            nlink = node.nlink
        return {"st_ino": node.ino, "st_mode": node.mode, "st_nlink": nlink, "st_uid": node.uid,
                "st_gid": node.gid, "st_size": size, "st_blocks": (size + 511) // 512, "st_blksize": BLOCK_SIZE,
                "st_atime": node.atime, "st_mtime": node.mtime, "st_ctime": node.ctime}

    def listing(self, node: Node) -> list[tuple[str, int, int]]:
        """(name, inode, mode) of each entry of a directory (a listing must carry inode numbers: readdir(3)
        skips entries whose inode is 0)."""
        if node.entries is None:
            raise fs_error(errno.ENOTDIR)
        return [(name, ino, self.nodes[ino].mode) for name, ino in node.entries.items()]

    # ------------------------------------------------------------------ name changes (volatile)
    def _new_node(self, parent: Node, name: str, mode: int, uid: int, gid: int) -> Node:
        if name in parent.entries:
            raise fs_error(errno.EEXIST)
        node = Node(self._next_ino, mode, uid, gid)
        self._next_ino += 1
        self.nodes[node.ino] = node
        if stat.S_ISREG(mode):
            node.data = FileData(self._data_path(node.ino))
        self._link(parent, name, node)
        return node

    def _link(self, parent: Node, name: str, node: Node) -> None:
        parent.entries[name] = node.ino
        node.nlink += 1
        parent.touch()
        self._pending_dirs.add(parent.ino)
        self.counters["name_changes"] += 1

    def _unlink(self, parent: Node, name: str) -> None:
        node = self.nodes[parent.entries.pop(name)]
        node.nlink -= 1
        node.ctime = time.time_ns()
        parent.touch()
        self._pending_dirs.add(parent.ino)
        self.counters["name_changes"] += 1
        self._forget_if_unused(node)

    def create(self, path: str, mode: int, uid: int, gid: int) -> Node:
        parent, name = self._parent(path)
        return self._new_node(parent, name, stat.S_IFREG | (mode & 0o7777), uid, gid)

    def mkdir(self, path: str, mode: int, uid: int, gid: int) -> None:
        parent, name = self._parent(path)
        self._new_node(parent, name, stat.S_IFDIR | (mode & 0o7777), uid, gid)

    def symlink(self, path: str, target: str, uid: int, gid: int) -> None:
        parent, name = self._parent(path)
        self._new_node(parent, name, stat.S_IFLNK | 0o777, uid, gid).target = target

    def link(self, existing: str, path: str) -> None:
        node = self.lookup(existing)
        if node.is_dir:
            raise fs_error(errno.EPERM)
        parent, name = self._parent(path)
        if name in parent.entries:
            raise fs_error(errno.EEXIST)
        self._link(parent, name, node)
        node.ctime = time.time_ns()

    def unlink(self, path: str) -> None:
        parent, name = self._parent(path)
        node = self.lookup(path)
        if node.is_dir:
            raise fs_error(errno.EISDIR)
        self._unlink(parent, name)

    def rmdir(self, path: str) -> None:
        parent, name = self._parent(path)
        node = self.lookup(path)
        if not node.is_dir:
            raise fs_error(errno.ENOTDIR)
        if node.entries:
            raise fs_error(errno.ENOTEMPTY)
        self._unlink(parent, name)

    def rename(self, old: str, new: str, flags: int) -> None:
        old_parent, old_name = self._parent(old)
        new_parent, new_name = self._parent(new)
        node = self.lookup(old)
        target_ino = new_parent.entries.get(new_name)
        if flags & RENAME_EXCHANGE:
            if target_ino is None:
                raise fs_error(errno.ENOENT)
            old_parent.entries[old_name], new_parent.entries[new_name] = target_ino, node.ino
            for d in (old_parent, new_parent):
                d.touch()
                self._pending_dirs.add(d.ino)
            self.counters["name_changes"] += 1
            return
        if target_ino is not None and flags & RENAME_NOREPLACE:
            raise fs_error(errno.EEXIST)
        if target_ino == node.ino:
            return
        if node.is_dir and self._contains(node, new_parent):
            raise fs_error(errno.EINVAL)
        if target_ino is not None:
            target = self.nodes[target_ino]
            if node.is_dir and not target.is_dir:
                raise fs_error(errno.ENOTDIR)
            if target.is_dir and not node.is_dir:
                raise fs_error(errno.EISDIR)
            if target.is_dir and target.entries:
                raise fs_error(errno.ENOTEMPTY)
            self._unlink(new_parent, new_name)
        del old_parent.entries[old_name]
        old_parent.touch()
        self._pending_dirs.add(old_parent.ino)
        new_parent.entries[new_name] = node.ino
        new_parent.touch()
        self._pending_dirs.add(new_parent.ino)
        node.ctime = time.time_ns()
        self.counters["name_changes"] += 1

    def _contains(self, directory: Node, node: Node) -> bool:
        """Whether ``node`` is ``directory`` or lies below it (a directory cannot move into itself)."""
        stack = [directory]
        while stack:
            d = stack.pop()
            if d is node:
                return True
            stack.extend(self.nodes[i] for i in d.entries.values() if self.nodes[i].is_dir)
        return False

    def set_mode(self, path: str, mode: int) -> None:
        node = self.lookup(path)
        node.mode = stat.S_IFMT(node.mode) | (mode & 0o7777)
        node.ctime = time.time_ns()

    def set_owner(self, path: str, uid: int, gid: int) -> None:
        node = self.lookup(path)
        if uid not in (-1, UNCHANGED_ID):
            node.uid = uid
        if gid not in (-1, UNCHANGED_ID):
            node.gid = gid
        node.ctime = time.time_ns()

    def set_times(self, path: str, times: tuple[int, int] | None) -> None:
        node = self.lookup(path)
        node.atime, node.mtime = times if times is not None else (time.time_ns(),) * 2
        node.ctime = time.time_ns()

    # ------------------------------------------------------------------ open files and data (volatile)
    def open(self, node: Node, truncate: bool = False) -> int:
        if truncate and node.data is not None:
            self.truncate(node, 0)
        fh = self._next_fh
        self._next_fh += 1
        self._handles[fh] = node
        node.opened += 1
        return fh

    def release(self, fh: int) -> None:
        node = self._handles.pop(fh, None)
        if node is not None:
            node.opened -= 1
            self._forget_if_unused(node)

    def read(self, node: Node, offset: int, size: int) -> bytes:
        self.counters["reads"] += 1
        data = node.data.read(offset, size)
        self.counters["read_bytes"] += len(data)
        return data

    def write(self, node: Node, offset: int, data: bytes) -> int:
        node.data.write(offset, data)
        node.touch()
        self.counters["writes"] += 1
        self.counters["written_bytes"] += len(data)
        return len(data)

    def truncate(self, node: Node, size: int) -> None:
        if node.data is None:
            raise fs_error(errno.EISDIR if node.is_dir else errno.EINVAL)
        node.data.truncate(size)
        node.touch()
        self._pending_sizes.add(node.ino)

    def allocate(self, node: Node, mode: int, offset: int, length: int) -> None:
        """fallocate: mode 0 extends the size (blocks are never short here); FALLOC_FL_KEEP_SIZE is a no-op."""
        if mode & ~FALLOC_FL_KEEP_SIZE:
            raise fs_error(errno.EOPNOTSUPP)  # punching holes, zeroing or collapsing ranges: nothing uses them
        if not mode & FALLOC_FL_KEEP_SIZE and offset + length > node.data.size:
            self.truncate(node, offset + length)

    def _forget_if_unused(self, node: Node) -> None:
        """Drop a node nothing refers to any more; its durable bytes stay while a durable name refers to it."""
        if node.nlink > 0 or node.opened > 0 or node.ino == ROOT:
            return
        del self.nodes[node.ino]
        self._pending_dirs.discard(node.ino)
        self._pending_sizes.discard(node.ino)
        if node.data is not None:
            node.data.close()
        self._collect(node.ino)

    # ------------------------------------------------------------------ durability
    def fsync(self, node: Node) -> None:
        """fsync/fdatasync of a file or directory descriptor (msync(MS_SYNC) arrives as one too)."""
        if self.frozen:
            raise fs_error(errno.EIO)  # the power is off: nothing becomes durable any more
        changed = False
        if node.is_dir:
            self.counters["dir_fsyncs"] += 1
            if self.mode == STRICT and node.ino in self._pending_dirs:
                self._make_entries_durable(node)
                changed = True
        elif node.data is not None:
            self.counters["fsyncs"] += 1
            self.counters["synced_bytes"] += node.data.sync()
            self._pending_sizes.discard(node.ino)
            rec = self._durable.get(node.ino)
            if rec is not None and (rec["mode"], rec["uid"], rec["gid"]) != (node.mode, node.uid, node.gid):
                rec.update(mode=node.mode, uid=node.uid, gid=node.gid)
                changed = True
        if self.mode == ANY_FSYNC and (self._pending_dirs or self._pending_sizes):
            for ino in sorted(self._pending_dirs):
                self._make_entries_durable(self.nodes[ino])
            for ino in self._pending_sizes:
                self.nodes[ino].data.sync_size()
            self._pending_sizes.clear()
            changed = True
        if changed:
            self._persist()

    def _record(self, node: Node) -> dict[str, Any]:
        rec: dict[str, Any] = {"mode": node.mode, "uid": node.uid, "gid": node.gid}
        if node.is_dir:
            rec.update(kind="dir", entries={})  # its own entries become durable when it is synced itself
        elif node.data is not None:
            rec["kind"] = "file"
        else:
            rec.update(kind="symlink", target=node.target)
        return rec

    def _make_entries_durable(self, directory: Node) -> None:
        rec = self._durable.get(directory.ino)
        if rec is None:
            rec = self._durable[directory.ino] = self._record(directory)
        old, new = rec["entries"], dict(directory.entries)
        for ino in new.values():
            if ino not in self._durable:
                self._durable[ino] = self._record(self.nodes[ino])
            self._durable_refs[ino] += 1
        rec["entries"] = new
        for ino in old.values():
            self._durable_refs[ino] -= 1
            self._collect(ino)
        self._pending_dirs.discard(directory.ino)

    def _collect(self, ino: int) -> None:
        """Delete a durable inode that neither a durable name nor the current tree refers to any more."""
        if ino in self.nodes or self._durable_refs[ino] > 0:
            return
        del self._durable_refs[ino]
        rec = self._durable.pop(ino, None)
        if rec is None or rec["kind"] == "file":
            try:
                os.unlink(self._data_path(ino))
            except FileNotFoundError:
                pass
        elif rec["kind"] == "dir":
            for child in rec["entries"].values():
                self._durable_refs[child] -= 1
                self._collect(child)

    # ------------------------------------------------------------------ the cut
    def freeze(self) -> dict[str, Any]:
        """The power goes off now: no later fsync makes anything durable. Returns what the cut will drop."""
        self.frozen = True
        paths = self._paths()
        files = {}
        for node in self.nodes.values():
            if node.data is not None and not node.data.synced:
                files[paths.get(node.ino, f"(unlinked inode {node.ino})")] = {
                    "size": node.data.size, "durable_size": node.data.durable_size,
                    "unsynced_bytes": node.data.unsynced_bytes}
        dirs = {paths.get(ino, f"(removed inode {ino})"): self._unsynced_entries(self.nodes[ino])
                for ino in self._pending_dirs}
        return {"files": files, "dirs": dirs, "unsynced_bytes": sum(f["unsynced_bytes"] for f in files.values())}

    def _unsynced_entries(self, directory: Node) -> list[str]:
        """The names a cut changes in ``directory``: ``+name`` goes away, ``-name`` comes back, ``~name`` comes
        back as the file it named before."""
        rec = self._durable.get(directory.ino)
        durable = rec["entries"] if rec is not None else {}
        changes = [f"+{n}" for n in directory.entries if n not in durable]
        changes += [f"-{n}" for n in durable if n not in directory.entries]
        changes += [f"~{n}" for n, ino in directory.entries.items() if durable.get(n, ino) != ino]
        return sorted(changes, key=lambda c: c[1:])

    def _paths(self) -> dict[int, str]:
        """One current path per reachable inode."""
        paths = {ROOT: "/"}
        stack = [ROOT]
        while stack:
            ino = stack.pop()
            prefix = paths[ino].rstrip("/")
            for name, child in self.nodes[ino].entries.items():
                if child not in paths:
                    paths[child] = f"{prefix}/{name}"
                    if self.nodes[child].is_dir:
                        stack.append(child)
        return paths

    def stats(self) -> dict[str, Any]:
        files = [n.data for n in self.nodes.values() if n.data is not None]
        return {**self.counters, "mode": self.mode, "frozen": self.frozen, "files": len(files),
                "unsynced_bytes": sum(f.unsynced_bytes for f in files),
                "unsynced_files": sum(1 for f in files if not f.synced),
                "dirs_with_unsynced_entries": len(self._pending_dirs)}

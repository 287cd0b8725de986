"""The store directories of a cluster of several Raft groups: which member stores belong to which group.

Why: a cluster is G groups, each a replicated group whose members' stores are plain RocketMQ stores holding only
that group's messages (docs/design/scale-out.md). The jobs read a many-group layout (one member directory per
group, or a directory holding every member's) and report per group. Nothing in a store names its group, but
every record carries its group's STOREHOST, which the configuration keeps unique per group, so the members of a
group are the stores whose records carry the same STOREHOST (read from the first record, without opening the
store). A store whose first record cannot be read is a group of its own, reported as such.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from raftmq.pipeline.errors import NotAStoreError
from raftmq.pipeline.layout import StoreLayout, open_layout

MAX_DEPTH = 3  # data/<member>/store/commitlog: how deep a directory of members is searched for stores
_HEAD_BYTES = 64 << 10  # the first record's frame is read from this much of the first segment


@dataclass(frozen=True, slots=True)
class MemberStore:
    label: str  # the member's directory, relative to what was given (how reports name it)
    layout: StoreLayout


@dataclass(frozen=True, slots=True)
class GroupStores:
    store_host: str  # "host:port" its records carry; "" when no record could be read
    members: tuple[MemberStore, ...]

    @property
    def name(self) -> str:
        """How reports name the group: by the STOREHOST its records carry (its `store_host` setting)."""
        return f"store host {self.store_host}" if self.store_host else f"unreadable ({self.members[0].label})"

    @property
    def dir_name(self) -> str:
        """A directory name for the group's output (no ':', which Hadoop paths refuse)."""
        return ("storehost-" + self.store_host.replace(":", "-").replace("[", "").replace("]", "")
                if self.store_host else f"unreadable-{self.members[0].label.replace(os.sep, '-')}")


def is_store(path: str) -> bool:
    return os.path.isdir(os.path.join(path, "commitlog"))


def find_stores(path: str) -> list[str]:
    """``path`` itself when it is a store root; else every store root below it (a directory of members), in
    name order. Raises NotAStoreError when there is none."""
    root = os.path.abspath(path)
    if not os.path.isdir(root) or is_store(root):
        return [root]  # open_layout says what is wrong with a path that is not a directory
    found: list[str] = []

    def walk(d: str, depth: int) -> None:
        for name in sorted(os.listdir(d)):
            sub = os.path.join(d, name)
            if not os.path.isdir(sub) or os.path.islink(sub):
                continue
            if is_store(sub):
                found.append(sub)
            elif depth < MAX_DEPTH:
                walk(sub, depth + 1)

    walk(root, 1)
    if not found:
        raise NotAStoreError(f"not a store directory: {root} has no commitlog/ folder, and no store (a directory "
                             f"with commitlog/) within {MAX_DEPTH} levels below it (pass a store root, e.g. "
                             "data/n0, or a directory of members' stores)")
    return found


def store_host_of(layout: StoreLayout) -> str:
    """The STOREHOST (``host:port``) of the store's first record, "" when there is none or it is unreadable."""
    from raftmq.store.message import RecordStatus, decode_record

    if not layout.segments:
        return ""
    with open(layout.segments[0].path, "rb") as f:
        head = f.read(_HEAD_BYTES)
    rec = decode_record(head, 0, check_crc=False, read_body=False)
    if rec.status != RecordStatus.OK or rec.message is None:
        return ""
    host, port = rec.message.store_host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _labels(given: list[str], roots: list[list[str]]) -> list[str]:
    out = []
    for path, found in zip(given, roots, strict=True):
        base = os.path.abspath(path)
        for r in found:
            out.append(os.path.relpath(r, base) if r != base else os.path.basename(base.rstrip(os.sep)) or base)
    return out if len(set(out)) == len(out) else [r for found in roots for r in found]


def group_stores(paths: list[str], *, allow_empty: bool = False) -> list[GroupStores]:
    """Every store under ``paths`` (store roots or directories of them), grouped by the STOREHOST of their
    records, groups in STOREHOST order, members in the order found."""
    roots = [find_stores(p) for p in paths]
    flat = [r for found in roots for r in found]
    if len(set(flat)) != len(flat):
        raise NotAStoreError("a store was given twice (directly and inside a directory given): give each once")
    groups: dict[str, list[MemberStore]] = {}
    for label, root in zip(_labels(paths, roots), flat, strict=True):
        layout = open_layout(root, allow_empty=allow_empty)
        host = store_host_of(layout)
        groups.setdefault(host or f"\0{label}", []).append(MemberStore(label, layout))
    return [GroupStores("" if key.startswith("\0") else key, tuple(members))
            for key, members in sorted(groups.items(), key=lambda kv: (kv[0].startswith("\0"), kv[0]))]


def per_group(paths: list[str]) -> bool:
    """True unless ``paths`` is the one store root the jobs read before groups (they keep their output then)."""
    return not (len(paths) == 1 and is_store(os.path.abspath(paths[0])))

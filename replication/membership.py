"""The group's membership: who votes, who learns, and how a member works out its configuration
(docs/design/membership.md).

Why a module of its own: the same few rules decide what a member does at start, what a leader may propose and what
``cluster status`` shows, and they must agree. Everything here is plain data and pure functions; the Raft side
(pysyncobj's ``MEMBERSHIP`` entries, effective on append) lives in raft_log, the replicated record in the state
machine's metadata.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from raftmq.replication.write_path import MemberInfo
from raftmq.store.json_file import read_leniently, write_safely

MEMBERSHIP_COMMAND = 2  # pysyncobj's _COMMAND_TYPE.MEMBERSHIP: the first byte of such a log entry
VOTER = "voter"
LEARNER = "learner"


@dataclass(frozen=True)
class VoterChange:
    """One pysyncobj ``MEMBERSHIP`` entry: ``op`` "add" or "rem" of ``member``."""

    op: str
    member: MemberInfo


@dataclass(frozen=True)
class Membership:
    """The membership record as of Raft ``index`` (0: the seed from ``cluster.members``, never replicated)."""

    voters: tuple[MemberInfo, ...]
    learners: tuple[MemberInfo, ...] = ()
    replaces: dict[str, str] = field(default_factory=dict)  # learner id -> the voter it replaces once promoted
    index: int = 0

    # ------------------------------------------------------------------ queries
    def role(self, member_id: str) -> str | None:
        if any(m.id == member_id for m in self.voters):
            return VOTER
        if any(m.id == member_id for m in self.learners):
            return LEARNER
        return None

    def member(self, member_id: str) -> MemberInfo | None:
        return next((m for m in (*self.voters, *self.learners) if m.id == member_id), None)

    def by_raft_address(self, address: str) -> MemberInfo | None:
        return next((m for m in (*self.voters, *self.learners) if m.raft_address == address), None)

    @property
    def voter_ids(self) -> list[str]:
        return sorted(m.id for m in self.voters)

    @property
    def learner_ids(self) -> list[str]:
        return sorted(m.id for m in self.learners)

    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def conflict(self, new: MemberInfo) -> str:
        """Why ``new`` cannot join ("" when it can): its id or one of its addresses is taken."""
        for m in (*self.voters, *self.learners):
            kind = VOTER if m in self.voters else LEARNER
            if m.id == new.id:
                return f"{new.id} is already a {kind}"
            if m.raft_address == new.raft_address:
                return f"Raft address {new.raft_address} is already used by {kind} {m.id}"
            if m.grpc_address == new.grpc_address:
                return f"gRPC address {new.grpc_address} is already used by {kind} {m.id}"
        return ""

    # ------------------------------------------------------------------ changes (each returns a new record)
    def with_learner(self, member: MemberInfo, index: int, replaces: str = "") -> Membership:
        learners = tuple(sorted((*self.learners, member), key=lambda m: m.id))
        repl = {**self.replaces, member.id: replaces} if replaces else dict(self.replaces)
        return replace(self, learners=learners, replaces=repl, index=index)

    def without_learner(self, member_id: str, index: int) -> Membership:
        repl = {k: v for k, v in self.replaces.items() if k != member_id}
        return replace(self, learners=tuple(m for m in self.learners if m.id != member_id), replaces=repl,
                       index=index)

    def with_change(self, change: VoterChange, index: int) -> Membership:
        """The record after a ``MEMBERSHIP`` entry (a promoted learner leaves the learners)."""
        m = change.member
        if change.op == "add":
            others = tuple(v for v in self.voters if v.id != m.id and v.raft_address != m.raft_address)
            voters = tuple(sorted((*others, m), key=lambda v: v.id))
            return replace(self, voters=voters, learners=tuple(x for x in self.learners if x.id != m.id),
                           index=index)
        voters = tuple(v for v in self.voters if v.raft_address != m.raft_address)
        repl = {k: v for k, v in self.replaces.items() if v != m.id}
        return replace(self, voters=voters, replaces=repl, index=index)

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict:
        def rows(ms: Iterable[MemberInfo]) -> list[dict]:
            return [{"id": m.id, "raft": m.raft_address, "grpc": m.grpc_address} for m in ms]
        return {"voters": rows(self.voters), "learners": rows(self.learners), "replaces": dict(self.replaces),
                "index": self.index}

    @classmethod
    def from_dict(cls, d: dict) -> Membership:
        def members(rows: list) -> tuple[MemberInfo, ...]:
            return tuple(sorted((MemberInfo(str(r["id"]), str(r["raft"]), str(r["grpc"])) for r in rows),
                                key=lambda m: m.id))
        return cls(members(d.get("voters", [])), members(d.get("learners", [])),
                   {str(k): str(v) for k, v in (d.get("replaces") or {}).items()}, int(d.get("index", 0)))

    def describe(self) -> str:
        learners = f"; learners {', '.join(self.learner_ids)}" if self.learners else ""
        return f"voters {', '.join(self.voter_ids) or 'none'}{learners} (Raft index {self.index})"


# ---------------------------------------------------------------------- pysyncobj MEMBERSHIP entries
def encode_change(change: VoterChange) -> bytes:
    """The pysyncobj ``MEMBERSHIP`` command for ``change``, less its type byte.

    pysyncobj reads ``[op, node id, node]`` (the node as its Raft address) and ignores what follows: raftmq adds
    the member id and gRPC address, which pysyncobj does not know."""
    m = change.member
    return pickle.dumps([change.op, m.raft_address, m.raft_address, {"id": m.id, "grpc": m.grpc_address}],
                        protocol=4)


def decode_change(command: bytes) -> VoterChange | None:
    """The change a pysyncobj log command makes, or None when it is not a ``MEMBERSHIP`` command. A change
    without raftmq's element (written by a tool like syncobj_admin) is named by its Raft address."""
    if not command or command[0] != MEMBERSHIP_COMMAND:
        return None
    request = pickle.loads(command[1:])
    op, node = request[0], request[2] if len(request) >= 3 else request[1]
    address = getattr(node, "address", node)
    extra = request[3] if len(request) >= 4 and isinstance(request[3], dict) else {}
    return VoterChange(op, MemberInfo(str(extra.get("id", address)), str(address), str(extra.get("grpc", ""))))


def replay(record: Membership, changes: Iterable[tuple[int, VoterChange]]) -> Membership:
    """The configuration: ``record`` plus the ``MEMBERSHIP`` entries after its index, in log order (each takes
    effect when appended, committed or not: the Raft thesis's single-server change)."""
    out = record
    for index, change in changes:
        if index > record.index:
            out = out.with_change(change, index)
    return out


# ---------------------------------------------------------------------- health
def health_refusal(voters_after: Iterable[str], healthy: Iterable[str], change: str) -> str:
    """Why ``change`` must not be made ("" when it may): the voters after it that are healthy (connected to the
    leader and caught up, the leader included) are not a majority of them. Names who is down or behind."""
    after = sorted(set(voters_after))
    ok = sorted(set(after) & set(healthy))
    need = len(after) // 2 + 1
    if len(ok) >= need:
        return ""
    down = [m for m in after if m not in ok]
    return (f"refused: after {change} the group would have {len(after)} voters, of which only {len(ok)} "
            f"({', '.join(ok) or 'none'}) are healthy, fewer than a majority ({need}); down or behind: "
            f"{', '.join(down)}. Bring them back (or remove the ones that are gone) first")


# ---------------------------------------------------------------------- the record on disk
class MembershipFile:
    """The replicated record as of this member's applied index, in ``config/membership.json``; written durably
    (``write_safely``) when a change is applied, before the applied index that covers it."""

    FILE_NAME = "membership.json"

    def __init__(self, config_dir: str | None):
        self.path = os.path.join(config_dir, self.FILE_NAME) if config_dir else None
        self.record: Membership | None = None
        self._dirty = False
        if self.path is not None:
            data = read_leniently(self.path)
            if data:
                self.record = Membership.from_dict(data)

    def set(self, record: Membership) -> None:
        self.record = record
        self._dirty = True

    def persist(self) -> None:
        if self._dirty and self.path is not None:
            write_safely(self.path, json.dumps(self.record.to_dict(), sort_keys=True))
        self._dirty = False

    def snapshot(self) -> dict | None:
        return self.record.to_dict() if self.record is not None else None

    def restore(self, d: dict | None) -> None:
        """A peer's record (catch-up, snapshot install); None (a peer from before membership records) keeps ours."""
        if d:
            self.set(Membership.from_dict(d))
            self.persist()

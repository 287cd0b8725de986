"""StateMachine: what every replica does with a committed Raft entry, plus the snapshot hooks.

Rules it keeps (docs/design/replication.md#deterministic-idempotent-never-half-applied):
* deterministic: the leader encoded everything clock- or host-dependent; apply only assigns offsets;
* idempotent on journal replay: an entry at or below the last applied index (AppliedIndex) is skipped;
* never half-applied: on an I/O error the commit log is cut back to the batch start, the node is fenced
  (unhealthy, refuses writes) and the error propagates, so pysyncobj retries the same entry instead of skipping it;
* only committed entries reach the store, so ``confirm_offset`` (what reput may dispatch) is the applied end;
* never destroys unproven bytes: commit-log bytes beyond the last applied entry after a power cut are adopted when
  a replayed entry wrote exactly them, and cut only when a committed entry shows they are not the group's
  (docs/design/durability.md).
"""

from __future__ import annotations

import json
import logging
import struct
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

from raftmq.replication import membership, snapshot
from raftmq.replication.applied_index import AppliedIndex
from raftmq.replication.applier import StoreApplier
from raftmq.replication.deduplicator import Deduplicator
from raftmq.replication.stage_times import StageTimes
from raftmq.replication.write_path import MemberInfo

log = logging.getLogger(__name__)

BATCH_MAGIC = 0x52504231  # "RPB1": a store batch
DEDUP_BATCH_MAGIC = 0x52504232  # "RPB2": a store batch and the ids of its judged records (deduplication.md)
_BATCH_HEADER = struct.Struct(">II")  # magic, crc32 of the rest
_KEYS_HEADER = struct.Struct(">QI")  # RPB2: the proposer's term, bytes of the ids that follow; then the store batch
_KEY_HEAD = struct.Struct(">I16s")  # record index, id (replication.dedup_window.id_of)


class CorruptCommandError(Exception):
    """A replicated command failed its checksum: the node must stop applying (never skip an entry)."""


def frame_batch(store_blob: bytes, keys: list[tuple[int, bytes]] = (), term: int = 0) -> bytes:
    """The Raft command of a store batch: RPB1, or RPB2 when records are judged for de-duplication (an older
    member stops applying at RPB2 instead of applying the batch without its ids, docs/operations/upgrades.md).
    ``term``: the term the proposer led when it screened the batch (RPB2 only; see ``StateMachine.apply_batch``)."""
    if not keys:
        return _BATCH_HEADER.pack(BATCH_MAGIC, zlib.crc32(store_blob)) + store_blob
    pack = _KEY_HEAD.pack
    ids = b"".join([pack(index, key) for index, key in keys])
    head = _KEYS_HEADER.pack(term, len(ids)) + ids
    crc = zlib.crc32(store_blob, zlib.crc32(head))  # the store batch is copied once, into the command
    return b"".join((_BATCH_HEADER.pack(DEDUP_BATCH_MAGIC, crc), head, store_blob))


def unframe_batch(blob: bytes, index: int) -> tuple[memoryview, list[tuple[int, bytes]], int | None]:
    """(store batch, judged ids, the proposer's term or None) of a batch command; CorruptCommandError when it
    fails its checksum."""
    magic, crc = _BATCH_HEADER.unpack_from(blob, 0)
    body = memoryview(blob)[_BATCH_HEADER.size:]
    if magic >> 8 == BATCH_MAGIC >> 8 and magic not in (BATCH_MAGIC, DEDUP_BATCH_MAGIC) and zlib.crc32(body) == crc:
        raise CorruptCommandError(f"Raft entry {index}: a batch command of a newer raftmq version "
                                  f"(RPB{chr(magic & 0xFF)}); upgrade this member (docs/operations/upgrades.md)")
    if magic not in (BATCH_MAGIC, DEDUP_BATCH_MAGIC) or zlib.crc32(body) != crc:
        raise CorruptCommandError(f"Raft entry {index}: batch command fails its checksum; this replica stops "
                                  "applying. Rebuild it from its peers: `raftmq cluster rebuild-member` with "
                                  "this member's id.")
    if magic == BATCH_MAGIC:
        return body, [], None
    term, n = _KEYS_HEADER.unpack_from(body, 0)
    end = _KEYS_HEADER.size + n
    keys = list(_KEY_HEAD.iter_unpack(body[_KEYS_HEADER.size:end]))
    return body[end:], keys, term


class StateMachine:
    def __init__(self, store: Any, applied: AppliedIndex, dedup: Deduplicator | None = None):
        self.store = store
        self.dedup = dedup                 # the de-duplication window, kept at apply on every member
        self.applier = StoreApplier(store)
        self.applied = applied
        self.lock = threading.Lock()       # held while applying; readers take it for a consistent view
        self.fenced: str | None = None     # set when an apply failed; cleared when the retry succeeds
        self.entry_term: Callable[[int], int | None] = lambda index: None
        self.gap_fetcher: Callable[[int, int], tuple[int, int]] | None = None
        # True when a peer holds exactly the local commit-log bytes [start, stop) (snapshot install keeps them)
        self.gap_prover: Callable[[int, int], bool] | None = None
        self.snapshot_installs = 0
        self.snapshot_bytes_proven = 0     # withheld bytes a snapshot install kept, proven by a peer's digests
        self.applied_raft_index = 0        # pysyncobj's index of the last entry handed to us
        self.tail_bytes_adopted = 0        # withheld commit-log bytes proven by replayed entries (metrics)
        self.tail_bytes_cut = 0            # withheld bytes an entry showed were not the group's (metrics)
        self.stale_batches_dropped = 0     # RPB2 batches screened in an earlier term than their entry's (apply_batch)
        self.metadata_stale = False        # rewound metadata entries: take the leader's metadata (``rewind``)
        self.from_leader = False           # deserialize is installing a snapshot the leader sent (not our own)
        self.seed_membership: membership.Membership | None = None  # cluster.members, until the group records one
        # the voters pysyncobj must run with after a snapshot is loaded (``deserialize``): Raft addresses
        self.snapshot_voters: Callable[[membership.Membership | None, bool], list[str]] | None = None
        self.on_membership: Callable[[], None] = lambda: None  # a change to the record was applied (tick thread)
        self.stage_times = StageTimes()    # the ``apply`` stage (replication/stage_times.py)

    # ------------------------------------------------------------------ apply (tick thread)
    def apply_batch(self, index: int, blob: bytes) -> Any:
        with self.lock:
            self.applied_raft_index = index
            last_index, end = self.applied.last
            if index <= last_index:
                return None  # journal replay or already copied from a peer
            body, keys, term = unframe_batch(blob, index)
            entry_term = self.entry_term(index) if term is not None else None
            if entry_term is not None and term != entry_term:
                # Screened by a member that led an earlier term, with the window it had then, and carried to the
                # log by someone else: pysyncobj forwards a command a deposed leader proposed to the new leader.
                # Its duplicates were never judged by the leader of this entry's term: dropped on every member
                # alike (the entry's term is part of the log), and its puts end unknown
                # (docs/design/deduplication.md#where-the-decision-is-made).
                self.applied.append(index, end, end)
                self.stale_batches_dropped += 1
                return index, None, []
            if self.store.commit_log_max_offset > end:  # a withheld tail (after a power cut): prove or cut it
                adopted = self._adopt(index, body, end)
                if adopted is not None:
                    self._judged_applied(keys, adopted[2])
                    return adopted
            start = self.store.commit_log_max_offset
            began = time.monotonic()
            try:
                results = self.store.apply_batch(bytes(body))
                self.stage_times.add("apply", time.monotonic() - began)
                end = self.store.commit_log_max_offset
                self.applied.append(index, start, end)
            except Exception as e:
                self._fence(index, start, e)
                raise
            self.store.confirm_offset = end
            self._judged_applied(keys, results)
            if self.fenced:
                log.warning("apply recovered at Raft index %d; fence lifted", index)
                self.fenced = None
            return index, self.entry_term(index), results

    def _judged_applied(self, keys: list[tuple[int, bytes]], results: list[Any]) -> None:
        if self.dedup is not None and keys:
            self.dedup.applied(keys, results)

    def rebuild_dedup_window(self) -> None:
        """The window from the commit log again: its entries may no longer be this member's log's (a rewind, a
        snapshot install, a copy from peers)."""
        if self.dedup is not None:
            self.dedup.rebuild()

    def _adopt(self, index: int, body: memoryview, end: int) -> Any:
        """Entry ``index`` is applied at ``end``, below which every byte is accounted for; beyond it the commit log
        holds bytes no applied entry accounts for (``MessageStore.withhold_tail``). When they are exactly what
        this entry writes, they are adopted as its result. Otherwise they are cut: this committed entry says
        something else belongs at ``end`` (entries lost by the group in a power cut of a majority under
        ``async``), or the tail ends inside it and the apply writes it whole again."""
        results = self.store.adopt_batch(body, end)
        if results is not None:
            last = results[-1]
            new_end = last.physical_offset + last.wrote_bytes
            self.applied.append(index, end, new_end)
            self.store.confirm_offset = new_end
            self.tail_bytes_adopted += new_end - end
            return index, self.entry_term(index), results
        tail = self.store.commit_log_max_offset - end
        log.warning("Raft entry %d does not match the %d withheld commit-log bytes at offset %d (they differ, or "
                    "end inside the entry): cutting them and applying the entry", index, tail, end)
        self.store.truncate_to(end)
        self.tail_bytes_cut += tail
        return None

    def apply_meta(self, index: int, kind: str, payload: bytes) -> Any:
        with self.lock:
            self.applied_raft_index = index
            last_index, end = self.applied.last
            if index <= last_index:
                if kind == "pop" and index > self.store.pop_state.applied_index:
                    # journal replay: the pop state file is written periodically, so it may miss this command
                    self.applier.apply_pop(json.loads(payload), index)
                return None
            try:
                outcome = self._apply_meta(kind, json.loads(payload), index)
                self.applied.append(index, end, end)
            except Exception as e:
                self._fence(index, None, e)
                raise
            return index, self.entry_term(index), outcome

    def _apply_meta(self, kind: str, arg: Any, index: int = 0) -> Any:
        """Returns an error message (str) for a deterministic refusal, else None ("pop", "topics": one of those
        per op)."""
        from raftmq.store.errors import StoreError

        try:
            if kind in ("topic_create", "topic_update"):
                self.applier.apply_topic("create" if kind == "topic_create" else "update",
                                         self.applier.topic_from_dict(arg["cfg"]), arg["ts"])
            elif kind == "topic_delete":
                self.applier.apply_topic("delete", arg["name"], arg["ts"])
            elif kind == "topics":  # one refusal or None per operation
                return self.applier.apply_topics(self.applier.topic_ops_from_json(arg["ops"]), arg["ts"])
            elif kind == "offsets":
                self.applier.apply_offsets([(g, t, {int(q): o for q, o in offs.items()}) for g, t, offs in arg])
            elif kind == "delay_offsets":
                self.applier.apply_delay_offsets(arg)
            elif kind == "timer_progress":
                self.applier.apply_timer_progress(arg)
            elif kind == "pop":  # persisted periodically and before a dump; replayed from the journal (see above)
                return self.applier.apply_pop(arg, index)
            elif kind == "group_config":
                self.applier.apply_group_config(arg)
            elif kind == "console_logout":
                self.applier.apply_console_logout(arg)
            elif kind == "acl":
                refusal = self.applier.apply_acl(arg)
                if refusal:
                    return refusal
            elif kind == "barrier":
                pass
            elif kind in ("membership_init", "learner_add", "learner_remove"):
                return self._apply_membership_meta(kind, arg, index)
            else:
                raise CorruptCommandError(f"unknown replicated command {kind!r}; is a member running a newer "
                                          "raftmq version? Upgrade every member.")
        except StoreError as e:  # same state everywhere -> same refusal everywhere
            return f"{type(e).__name__}: {e}"
        self.applier.persist_metadata()
        return None

    # ------------------------------------------------------------------ membership (docs/design/membership.md)
    @property
    def membership(self) -> membership.Membership | None:
        """The group's record as of the applied index (None: not recorded yet, the seed applies)."""
        return self.applier.membership.record

    def _apply_membership_meta(self, kind: str, arg: dict, index: int) -> str | None:
        """Learner changes and the first record; a refusal (str) is the same on every member."""
        record = self.membership
        if kind == "membership_init":
            if record is not None:
                return None  # an earlier leader recorded it already
            voters = tuple(MemberInfo(r["id"], r["raft"], r["grpc"]) for r in arg["voters"])
            record = membership.Membership(voters, index=index)
        else:
            record = record or self.seed_membership
            if record is None:
                return "the group has no membership record yet; retry once its leader has written it"
            if kind == "learner_add":
                new = MemberInfo(arg["id"], arg["raft"], arg["grpc"])
                conflict = record.conflict(new)
                if conflict:
                    return conflict
                replaces = arg.get("replaces") or ""
                if replaces and record.role(replaces) != membership.VOTER:
                    return f"{replaces} (the member to replace) is not a voter"
                record = record.with_learner(new, index, replaces)
            else:
                if record.role(arg["id"]) != membership.LEARNER:
                    return f"{arg['id']} is not a learner"
                record = record.without_learner(arg["id"], index)
        self.applier.membership.set(record)
        self.applier.membership.persist()
        self.on_membership()
        return None

    def apply_membership(self, index: int, change: membership.VoterChange) -> Any:
        """A pysyncobj ``MEMBERSHIP`` entry, committed: pysyncobj changed the voters when it was appended; the
        record follows when it is applied, so it always says what the group committed."""
        with self.lock:
            self.applied_raft_index = index
            last_index, end = self.applied.last
            if index <= last_index:
                return None
            base = self.membership or self.seed_membership
            if base is not None:
                self.applier.membership.set(base.with_change(change, index))
                self.applier.membership.persist()
            self.applied.append(index, end, end)
            self.on_membership()
            return index, self.entry_term(index), None

    def _fence(self, index: int, start: int | None, exc: Exception) -> None:
        if start is not None:
            try:
                if self.store.commit_log_max_offset > start:
                    self.store.truncate_to(start)
            except Exception:
                log.exception("could not cut the commit log back to %d after a failed apply", start)
        if self.fenced is None:
            log.critical("apply of Raft entry %d failed (%s); node fenced: it refuses writes and retries the "
                         "entry until the cause (disk full? I/O error?) is fixed", index, exc)
        self.fenced = f"apply of Raft entry {index} failed: {exc}"

    def rewind(self, index: int) -> None:
        """Forget the entries applied after ``index``: the leader's log holds others there (raft_log's
        ``_rewind_applied``). Their commit-log bytes are withheld, not cut: the leader's entries adopt or cut them as
        they apply. Metadata changes among them cannot be undone one by one, so ``metadata_stale`` asks the write
        path to take the leader's metadata (the leader's entries then apply on top, in log order)."""
        with self.lock:
            self._rewind(index)

    def _applied_end(self) -> tuple[int, int]:
        """(applied index, the commit-log end it accounts for), the end never below the commit log's first byte: a
        member that copied the group's log after retention deleted its oldest segments starts its log there, and
        with no frame left (none written yet, or all rewound) the end would read 0, a range no peer holds any
        more to prove or to send (the snapshot install then failed on every try and the member never got ready)."""
        idx, end = self.applied.last
        return idx, max(end, self.store.commit_log_min_offset)

    def _rewind(self, index: int) -> None:
        dropped = self.applied.frames_after(index)
        self.applied.drop_beyond_index(index)
        idx, end = self._applied_end()
        if self.store.commit_log_max_offset > end:
            self.store.withhold_tail(end)
        self.store.confirm_offset = end
        if any(start == stop for _i, start, stop in dropped):
            self.metadata_stale = True
        self.rebuild_dedup_window()
        log.warning("rewound to Raft entry %d (commit-log end %d): %d applied entries are not known to be the "
                    "group's; their bytes are withheld until its log proves them", idx, end, len(dropped))

    def _prove_withheld(self, start: int, stop: int) -> bool:
        """True when the commit log already holds the snapshot's gap [start, stop) as withheld bytes (a copy from
        a peer, rewound because its frame lies past the snapshot) and a peer's digests prove them the group's:
        they are kept, not copied again. Unproven bytes stay withheld, and the gap is fetched over them."""
        if self.store.commit_log_max_offset < stop or self.gap_prover is None:
            return False
        from raftmq.store.errors import StoreError

        if not self.gap_prover(start, stop):
            return False
        try:
            self.store.confirm_withheld(stop)
        except StoreError as e:
            log.warning("kept commit-log bytes not confirmed (%s); fetching the snapshot's gap instead", e)
            return False
        self.snapshot_bytes_proven += stop - start
        log.info("snapshot install: commit log [%d, %d) held here matches the group's; kept, not copied again",
                 start, stop)
        return True

    def _fetch_gap(self, start: int, meta: snapshot.SnapshotMeta) -> None:
        if self.gap_fetcher is None:
            raise snapshot.SnapshotError("snapshot is ahead of the local commit log and no peer to fetch the gap "
                                         "from")
        end_offset, _end_index = self.gap_fetcher(start, meta.applied_index)
        if end_offset < meta.commit_log_end:
            raise snapshot.SnapshotError(f"fetched the commit log only up to {end_offset}, snapshot needs "
                                         f"{meta.commit_log_end}")

    # ------------------------------------------------------------------ consistent views (any thread)
    def status_view(self) -> tuple[int, int, dict]:
        """(applied index, commit-log end, metadata) as of one point in the log."""
        with self.lock:
            idx, end = self.applied.last
            return idx, end, self.applier.export_metadata()

    def applied_index(self) -> int:
        """The last Raft index whose entry changed the store (AppliedIndex); pysyncobj's own applied index is only a
        cursor over its journal and lags this one after a restart."""
        return self.applied.last[0]

    def applied_position(self) -> tuple[int, int]:
        """(applied index, commit-log end) without exporting metadata: status polls must not hold up apply."""
        with self.lock:
            return self.applied.last

    # ------------------------------------------------------------------ snapshot hooks (tick thread)
    def serialize(self, path: str, internal: tuple) -> None:
        """pysyncobj serializer: make the commit log durable up to here, then write the tiny dump.

        Only the commit log (and the applied index) must reach disk before a dump that points past them: consume
        queues and index are rebuilt from it on recovery, and metadata is persisted when applied. Runs on the
        tick thread, so it stays one commit-log fsync."""
        with self.lock:
            self.store.wait_flushed(self.store.commit_log_max_offset, 30.0)
            self.store.pop_state.persist(only_if_dirty=True)  # the journal entries it replays from are dropped next
            self.applied.fsync()
            idx, end = self.applied.last
            meta = snapshot.SnapshotMeta(idx, end, internal[0][1], self.applier.export_metadata())
        snapshot.write_file(path, meta, internal)

    def deserialize(self, path: str) -> tuple:
        """pysyncobj deserializer: at startup (our own dump) or when the leader sent its dump
        (``from_leader``, set by raft_log around the snapshot message)."""
        meta, internal = snapshot.read_file(path)
        with self.lock:
            local_index, local_end = self._applied_end()
            if self.from_leader and local_index > meta.applied_index:
                # A leader sends its snapshot when this member's log does not match its own past it (the
                # entries applied here after the snapshot's are not the group's, see rewind), or when this member
                # has no Raft log (a learner that copied the commit log from a peer). Either way the bytes are
                # withheld, not cut: the gap below keeps those a peer's digests prove. The snapshot's metadata,
                # exact at that point, replaces ours below.
                self._rewind(meta.applied_index)
                local_index, local_end = self._applied_end()
            if local_index < meta.applied_index or (self.from_leader and local_end != meta.commit_log_end):
                self.snapshot_installs += 1
                if local_end < meta.commit_log_end:
                    if not self._prove_withheld(local_end, meta.commit_log_end):
                        self._fetch_gap(local_end, meta)
                    # the frame written below says these bytes are applied: they reach the disk first
                    if not self.store.wait_flushed(meta.commit_log_end, 30.0):
                        raise snapshot.SnapshotError(f"the commit log copied up to {meta.commit_log_end} did not "
                                                     "reach the disk; the leader sends the snapshot again")
                elif local_end > meta.commit_log_end:
                    # an applied entry below the snapshot's index ended past the group's log at that index: these
                    # bytes are provably not the group's
                    self.store.truncate_to(meta.commit_log_end)
                self.applier.import_metadata(meta.metadata)
                self.metadata_stale = False
                self.applied.reset([(meta.applied_index, meta.commit_log_end, meta.commit_log_end)])
                self.store.confirm_offset = meta.commit_log_end
                self.rebuild_dedup_window()
                log.info("installed snapshot: Raft index %d, commit log end %d", meta.applied_index,
                         meta.commit_log_end)
            if self.snapshot_voters is not None:  # pysyncobj takes the dump's cluster as its voters
                record = meta.metadata.get("membership")
                voters = self.snapshot_voters(membership.Membership.from_dict(record) if record else None,
                                              self.from_leader)
                internal = (*internal[:2], voters, *internal[3:])
        return internal

"""Repair a member's damaged commit log from a healthy peer before it serves (issue 10, must-have 2).

Why it works: every member's commit log is byte-identical (docs/architecture.md#contracts, 1), so the bytes a peer holds
at ``[start, end)`` are exactly what this member wrote there. When the store refuses to open with
``CorruptionError`` (damaged records, a missing or mis-sized segment), each damaged range is streamed from a
peer with the catch-up RPC (``FetchCommitLog``, whole records, the peer's throttle applies), every record is
verified (magic, calMsgLength, body CRC, its own PHYSICALOFFSET; an end-of-file blank must reach the segment
end), only the damaged bytes are overwritten in place (a missing segment is recreated), the file is fsynced,
and the caller re-opens the store re-dispatching consume queues and index from the first repaired offset.

The store is closed meanwhile, so nothing is served from the damaged range. A range no reachable peer holds
(retention, all peers down, peers damaged at the same place) is reported; the caller stays not ready.
"""

from __future__ import annotations

import logging
import os
import struct
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from raftmq.replication.anti_entropy import BLOCK, heal_range, record_replaced
from raftmq.replication.catch_up import peer_statuses
from raftmq.replication.peers import Peers
from raftmq.store.errors import StoreError
from raftmq.store.integrity import CorruptRecord, chunk_problem
from raftmq.store.json_file import fsync_dir
from raftmq.store.message import BLANK_MAGIC_CODE
from raftmq.v1 import replica_pb2

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 120.0
_SIZE_MAGIC = struct.Struct(">ii")


@dataclass(slots=True)
class PeerRepairOutcome:
    repaired: list[tuple[CorruptRecord, str]] = field(default_factory=list)  # (range, peer id)
    unrepaired: list[tuple[CorruptRecord, str]] = field(default_factory=list)  # (range, why)

    @property
    def complete(self) -> bool:
        return not self.unrepaired


class _BadChunk(Exception):
    pass


def verify_chunk(offset: int, data: bytes, file_size: int) -> None:
    """Raise ``_BadChunk`` unless ``data`` (at commit-log ``offset``) is whole valid records, maybe a final blank."""
    why = chunk_problem(offset, data, file_size)
    if why is not None:
        raise _BadChunk(why)


def _segment_path(commit_log_dir: str, offset: int, file_size: int) -> str:
    return os.path.join(commit_log_dir, f"{offset - offset % file_size:020d}")


def _fetch_range(peers: Peers, member_id: str, up_to_index: int, r: CorruptRecord,
                 file_size: int) -> list[tuple[int, bytes]]:
    """Verified chunks covering ``[r.start, r.end)`` from one peer (the stream is cancelled once covered)."""
    req = replica_pb2.FetchCommitLogRequest(from_offset=r.start, up_to_index=up_to_index, max_chunk_bytes=1 << 20)
    call = peers.stub(member_id).FetchCommitLog(req, timeout=FETCH_TIMEOUT_S, metadata=peers.metadata)
    out: list[tuple[int, bytes]] = []
    try:
        for chunk in call:
            if chunk.data:
                if chunk.offset >= r.end:
                    break
                verify_chunk(chunk.offset, chunk.data, file_size)
                out.append((chunk.offset, chunk.data))
                end = chunk.offset + len(chunk.data)
                if end >= r.end or (end % file_size == 0 and end >= r.end):
                    break
            if chunk.last:
                break
    finally:
        call.cancel()
    covered = r.start
    for off, data in out:
        if off > covered:
            break
        covered = max(covered, off + len(data))
        if data and _SIZE_MAGIC.unpack_from(data, len(data) - 8)[1] == BLANK_MAGIC_CODE:
            covered = max(covered, off - off % file_size + file_size)  # the rest of the segment is empty
    if covered < r.end:
        raise _BadChunk(f"peer sent [{r.start}, {covered}) but the damage reaches {r.end}")
    return out


def _apply(commit_log_dir: str, r: CorruptRecord, chunks: list[tuple[int, bytes]], file_size: int) -> None:
    """Overwrite only ``[r.start, r.end)`` with the peer's bytes (a missing segment is created whole)."""
    touched: set[str] = set()
    created = False
    for off, data in chunks:
        lo, hi = max(off, r.start), min(off + len(data), r.end)
        if lo >= hi:
            continue
        path = _segment_path(commit_log_dir, lo, file_size)
        if not os.path.exists(path):
            created = True
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != file_size:
                os.ftruncate(fd, file_size)  # a missing or mis-sized segment: the rest of it is zeros
            os.pwrite(fd, data[lo - off : hi - off], lo % file_size)
            touched.add(path)
        finally:
            os.close(fd)
    for path in touched:
        fd = os.open(path, os.O_RDWR)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    if created:
        fsync_dir(commit_log_dir)


def repair_from_peers(peers: Peers, commit_log_dir: str, file_size: int,
                      damaged: list[CorruptRecord]) -> PeerRepairOutcome:
    """Fetch, verify and write back every damaged range from a peer that holds it (see the module docstring)."""
    out = PeerRepairOutcome()
    errors: dict[str, str] = {}
    statuses = peer_statuses(peers, timeout=5.0, errors=errors, with_metadata=False)
    for r in damaged:
        if r.end <= r.start:
            out.unrepaired.append((r, "empty range"))
            continue
        holders = sorted(((mid, st) for mid, st in statuses.items()
                          if st.commit_log_min_offset <= r.start and st.commit_log_max_offset >= r.end
                          and (not st.commit_log_file_size or st.commit_log_file_size == file_size)),
                         key=lambda kv: kv[1].is_leader)  # spare the leader when a follower has it
        why: list[str] = [f"{mid} unreachable ({e})" for mid, e in errors.items()]
        why += [f"{mid} holds [{st.commit_log_min_offset}, {st.commit_log_max_offset})"
                for mid, st in statuses.items() if (mid, st) not in holders]
        done = False
        for mid, st in holders:
            try:
                chunks = _fetch_range(peers, mid, st.applied_index, r, file_size)
            except _BadChunk as e:
                why.append(f"{mid} sent bad data ({e})")
                continue
            except grpc.RpcError as e:
                why.append(f"{mid}: {e.code().name} {e.details()}")
                continue
            _apply(commit_log_dir, r, chunks, file_size)
            log.warning("repaired commit-log range [%d, %d) of %s from peer %s (%s)", r.start, r.end, r.path, mid,
                        r.reason)
            out.repaired.append((r, mid))
            done = True
            break
        if not done:
            out.unrepaired.append((r, "; ".join(why) or "no peer configured"))
    return out


def repair_range_live(peers: Peers, store: Any, r: CorruptRecord) -> str:
    """Replace the damaged range ``r`` of an *open* store with the peers' copy (the scrubber or a read found it).

    First the whole 4 KiB blocks around it (one block before it too: rot that broke this record's start often hit
    the end of the one before, whose bytes no check covers) are compared with the peers' and replaced where they
    differ from the majority (``anti_entropy.heal_range``); if the record is still damaged (no majority reachable),
    whole records from one peer are fetched, verified and written over ``[r.start, r.end)``. Returns who supplied
    the bytes; raises ``PeerRepairError`` with every peer's reason otherwise."""
    with futures.ThreadPoolExecutor(max_workers=max(1, len(peers.others)), thread_name_prefix="repair") as pool:
        try:
            healed = heal_range(peers, store, peers.group_size(), r.start - BLOCK, r.end, pool,
                                known_bad=(r.start, r.end))
        except StoreError as e:  # retention deleted the segment meanwhile
            raise PeerRepairError(f"[{r.start}, {r.end}) could not be compared: {e}") from None
    record_replaced(store, healed.replaced)
    if healed.replaced and not store.damaged_records_in(r.start, r.end):
        who = sorted({mid for _o, mid in healed.replaced})
        log.warning("repaired commit-log range [%d, %d) of %s (%s) while serving: %d block(s) from %s", r.start,
                    r.end, r.path, r.reason, len(healed.replaced), ", ".join(who))
        return ", ".join(who)
    return _copy_records_live(peers, store, r)


def _copy_records_live(peers: Peers, store: Any, r: CorruptRecord) -> str:
    """Whole verified records of ``[r.start, r.end)`` from the first peer that holds them."""
    file_size = store.config.mapped_file_size_commit_log
    errors: dict[str, str] = {}
    statuses = peer_statuses(peers, timeout=5.0, errors=errors, with_metadata=False)
    why = [f"{mid} unreachable ({e})" for mid, e in errors.items()]
    for mid, st in sorted(statuses.items(), key=lambda kv: kv[1].is_leader):
        if not (st.commit_log_min_offset <= r.start and st.commit_log_max_offset >= r.end):
            why.append(f"{mid} holds [{st.commit_log_min_offset}, {st.commit_log_max_offset})")
            continue
        try:
            chunks = _fetch_range(peers, mid, st.applied_index, r, file_size)
            data = b"".join(d for _o, d in chunks)
            lo = chunks[0][0]
            store.replace_commit_log_range(r.start, data[r.start - lo : r.end - lo])
        except (_BadChunk, StoreError) as e:
            why.append(f"{mid}: {e}")
            continue
        except grpc.RpcError as e:
            why.append(f"{mid}: {e.code().name} {e.details()}")
            continue
        log.warning("repaired commit-log range [%d, %d) of %s from peer %s while serving (%s)", r.start, r.end,
                    r.path, mid, r.reason)
        return mid
    raise PeerRepairError(f"no peer could supply [{r.start}, {r.end}): " + ("; ".join(why) or "no peer configured"))


class PeerRepairError(Exception):
    """No peer supplied a verified copy of a damaged range."""

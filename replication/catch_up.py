"""Catch-up by commit-log range transfer (docs/design/replication.md#catching-up-rebuilding-repairing): bulk pull first, then join Raft.

Why: pysyncobj can ship our tiny snapshot but not the commit log, and its deserializer runs on the tick thread.
A wiped or far-behind replica therefore copies the committed commit-log bytes (and the replicated metadata at the
same Raft index) from a peer over gRPC before it starts its SyncObj; apply then skips every entry the copied
bytes already contain.
"""

from __future__ import annotations

import json
import logging
import random
import struct
import time
from collections.abc import Callable
from typing import Any

import grpc

from raftmq.replication.commit_log_digest import digest_commit_log
from raftmq.replication.peers import Peers
from raftmq.store.errors import StoreError
from raftmq.v1 import replica_pb2

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 600.0   # bulk catch-up before joining Raft
INLINE_FETCH_TIMEOUT_S = 20.0  # a gap fetched on pysyncobj's tick thread (snapshot install): fail, let it retry
MAX_FRUITLESS_RECONNECTS = 3  # cut streams in a row that copied nothing before giving up on a peer
DIGEST_CHUNK = 1 << 20  # bytes per SHA-256 when a held copy is compared with a peer's (``range_matches``)
BUSY_BACKOFF_S = (0.5, 8.0)    # first and longest wait after a peer's RESOURCE_EXHAUSTED (catch_up_max_streams)


BLANK_MAGIC_CODE = 0xCBD43194
_BLANK = struct.Struct(">iI")


def next_chunk_offset(pos: int, data: bytes, file_size: int) -> int:
    """Where the commit-log chunk after ``data`` (read at ``pos``) starts: after an end-of-file blank record, at
    the next segment.

    A record always ends with its topic or UTF-8 properties, which cannot contain the blank magic's bytes, so a
    chunk ending in (remaining size, BLANK magic) is a blank record."""
    end = pos + len(data)
    if len(data) >= 8:
        size, magic = _BLANK.unpack_from(data, len(data) - 8)
        if magic == BLANK_MAGIC_CODE and size == file_size - (end - 8) % file_size:
            return end - 8 + size
    return end


class CatchUpError(Exception):
    """Catch-up from peers failed; the message says which peer and why."""


def fetch_range(peers: Peers, member_id: str, store: Any, from_offset: int, up_to_index: int,
                timeout: float = FETCH_TIMEOUT_S, retry: bool = True) -> tuple[int, int]:
    """Stream [from_offset, peer's end at ``up_to_index``) into the local commit log.

    Returns (end offset, Raft index the copied range is complete up to). Every chunk is verified by the store
    (``append_commit_log_raw`` checks record framing and CRCs) before it is appended. The peer rate-limits what it
    serves (``cluster.raft.catch_up_bytes_per_s``), so a large copy may outlast one ``timeout``: with ``retry``,
    a stream cut off after it copied something is resumed from the local end (chunks are whole records), one that
    copied nothing is tried again after a pause (up to ``MAX_FRUITLESS_RECONNECTS`` times in a row), and a
    peer already serving ``catch_up_max_streams`` copies (RESOURCE_EXHAUSTED) is asked again after a growing
    backoff for up to ``timeout``. Without ``retry`` (pysyncobj's tick thread, which must not sleep) the first
    failure is final.
    """
    busy_deadline = time.monotonic() + timeout
    backoff = BUSY_BACKOFF_S[0]
    progress = [from_offset]  # where the next chunk starts: everything before it is copied (or proven) here
    fruitless = 0  # consecutive cut streams that appended nothing
    while True:
        before = progress[0]
        try:
            return _fetch_once(peers, member_id, store, progress, up_to_index, timeout)
        except _PeerBusy as busy:  # refused before sending anything: ask again from the same offset
            if not retry or busy_deadline - time.monotonic() <= backoff:
                raise CatchUpError(f"fetching the commit log from {member_id} failed: {busy}") from None
            log.info("peer %s is busy serving other catch-ups; retrying in %.1fs", member_id, backoff)
            time.sleep(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, BUSY_BACKOFF_S[1])
        except _StreamCut as cut:
            progressed = progress[0] > before
            fruitless = 0 if progressed else fruitless + 1
            if not retry or (not progressed and (fruitless > MAX_FRUITLESS_RECONNECTS
                                                 or busy_deadline - time.monotonic() <= backoff)):
                raise CatchUpError(f"fetching the commit log from {member_id} failed: {cut}") from None
            log.info("commit-log stream from %s cut (%s) at %d; resuming", member_id, cut, progress[0])
            if not progressed:  # a reconnect that failed at once: give the network a moment
                time.sleep(backoff * random.uniform(0.8, 1.2))


class _PeerBusy(Exception):
    """The peer answered RESOURCE_EXHAUSTED before sending anything: it serves enough copies already."""


class _StreamCut(Exception):
    """The stream ended early (deadline, connection lost); what was appended before is verified and kept."""


def _fetch_once(peers: Peers, member_id: str, store: Any, progress: list[int], up_to_index: int,
                timeout: float) -> tuple[int, int]:
    """One FetchCommitLog stream from ``progress[0]``, which moves past every chunk copied or proven."""
    from_offset = progress[0]
    file_size = store.config.mapped_file_size_commit_log
    req = replica_pb2.FetchCommitLogRequest(from_offset=from_offset, up_to_index=up_to_index,
                                            max_chunk_bytes=1 << 20)
    end_offset, end_index = from_offset, -1
    try:
        for chunk in peers.stub(member_id).FetchCommitLog(req, timeout=timeout, metadata=peers.metadata):
            if chunk.data:
                offset, data = chunk.offset, chunk.data
                local_end = store.commit_log_max_offset
                if from_offset <= offset < local_end:  # over bytes withheld after a power cut
                    proven = _adopt_withheld(store, offset, data, local_end)
                    if proven == len(data):
                        progress[0] = next_chunk_offset(offset, data, file_size)
                        continue  # the peer's committed copy proves ours
                    if proven == 0:
                        log.warning("the commit log from %d differs from %s's committed copy: cutting the %d "
                                    "withheld bytes there and copying the peer's", offset, member_id,
                                    local_end - offset)
                        store.truncate_to(offset)
                    offset, data = offset + proven, data[proven:]
                    local_end = store.commit_log_max_offset
                if offset != local_end and not (local_end == 0 and offset == from_offset):
                    raise CatchUpError(f"peer {member_id} sent a chunk at {offset}, local end is "
                                       f"{store.commit_log_max_offset}")
                store.append_commit_log_raw(offset, data)
                progress[0] = next_chunk_offset(offset, data, file_size)
            if chunk.last:
                end_offset, end_index = chunk.end_offset, chunk.end_index
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise _PeerBusy(f"{e.code().name} {e.details()}") from e
        if e.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
            raise _StreamCut(f"{e.code().name} {e.details()}") from e
        raise CatchUpError(f"fetching the commit log from {member_id} failed: {e.code().name} {e.details()}") from e
    if end_index < 0:
        raise CatchUpError(f"peer {member_id} ended the commit-log stream without its final chunk")
    return end_offset, end_index


def _adopt_withheld(store: Any, offset: int, data: bytes, local_end: int) -> int:
    """How many bytes of a peer's chunk at ``offset`` the local commit log, which ends at ``local_end`` with
    withheld bytes, already holds exactly: all of it, the part up to ``local_end`` (the rest is appended), or 0."""
    n = min(len(data), local_end - offset)
    try:
        if store.adopt_commit_log_raw(offset, data[:n]):
            return n
    except StoreError:  # local_end falls inside one of the peer's records: the bytes cannot be the same
        pass
    return 0


def range_matches(peers: Peers, member_id: str, store: Any, start: int, stop: int,
                  timeout: float = INLINE_FETCH_TIMEOUT_S) -> bool:
    """True when the local commit-log bytes [start, stop) are exactly the ones peer ``member_id`` applied there:
    the SHA-256 of every chunk matches its ``ChecksumCommitLog`` answer. Digests cross the network, not the bytes,
    so proving a copy this member already holds costs a read of it, not a rate-limited copy again."""
    req = replica_pb2.ChecksumCommitLogRequest(to_offset=stop, chunk_bytes=DIGEST_CHUNK)
    pos = start
    try:
        while pos < stop:
            req.from_offset = pos
            resp = peers.stub(member_id).ChecksumCommitLog(req, timeout=timeout, metadata=peers.metadata)
            if resp.end_offset <= pos:
                return False
            ours, end = digest_commit_log(store, pos, resp.end_offset, DIGEST_CHUNK, resp.end_offset - pos,
                                          len(resp.chunks))
            if end != resp.end_offset or [c.sha256 for c in ours] != [c.sha256 for c in resp.chunks]:
                log.warning("the commit log [%d, %d) differs from %s's committed copy", pos, end, member_id)
                return False
            pos = end
    except grpc.RpcError as e:
        log.info("could not compare the commit log [%d, %d) with %s: %s", start, stop, member_id, e.code().name)
        return False
    except StoreError as e:  # our own bytes unreadable there
        log.warning("could not digest the local commit log [%d, %d): %s", start, stop, e)
        return False
    return True


def peer_statuses(peers: Peers, timeout: float = 2.0, errors: dict[str, str] | None = None,
                  with_metadata: bool = True, members: list | None = None,
                  ) -> dict[str, replica_pb2.GetReplicaStatusResponse]:
    """Ask every other voter (or ``members``) at once (a stopped peer costs one ``timeout``, not one per peer);
    members that did not answer are missing from the result and, when ``errors`` is given, named there with the
    reason."""
    req = replica_pb2.GetReplicaStatusRequest(skip_metadata=not with_metadata)
    calls = {m.id: peers.stub(m.id).GetReplicaStatus.future(req, timeout=timeout, metadata=peers.metadata)
             for m in (peers.others if members is None else members)}
    out = {}
    for mid, call in calls.items():
        try:
            out[mid] = call.result()
        except grpc.RpcError as e:
            log.info("peer %s status unavailable: %s", mid, e.code().name)
            if errors is not None:
                errors[mid] = f"{e.code().name}: {e.details() or 'no answer'}"
    return out


def rebuild_from_peer(peers: Peers, store: Any, applier: Any, applied: Any, file_size: int,
                      copying: Callable[[str, int, int], None] | None = None) -> bool:
    """Copy the commit log and metadata from the most advanced reachable peer. True when something was copied.
    ``copying(peer, from offset, to offset)`` is told before the copy starts (progress reports)."""
    statuses = peer_statuses(peers)
    if not statuses:
        log.warning("no peer reachable for catch-up; starting from local data only")
        return False
    local_index, local_end = applied.last
    if local_index == 0 and store.commit_log_max_offset > local_end:
        local_end = store.commit_log_max_offset  # an interrupted copy (the caller checked its marker): resume it
    ahead = [(mid, st) for mid, st in statuses.items() if st.applied_index > local_index]
    if not ahead:
        return False
    # spare the leader: copy from the most advanced follower; pysyncobj brings the last entries afterwards
    member_id, st = max(ahead, key=lambda kv: (not kv[1].is_leader, kv[1].applied_index))
    if st.commit_log_file_size and st.commit_log_file_size != file_size:
        raise CatchUpError(f"peer {member_id} uses commit-log files of {st.commit_log_file_size} bytes, this node "
                           f"{file_size}: store.mapped_file_size_commit_log must be the same on every member")
    if local_end == 0 and store.commit_log_max_offset == 0 and st.commit_log_min_offset > 0:
        # an empty member of a group whose oldest segments retention deleted: start at the peer's oldest segment
        # (a segment boundary); the peer's queue-offset table in its metadata covers the queues left behind
        local_end = st.commit_log_min_offset
        if local_end % file_size:
            raise CatchUpError(f"peer {member_id} reports its oldest commit-log offset {local_end}, which is not a "
                               f"segment boundary (segments of {file_size} bytes)")
        log.info("peer %s keeps its commit log from offset %d on (older segments expired): copying from there",
                 member_id, local_end)
    elif local_end < st.commit_log_min_offset:
        raise CatchUpError(f"peer {member_id} no longer has the commit log from offset {local_end} (its oldest is "
                           f"{st.commit_log_min_offset}); this member was away longer than the retention time: move "
                           "its data directory away and start it empty to rebuild it from the group")
    log.info("catching up from %s: commit log %d -> %d (Raft index %d -> %d)", member_id, local_end,
             st.commit_log_max_offset, local_index, st.applied_index)
    if copying is not None:
        copying(member_id, local_end, st.commit_log_max_offset)
    end_offset, end_index = fetch_range(peers, member_id, store, local_end, st.applied_index)
    applier.import_metadata(json.loads(st.metadata))
    applied.reset([(st.applied_index, end_offset, end_offset)])
    store.confirm_offset = end_offset
    log.info("caught up from %s to commit-log offset %d, Raft index %d", member_id, end_offset, st.applied_index)
    return True

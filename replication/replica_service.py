"""ReplicaService: the gRPC side of replication that pysyncobj cannot carry (see replica.proto).

The node registers it on its (grpc.aio) server before the write path exists, with a getter, so peers can catch
up from this member as soon as its Raft write path is started:
``replica_pb2_grpc.add_ReplicaServiceServicer_to_server(ReplicaServicer(lambda: broker.write_path, secret), srv)``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Callable
from typing import Any

import grpc

from raftmq.replication.catch_up import next_chunk_offset
from raftmq.replication.commit_log_digest import digest_commit_log
from raftmq.replication.consume_queue_digest import digest_consume_queue
from raftmq.replication.peers import SECRET_METADATA_KEY
from raftmq.replication.write_path import MemberInfo
from raftmq.store.errors import StoreError
from raftmq.v1 import replica_pb2, replica_pb2_grpc

log = logging.getLogger(__name__)


async def _write(context: grpc.aio.ServicerContext, chunk: Any, offset: int, peer: str) -> bool:
    """Send one chunk of a copy to ``peer``; False when it has gone (closed the stream, or its connection
    dropped)."""
    try:
        await context.write(chunk)
    except grpc.aio.InternalError as e:  # ExecuteBatchError: the send failed, the stream is gone
        log.info("peer %s closed the commit-log copy at offset %d before its end (%s)", peer, offset,
                 type(e).__name__)
        return False
    return True

MAX_CHUNK = 4 << 20
DEFAULT_CHECKSUM_CHUNK = 1 << 20
MAX_CHECKSUM_CHUNK = 16 << 20
MAX_CHECKSUM_BYTES_PER_CALL = 64 << 20  # one call digests at most this much; the caller pages on
MAX_CHECKSUM_CHUNKS_PER_CALL = 4096     # and answers at most this many digests (tiny chunks stay small answers)
MAX_CHECKSUM_QUEUE_UNITS_PER_CALL = 1 << 20  # consume-queue units (20 bytes each) one call digests in all
MAX_BLOCK_FETCH = 1 << 20  # bytes one FetchCommitLogBytes call returns


def membership_fields(wp: Any) -> dict:
    """GetReplicaStatus's membership fields: the applied record, the voters of the configuration, own role."""
    record = wp.machine.membership
    lg = wp._log
    return {"membership": json.dumps(record.to_dict()) if record is not None else "",
            "voters": sorted(lg.voter_addresses) if lg is not None else [],
            "membership_role": wp.role or ""}


class ReplicaServicer(replica_pb2_grpc.ReplicaServiceServicer):
    def __init__(self, get_write_path: Callable[[], Any], secret: str = "",
                 readiness: Callable[[], tuple[bool, str]] | None = None,
                 acl_key_ids: Callable[[], list[str]] | None = None):
        """``readiness``: the node's own /ready verdict, so a leader's cluster status shows each peer's real one;
        ``acl_key_ids``: fingerprints of the keys the node opens user secrets with (key rotation)."""
        self._get = get_write_path
        self._secret = secret
        self._readiness = readiness
        self._acl_key_ids = acl_key_ids

    async def _write_path(self, context: grpc.aio.ServicerContext, started: bool = True) -> Any:
        """The write path, once started (``started``) or as soon as it exists; aborts the call otherwise."""
        if self._secret:
            got = dict(context.invocation_metadata()).get(SECRET_METADATA_KEY, "")
            if not hmac.compare_digest(got, self._secret):
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, "replica call without the right cluster "
                                    "secret: set the same cluster.secret on every member")
        wp = self._get()
        if wp is None or (started and getattr(wp, "machine", None) is None):
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                "this member's Raft write path is not started (single node, or still starting)")
        return wp

    async def GetReplicaStatus(self, request, context):
        wp = await self._write_path(context)
        if request.skip_metadata:
            (idx, end), metadata = await asyncio.to_thread(wp.machine.applied_position), None
        else:
            idx, end, metadata = await asyncio.to_thread(wp.machine.status_view)
        store = wp.store
        leader = wp.leader()
        ready, reason = self._readiness() if self._readiness is not None else (None, "")
        return replica_pb2.GetReplicaStatusResponse(
            ready=ready, not_ready_reason="" if ready else reason,
            member_id=wp.node_id, is_leader=wp.is_leader(), leader_id=leader.id if leader else "",
            raft_term=wp.term(), applied_index=idx, commit_log_min_offset=store.commit_log_min_offset,
            commit_log_max_offset=end, commit_log_file_size=store.config.mapped_file_size_commit_log,
            metadata=json.dumps(metadata).encode() if metadata is not None else b"", commit_index=wp.commit_index(),
            raft_applied_index=wp.raft_applied_index(), dispatch_behind_bytes=store.dispatch_behind_bytes(),
            storage_integrity=store.integrity_summary(),
            acl_key_ids=self._acl_key_ids() if self._acl_key_ids is not None else [],
            **membership_fields(wp))

    async def JoinGroup(self, request, context) -> replica_pb2.JoinGroupResponse:  # noqa: N802
        """A member the group does not list asks to be added as a learner (docs/design/membership.md)."""
        wp = await self._write_path(context)
        if not request.member_id or not request.raft_address or not request.grpc_address:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "JoinGroup needs member_id, raft_address and "
                                "grpc_address")
        if not wp.is_leader():
            leader = wp.leader()
            return replica_pb2.JoinGroupResponse(refusal=f"{wp.node_id} is not the leader (the leader is "
                                                 f"{leader.id if leader else 'unknown'}); ask it")
        member = MemberInfo(request.member_id, request.raft_address, request.grpc_address)
        refusal = await asyncio.to_thread(wp.changes.admit, member)
        return replica_pb2.JoinGroupResponse(refusal=refusal)

    async def GetStartupState(self, request, context):
        """Answered while this member is still starting too (replication/fresh_start.py)."""
        wp = await self._write_path(context, started=False)
        record = getattr(wp, "startup", None)
        if record is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this node runs without Raft (single node)")
        state = record.answer(request.incarnation)
        if state is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this member is still opening its store")
        return state

    async def FetchCommitLog(self, request, context) -> None:
        """Stream the committed commit log from ``from_offset`` in whole records, paced by the catch-up throttle.

        Written with ``context.write`` rather than yielded: a peer that closes the copy early (a repair needs only
        its damaged range; a peer that stopped) can make a write fail before gRPC knows the peer went away, and
        gRPC logged that as an ERROR with a traceback when the failure happened in its own write of a yielded
        chunk. Here it is caught, and is the INFO line it is (issue 34)."""
        wp = await self._write_path(context)
        peer = context.peer()  # (empty once its connection is gone)
        found = wp.machine.applied.end_at_or_before(request.up_to_index)
        if found is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"Raft index {request.up_to_index} is older than this member's applied-index tail; "
                                "ask GetReplicaStatus again and fetch up to its applied_index")
        end_index, end = found
        store = wp.store
        pos = request.from_offset
        if pos < store.commit_log_min_offset or pos > end:
            await context.abort(grpc.StatusCode.OUT_OF_RANGE, f"from_offset {pos} is outside this member's commit "
                                f"log [{store.commit_log_min_offset}, {end})")
        throttle = wp.catch_up_throttle
        if not throttle.try_open():
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"member {wp.node_id} already serves {throttle.max_streams} commit-log copies "
                                "(cluster.raft.catch_up_max_streams); retry in a few seconds or fetch from another "
                                "member")
        try:
            chunk = throttle.chunk_bytes(min(request.max_chunk_bytes or (1 << 20), MAX_CHUNK))
            while pos < end:
                want = min(chunk, end - pos)
                wait = throttle.bucket.reserve(want)  # before reading: the limit spares the disk, not just the wire
                if wait:
                    try:
                        await asyncio.sleep(wait)
                    except asyncio.CancelledError:  # the peer went away: nothing was read, give the budget back
                        throttle.bucket.refund(want)
                        raise
                data = await asyncio.to_thread(store.read_commit_log, pos, want)
                if not data:
                    await context.abort(grpc.StatusCode.INTERNAL, f"commit log unreadable at offset {pos}")
                extra = len(data) - want
                if extra > 0:  # one record larger than the chunk: sent whole, and paid for
                    wait = throttle.bucket.reserve(extra)
                    if wait:
                        await asyncio.sleep(wait)
                else:  # stopped short at a record or segment end
                    throttle.bucket.refund(-extra)
                if not await _write(context, replica_pb2.CommitLogChunk(offset=pos, data=bytes(data)), pos, peer):
                    return
                throttle.served(len(data))
                pos = next_chunk_offset(pos, data, store.config.mapped_file_size_commit_log)
            await _write(context, replica_pb2.CommitLogChunk(offset=pos, last=True, end_offset=end,
                                                             end_index=end_index), pos, peer)
        finally:
            throttle.close()

    async def SyncJournal(self, request, context):
        wp = await self._write_path(context)
        durable, durable_index = await asyncio.to_thread(wp.sync_local, request.index, request.term, 5.0)
        return replica_pb2.SyncJournalResponse(durable=durable, durable_index=durable_index)

    async def ChecksumCommitLog(self, request, context):
        """SHA-256 per chunk of the applied commit log in [from_offset, to_offset) (see commit_log_digest)."""
        wp = await self._write_path(context)
        start, stop = request.from_offset, request.to_offset
        chunk = request.chunk_bytes or DEFAULT_CHECKSUM_CHUNK
        if start < 0 or stop < start:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad range [{start}, {stop}): need "
                                "0 <= from_offset <= to_offset")
        if not 0 < chunk <= MAX_CHECKSUM_CHUNK:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"chunk_bytes {chunk} must be 1..{MAX_CHECKSUM_CHUNK} "
                                "(0 means 1 MiB)")
        index, applied = await asyncio.to_thread(wp.machine.applied_position)
        store = wp.store
        low = store.commit_log_min_offset
        if stop > applied:
            await context.abort(grpc.StatusCode.OUT_OF_RANGE, f"to_offset {stop} is past what member {wp.node_id} has "
                                f"applied ({applied}): only committed bytes are compared; ask up to {applied}, or wait "
                                "until it has caught up")
        if start < low:
            await context.abort(grpc.StatusCode.OUT_OF_RANGE, f"from_offset {start} is before member {wp.node_id}'s "
                                f"first retained commit-log offset {low} (older segments went to retention): start "
                                f"at {low} or later")
        try:
            chunks, end = await asyncio.to_thread(digest_commit_log, store, start, stop, chunk,
                                                  MAX_CHECKSUM_BYTES_PER_CALL, MAX_CHECKSUM_CHUNKS_PER_CALL)
        except StoreError as exc:  # retention deleted a segment during the call
            await context.abort(grpc.StatusCode.OUT_OF_RANGE, f"{exc}; start the check again at "
                                f"{store.commit_log_min_offset} or later")
        return replica_pb2.ChecksumCommitLogResponse(
            member_id=wp.node_id, end_offset=end, applied_offset=applied, applied_index=index, min_offset=low,
            chunks=[replica_pb2.CommitLogDigest(offset=c.offset, length=c.length, sha256=c.sha256) for c in chunks])

    async def FetchCommitLogBytes(self, request, context):
        """Raw applied commit-log bytes of one block (anti-entropy replaces a differing local copy with them)."""
        wp = await self._write_path(context)
        start, stop = request.from_offset, request.to_offset
        if not 0 <= start < stop or stop - start > MAX_BLOCK_FETCH:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad range [{start}, {stop}): need 0 <= from_offset "
                                f"< to_offset and at most {MAX_BLOCK_FETCH} bytes")
        _index, applied = await asyncio.to_thread(wp.machine.applied_position)
        store = wp.store
        if stop > applied or start < store.commit_log_min_offset:
            await context.abort(grpc.StatusCode.OUT_OF_RANGE, f"[{start}, {stop}) is outside what member {wp.node_id} "
                                f"has applied: [{store.commit_log_min_offset}, {applied})")
        wait = wp.catch_up_throttle.bucket.reserve(stop - start)
        if wait:
            await asyncio.sleep(wait)
        data = bytearray()
        try:
            while len(data) < stop - start:
                piece = await asyncio.to_thread(store.read_commit_log_bytes, start + len(data),
                                                stop - start - len(data))
                if not piece:
                    raise StoreError(f"commit log unreadable at offset {start + len(data)}")
                data += piece
        except StoreError as exc:  # retention deleted the segment meanwhile
            await context.abort(grpc.StatusCode.OUT_OF_RANGE, str(exc))
        return replica_pb2.FetchCommitLogBytesResponse(offset=start, data=bytes(data))

    async def ChecksumConsumeQueues(self, request, context):
        """List this member's queues, or SHA-256 of the asked dispatched unit ranges (see consume_queue_digest)."""
        wp = await self._write_path(context)
        store = wp.store
        if not request.ranges:
            return replica_pb2.ChecksumConsumeQueuesResponse(member_id=wp.node_id, queues=[
                replica_pb2.ConsumeQueueDigest(topic=t, queue_id=q, min_offset=cq.get_min_offset_in_queue(),
                                               max_offset=cq.get_max_offset_in_queue())
                for t in sorted(store.consume_queues.topics()) for q in store.consume_queues.queue_ids(t)
                if (cq := store.consume_queues.get(t, q)) is not None])
        total = sum(max(0, r.to_offset - r.from_offset) for r in request.ranges)
        if total > MAX_CHECKSUM_QUEUE_UNITS_PER_CALL:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{total} units asked in one call; at most "
                                f"{MAX_CHECKSUM_QUEUE_UNITS_PER_CALL}: split the ranges over several calls")
        out = []
        for r in request.ranges:
            name = f"{r.topic}/{r.queue_id}"
            if r.from_offset < 0 or r.to_offset < r.from_offset:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad range [{r.from_offset}, {r.to_offset}) "
                                    f"for {name}: need 0 <= from_offset <= to_offset")
            cq = store.consume_queues.get(r.topic, r.queue_id)
            if cq is None:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"member {wp.node_id} has no consume queue {name}")
            low, high = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
            if r.to_offset > high or r.from_offset < low:
                await context.abort(grpc.StatusCode.OUT_OF_RANGE, f"[{r.from_offset}, {r.to_offset}) is outside what "
                                    f"member {wp.node_id} has dispatched of {name}: [{low}, {high}); list the queues "
                                    "again (no ranges) and ask within every member's range")
            try:
                digest = await asyncio.to_thread(digest_consume_queue, cq, r.from_offset, r.to_offset)
            except StoreError as exc:
                await context.abort(grpc.StatusCode.OUT_OF_RANGE, f"{exc}; list the queues again")
            out.append(replica_pb2.ConsumeQueueDigest(topic=r.topic, queue_id=r.queue_id, min_offset=low,
                                                      max_offset=high, from_offset=r.from_offset,
                                                      to_offset=r.to_offset, sha256=digest))
        return replica_pb2.ChecksumConsumeQueuesResponse(member_id=wp.node_id, queues=out)

"""Prove the members' commit logs byte-identical over the range all of them hold (``raftmq cluster check``).

The members come from the cluster status of any given server; each is then asked directly, on its own address,
for SHA-256 digests of fixed-size chunks (``ReplicaService.ChecksumCommitLog``, the cluster secret in metadata
when one is set). Only the committed prefix counts: the range checked is [the largest first retained offset, the
smallest applied end) of the reachable members. Pages are asked of every member at once; the first chunk whose
digests differ is narrowed down to a 4 KiB block and the check stops there. Consume queues are compared the same
way (``ChecksumConsumeQueues``), each over the queue offsets every member has dispatched, down to the first
differing unit.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from raftmq.client.admin import Admin
from raftmq.client.errors import (
    InvalidArgumentError,
    PermissionDeniedError,
    RaftmqError,
    UnavailableError,
    from_rpc_error,
)
from raftmq.client.security import ClientSecurity
from raftmq.v1 import replica_pb2 as rpb
from raftmq.v1 import replica_pb2_grpc as rpb_grpc

ALGORITHM = "sha256"
SECRET_METADATA_KEY = "x-raftmq-secret"
SECRET_ENV = "RAFTMQ_CLUSTER_SECRET"  # the node reads cluster.secret from the same variable
DEFAULT_CHUNK = 1 << 20
MIN_CHUNK = 4096
MAX_CHUNK = 16 << 20  # the server's limit
REFINE_BLOCK = 4096   # a differing chunk is narrowed down to a block of this size
QUEUE_UNITS_PER_CALL = 1 << 20  # the server's limit of consume-queue units per ChecksumConsumeQueues call

IDENTICAL = "identical"
MATCHES_MAJORITY = "matches majority"
DIFFERS = "DIFFERS"
UNREACHABLE = "unreachable"
NOT_COMPARED = "not compared"  # fewer than two members reachable, or no byte all of them hold
LAGS = "LAGS"  # still behind what the others had applied when the check began, after the whole lag wait
DEFAULT_LAG_WAIT_S = 10.0
LAG_POLL_S = 0.2


@dataclass
class MemberCheck:
    """One member's part of the check. ``checked_to`` is exclusive; ``verdict`` one of the constants above."""

    id: str
    address: str
    min_offset: int | None = None
    applied_offset: int | None = None
    checked_from: int = 0
    checked_to: int = 0
    verdict: str = ""
    queue_verdict: str = ""  # the same for its consume queues ("" when they were not compared)
    error: str = ""
    applied_index: int | None = None
    lag: str = ""  # why it lags (the LAGS verdict), "" when it reached the others in time
    lag_bytes: int = 0  # commit-log bytes it was still behind then

    @property
    def bytes_checked(self) -> int:
        return max(0, self.checked_to - self.checked_from)


@dataclass
class Difference:
    """The first place the members disagree: [offset, end) inside the chunk [chunk_offset, chunk_end)."""

    offset: int
    end: int
    chunk_offset: int
    chunk_end: int
    differing: list[str]
    majority: list[str]  # empty when no digest is held by more than half of the compared members


@dataclass
class QueueDifference:
    """The first consume-queue unit the members disagree on: queue offsets [from_offset, to_offset)."""

    topic: str
    queue_id: int
    from_offset: int
    to_offset: int
    differing: list[str]
    majority: list[str]


@dataclass
class CheckReport:
    algorithm: str
    chunk_bytes: int
    range_from: int
    range_to: int
    members: list[MemberCheck] = field(default_factory=list)
    difference: Difference | None = None
    answered_by: str = ""
    queues_compared: int = 0        # queues every member has
    queue_units: int = 0            # units in their common dispatched ranges
    queue_difference: QueueDifference | None = None
    queues_not_everywhere: list[str] = field(default_factory=list)

    @property
    def unreachable(self) -> list[MemberCheck]:
        return [m for m in self.members if m.verdict == UNREACHABLE]

    @property
    def lagging(self) -> list[MemberCheck]:
        return [m for m in self.members if m.lag]

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["identical"] = (self.difference is None and self.queue_difference is None and not self.lagging
                          and any(m.verdict == IDENTICAL for m in self.members))
        for m, member in zip(d["members"], self.members, strict=True):
            m["bytes_checked"] = member.bytes_checked
        return d


class NothingToCompareError(RaftmqError):
    """The group has one member: there are no replicas to compare."""


class _Unreachable(Exception):
    """A member that did not answer (connection refused, deadline, not started)."""


class ReplicaChecker:
    """Compares the members of the cluster that any of ``servers`` belongs to. ``secret``: cluster.secret."""

    def __init__(self, servers: str | Iterable[str] | None, *, secret: str = "", timeout: float = 10.0,
                 security: ClientSecurity | None = None):
        self._servers = servers
        self._security = ClientSecurity.from_env() if security is None else security
        self._timeout = timeout
        self._metadata = ((SECRET_METADATA_KEY, secret),) if secret else ()
        self._channels: dict[str, grpc.Channel] = {}

    def check(self, *, from_offset: int = 0, max_bytes: int | None = None, chunk_bytes: int = DEFAULT_CHUNK,
              progress: Callable[[int, int], None] | None = None, queues: bool = True,
              lag_wait_s: float = DEFAULT_LAG_WAIT_S, group: str = "") -> CheckReport:
        """Digest and compare [max(from_offset, common start), common end), at most ``max_bytes`` of it; with
        ``queues`` also every consume queue over the range all members have dispatched.

        The common range says nothing of a member stuck far behind, so afterwards every member must also reach
        what the most advanced one had applied when the check began (Raft index and commit-log end); one that
        has not within ``lag_wait_s`` gets the LAGS verdict and a ``lag`` reason.

        Raises ``InvalidArgumentError`` for bad bounds, ``PermissionDeniedError`` for a wrong or missing secret,
        ``NothingToCompareError`` when there is nothing to compare (a single member). ``group``: the members of that
        group of the cluster (issue 38; the answering member relays the question of its members there)."""
        if from_offset < 0:
            raise InvalidArgumentError(f"from offset {from_offset} is negative: commit-log offsets start at 0")
        if not MIN_CHUNK <= chunk_bytes <= MAX_CHUNK:
            raise InvalidArgumentError(f"chunk size {chunk_bytes} must be {MIN_CHUNK}..{MAX_CHUNK} bytes")
        if max_bytes is not None and max_bytes <= 0:
            raise InvalidArgumentError(f"bytes to check {max_bytes} must be > 0 (omit it to check everything)")
        if lag_wait_s < 0:
            raise InvalidArgumentError(f"lag wait {lag_wait_s} must be >= 0 seconds")
        self._lag_wait_s = lag_wait_s
        with Admin(self._servers, timeout=self._timeout, retry_timeout=self._timeout,
                   security=self._security) as admin:
            status = admin.cluster_status(group=group)
        if len(status.members) < 2:
            what = f"group {group} has a single member" if group else f"{status.answered_by} is a single-member cluster"
            raise NothingToCompareError(f"{what}: there are no replicas to compare")
        members = [MemberCheck(m.id, m.grpc_address) for m in sorted(status.members, key=lambda m: m.id)]
        with futures.ThreadPoolExecutor(max_workers=len(members), thread_name_prefix="check") as pool:
            self._pool = pool
            return self._check(members, status.answered_by, from_offset, max_bytes, chunk_bytes, progress, queues)

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()
        self._channels.clear()

    def __enter__(self) -> ReplicaChecker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ steps

    def _check(self, members: list[MemberCheck], answered_by: str, from_offset: int, max_bytes: int | None,
               chunk: int, progress: Callable[[int, int], None] | None, queues: bool) -> CheckReport:
        statuses = self._ask(members, lambda stub: stub.GetReplicaStatus(
            rpb.GetReplicaStatusRequest(skip_metadata=True), timeout=self._timeout, metadata=self._metadata))
        sizes = {s.commit_log_file_size for s in statuses.values()}
        if len(sizes) > 1:
            raise RaftmqError(f"members use different commit-log segment sizes {sorted(sizes)}: "
                              "store.mapped_file_size_commit_log must be the same everywhere")
        for m in members:
            if m.id in statuses:
                m.min_offset = statuses[m.id].commit_log_min_offset
                m.applied_offset = statuses[m.id].commit_log_max_offset
                m.applied_index = statuses[m.id].applied_index
        live = [m for m in members if m.verdict != UNREACHABLE]
        target = max(((m.applied_index, m.applied_offset) for m in live), default=None)
        lo = hi = from_offset
        if live:
            lo = max(from_offset, *(m.min_offset for m in live))
            hi = min(m.applied_offset for m in live)
            if from_offset > hi:
                raise InvalidArgumentError(f"--from {from_offset} is past the committed range every reachable "
                                           f"member holds (it ends at {hi}): give an offset below {hi}")
            hi = max(lo, hi)
            if max_bytes is not None:
                hi = min(hi, lo + max_bytes)
        report = CheckReport(ALGORITHM, chunk, lo, hi, members, answered_by=answered_by)
        self._compare_commit_logs(report, live, progress)
        if queues:
            self._compare_queues(report, [m for m in members if m.verdict != UNREACHABLE])
        live = [m for m in members if m.verdict != UNREACHABLE]
        for m in live:
            m.verdict = _verdict(m.id, report.difference, len(live) >= 2 and report.range_to > report.range_from)
            if queues:
                m.queue_verdict = _verdict(m.id, report.queue_difference,
                                           len(live) >= 2 and report.queues_compared > 0)
        if target is not None:
            self._wait_for_laggards(live, target)
        return report

    def _wait_for_laggards(self, live: list[MemberCheck], target: tuple[int, int]) -> None:
        """Give every member ``lag_wait_s`` to reach ``target`` (Raft index, commit-log end): what the most
        advanced member had applied when the check began. One that does not LAGS, with the reason."""
        behind = [m for m in live if (m.applied_index, m.applied_offset) < target]
        deadline = time.monotonic() + self._lag_wait_s
        says: dict[str, str] = {}  # what a lagging member's own readiness says
        while behind:
            statuses = self._ask(behind, lambda stub: stub.GetReplicaStatus(
                rpb.GetReplicaStatusRequest(skip_metadata=True), timeout=self._timeout, metadata=self._metadata))
            for m in behind:
                st = statuses.get(m.id)
                if st is not None:
                    m.applied_index, m.applied_offset = st.applied_index, st.commit_log_max_offset
                    says[m.id] = st.not_ready_reason
            behind = [m for m in behind if m.verdict != UNREACHABLE and (m.applied_index, m.applied_offset) < target]
            if not behind or time.monotonic() >= deadline:
                break
            time.sleep(LAG_POLL_S)
        for m in behind:
            why = f"; it says: {says[m.id]}" if says.get(m.id) else ""
            m.lag = (f"applied Raft index {m.applied_index} and commit log to {m.applied_offset}, behind index "
                     f"{target[0]} / offset {target[1]} ({target[1] - m.applied_offset} bytes) after "
                     f"{self._lag_wait_s:g}s{why}")
            m.lag_bytes = target[1] - m.applied_offset
            m.verdict = LAGS

    def _compare_commit_logs(self, report: CheckReport, live: list[MemberCheck],
                             progress: Callable[[int, int], None] | None) -> None:
        lo, hi, chunk = report.range_from, report.range_to, report.chunk_bytes
        for m in live:
            m.checked_from = m.checked_to = lo
        pos = lo
        while pos < hi and len(live) >= 2 and report.difference is None:
            answers = self._ask(live, self._digests(pos, hi, chunk))
            live = [m for m in live if m.verdict != UNREACHABLE]
            if len(live) < 2:
                break
            end = min(answers[m.id].end_offset for m in live)
            lists = [[c for c in answers[m.id].chunks if c.offset < end] for m in live]
            for i, row in enumerate(zip(*lists, strict=True)):
                if len({(c.offset, c.length) for c in row}) != 1:
                    raise RaftmqError(f"members answered different chunk bounds at page {pos}: {row}")
                if len({c.sha256 for c in row}) > 1:
                    report.difference = self._locate(live, row[0].offset, row[0].offset + row[0].length,
                                                     {m.id: lst[i].sha256 for m, lst in zip(live, lists, strict=True)})
                    end = row[0].offset + row[0].length
                    break
            for m in live:
                m.checked_to = end
            pos = end
            if progress is not None:
                progress(pos - lo, hi - lo)

    def _compare_queues(self, report: CheckReport, live: list[MemberCheck]) -> None:
        """Every queue all members have, over [largest min, smallest dispatched end); the first differing unit."""
        if len(live) < 2:
            return
        listings = self._ask(live, self._queue_digests([]))
        live = [m for m in live if m.verdict != UNREACHABLE]
        if len(live) < 2:
            return
        held = {m.id: {(q.topic, q.queue_id): (q.min_offset, q.max_offset) for q in listings[m.id].queues}
                for m in live}
        pieces: list[tuple[str, int, int, int]] = []
        for key in sorted(set().union(*held.values())):
            missing = [m.id for m in live if key not in held[m.id]]
            if missing:
                report.queues_not_everywhere.append(f"{key[0]}/{key[1]} (not on {', '.join(missing)})")
                continue
            lo = max(held[m.id][key][0] for m in live)
            hi = min(held[m.id][key][1] for m in live)
            report.queues_compared += 1
            report.queue_units += max(0, hi - lo)
            pieces += [(*key, a, min(a + QUEUE_UNITS_PER_CALL, hi)) for a in range(lo, hi, QUEUE_UNITS_PER_CALL)]
        batch: list[tuple[str, int, int, int]] = []
        for i, piece in enumerate(pieces):
            batch.append(piece)
            if i + 1 < len(pieces) and sum(p[3] - p[2] for p in batch) + pieces[i + 1][3] - pieces[i + 1][2] \
                    <= QUEUE_UNITS_PER_CALL:
                continue
            found, live = self._first_queue_difference(live, batch)
            batch = []
            if len(live) < 2:  # members went away mid-check: they are reported unreachable, the queues unchecked
                report.queues_compared = report.queue_units = 0
                return
            if found is not None:
                report.queue_difference = found
                return

    def _first_queue_difference(self, live: list[MemberCheck], ranges: list[tuple[str, int, int, int]]
                                ) -> tuple[QueueDifference | None, list[MemberCheck]]:
        """Compare ``ranges``; narrow the first differing one down to one unit (up to 64 pieces per round).
        Also returns the members still reachable."""
        while True:
            answers = self._ask(live, self._queue_digests(ranges))
            live = [m for m in live if m.verdict != UNREACHABLE]
            if len(live) < 2:
                return None, live
            for i in range(len(ranges)):
                digests = {m.id: answers[m.id].queues[i].sha256 for m in live}
                if len(set(digests.values())) > 1:
                    break
            else:
                return None, live
            topic, qid, a, b = ranges[i]
            if b - a <= 1:
                differing, majority = _split_majority(digests)
                return QueueDifference(topic, qid, a, b, differing, majority), live
            step = -(-(b - a) // 64)
            ranges = [(topic, qid, x, min(x + step, b)) for x in range(a, b, step)]

    def _queue_digests(self, ranges: list[tuple[str, int, int, int]]):
        req = rpb.ChecksumConsumeQueuesRequest(ranges=[
            rpb.ConsumeQueueRange(topic=t, queue_id=q, from_offset=a, to_offset=b) for t, q, a, b in ranges])
        return lambda stub: stub.ChecksumConsumeQueues(req, timeout=self._timeout, metadata=self._metadata)

    def _digests(self, pos: int, hi: int, chunk: int):
        req = rpb.ChecksumCommitLogRequest(from_offset=pos, to_offset=hi, chunk_bytes=chunk)
        return lambda stub: stub.ChecksumCommitLog(req, timeout=self._timeout, metadata=self._metadata)

    def _locate(self, live: list[MemberCheck], start: int, stop: int, digests: dict[str, bytes]) -> Difference:
        """Narrow the differing chunk [start, stop) to its first differing block (one more call per member)."""
        where, at = (start, stop), digests
        if stop - start > REFINE_BLOCK:
            answers = self._ask(live, self._digests(start, stop, REFINE_BLOCK))
            answered = [m for m in live if m.id in answers and answers[m.id].end_offset == stop]
            if len(answered) == len(live):
                for row in zip(*(answers[m.id].chunks for m in live), strict=True):
                    if len({c.sha256 for c in row}) > 1:
                        where = (row[0].offset, row[0].offset + row[0].length)
                        at = {m.id: c.sha256 for m, c in zip(live, row, strict=True)}
                        break
        differing, majority = _split_majority(at)
        return Difference(where[0], where[1], start, stop, differing, majority)

    def _ask(self, members: list[MemberCheck], call) -> dict:
        """``call(stub)`` on every member at once; unreachable members are marked so and left out."""
        jobs = {m.id: self._pool.submit(self._one, m, call) for m in members}
        out = {}
        for m in members:
            try:
                out[m.id] = jobs[m.id].result()
            except _Unreachable as exc:
                m.verdict, m.error = UNREACHABLE, str(exc)
        return out

    def _one(self, m: MemberCheck, call):
        channel = self._channels.get(m.address)
        if channel is None:
            channel = self._channels[m.address] = self._security.channel(m.address, [])
        try:
            return call(rpb_grpc.ReplicaServiceStub(channel))
        except grpc.RpcError as e:
            err = from_rpc_error(e, m.address)
            if e.code() == grpc.StatusCode.PERMISSION_DENIED:
                raise PermissionDeniedError(
                    f"member {m.id} ({m.address}) refused the check: {e.details()} (give the cluster secret in "
                    f"${SECRET_ENV} or with --secret-file)", address=m.address, code=e.code()) from None
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise RaftmqError(f"member {m.id} ({m.address}) cannot answer the check (UNIMPLEMENTED: an older "
                                  "raftmq?): upgrade it first", address=m.address, code=e.code()) from None
            if isinstance(err, UnavailableError):
                raise _Unreachable(err.message) from None
            raise type(err)(f"member {m.id} ({m.address}): {err.message}", address=m.address,
                            code=e.code()) from None


def _split_majority(digests: dict[str, bytes]) -> tuple[list[str], list[str]]:
    """(differing, majority) member ids: the majority holds the digest more than half of them have, if any."""
    top, count = Counter(digests.values()).most_common(1)[0]
    majority = sorted(i for i, d in digests.items() if d == top) if 2 * count > len(digests) else []
    return sorted(i for i in digests if i not in majority), majority


def _verdict(member_id: str, difference: Difference | QueueDifference | None, compared: bool) -> str:
    if not compared:
        return NOT_COMPARED
    if difference is None:
        return IDENTICAL
    return DIFFERS if member_id in difference.differing else MATCHES_MAJORITY

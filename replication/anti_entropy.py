"""Anti-entropy: compare this member's commit log with its peers' and replace every block that differs from the
majority (issue 33 item 1).

Why: RocketMQ's format covers only a record's body with a CRC. A byte that rots in a record's properties or
timestamps (its UNIQ_KEY, the message id clients see) leaves a record every check accepts, and the member serves
the altered message for good. But the members of a group hold byte-identical commit logs
(docs/architecture.md#contracts, 1), so the bytes a majority agrees on are the bytes that were written.

How: a background pass walks the range every member has applied ([largest first retained offset, smallest
applied end)) from the oldest byte on, at most ``rate`` bytes a second. For each page it digests its own 1 MiB
chunks and asks every peer for theirs (``ReplicaService.ChecksumCommitLog``, what ``raftmq cluster check`` uses).
A chunk whose digest differs from the one a majority of the *group* holds is narrowed to 4 KiB blocks the same
way, and each differing block is fetched whole from a member of that majority (``FetchCommitLogBytes``),
checked against the majority's SHA-256 and written in place (``MessageStore.overwrite_commit_log_block``). A
block with no majority (members down, or all disagreeing) is left alone, counted as unrepaired and retried by the
next pass.

``heal_range`` is also how damage the scrubber or a read finds is repaired while serving: the whole blocks
around it are compared and replaced, not only the bytes from the damaged record's start (rot that also hit the
end of the record before it is healed with it).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from raftmq.replication.catch_up import peer_statuses
from raftmq.replication.commit_log_digest import digest_commit_log
from raftmq.replication.peers import Peers
from raftmq.store.errors import StoreError
from raftmq.store.service_thread import ServiceThread
from raftmq.v1 import replica_pb2

log = logging.getLogger(__name__)

BLOCK = 4096  # the unit compared and replaced
CHUNK = 1 << 20  # the unit a pass compares first (a differing chunk is narrowed to blocks)
PAGE = 16 << 20  # commit-log bytes compared per round of calls
CALL_TIMEOUT_S = 30.0
FIRST_PASS_DELAY_S = 30.0  # after the start (or the interval, when shorter)


@dataclass
class HealResult:
    """What ``heal_range`` did: blocks replaced (offset, peer), blocks that differ but have no majority."""

    replaced: list[tuple[int, str]] = field(default_factory=list)
    unresolved: list[int] = field(default_factory=list)
    compared: int = 0  # members whose digests were compared, this one included


class _Members:
    """The digests of the group for one range, asked of every reachable peer at once."""

    def __init__(self, peers: Peers, pool: futures.ThreadPoolExecutor) -> None:
        self.peers = peers
        self.pool = pool

    def digests(self, start: int, end: int, chunk: int) -> dict[str, list[bytes]]:
        """Peer id -> SHA-256 of each ``chunk`` of [start, end) (peers that cannot answer all of it are left out)."""
        req = replica_pb2.ChecksumCommitLogRequest(from_offset=start, to_offset=end, chunk_bytes=chunk)

        def ask(member_id: str) -> list[bytes]:
            out: list[bytes] = []
            pos = start
            while pos < end:
                req.from_offset = pos
                resp = self.peers.stub(member_id).ChecksumCommitLog(req, timeout=CALL_TIMEOUT_S,
                                                                    metadata=self.peers.metadata)
                if resp.end_offset <= pos:
                    raise StoreError(f"{member_id} answered no chunk at {pos}")
                out += [c.sha256 for c in resp.chunks]
                pos = resp.end_offset
            return out

        calls = {m.id: self.pool.submit(ask, m.id) for m in self.peers.others}
        out: dict[str, list[bytes]] = {}
        for mid, call in calls.items():
            try:
                out[mid] = call.result()
            except (grpc.RpcError, StoreError) as e:
                log.debug("anti-entropy: %s gave no digests for [%d, %d): %s", mid, start, end, e)
        return out

    def fetch(self, member_id: str, start: int, end: int) -> bytes:
        resp = self.peers.stub(member_id).FetchCommitLogBytes(
            replica_pb2.FetchCommitLogBytesRequest(from_offset=start, to_offset=end), timeout=CALL_TIMEOUT_S,
            metadata=self.peers.metadata)
        return resp.data


def _majority(digests: dict[str, bytes], group_size: int) -> bytes | None:
    """The digest more than half of the whole group holds, if any."""
    if not digests:
        return None
    top, count = Counter(digests.values()).most_common(1)[0]
    return top if 2 * count > group_size else None


def heal_range(peers: Peers, store: Any, group_size: int, start: int, end: int,
               pool: futures.ThreadPoolExecutor, *, known_bad: tuple[int, int] | None = None) -> HealResult:
    """Compare the 4 KiB blocks covering [start, end) with the peers' and replace each one this member holds
    differently from the majority of the group with a majority member's verified copy.

    ``known_bad``: a range the record checks found damaged here; blocks overlapping it are replaced with the copy
    every answering peer agrees on even without a majority of the group (this member's copy is known wrong)."""
    out = HealResult()
    members = _Members(peers, pool)
    low = store.commit_log_min_offset
    a = max(low, start - start % BLOCK)
    b = min(store.commit_log_max_offset, -(-end // BLOCK) * BLOCK)
    if b <= a:
        return out
    theirs = members.digests(a, b, BLOCK)
    mine, _ = digest_commit_log(store, a, b, BLOCK, b - a, (b - a) // BLOCK + 1)
    out.compared = 1 + len(theirs)
    for i, own in enumerate(mine):
        row = {mid: d[i] for mid, d in theirs.items() if i < len(d)}
        everyone = {**row, peers.self_id: own.sha256}
        want = _majority(everyone, group_size)
        block_end = own.offset + own.length
        if want is None and known_bad is not None and own.offset < known_bad[1] and known_bad[0] < block_end:
            agreed = set(row.values())
            want = agreed.pop() if len(agreed) == 1 else None
        if want == own.sha256:
            continue
        if want is None:
            if len(set(everyone.values())) > 1:
                out.unresolved.append(own.offset)
            continue
        for mid in (m for m, d in row.items() if d == want):
            try:
                data = members.fetch(mid, own.offset, block_end)
            except grpc.RpcError as e:
                log.warning("anti-entropy: fetching [%d, %d) from %s failed: %s", own.offset, block_end, mid,
                            e.code().name)
                continue
            if hashlib.sha256(data).digest() != want:
                log.error("anti-entropy: %s sent [%d, %d) that does not match the majority's digest", mid,
                          own.offset, block_end)
                continue
            store.overwrite_commit_log_block(own.offset, data)
            out.replaced.append((own.offset, mid))
            break
        else:
            out.unresolved.append(own.offset)
    return out


def record_replaced(store: Any, replaced: Sequence[tuple[int, str]]) -> None:
    """Log blocks replaced with the majority's copy and tell the store (it counts what was not known damage yet,
    re-verifies the damaged records they cover and re-checks their consume-queue units)."""
    if not replaced:
        return
    runs = _runs([o for o, _ in replaced])
    for a, b in runs:
        who = sorted({mid for o, mid in replaced if a <= o < b})
        log.critical("commit log [%d, %d) differed from the majority of the group; replaced with %s's copy", a, b,
                     ", ".join(who))
    store.commit_log_blocks_replaced(runs)


class AntiEntropy(ServiceThread):
    """The background pass of one member; see the module docstring. ``stats()`` feeds metrics."""

    def __init__(self, store: Any, peers: Peers, rate_bytes_per_s: int, interval_s: float) -> None:
        self.store = store
        self.peers = peers
        self.rate = max(1, rate_bytes_per_s)
        self.interval_s = interval_s
        super().__init__("anti-entropy")
        self._pool = futures.ThreadPoolExecutor(max_workers=max(1, len(peers.others)),
                                                thread_name_prefix="anti-entropy")
        self._next_free = 0.0
        self.position = 0
        self.bytes_compared = 0
        self.passes = 0
        self.last_pass_ms = 0
        self.last_pass_seconds = 0.0
        self.blocks_repaired = 0
        self.unrepaired: set[int] = set()  # block offsets that differ without a majority (retried each pass)
        self.last_problem = ""

    @property
    def group_size(self) -> int:
        """The voters of the group now (the configuration changes: docs/design/membership.md)."""
        return self.peers.group_size()

    # ------------------------------------------------------------------ one pass
    def run_pass(self) -> int:
        """Compare the whole common range once; returns the number of blocks replaced."""
        started = time.monotonic()
        errors: dict[str, str] = {}
        statuses = peer_statuses(self.peers, timeout=5.0, errors=errors, with_metadata=False)
        if 2 * (len(statuses) + 1) <= self.group_size:
            self.last_problem = f"no majority reachable to compare with ({'; '.join(errors.values())})"
            log.info("anti-entropy pass skipped: %s", self.last_problem)
            return 0
        store = self.store
        lo = max([store.commit_log_min_offset, *(s.commit_log_min_offset for s in statuses.values())])
        hi = min([store.commit_log_max_offset, *(s.commit_log_max_offset for s in statuses.values())])
        lo -= lo % CHUNK
        replaced = 0
        pos = lo
        members = _Members(self.peers, self._pool)
        while pos < hi and not self.stopped:
            end = min(hi, pos + PAGE)
            self.position = pos
            try:
                replaced += self._compare_page(members, pos, end)
            except StoreError as e:  # retention deleted the range meanwhile: go on after it
                log.info("anti-entropy: [%d, %d) skipped: %s", pos, end, e)
            self.bytes_compared += end - pos
            self._pace(end - pos)
            pos = end
        if not self.stopped:
            self.passes += 1
            self.last_pass_ms = time.time_ns() // 1_000_000
            self.last_pass_seconds = time.monotonic() - started
            log.info("anti-entropy pass %d: [%d, %d) compared with %d peer(s) in %.1fs, %d block(s) replaced, "
                     "%d without a majority", self.passes, lo, hi, len(statuses), self.last_pass_seconds, replaced,
                     len(self.unrepaired))
        return replaced

    def _compare_page(self, members: _Members, start: int, end: int) -> int:
        theirs = members.digests(start, end, CHUNK)
        mine, _ = digest_commit_log(self.store, start, end, CHUNK, end - start, (end - start) // CHUNK + 1)
        replaced = 0
        for i, own in enumerate(mine):
            row = {mid: d[i] for mid, d in theirs.items() if i < len(d)}
            want = _majority({**row, self.peers.self_id: own.sha256}, self.group_size)
            chunk_end = own.offset + own.length
            if want == own.sha256:
                self._forget_unrepaired(own.offset, chunk_end)
                continue
            if want is None and len({*row.values(), own.sha256}) == 1:
                continue  # too few peers answered to tell, and those agree
            replaced += self._heal(own.offset, chunk_end)
        return replaced

    def _heal(self, start: int, end: int) -> int:
        result = heal_range(self.peers, self.store, self.group_size, start, end, self._pool)
        self._forget_unrepaired(start, end)
        self.unrepaired.update(result.unresolved)
        if result.unresolved:
            self.last_problem = (f"{len(result.unresolved)} block(s) in [{start}, {end}) differ and no majority of "
                                 f"the group holds one copy ({result.compared} members compared)")
            log.error("anti-entropy: %s", self.last_problem)
        self.blocks_repaired += len(result.replaced)
        record_replaced(self.store, result.replaced)
        return len(result.replaced)

    def _forget_unrepaired(self, start: int, end: int) -> None:
        self.unrepaired = {o for o in self.unrepaired if not start <= o < end}

    # ------------------------------------------------------------------ pacing and thread
    def _pace(self, nbytes: int) -> None:
        """Sleep as long as needed to stay at or below the rate after comparing ``nbytes``."""
        now = time.monotonic()
        self._next_free = max(self._next_free, now) + nbytes / self.rate
        delay = self._next_free - now
        if delay > 0:
            self.wait(delay)

    def run(self) -> None:
        wait = min(FIRST_PASS_DELAY_S, self.interval_s)
        while not self.wait(wait):
            wait = self.interval_s
            try:
                self.run_pass()
            except Exception:
                log.exception("anti-entropy pass failed; the next one starts in %ss", self.interval_s)

    def shutdown(self) -> None:
        super().shutdown()
        self._pool.shutdown(wait=True)

    def stats(self) -> dict[str, object]:
        return {
            "anti_entropy_bytes_total": self.bytes_compared,
            "anti_entropy_position": self.position,
            "anti_entropy_passes": self.passes,
            "anti_entropy_last_pass_timestamp_ms": self.last_pass_ms,
            "anti_entropy_last_pass_seconds": self.last_pass_seconds,
            "anti_entropy_blocks_repaired_total": self.blocks_repaired,
            "anti_entropy_unrepaired_blocks": len(self.unrepaired),
        }


def _runs(offsets: Sequence[int]) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges of the blocks at ``offsets``."""
    out: list[tuple[int, int]] = []
    for o in sorted(offsets):
        if out and out[-1][1] == o:
            out[-1] = (out[-1][0], o + BLOCK)
        else:
            out.append((o, o + BLOCK))
    return out

"""Deduplicator: the leader's screening of puts against the window before they are proposed.

Why on the leader (docs/design/deduplication.md#where-the-decision-is-made): duplicates never enter the log, so a
window that differs between members can never make their commit logs differ. The leader's view is complete: the
window holds every applied id (a new leader applied everything before its barrier), and the in-flight map every
id it proposed and has not applied yet. A retry of an in-flight id waits for the original's result; if the
original ends UNKNOWN, so does the retry (it is the same message).

Threads: ``screen`` and ``keys_of`` run on the committer thread (one at a time), ``applied`` on the apply thread
(every member), the rest wherever a put fails; the window's lock keeps the window and the in-flight map in step.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from functools import partial
from typing import Any

from raftmq.replication.dedup_window import DedupWindow, dedup_topic
from raftmq.replication.errors import UnknownOutcomeError
from raftmq.replication.group_commit import PendingPut, estimate_size
from raftmq.store.commit_log import AppendResult
from raftmq.store.message import create_message_id

log = logging.getLogger(__name__)


def duplicate_of(original: AppendResult, uniq_key: str | None) -> AppendResult:
    """The answer to a retry: the original's result, flagged."""
    r = AppendResult(original.physical_offset, original.queue_offset, original.wrote_bytes,
                     original.store_timestamp, original.topic, original.queue_id, original._host)
    r.uniq_key = uniq_key
    r.duplicate = True
    return r


class _Assembly:
    """One caller's put whose messages got their results from different places: its own new messages (``inner``,
    proposed), the window (at once) or another put still in flight (a slot)."""

    __slots__ = ("put", "results", "waiting", "lock")

    def __init__(self, put: PendingPut):
        self.put = put
        self.results: list[AppendResult | None] = [None] * len(put.msgs)
        self.waiting = 0
        self.lock = threading.Lock()

    def wait_for(self, fut: Future, place: Any) -> None:
        """``place``: a message index (a slot's result, flagged) or a list of indexes (the inner put's results)."""
        with self.lock:
            self.waiting += 1
        fut.add_done_callback(lambda f: self._done(f, place))

    def _done(self, fut: Future, place: Any) -> None:
        exc = fut.exception()
        if exc is not None:
            self.put.fail(exc)
            return
        value = fut.result()
        with self.lock:
            if isinstance(place, int):
                self.results[place] = duplicate_of(value, self.put.msgs[place].uniq_key)
            else:
                for i, r in zip(place, value, strict=True):
                    self.results[i] = r
            self.waiting -= 1
            complete = self.waiting == 0
        if complete:
            self.put.resolve(self.results)


class Deduplicator:
    """Screens puts on the leader and keeps the window on every member (``applied``)."""

    def __init__(self, window: DedupWindow, store: Any):
        self.window = window
        self.store = store
        # id -> None, or the Future a retry waits on (made only then: most ids never see a retry); it settles with
        # the record's AppendResult when the id is applied here, or, when ``settle_at_apply`` is off, when its
        # put is acknowledged
        self._inflight: dict[bytes, Future | None] = {}
        # False under ``sync`` durability (RaftWritePath): an applied entry is acknowledged only once a majority
        # made it durable, so a retry waits for the original's acknowledgement, not for its apply. Ids whose put
        # ended unknown before they applied are ``_orphans``: their apply settles them.
        self.settle_at_apply = True
        self._orphans: set[bytes] = set()
        # id(put) -> each message's id for ``keys_of``, of the last screened batch only (its puts are alive until
        # it is encoded; None: not judged; b"": no UNIQ_KEY yet, made by the encoder)
        self._screened: dict[int, list[bytes | None]] = {}
        # the term this member leads with a complete window (``lead``); 0 for the single-node path, which always
        # leads; None: no term (a replicated member until its barrier applied, and after it lost leadership)
        self._term: int | None = 0

    # ------------------------------------------------------------------ leader: before proposing
    def lead(self, term: int | None) -> None:
        """This member leads ``term`` with a complete window (its barrier entry applied), or None: it leads no term
        (``leadership_lost`` sets it too). Screening registers in-flight ids for that term only."""
        with self.window.lock:
            self._term = term

    def screen(self, puts: list[PendingPut], now_ms: int, term: int = 0) -> list[PendingPut] | None:
        """The puts to propose in place of ``puts``: each caller's duplicates are answered from the window or
        wait for the in-flight original; its new messages go on (the caller's own put when all are new).

        None when this member no longer leads ``term`` (the term the caller read before screening): nothing is
        registered or answered, and the caller fails the puts. An id registered after ``leadership_lost`` cleared
        the in-flight map would stay there for good, and every retry of it would wait for an original that never
        applies."""
        window = self.window
        inflight = self._inflight
        judge, find = window.judge, window.find
        screened: list[tuple[PendingPut, list[bytes | None], dict[int, Any] | None]] = []
        with window.lock:
            if term != self._term:
                return None
            for put in puts:
                ids: list[bytes | None] = []  # each proposed message's id (None: not judged; b"": no UNIQ_KEY yet)
                dups: dict[int, Any] | None = None  # message index -> its original's result, or the Future of one
                for i, m in enumerate(put.msgs):
                    j = judge(m.topic, m.properties)
                    if j is None:
                        ids.append(b"" if m.properties is not None and "UNIQ_KEY" not in m.properties else None)
                        continue
                    topic, key, window_ms = j
                    if key in inflight:
                        dup: Any = self._slot(key)
                    else:
                        hit = find(key, now_ms, window_ms)
                        dup = self._original(hit, topic, m.uniq_key) if hit is not None else None
                        if dup is None:
                            inflight[key] = None
                            ids.append(key)
                            continue
                    window.duplicates[topic] += 1
                    if dups is None:
                        dups = {}
                    dups[i] = dup
                screened.append((put, ids, dups))
        out: list[PendingPut] = []
        self._screened = by_put = {}
        for put, ids, dups in screened:
            if dups is None:
                self._follow(put, ids)
                by_put[id(put)] = ids
                out.append(put)
                continue
            asm = _Assembly(put)
            new = [i for i in range(len(put.msgs)) if i not in dups]
            if new:
                inner = PendingPut([put.msgs[i] for i in new], sum(estimate_size(put.msgs[i]) for i in new))
                self._follow(inner, ids)
                by_put[id(inner)] = ids
                asm.wait_for(inner.future, new)
                out.append(inner)
            for i, dup in dups.items():
                if isinstance(dup, Future):
                    asm.wait_for(dup, i)
                else:
                    asm.results[i] = duplicate_of(dup, put.msgs[i].uniq_key)
            with asm.lock:
                if asm.waiting == 0:
                    put.resolve(asm.results)
        return out

    def _slot(self, key: bytes) -> Future:
        """The Future a retry of in-flight ``key`` waits on (window lock held)."""
        slot = self._inflight[key]
        if slot is None:
            slot = self._inflight[key] = Future()
        return slot

    def _original(self, hit: tuple[int, int], topic: str, uniq_key: str | None) -> AppendResult | None:
        """The result the original send got, read back from its record; None when it cannot be read any more
        (retention deleted its segment) or is not that message: the message is then stored again."""
        try:
            ext = self.store.view_message(hit[1])
        except Exception as e:  # noqa: BLE001 - a damaged record: store the message again rather than fail it
            log.warning("the original of a retried message at offset %d cannot be read (%s); storing it again",
                        hit[1], e)
            return None
        if ext is None or ext.properties.get("UNIQ_KEY") != uniq_key or dedup_topic(ext.topic, ext.properties) != topic:
            return None
        host = create_message_id(ext.store_host, 0)[:-16]
        r = AppendResult(ext.physical_offset, ext.queue_offset, ext.store_size, ext.store_timestamp, ext.topic,
                         ext.queue_id, host)
        r.uniq_key = uniq_key
        return r

    def _follow(self, put: PendingPut, ids: list[bytes | None]) -> None:
        """What the end of a put whose messages have ``ids`` (those it registered in flight are the non-empty
        ones) does to them (``_ended``)."""
        if any(ids):
            put.on_end = partial(self._ended, ids)

    def _ended(self, ids: list[bytes | None], outcome: Any) -> None:
        """A put that registered ``ids`` ended with ``outcome`` (its results or an exception). One that failed for
        sure before its entry could be in the log (refused, invalid, not leader) frees them; one whose outcome is
        unknown keeps them until the entry applies here or the leadership is lost (``leadership_lost``), so a
        retry meanwhile waits instead of storing the message a second time; an acknowledged one settles them
        when they are not settled at apply."""
        if not isinstance(outcome, BaseException):
            if not self.settle_at_apply:
                self._settle([(key, outcome[i]) for i, key in enumerate(ids) if key])
        elif isinstance(outcome, UnknownOutcomeError):
            if not self.settle_at_apply:
                self._orphan([key for key in ids if key], outcome)
        else:
            self._abandon([key for key in ids if key], outcome)

    def _settle(self, done: list[tuple[bytes, AppendResult]]) -> None:
        with self.window.lock:
            slots = [(self._inflight.pop(key, None), r) for key, r in done]
        for slot, r in slots:
            if slot is not None and not slot.done():
                slot.set_result(r)

    def _orphan(self, keys: list[bytes], exc: BaseException) -> None:
        """Ids whose put ended unknown while their apply settles nothing: one already applied is in the window
        (a retry finds it there; those waiting now hear "unknown" and retry); the others wait for their apply."""
        with self.window.lock:
            applied = [k for k in keys if k in self._inflight and k in self.window]
            self._orphans.update(k for k in keys if k in self._inflight and k not in applied)
        self._abandon(applied, exc)

    def _abandon(self, keys: list[bytes], exc: BaseException) -> None:
        with self.window.lock:
            slots = [self._inflight.pop(k, None) for k in keys]
            self._orphans.difference_update(keys)
        for s in slots:
            if s is not None and not s.done():
                s.set_exception(exc)

    def leadership_lost(self, exc: BaseException) -> None:
        """Every in-flight id's outcome is now unknown here; the next leader's window holds those that commit."""
        with self.window.lock:
            self._term = None
            slots = list(self._inflight.values())
            self._inflight.clear()
            self._orphans.clear()
        for s in slots:
            if s is not None and not s.done():
                s.set_exception(exc)

    def keys_of(self, puts: list[PendingPut]) -> list[tuple[int, bytes]]:
        """(record index, id) of the judged records of a batch encoded from ``puts`` (screened just before); they
        travel in the Raft command so that every member adds them at apply. A message that had no UNIQ_KEY when
        it was screened got one from the encoder: its id is made now."""
        out: list[tuple[int, bytes]] = []
        i = 0
        key_of = self.window.key_of
        screened = self._screened
        for put in puts:
            msgs = put.msgs
            ids = screened.get(id(put))
            if ids is None or len(ids) != len(msgs):
                ids = [b""] * len(msgs)
            for j, key in enumerate(ids):
                if key == b"":
                    m = msgs[j]
                    key = key_of(m.topic, m.properties)
                if key is not None:
                    out.append((i + j, key))
            i += len(msgs)
        return out

    # ------------------------------------------------------------------ every member: at apply
    def rebuild(self) -> None:
        """The window from this member's commit log (start, rewind, snapshot install, copy from peers)."""
        found = self.window.rebuild(self.store)
        log.info("de-duplication window rebuilt from the commit log: %d ids", found)

    def applied(self, keys: list[tuple[int, bytes]], results: list[AppendResult]) -> None:
        """The batch's judged records were applied: into the window, and settle any retry waiting for them."""
        if not keys:
            return
        settled = []
        with self.window.lock:
            self.window.add_batch(results[0].store_timestamp, [key for _i, key in keys],
                                  [results[i].physical_offset for i, _key in keys])
            inflight = self._inflight
            if inflight:
                if self.settle_at_apply:
                    for i, key in keys:
                        slot = inflight.pop(key, None)
                        if slot is not None:
                            settled.append((slot, results[i]))
                elif self._orphans:  # the others are settled by their put's acknowledgement (``_follow``)
                    orphans = self._orphans
                    for i, key in keys:
                        if key in orphans:
                            orphans.discard(key)
                            slot = inflight.pop(key, None)
                            if slot is not None:
                                settled.append((slot, results[i]))
        for slot, r in settled:
            if not slot.done():
                slot.set_result(r)

"""Transactional messages (RocketMQ 4.9): the records of a transaction, and the bookkeeping of the half queue.

A half message waits in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 (a NOT_TYPE record: in that topic's consume queue and
index, invisible to consumers of its real topic). Commit writes the real record (type COMMIT) plus an op message in
``RMQ_SYS_TRANS_OP_HALF_TOPIC`` whose body is the half record's queue offset; rollback writes only the op message.
The check service walks the half queue from the internal group's offset: a record with an op is done; an old one
is checked with its producer (a renewed copy with ``TRANSACTION_CHECK_TIMES`` + 1 is appended, as RocketMQ's
``renewHalfMessageInner``), or discarded to ``TRANS_CHECK_MAX_TIME_TOPIC`` after too many checks.

Why everything is records and offsets: the progress is then made of replicated puts plus the ``CID_RMQ_SYS_TRANS``
consumer offsets, so a new leader resumes exactly where the store says. A transaction is identified by its
UNIQ_KEY across renewed copies: an op for any copy finishes all of them. This module only builds records and reads
the store; the caller puts through its write path.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from raftmq.store.dispatch import TRANSACTION_COMMIT_TYPE, TRANSACTION_TYPE_MASK
from raftmq.store.errors import StoreError
from raftmq.store.java import JavaHashMap
from raftmq.store.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_CLUSTER,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_WAIT_STORE_MSG_OK,
    Message,
    MessageExt,
)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYSTEM_GROUP = "CID_RMQ_SYS_TRANS"
REMOVE_TAG = "d"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
OP_PROPERTIES = f"WAIT{NAME_VALUE_SEPARATOR}true{PROPERTY_SEPARATOR}TAGS{NAME_VALUE_SEPARATOR}{REMOVE_TAG}"
SCAN_LIMIT = 1024  # half records looked at per scan; the rest waits for the next one


COMMITTED, ROLLED_BACK, DISCARDED = "committed", "rolled back", "discarded"


class TransactionStateError(Exception):
    """An end-transaction request that cannot be applied; ``kind``: "not_found", "finished", "mismatch", "busy".

    For "finished", ``outcome`` says how it ended (COMMITTED, ROLLED_BACK or DISCARDED) and ``committed`` is the
    real record of a committed one (None when retention removed it), so a repeated outcome can be answered."""

    def __init__(self, kind: str, message: str, outcome: str | None = None,
                 committed: MessageExt | None = None):
        super().__init__(message)
        self.kind = kind
        self.outcome = outcome
        self.committed = committed


# ------------------------------------------------------------------------------------------------ records
def _serialize(m: JavaHashMap) -> str:
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in m.items())


def _reserialize(props: dict[str, str]) -> JavaHashMap:
    """``MessageDecoder.string2messageProperties`` then a map: keys in stored order into a fresh HashMap."""
    m = JavaHashMap()
    for k, v in props.items():
        m.put(k, v)
    return m


def half_message(msg: Message, producer_group: str, cluster_name: str) -> Message:
    """``parseHalfMessageInner`` for a producer's message (real topic and queue set, properties in client order).

    The broker's map: client properties + TRAN_MSG + PGROUP, CLUSTER put, WAIT removed and put back, then REAL_TOPIC
    and REAL_QID; the string is re-serialized from that map (docs/design/store-formats.md#properties).
    """
    m = JavaHashMap()
    for k, v in msg.properties.items():
        m.put(k, v)
    m.put(PROPERTY_TRANSACTION_PREPARED, "true")
    m.put(PROPERTY_PRODUCER_GROUP, producer_group)
    m.put(PROPERTY_CLUSTER, cluster_name)
    wait = msg.properties.get(PROPERTY_WAIT_STORE_MSG_OK, "true")
    m.remove(PROPERTY_WAIT_STORE_MSG_OK)
    m.put(PROPERTY_WAIT_STORE_MSG_OK, wait)
    m.put(PROPERTY_REAL_TOPIC, msg.topic)
    m.put(PROPERTY_REAL_QUEUE_ID, str(msg.queue_id))
    return Message(topic=HALF_TOPIC, queue_id=0, body=msg.body, properties=dict(m.items()),
                   properties_string=_serialize(m), flag=msg.flag, sys_flag=msg.sys_flag & ~TRANSACTION_TYPE_MASK,
                   born_timestamp=msg.born_timestamp, born_host=msg.born_host, reconsume_times=msg.reconsume_times)


def _copy(half: MessageExt, topic: str, queue_id: int, props: JavaHashMap, sys_flag: int,
          prepared_offset: int = 0) -> Message:
    return Message(topic=topic, queue_id=queue_id, body=half.body, properties=dict(props.items()),
                   properties_string=_serialize(props), flag=half.flag, sys_flag=sys_flag,
                   born_timestamp=half.born_timestamp, born_host=half.born_host,
                   reconsume_times=half.reconsume_times, prepared_transaction_offset=prepared_offset)


def commit_message(half: MessageExt) -> Message:
    """``EndTransactionProcessor.endMessageTransaction``: the real record, type COMMIT, pointing at the half record.

    Its properties string is taken before REAL_TOPIC, REAL_QID and TRAN_MSG are cleared, so it keeps them.
    """
    props = half.properties
    sys_flag = (half.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE
    return _copy(half, props[PROPERTY_REAL_TOPIC], int(props[PROPERTY_REAL_QUEUE_ID]), _reserialize(props),
                 sys_flag, prepared_offset=half.physical_offset)


def op_message(half_queue_offset: int, broker_host: tuple[str, int], now_ms: int | None = None) -> Message:
    """``makeOpMessageInner``: body = the half record's queue offset, tag ``d``, no UNIQ_KEY in the string."""
    ts = int(time.time() * 1000) if now_ms is None else now_ms
    return Message(topic=OP_TOPIC, queue_id=0, body=str(half_queue_offset).encode(),
                   properties={"WAIT": "true", "TAGS": REMOVE_TAG}, properties_string=OP_PROPERTIES,
                   born_timestamp=ts, born_host=broker_host)


def check_times(half: MessageExt) -> int:
    try:
        return int(half.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES, "0"))
    except ValueError:
        return 0


def renewed_half(half: MessageExt, times: int) -> Message:
    """``renewHalfMessageInner``: the same half message appended again, its check count set to ``times``."""
    props = _reserialize(half.properties)
    props.put(PROPERTY_TRANSACTION_CHECK_TIMES, str(times))
    return _copy(half, HALF_TOPIC, 0, props, half.sys_flag)


def discarded_message(half: MessageExt) -> Message:
    """``toMessageExtBrokerInner`` of the check listener: the half message moved to TRANS_CHECK_MAX_TIME_TOPIC."""
    return _copy(half, CHECK_MAX_TOPIC, 0, _reserialize(half.properties), half.sys_flag)


def real_topic(half: MessageExt) -> str:
    return half.properties.get(PROPERTY_REAL_TOPIC, "")


def producer_group(half: MessageExt) -> str:
    return half.properties.get(PROPERTY_PRODUCER_GROUP, "")


# ------------------------------------------------------------------------------------------------ bookkeeping
@dataclass
class ScanResult:
    """What one pass over the half queue found; the caller acts on ``due`` then commits the two offsets."""

    due: list[MessageExt]  # timed out, unresolved, in queue order
    half_offset: int  # next half-queue offset once ``due`` is handled
    op_offset: int  # next op-queue offset (ops below it are no longer needed)
    half_from: int
    op_from: int
    more: bool = False  # the window ended before the queue did with nothing left waiting: scan again at once


class TransactionLog:
    """Reads the half and op queues of a store (any replica; the leader acts on what it finds).

    The op messages from the committed op offset on are cached (read once each, with the UNIQ_KEY of the half
    record they finish), so deciding whether a transaction is open costs a set lookup, not a pass over every op
    since the last check. Thread-safe.
    """

    def __init__(self, store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._ops: list[tuple[int, int, str | None]] = []  # (op queue offset, half queue offset, UNIQ_KEY)
        self._ops_from = 0
        self._ops_end = 0
        self._done_offsets: set[int] = set()
        self._done_keys: set[str] = set()
        self._halves: list[tuple[int, str | None, str]] = []  # (half queue offset, UNIQ_KEY, real topic), for pending()
        self._halves_from = 0
        self._halves_end = 0

    def catch_up(self, timeout_s: float = 10.0) -> None:
        """Wait until the consume queues hold every record stored so far (an op message just written included).

        Why: a put returns once its record is in the commit log; the op queue gets it from the reput thread a
        moment later, and "is this transaction still open?" must not miss it.
        """
        st = self.store
        target = st.confirm_offset
        deadline = time.monotonic() + timeout_s
        while st.confirm_offset - st.dispatch_behind_bytes() < target:  # a lower bound of the dispatched offset
            if time.monotonic() > deadline:
                raise TransactionStateError(
                    "busy", f"the consume queues are {st.dispatch_behind_bytes()} bytes behind the commit log; "
                    "retry shortly")
            time.sleep(0.001)

    def progress(self) -> tuple[int, int]:
        """(half offset, op offset) of ``CID_RMQ_SYS_TRANS``, clamped into each queue's range."""
        st = self.store
        out = []
        for topic in (HALF_TOPIC, OP_TOPIC):
            off = st.consumer_offsets.offsets(SYSTEM_GROUP, topic).get(0, 0)
            lo, hi = st.min_offset_in_queue(topic, 0), st.max_offset_in_queue(topic, 0)
            out.append(min(max(off, lo), hi))
        return out[0], out[1]

    def _half_at(self, queue_offset: int) -> MessageExt | None:
        got = self.store.get_messages(HALF_TOPIC, 0, queue_offset, 1, 1 << 30, None)
        return got.messages[0] if got.messages else None

    def _refresh_ops(self, op_from: int) -> None:
        """Bring the op cache to [op_from, end of the op queue) (under the lock)."""
        st = self.store
        if op_from < self._ops_from or op_from > self._ops_end or st.max_offset_in_queue(OP_TOPIC, 0) < self._ops_end:
            self._ops, self._ops_from, self._ops_end = [], op_from, op_from  # another window (or a truncation)
            self._done_offsets, self._done_keys = set(), set()
        elif op_from > self._ops_from:
            self._ops = [e for e in self._ops if e[0] >= op_from]
            self._ops_from = op_from
            self._done_offsets = {h for _, h, _ in self._ops}
            self._done_keys = {k for _, _, k in self._ops if k}
        offset = self._ops_end
        while True:
            got = st.get_messages(OP_TOPIC, 0, offset, 256, 4 << 20, None)
            if not got.messages:
                break
            for m in got.messages:
                try:
                    half_off = int(m.body.decode("ascii"))
                except (ValueError, UnicodeDecodeError):
                    continue  # not an op message of ours: nothing it could finish
                half = self._half_at(half_off)
                key = half.uniq_key if half is not None else None
                self._ops.append((m.queue_offset, half_off, key))
                self._done_offsets.add(half_off)
                if key:
                    self._done_keys.add(key)
            offset = got.next_begin_offset
        self._ops_end = offset

    def _refresh_halves(self, half_from: int) -> None:
        """Bring the half-record cache to [half_from, end of the half queue) (under the lock)."""
        st = self.store
        if (half_from < self._halves_from or half_from > self._halves_end
                or st.max_offset_in_queue(HALF_TOPIC, 0) < self._halves_end):
            self._halves, self._halves_from, self._halves_end = [], half_from, half_from
        elif half_from > self._halves_from:
            self._halves = [h for h in self._halves if h[0] >= half_from]
            self._halves_from = half_from
        offset = self._halves_end
        while True:
            got = st.get_messages(HALF_TOPIC, 0, offset, 256, 4 << 20, None)
            if not got.messages:
                break
            self._halves.extend((m.queue_offset, m.uniq_key, real_topic(m)) for m in got.messages)
            offset = got.next_begin_offset
        self._halves_end = offset

    def pending(self) -> dict[str, int]:
        """Open transactions by real topic: half records from the check progress on that no op finishes, counted
        once per UNIQ_KEY (a renewed copy is the same transaction). Reads only what was appended since the last
        call (both caches are incremental)."""
        half_from, op_from = self.progress()
        with self._lock:
            self._refresh_ops(op_from)
            self._refresh_halves(half_from)
            open_tx: dict[object, str] = {}
            for offset, key, topic in self._halves:
                if offset in self._done_offsets or (key and key in self._done_keys):
                    continue
                open_tx[key or offset] = topic
        counts: dict[str, int] = {}
        for topic in open_tx.values():
            counts[topic] = counts.get(topic, 0) + 1
        return counts

    def ops(self, op_from: int) -> list[tuple[int, int, str | None]]:
        """Op messages from ``op_from``: (op queue offset, half queue offset, UNIQ_KEY of that half record)."""
        with self._lock:
            self._refresh_ops(op_from)
            return list(self._ops)

    def _is_done(self, op_from: int, half: MessageExt) -> bool:
        with self._lock:
            self._refresh_ops(op_from)
            return half.queue_offset in self._done_offsets or half.uniq_key in self._done_keys

    def scan(self, now_ms: int, timeout_ms: int, limit: int = SCAN_LIMIT) -> ScanResult:
        self.catch_up()
        half_from, op_from = self.progress()
        ops = self.ops(op_from)
        done_offsets = {h for _, h, _ in ops}
        done_keys = {k for _, _, k in ops if k}
        got = self.store.get_messages(HALF_TOPIC, 0, half_from, limit, 16 << 20, None)
        records = got.messages
        due: list[MessageExt] = []
        half_offset = half_from
        rest: list[MessageExt] = []
        for i, m in enumerate(records):
            if m.queue_offset in done_offsets or m.uniq_key in done_keys:
                half_offset = m.queue_offset + 1
                continue
            if now_ms - m.store_timestamp < timeout_ms:
                rest = records[i:]
                break
            due.append(m)
            half_offset = m.queue_offset + 1
        op_offset = op_from
        read_all = not records or got.next_begin_offset >= got.max_offset
        if read_all:  # the whole pending window is known: drop ops nothing pending refers to
            pending = {m.uniq_key for m in rest} | {m.uniq_key for m in due}
            for op_q, half_off, key in ops:
                if half_off >= half_offset or key in pending:
                    break
                op_offset = op_q + 1
        return ScanResult(due, half_offset, op_offset, half_from, op_from, more=not read_all and not rest)

    def open_half(self, physical_offset: int, transaction_id: str, group: str) -> MessageExt:
        """The half record an end-transaction request names, if its transaction is still open.

        Raises TransactionStateError: "not_found" (no such half message), "mismatch" (another producer group's),
        "finished" (committed, rolled back, or discarded after too many checks), "busy" (dispatch far behind).
        """
        st = self.store
        self.catch_up()
        half = st.view_message(physical_offset) if physical_offset >= 0 else None
        if half is None or half.topic != HALF_TOPIC or (transaction_id and half.uniq_key != transaction_id):
            raise TransactionStateError(
                "not_found", f"no half message for transaction {transaction_id!r} at that msg_id (never sent, or "
                "removed by retention); pass the msg_id and transaction_id that SendHalfMessage returned")
        if producer_group(half) != group:
            raise TransactionStateError(
                "mismatch", f"transaction {half.uniq_key!r} belongs to producer group {producer_group(half)!r}, "
                f"not {group!r}")
        half_from, op_from = self.progress()
        if self._is_done(op_from, half):
            raise self._finished(half)
        if half.queue_offset < half_from:
            # passed by the check service: still open only through a renewed copy it appended later
            if not any(c.queue_offset >= half_from for c in self._copies(HALF_TOPIC, half.uniq_key)):
                raise self._finished(half)
        return half

    def _copies(self, topic: str, uniq_key: str | None) -> list[MessageExt]:
        if not uniq_key:
            return []
        found = self.store.query_messages(topic, uniq_key, 64, 0, int(time.time() * 1000) + 1000)
        return [m for m in found if m.uniq_key == uniq_key]

    def _finished(self, half: MessageExt) -> TransactionStateError:
        """How a finished transaction ended, from the records it left (found through the index)."""
        key = half.uniq_key
        try:
            commits = [m for m in self._copies(real_topic(half), key)
                       if m.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE]
            discarded = not commits and self._copies(CHECK_MAX_TOPIC, key)
        except StoreError as e:  # message_index_enable=false: the records cannot be looked up by key
            return TransactionStateError("finished", f"transaction {key!r} is already finished (how is unknown: {e})")
        if commits:
            outcome, how = COMMITTED, COMMITTED
        elif discarded:
            outcome, how = DISCARDED, f"discarded to {CHECK_MAX_TOPIC} after too many checks"
        else:
            outcome, how = ROLLED_BACK, ROLLED_BACK
        return TransactionStateError("finished", f"transaction {key!r} is already finished ({how})", outcome,
                                     min(commits, key=lambda m: m.physical_offset) if commits else None)


__all__ = [
    "CHECK_MAX_TOPIC", "COMMITTED", "DISCARDED", "HALF_TOPIC", "OP_TOPIC", "ROLLED_BACK", "SYSTEM_GROUP",
    "ScanResult", "TransactionLog", "TransactionStateError", "check_times", "commit_message", "discarded_message",
    "half_message", "op_message", "producer_group", "real_topic", "renewed_half",
]

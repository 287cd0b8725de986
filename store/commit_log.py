"""CommitLog: RocketMQ 4.9's append-only message log over a MappedFileQueue.

The write path is split in two for replication (docs/architecture.md#contracts, 1):

* ``encode_batch`` (leader only) validates messages and encodes final records with STORETIMESTAMP and
  STOREHOST fixed and QUEUEOFFSET / PHYSICALOFFSET left 0, wrapped in a self-describing batch frame;
* ``apply_batch`` (every replica) assigns queue offsets from the ``topic-queueId`` table and physical
  offsets at the log end, writes the end-of-file blank record and rolls exactly like RocketMQ, and copies
  the batch into the mapped file in one slice assignment, patching the two offset fields in place.

Applying the same frames to two empty logs yields byte-identical segment files.

Batch frame v1 (big-endian)::

    magic u32 "RPB1" | version u8 = 1 | flags u8 (bit0: has prepared/rollback records) | host_len u8 (4|16)
    | reserved u8 | store_ts i64 | store_ip 16 bytes (host_len used) | store_port i32 | count u32
    | nkeys u32 | payload_len u32                                       -- 48 bytes
    keys[nkeys]: topic_len u8 + topic + queue_id i32
    sizes[count]: u32 record size
    key_refs[count]: u32 key index, bit 31 set = the record does not advance its queue offset
    payload: the records back to back
    crc32 u32 over everything above
"""

from __future__ import annotations

import enum
import logging
import struct
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import concat, itemgetter

from raftmq.store.checkpoint import StoreCheckpoint
from raftmq.store.config import END_FILE_MIN_BLANK_LENGTH, StoreConfig
from raftmq.store.dispatch import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    DispatchRequest,
)
from raftmq.store.errors import (
    BatchFormatError,
    DiskFullError,
    MessageIllegalError,
    OffsetMismatchError,
    PropertiesSizeExceededError,
)
from raftmq.store.integrity import CorruptionError, CorruptRecord, scan_segment, segment_layout_problems
from raftmq.store.mapped_file import MappedFile
from raftmq.store.mapped_file_queue import MappedFileQueue
from raftmq.store.message import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_CODE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_CLUSTER,
    PROPERTY_SEPARATOR,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    QUEUE_OFFSET_POSITION,
    RECORD_FIXED_PART,
    STOREHOSTADDRESS_V6_FLAG,
    SYSFLAG_POSITION,
    Message,
    RecordStatus,
    UniqKeyGenerator,
    broker_order,
    check_frame,
    check_properties,
    check_topic,
    decode_dispatch,
    host_to_bytes,
    parse_delay_levels,
    properties_without_wait,
)

log = logging.getLogger("raftmq.store.commit_log")

BATCH_MAGIC = 0x52504231  # "RPB1"
BATCH_VERSION = 1
FLAG_HAS_TRANSACTIONAL = 0x1
NO_ADVANCE = 0x80000000

_BATCH_HEAD = struct.Struct(">IBBBBq16siIII")
_BLANK = struct.Struct(">ii")
_QQ = struct.Struct(">qq")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_KEY_TAIL = struct.Struct(">i")
_B = struct.Struct(">B")
_ZERO_CHUNK = bytes(1 << 20)
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_HEX2 = tuple(f"{b:02X}" for b in range(256))
_FIXED_PACKS = {sw: {bw: RECORD_FIXED_PART[bw, sw].pack for bw in (4, 16)} for sw in (4, 16)}
_UNSET = object()  # "no previous message" for the encoder's reuse of what the last message resolved
_MAX_PROPERTY_PLANS = 4096

# (text in front of each value, values getter, text after the last value, separator count, values cover all)
_PropertyPlan = tuple[tuple[str, ...], Callable[[dict[str, str]], tuple[str, ...]], str, int, bool]


def _one_value(name: str) -> Callable[[dict[str, str]], tuple[str, ...]]:
    """``itemgetter`` for one name returns the bare value; the plans need a 1-tuple."""
    return lambda props: (props[name],)


class PutStatus(enum.Enum):
    """RocketMQ ``PutMessageStatus`` (the ones this store produces)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored, but the fsync did not finish in sync_flush_timeout
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class AppendResult:
    """Where one record landed (offsets are final once the apply returns); also the facade's ``PutResult``.

    ``status`` and ``uniq_key`` are filled by ``MessageStore.put_messages``; after ``apply_batch`` they are
    PUT_OK and None (the leader knows the uniq keys of the messages it encoded). ``duplicate``: the result of an
    earlier send of the same message, returned to a retry that was not stored again (docs/design/deduplication.md).
    """

    __slots__ = ("physical_offset", "queue_offset", "wrote_bytes", "store_timestamp", "topic", "queue_id",
                 "_host", "status", "uniq_key", "duplicate")

    def __init__(self, physical_offset: int, queue_offset: int, wrote_bytes: int, store_timestamp: int,
                 topic: str, queue_id: int, host: str) -> None:
        self.physical_offset = physical_offset
        self.queue_offset = queue_offset
        self.wrote_bytes = wrote_bytes
        self.store_timestamp = store_timestamp
        self.topic = topic
        self.queue_id = queue_id
        self._host = host  # upper-case hex of store ip + port: the msgId prefix
        self.status = PutStatus.PUT_OK
        self.uniq_key: str | None = None
        self.duplicate = False

    @property
    def msg_id(self) -> str:
        """Offset msgId: STOREHOST + physical offset, upper-case hex."""
        return f"{self._host}{self.physical_offset:016X}"

    def __repr__(self) -> str:
        return (f"PutResult({self.status.name} {self.topic}-{self.queue_id} qo={self.queue_offset} "
                f"phy={self.physical_offset} size={self.wrote_bytes} id={self.msg_id} uniq={self.uniq_key})")


class DecodedBatch:
    """A parsed batch frame (``CommitLog.parse_batch``)."""

    __slots__ = ("store_timestamp", "host", "keys", "sizes", "key_refs", "payload", "flags")

    def __init__(self, store_timestamp: int, host: bytes, keys: list[tuple[str, int]], sizes: Sequence[int],
                 key_refs: Sequence[int], payload: memoryview, flags: int) -> None:
        self.store_timestamp = store_timestamp
        self.host = host
        self.keys = keys
        self.sizes = sizes
        self.key_refs = key_refs
        self.payload = payload
        self.flags = flags


_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _out_of_range_field(m: Message, store_timestamp: int, store_port: int) -> str:
    """Which numeric field does not fit its place in the record (for the error message)."""
    checks = (("flag", m.flag, _INT32), ("sys_flag", m.sys_flag, _INT32), ("born_timestamp", m.born_timestamp, _INT64),
              ("born_host port", m.born_host[1], _INT32), ("store_timestamp", store_timestamp, _INT64),
              ("store_host port", store_port, _INT32), ("reconsume_times", m.reconsume_times, _INT32),
              ("prepared_transaction_offset", m.prepared_transaction_offset, _INT64))
    for name, value, (lo, hi) in checks:
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            return f"{name} {value!r} does not fit its record field (an integer in [{lo}, {hi}])"
    return "a numeric field does not fit its record field"


def store_port_of(host: bytes) -> int:
    """Port of a msgId host prefix (ip bytes + i32 port)."""
    return _I32.unpack_from(host, len(host) - 4)[0]


@dataclass(slots=True)
class _RecoveryPlan:
    """What recovery found (``CommitLog._plan_recovery``) and will do: where the data ends, what it cuts."""

    index: int
    end_mf: MappedFile
    end_pos: int
    cut: CorruptRecord | None
    last_record: tuple[MappedFile, int] | None


def roll_next_file(offset: int, file_size: int) -> int:
    """Start of the segment after the one holding ``offset``."""
    return offset + file_size - offset % file_size


def _layout(pos: int, rel: Sequence[int], file_size: int) -> Iterator[tuple[int, int, int]]:
    """Where apply puts a batch whose records start at ``rel`` (``rel[-1]`` = payload length) from log offset
    ``pos``: (offset, i, j) for records [i, j) written there, or (offset, i, i) for an end-of-file blank record.

    RocketMQ's rolling rule: a batch that does not fit the rest of a segment (keeping room for the blank record)
    moves whole to the next one; one larger than a whole segment fills each segment with what fits."""
    n = len(rel) - 1
    i = 0
    while i < n:
        room = file_size - pos % file_size
        rest = rel[n] - rel[i]
        if rest + END_FILE_MIN_BLANK_LENGTH <= room:
            j = n
        elif rest + END_FILE_MIN_BLANK_LENGTH <= file_size:
            yield pos, i, i
            pos += room
            continue
        else:
            j = i
            while j < n and rel[j + 1] - rel[i] + END_FILE_MIN_BLANK_LENGTH <= room:
                j += 1
            if j == i:
                yield pos, i, i
                pos += room
                continue
        yield pos, i, j
        pos += rel[j] - rel[i]
        i = j


def _raw_records(offset: int, mv: memoryview) -> tuple[list[DispatchRequest], int, bool]:
    """Check raw bytes from another replica: whole records with valid CRCs, each carrying its own physical offset,
    at most one end-of-file blank record last. Returns (records, bytes of records, ends with a blank)."""
    p = 0
    n = len(mv)
    reqs: list[DispatchRequest] = []
    blank = False
    while p < n:
        dr = decode_dispatch(mv, p, check_crc=True, limit=n)
        if dr.success and dr.msg_size > 0:
            if dr.commit_log_offset != offset + p:
                raise BatchFormatError(f"raw record at {offset + p} says it belongs at {dr.commit_log_offset}")
            reqs.append(dr)
            p += dr.msg_size
        elif dr.success:
            blank = True
            if p + 8 != n:
                raise BatchFormatError("raw data continues after an end-of-file blank record")
            break
        else:
            raise BatchFormatError(f"raw data at {offset + p} is not a whole record: {dr.reason}")
    return reqs, p, blank


class _QueueOffsets:
    """The queue offsets a batch's records get, counted from the ``topic-queueId`` table (one counter per key)."""

    __slots__ = ("b", "names", "counters")

    def __init__(self, b: DecodedBatch, table: dict[str, int]) -> None:
        self.b = b
        self.names = [f"{t}-{q}" for t, q in b.keys]
        self.counters = [table.get(name, 0) for name in self.names]

    def patch(self, buf, shift: int, base: int, rel: Sequence[int], i: int, j: int, host: str,
              append: Callable[[AppendResult], None]) -> None:
        """Patch QUEUEOFFSET and PHYSICALOFFSET of records [i, j) in ``buf`` (record k at ``shift + rel[k]``,
        physical offset ``base + rel[k]``) and hand out their results."""
        b, counters = self.b, self.counters
        sizes, refs, keys, ts = b.sizes, b.key_refs, b.keys, b.store_timestamp
        pack_into = _QQ.pack_into
        delta = shift + QUEUE_OFFSET_POSITION
        for k in range(i, j):
            ref = refs[k]
            if ref & NO_ADVANCE:
                ki = ref & ~NO_ADVANCE
                qo = 0
            else:
                ki = ref
                qo = counters[ki]
                counters[ki] = qo + 1
            r = rel[k]
            phy = base + r
            pack_into(buf, delta + r, qo, phy)
            topic, qid = keys[ki]
            append(AppendResult(phy, qo, sizes[k], ts, topic, qid, host))

    def save(self, table: dict[str, int]) -> None:
        for name, c in zip(self.names, self.counters, strict=True):
            if c:
                table[name] = c


class CommitLog:
    """The commit log of one store (``{root}/commitlog``)."""

    def __init__(self, config: StoreConfig, checkpoint: StoreCheckpoint | None = None) -> None:
        self.config = config
        self.file_size = config.mapped_file_size_commit_log
        self.mapped_file_queue = MappedFileQueue(config.commit_log_dir, self.file_size,
                                                 preallocate=config.preallocate)
        self.checkpoint = checkpoint
        self.topic_queue_table: dict[str, int] = {}
        self.put_lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self.delay_level_ms = parse_delay_levels(config.message_delay_level)
        self._uniq = UniqKeyGenerator(config.store_host_addr[0])
        self._topic_parts: dict[str, bytes] = {}  # validated topic -> its TOPICLEN + TOPIC bytes
        self._plans_by_cluster: dict[str, dict[tuple[str, ...], _PropertyPlan]] = {}  # see _add_property_plan
        self._host_hex: dict[bytes, str] = {}  # store host bytes -> the msgId prefix of its results
        self.last_store_timestamp = 0
        self._last_encoded_timestamp = 0  # leader: highest STORETIMESTAMP handed out, applied or not yet
        self._stamp_lock = threading.Lock()
        self.abnormal_recovery_start = 0  # first segment scanned by recover_abnormally
        self._empty_log_start = 0  # where the first segment of an empty log starts (catch-up of a wiped replica)
        # recovery may cut damage only beyond this offset (set by the store / replication before recovery)
        self.acknowledged_end = 0
        # a machine restart may have lost dirty pages in any order: damage beyond acknowledged_end is then a
        # lost write even with valid records after it (RocketMQ's async-flush semantics)
        self.pages_may_be_lost = False
        self._plan: _RecoveryPlan | None = None

    # ================================================================== load / offsets
    def load(self) -> None:
        """Open the segments; a missing middle segment or one of the wrong size is corruption (nothing is touched)."""
        problems = segment_layout_problems(self.config.commit_log_dir, self.file_size)
        if problems:
            raise CorruptionError(problems)
        self.mapped_file_queue.load()

    @property
    def min_offset(self) -> int:
        """First byte still on disk (0 for an empty log)."""
        mf = self.mapped_file_queue.get_first_mapped_file()
        return mf.file_from_offset if mf is not None else 0

    @property
    def max_offset(self) -> int:
        """End of the written data (the next physical offset)."""
        return self.mapped_file_queue.get_max_offset()

    def roll_next_file(self, offset: int) -> int:
        return roll_next_file(offset, self.file_size)

    # ================================================================== encode (leader)
    def encode_batch(self, msgs: Sequence[Message], store_timestamp: int, store_host: tuple[str, int],
                     cluster_name: str | None) -> bytes:
        """Validate and encode ``msgs`` into one batch frame (see the module docstring).

        Sets ``UNIQ_KEY`` in a message's properties when it has none (like the RocketMQ producer), so the
        caller can report it. Raises MessageIllegalError / PropertiesSizeExceededError naming the problem.
        """
        b = self.encode(msgs, store_timestamp, store_host, cluster_name)
        count = len(b.sizes)
        head = _BATCH_HEAD.pack(BATCH_MAGIC, BATCH_VERSION, b.flags, len(b.host) - 4, 0, b.store_timestamp,
                                b.host[:-4].ljust(16, b"\0"), store_port_of(b.host), count, len(b.keys),
                                len(b.payload))
        keys_blob = b"".join(_B.pack(len(t)) + t.encode("ascii") + _KEY_TAIL.pack(q) for t, q in b.keys)
        frame = b"".join((head, keys_blob, struct.pack(f">{count}I", *b.sizes),
                          struct.pack(f">{count}I", *b.key_refs), b.payload))
        return frame + _U32.pack(zlib.crc32(frame))

    def monotonic_store_timestamp(self, now_ms: int) -> int:
        """``max(now_ms, last STORETIMESTAMP in the log, last one encoded)``: store times never decrease.

        The index keeps seconds since a file's begin time (never negative) and the time search over a
        consume queue is a binary search, so both need store times that grow with the offset; the wall
        clock can step back (NTP, a resumed VM). Basing it on the applied log, which every replica has,
        keeps it true across a leader change; the encoded maximum covers batches not applied yet.
        """
        with self._stamp_lock:
            ts = max(now_ms, self.last_store_timestamp, self._last_encoded_timestamp)
            if ts <= _INT64[1]:  # an out-of-range time is refused by encode; never remember it
                self._last_encoded_timestamp = ts
            return ts

    def encode(self, msgs: Sequence[Message], store_timestamp: int, store_host: tuple[str, int],
               cluster_name: str | None) -> DecodedBatch:
        """``encode_batch`` without the frame: the records and their index, ready for ``apply_decoded``.

        ``store_timestamp`` is raised to the last one in the log (or handed out by an earlier encode) when
        it is lower, see ``monotonic_store_timestamp``.

        Hot loop: work that depends only on what consecutive messages share (topic, born host, property
        keys, topic-queue key) is done when it changes, not per message; the bytes are the same either way.
        """
        if not msgs:
            raise MessageIllegalError("empty batch: put at least one message")
        store_timestamp = self.monotonic_store_timestamp(store_timestamp)
        max_body = self.config.max_message_size
        max_total = min(max_body + 64 * 1024, self.file_size - END_FILE_MIN_BLANK_LENGTH)
        store_ip = host_to_bytes(store_host[0])
        store_port = store_host[1]
        store_w = len(store_ip)
        store_bit = STOREHOSTADDRESS_V6_FLAG if store_w == 16 else 0
        topic_parts = self._topic_parts
        fixed = _FIXED_PACKS[store_w]
        plans = self._property_plans(cluster_name)
        key_index: dict[tuple[str, int], int] = {}
        parts: list[bytes] = []
        sizes: list[int] = []
        refs: list[int] = []
        flags = 0
        uniq_prefix, uniq_counter, uniq_first = "", 0, -1  # ids reserved when a message first needs one
        sep_kv, sep_p, uniq_name = NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
        crc32, pack16, host_bytes, add_size, add_ref = zlib.crc32, _I16.pack, host_to_bytes, sizes.append, refs.append
        add_parts = parts.extend
        not_v6 = ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
        # what the previous message resolved, reused while the next one has the same value
        last_topic: object = _UNSET
        tpart = b""
        last_host: object = _UNSET
        born_ip, born_w, host_bits, pack_head = b"", 0, 0, fixed[4]
        fixed_len = 0  # calMsgLength without body and properties: 82 + both host widths + topic length
        hex2 = _HEX2
        last_key_topic: object = _UNSET
        last_qid = ki = -1
        for i, m in enumerate(msgs):
            topic = m.topic
            if topic is not last_topic:
                tpart = topic_parts.get(topic) if type(topic) is str else None
                if tpart is None:
                    check_topic(topic)
                    tpart = _I8.pack(len(topic)) + topic.encode("ascii")
                    if len(topic_parts) < 100_000:
                        topic_parts[topic] = tpart
                last_topic = topic
                fixed_len = 82 + born_w + store_w + len(tpart)
            qid = m.queue_id
            if type(qid) is not int or not 0 <= qid <= 0x7FFFFFFF:
                raise MessageIllegalError(f"message {i}: queue_id {qid!r} must be an int in [0, 2^31)")
            body = m.body
            if type(body) is not bytes:
                if not isinstance(body, bytearray | memoryview):
                    raise MessageIllegalError(f"message {i}: body must be bytes, got {type(body).__name__}")
                body = bytes(body)
            body_len = len(body)
            if body_len > max_body:
                raise MessageIllegalError(
                    f"message {i}: body of {body_len} bytes exceeds max_message_size {max_body}"
                )
            props = m.properties
            props_s = m.properties_string
            if props_s is not None:  # built by the broker itself (transactions): stored verbatim
                if type(props_s) is not str:
                    raise MessageIllegalError(f"message {i}: properties_string must be a str")
            else:
                if uniq_name not in props:
                    if uniq_first < 0:
                        uniq_prefix, uniq_counter = self._uniq.reserve(len(msgs) - i)
                        uniq_first = i
                    c = (uniq_counter + i - uniq_first) & 0xFFFF
                    props[uniq_name] = uniq_prefix + hex2[c >> 8] + hex2[c & 0xFF]
                plan = plans.get(tuple(props)) if plans is not None else None
                if plan is not None:
                    prefixes, get_values, tail, n_props, all_values = plan
                    try:
                        values = get_values(props)
                        props_s = sep_p.join(map(concat, prefixes, values)) + tail
                    except (TypeError, AttributeError):
                        check_properties(props)
                        raise
                    if (props_s.count(sep_kv) != n_props or props_s.count(sep_p) != n_props - 1
                            or ("" in values if all_values else "" in props.values())):
                        check_properties(props)
                else:
                    try:
                        order = broker_order(tuple(props))
                        props_s = sep_p.join([
                            k + sep_kv + (cluster_name if k == PROPERTY_CLUSTER else props[k]) for k in order
                        ]) if cluster_name is not None else properties_without_wait(props)
                    except (TypeError, AttributeError):
                        check_properties(props)
                        raise
                    n_props = len(order)
                    if (props_s.count(sep_kv) != n_props or props_s.count(sep_p) != n_props - 1
                            or "" in props or "" in props.values()):
                        check_properties(props)
                    elif plans is not None:
                        self._add_property_plan(plans, tuple(props), order, cluster_name)
            props_b = props_s.encode("utf-8", "replace")
            props_len = len(props_b)
            if props_len > MAX_PROPERTIES_LENGTH:
                raise PropertiesSizeExceededError(
                    f"message {i}: properties are {props_len} bytes encoded; the limit is {MAX_PROPERTIES_LENGTH}"
                )
            born_host = m.born_host
            if born_host is not last_host and not (type(born_host) is tuple and born_host == last_host):
                try:
                    if len(born_host) != 2 or type(born_host[0]) is not str:
                        raise TypeError
                    born_ip = host_bytes(born_host[0])
                except (TypeError, IndexError, AttributeError):
                    raise MessageIllegalError(
                        f"message {i}: born_host must be (ip, port), got {born_host!r}") from None
                last_host = born_host
                born_w = len(born_ip)
                host_bits = store_bit | BORNHOST_V6_FLAG if born_w == 16 else store_bit
                pack_head = fixed[born_w]
                fixed_len = 82 + born_w + store_w + len(tpart)
            sys_flag = m.sys_flag & not_v6 | host_bits
            total = fixed_len + body_len + props_len  # calMsgLength
            if total > max_total:
                raise MessageIllegalError(
                    f"message {i}: record of {total} bytes exceeds the limit of {max_total} bytes "
                    "(max_message_size + 64 KiB, and it must fit one commit-log segment)"
                )
            try:
                head = pack_head(
                    total, MESSAGE_MAGIC_CODE, crc32(body) & 0x7FFFFFFF, qid, m.flag, 0, 0, sys_flag,
                    m.born_timestamp, born_ip, born_host[1], store_timestamp, store_ip, store_port,
                    m.reconsume_times, m.prepared_transaction_offset, body_len)
            except struct.error:
                raise MessageIllegalError(f"message {i}: {_out_of_range_field(m, store_timestamp, store_port)}") \
                    from None
            add_parts((head, body, tpart, pack16(props_len), props_b))
            add_size(total)
            if qid != last_qid or topic is not last_key_topic:
                k = (topic, qid)
                ki = key_index.get(k)
                if ki is None:
                    ki = key_index[k] = len(key_index)
                last_key_topic, last_qid = topic, qid
            tran = sys_flag & TRANSACTION_TYPE_MASK
            if tran == TRANSACTION_NOT_TYPE or tran == TRANSACTION_COMMIT_TYPE:
                add_ref(ki)
            else:
                add_ref(ki | NO_ADVANCE)
                flags |= FLAG_HAS_TRANSACTIONAL
        return DecodedBatch(store_timestamp, store_ip + _I32.pack(store_port), list(key_index), sizes, refs,
                            memoryview(b"".join(parts)), flags)

    def _property_plans(self, cluster_name: str | None) -> dict[tuple[str, ...], _PropertyPlan] | None:
        """The property-string plans for ``cluster_name`` (None: no plans, the generic path is used)."""
        if cluster_name is None or type(cluster_name) is not str:
            return None
        plans = self._plans_by_cluster.get(cluster_name)
        if plans is None:
            if len(self._plans_by_cluster) >= 16:
                self._plans_by_cluster.clear()
            plans = self._plans_by_cluster[cluster_name] = {}
        return plans

    @staticmethod
    def _add_property_plan(plans: dict[tuple[str, ...], _PropertyPlan], keys: tuple[str, ...],
                           order: tuple[str, ...], cluster_name: str) -> None:
        """Remember how to build the properties string of a message with property names ``keys``.

        The string is ``k\\x01v`` joined by ``\\x02`` in broker (HashMap) order with CLUSTER = ``cluster_name``;
        the plan holds, per value, the constant text in front of it, so a message costs one join. Only names
        that are plain non-empty strings without separators get a plan; anything else keeps the generic path.
        Values the string leaves out (WAIT, a client-sent CLUSTER) are still checked for being empty.
        """
        if len(plans) >= _MAX_PROPERTY_PLANS:
            return
        for k in keys:
            if type(k) is not str or not k or NAME_VALUE_SEPARATOR in k or PROPERTY_SEPARATOR in k:
                return
        named = [k for k in order if k != PROPERTY_CLUSTER]
        at = order.index(PROPERTY_CLUSTER)
        cluster = f"{PROPERTY_CLUSTER}{NAME_VALUE_SEPARATOR}{cluster_name}"
        prefixes = [k + NAME_VALUE_SEPARATOR for k in named]
        tail = ""
        if at < len(named):  # CLUSTER goes in front of the name that follows it
            prefixes[at] = cluster + PROPERTY_SEPARATOR + prefixes[at]
        else:
            tail = PROPERTY_SEPARATOR + cluster
        get = itemgetter(*named) if len(named) > 1 else _one_value(named[0])
        plans[keys] = (tuple(prefixes), get, tail, len(order), len(named) == len(keys))

    # ================================================================== apply (every replica)
    @staticmethod
    def parse_batch(batch: bytes | bytearray | memoryview) -> DecodedBatch:
        """Check magic, version and CRC and split the frame; BatchFormatError when it is not a valid frame."""
        mv = memoryview(batch)
        n = len(mv)
        if n < _BATCH_HEAD.size + 4:
            raise BatchFormatError(f"batch frame of {n} bytes is shorter than its header")
        (magic, version, flags, host_len, _r, store_ts, ip16, port, count, nkeys,
         payload_len) = _BATCH_HEAD.unpack_from(mv, 0)
        if magic != BATCH_MAGIC:
            raise BatchFormatError(f"batch frame magic 0x{magic:08x} is not RPB1")
        if version != BATCH_VERSION:
            raise BatchFormatError(f"batch frame version {version} is not supported (expected 1)")
        crc = _U32.unpack_from(mv, n - 4)[0]
        if zlib.crc32(mv[: n - 4]) != crc:
            raise BatchFormatError("batch frame CRC mismatch: the frame was damaged")
        if host_len not in (4, 16):
            raise BatchFormatError(f"batch frame store-host length {host_len} is not 4 or 16")
        pos = _BATCH_HEAD.size
        keys: list[tuple[str, int]] = []
        try:
            for _ in range(nkeys):
                tl = mv[pos]
                topic = bytes(mv[pos + 1 : pos + 1 + tl]).decode("ascii")
                qid = _KEY_TAIL.unpack_from(mv, pos + 1 + tl)[0]
                keys.append((topic, qid))
                pos += 5 + tl
            sizes = struct.unpack_from(f">{count}I", mv, pos)
            pos += 4 * count
            refs = struct.unpack_from(f">{count}I", mv, pos)
            pos += 4 * count
        except (IndexError, struct.error, UnicodeDecodeError) as e:
            raise BatchFormatError(f"batch frame index is malformed: {e}") from None
        if pos + payload_len + 4 != n or sum(sizes) != payload_len:
            raise BatchFormatError("batch frame sizes do not add up to its payload")
        for r in refs:
            if (r & ~NO_ADVANCE) >= nkeys:
                raise BatchFormatError("batch frame refers to an unknown topic-queue key")
        host = bytes(ip16[:host_len]) + _I32.pack(port)
        return DecodedBatch(store_ts, host, keys, sizes, refs, mv[pos : pos + payload_len], flags)

    def apply_batch(self, batch: bytes | bytearray | memoryview) -> list[AppendResult]:
        """Append a frame made by ``encode_batch`` deterministically; returns one result per record."""
        return self.apply_decoded(self.parse_batch(batch))

    def apply_decoded(self, b: DecodedBatch) -> list[AppendResult]:
        """Apply a parsed (or locally encoded) batch; see ``apply_batch``."""
        limit = self.file_size - END_FILE_MIN_BLANK_LENGTH
        if b.sizes and max(b.sizes) > limit:
            for s in b.sizes:
                if s > limit:
                    raise BatchFormatError(f"record of {s} bytes cannot fit a commit-log segment of {self.file_size}")
        with self.put_lock:
            return self._apply(b)

    def _apply(self, b: DecodedBatch) -> list[AppendResult]:
        sizes, payload = b.sizes, b.payload
        rel = [0, *accumulate(sizes)]  # start of record k inside the payload, rel[n] = payload length
        table = self.topic_queue_table
        offsets = _QueueOffsets(b, table)
        host = self._host_of(b.host)
        results: list[AppendResult] = []
        mf = self._writable_segment()
        for _pos, i, j in _layout(mf.file_from_offset + mf.wrote_position, rel, self.file_size):
            mf = self._writable_segment()
            if i == j:
                self._write_blank(mf)  # does not fit here but fits a segment: the batch moves there whole
                continue
            wrote = mf.wrote_position
            mf.write_at(wrote, payload[rel[i] : rel[j]])
            offsets.patch(mf.buffer, wrote - rel[i], mf.file_from_offset + wrote - rel[i], rel, i, j, host,
                          results.append)
            mf.store_timestamp = b.store_timestamp
            mf.wrote_position = wrote + rel[j] - rel[i]  # publish only after the offsets are patched
        offsets.save(table)
        self.last_store_timestamp = b.store_timestamp
        return results

    def match_batch(self, b: DecodedBatch, at: int) -> list[AppendResult] | None:
        """The results of ``b`` applied at ``at``, when every byte that apply would write is there already.

        After a power cut the commit log may hold records beyond the last Raft entry the member knows it applied
        (pages reach the disk in any order). Replaying the entry must then neither write them twice nor destroy
        them: this compares, byte for byte (queue and physical offsets included, computed as apply would), what
        apply would write at ``at`` with what the log holds. None when anything differs or the log ends first;
        on a match the queue-offset table moves on as apply would have moved it."""
        sizes, payload = b.sizes, b.payload
        rel = [0, *accumulate(sizes)]
        offsets = _QueueOffsets(b, self.topic_queue_table)
        host = self._host_of(b.host)
        results: list[AppendResult] = []
        with self.put_lock:
            end = self.max_offset
            for pos, i, j in _layout(at, rel, self.file_size):
                if i == j:
                    room = self.file_size - pos % self.file_size
                    if self.get_message(pos, 8) != _BLANK.pack(room, BLANK_MAGIC_CODE):
                        return None
                    continue
                n = rel[j] - rel[i]
                if pos + n > end:
                    return None
                have = self.get_message(pos, n)
                if have is None:
                    return None
                expected = bytearray(payload[rel[i] : rel[j]])
                offsets.patch(expected, -rel[i], pos - rel[i], rel, i, j, host, results.append)
                if have != expected:
                    return None
            offsets.save(self.topic_queue_table)
        self.last_store_timestamp = max(self.last_store_timestamp, b.store_timestamp)
        return results

    def _host_of(self, host_bytes: bytes) -> str:
        """Upper-case hex of a store host (the msgId prefix), cached for the few hosts a log sees."""
        host = self._host_hex.get(host_bytes)
        if host is None:
            host = host_bytes.hex().upper()
            if len(self._host_hex) < 64:
                self._host_hex[host_bytes] = host
        return host

    def _writable_segment(self) -> MappedFile:
        """The segment to append to, creating the next one when needed (DiskFullError when that fails).

        A failure leaves the log unchanged apart from a possible end-of-file blank record, which a retry
        writes identically, so a retried apply produces the same bytes.
        """
        try:
            mf = self.mapped_file_queue.get_last_mapped_file(self._empty_log_start)
        except OSError as e:
            raise DiskFullError(f"cannot create a commit-log segment in {self.config.commit_log_dir}: {e}") from e
        assert mf is not None
        return mf

    def _write_blank(self, mf: MappedFile) -> None:
        """End-of-file blank record: (remaining bytes, BLANK magic); the segment becomes full."""
        wrote = mf.wrote_position
        room = mf.file_size - wrote
        mf.write_at(wrote, _BLANK.pack(room, BLANK_MAGIC_CODE))
        mf.wrote_position = mf.file_size

    # ================================================================== raw catch-up
    def read_raw(self, offset: int, max_bytes: int) -> bytes:
        """Whole records (and a closing blank record) from ``offset`` within its segment, up to ``max_bytes``.

        At least one record is returned when one exists, even if it is larger than ``max_bytes``.
        """
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return b""
        pos = offset - mf.file_from_offset
        end = mf.wrote_position
        buf = mf.buffer
        p = pos
        while p + 8 <= end:
            size, magic = _BLANK.unpack_from(buf, p)
            if magic == BLANK_MAGIC_CODE:
                p += 8
                break
            if magic != MESSAGE_MAGIC_CODE or size <= 0 or p + size > end:
                break
            if p > pos and p + size - pos > max_bytes:
                break
            p += size
        return mf.read_bytes(pos, p - pos)

    def append_raw(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Append verified raw bytes (from ``read_raw`` on another replica) at the end of the log."""
        with self.put_lock:
            end = self.max_offset
            mfq = self.mapped_file_queue
            if not mfq.mapped_files:
                if offset % self.file_size:
                    raise OffsetMismatchError(
                        f"raw append into an empty commit log must start at a segment boundary "
                        f"(a multiple of {self.file_size}), got {offset}"
                    )
                self._empty_log_start = end = offset
            if offset != end:
                raise OffsetMismatchError(f"raw append at {offset} but the commit log ends at {end}")
            mv = memoryview(data)
            reqs, p, blank = _raw_records(offset, mv)
            mf = self._writable_segment()
            wrote = mf.wrote_position
            if blank:
                remaining = mf.file_size - (wrote + p)
                if remaining < END_FILE_MIN_BLANK_LENGTH or _I32.unpack_from(mv, p)[0] != remaining:
                    raise BatchFormatError("raw blank record length does not match this segment's free space")
            elif wrote + p + END_FILE_MIN_BLANK_LENGTH > mf.file_size:
                raise BatchFormatError(f"raw data of {p} bytes does not fit the segment at {offset}")
            mf.write_at(wrote, mv[:p])
            self._count_raw(reqs)
            if reqs:
                mf.store_timestamp = self.last_store_timestamp = reqs[-1].store_timestamp
            mf.wrote_position = wrote + p
            if blank:
                self._write_blank(mf)

    def adopt_raw(self, offset: int, data: bytes | bytearray | memoryview) -> bool:
        """True when the log already holds exactly ``data`` (verified raw records from another replica) at
        ``offset``: its records then count for the next queue offsets as if appended; nothing is written.

        A member whose commit log has bytes beyond what it knows it applied (``MessageStore.withhold_tail``)
        keeps those that a peer's copy proves, instead of cutting and writing them again."""
        mv = memoryview(data)
        reqs, _p, _blank = _raw_records(offset, mv)
        with self.put_lock:
            if offset + len(mv) > self.max_offset or self.get_message(offset, len(mv)) != mv:
                return False
            self._count_raw(reqs)
            if reqs:
                self.last_store_timestamp = max(self.last_store_timestamp, reqs[-1].store_timestamp)
            return True

    def _count_raw(self, reqs: list[DispatchRequest]) -> None:
        table = self.topic_queue_table
        for dr in reqs:
            if dr.goes_to_consume_queue:
                name = f"{dr.topic}-{dr.queue_id}"
                table[name] = max(table.get(name, 0), dr.consume_queue_offset + 1)

    # ================================================================== reads
    def get_data(self, offset: int, max_offset: int | None = None) -> memoryview | None:
        """Readable bytes from ``offset`` to the end of data in its segment (capped at ``max_offset``).

        Like every read here, None (or -1) when the segment was deleted by retention meanwhile.
        """
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        end = mf.wrote_position
        if max_offset is not None:
            end = min(end, max_offset - mf.file_from_offset)
        if pos < 0 or pos >= end:
            return None
        try:
            return mf.read(pos, end - pos)
        except ValueError:  # unmapped by retention
            return None

    def get_message(self, offset: int, size: int) -> bytes | None:
        """A copy of ``size`` bytes at ``offset`` when they are all written."""
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + size > mf.wrote_position:
            return None
        try:
            return mf.read_bytes(pos, size)
        except ValueError:  # unmapped by retention
            return None

    def get_record_size(self, offset: int) -> int:
        """TOTALSIZE of the message record at ``offset``, or -1."""
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return -1
        pos = offset - mf.file_from_offset
        if pos + 8 > mf.wrote_position:
            return -1
        try:
            size, magic = _BLANK.unpack_from(mf.buffer, pos)
        except ValueError:  # unmapped by retention
            return -1
        if magic != MESSAGE_MAGIC_CODE or size <= 0 or pos + size > mf.wrote_position:
            return -1
        return size

    def store_timestamp_at(self, offset: int, size: int) -> int:
        """STORETIMESTAMP of the record at ``offset`` (-1 when unreadable); ``size`` is its TOTALSIZE."""
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return -1
        pos = offset - mf.file_from_offset
        if pos + min(size, 84) > mf.wrote_position:
            return -1
        try:
            sys_flag = _I32.unpack_from(mf.buffer, pos + SYSFLAG_POSITION)[0]
            return _I64.unpack_from(mf.buffer, pos + 48 + (20 if sys_flag & BORNHOST_V6_FLAG else 8))[0]
        except ValueError:  # unmapped by retention
            return -1

    def check_message_and_return_size(self, buf, pos: int, limit: int, check_crc: bool) -> DispatchRequest:
        """RocketMQ ``checkMessageAndReturnSize`` (readBody=false)."""
        return decode_dispatch(buf, pos, check_crc=check_crc, limit=limit, delay_level_ms=self.delay_level_ms)

    # ================================================================== recovery
    def recover_normally(self) -> int:
        """Scan the last 3 segments; cut a torn tail (see ``_scan_and_truncate``). Returns the recovered end."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            self._reset_empty()
            return 0
        return self._scan_and_truncate(self._recovery_start(True))

    def recover_abnormally(self) -> int:
        """Scan from the newest segment the checkpoint shows flushed and dispatched (``abnormal_recovery_start``;
        the caller re-dispatches from there)."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            self._reset_empty()
            return 0
        index = self._recovery_start(False)
        self.abnormal_recovery_start = files[index].file_from_offset
        log.info("abnormal recovery scans from segment %s", files[index].path)
        return self._scan_and_truncate(index)

    def verify_before_recovery(self, last_exit_ok: bool) -> None:
        """Run recovery's checks without changing anything: raises ``CorruptionError`` where recovery would.

        The store calls it first thing after loading, before any file (consume queue, index, abort marker) is
        touched; the plan is kept for the recovery that follows.
        """
        if self.mapped_file_queue.mapped_files:
            self._plan = self._plan_recovery(self._recovery_start(last_exit_ok))

    def _recovery_start(self, last_exit_ok: bool) -> int:
        files = self.mapped_file_queue.mapped_files
        if last_exit_ok:
            return max(0, len(files) - 3)
        for i in range(len(files) - 1, -1, -1):  # newest segment whose first message the checkpoint covers
            if self._is_mapped_file_matched_recover(files[i]):
                return i
        return 0

    def _is_mapped_file_matched_recover(self, mf: MappedFile) -> bool:
        buf = mf.buffer
        magic = _I32.unpack_from(buf, 4)[0]
        if magic != MESSAGE_MAGIC_CODE:
            return False
        sys_flag = _I32.unpack_from(buf, SYSFLAG_POSITION)[0]
        born_len = 20 if sys_flag & BORNHOST_V6_FLAG else 8
        store_ts = _I64.unpack_from(buf, 48 + born_len)[0]
        if store_ts == 0 or self.checkpoint is None:
            return False
        if self.config.message_index_enable and self.config.message_index_safe:
            return store_ts <= self.checkpoint.min_timestamp_index()
        return store_ts <= self.checkpoint.min_timestamp()

    def _plan_recovery(self, index: int) -> _RecoveryPlan:
        """Verify segments from ``index`` on, then cut a torn tail; corruption raises before anything changes.

        What may be cut (``store.integrity`` finds it): damage with nothing valid after it that starts at or
        beyond ``acknowledged_end`` (the checkpoint's flushed offset, or what replication says was applied), or,
        after a machine restart (dirty pages may be lost in any order), any damage beyond it. Everything else
        is corruption of acknowledged data: ``CorruptionError`` names it and the files stay untouched.
        """
        files = self.mapped_file_queue.mapped_files
        acked = self.acknowledged_end
        # segments at the end whose first bytes are zeros hold no data (preallocated or just created)
        last_data = len(files) - 1
        while last_data > index and _BLANK.unpack_from(files[last_data].buffer, 0) == (0, 0):
            last_data -= 1
        corrupt: list[CorruptRecord] = []
        cut: CorruptRecord | None = None
        end_mf, end_pos = files[index], 0
        last_record: tuple[MappedFile, int] | None = None
        for i in range(index, last_data + 1):
            mf = files[i]
            scan = scan_segment(mf.buffer, mf.file_from_offset, mf.path, i == last_data,
                                check_crc=self.config.check_crc_on_recover)
            for d in scan.damaged:
                if self.pages_may_be_lost and d.start >= acked:
                    cut = d
                    break
                corrupt.append(d)
            if cut is not None:
                end_mf, end_pos = mf, cut.start - mf.file_from_offset
                break
            if scan.tail is not None:
                if scan.tail.start >= acked:
                    cut = scan.tail
                else:
                    corrupt.append(scan.tail)
            # a full segment (blank record) ends where the next one starts, as RocketMQ's recovery rolls
            end_mf, end_pos = mf, (mf.file_size if scan.blank_at is not None else scan.data_end)
            if scan.last_record >= 0:
                last_record = (mf, scan.last_record)
            if scan.blank_at is None:
                break
        data_end = end_mf.file_from_offset + end_pos
        if not corrupt and cut is None and data_end < acked:
            corrupt.append(CorruptRecord(end_mf.path, data_end, acked,
                                         f"the log ends at {data_end} but the checkpoint says {acked} bytes were "
                                         "flushed (zeros where acknowledged records must be)"))
        if corrupt:
            raise CorruptionError(corrupt)
        return _RecoveryPlan(index, end_mf, end_pos, cut, last_record)

    def _scan_and_truncate(self, index: int) -> int:
        plan, self._plan = self._plan, None
        if plan is None or plan.index != index:
            plan = self._plan_recovery(index)
        files = self.mapped_file_queue.mapped_files
        first_scanned = files[index].file_from_offset
        acked = self.acknowledged_end
        end_mf, end_pos, cut, last_record = plan.end_mf, plan.end_pos, plan.cut, plan.last_record
        data_end = end_mf.file_from_offset + end_pos
        process_offset = data_end if cut is None else cut.start
        if cut is not None:
            end_mf = self.mapped_file_queue.find_mapped_file_by_offset(cut.start) or end_mf
            end_pos = cut.start - end_mf.file_from_offset
            log.warning("commit log: torn or corrupt data at offset %d (%s) beyond the flushed offset %d; "
                        "truncating there", cut.start, cut.reason, acked)
        mf, pos = end_mf, end_pos
        stale = self._zero_stale_tail(mf, pos)
        if stale and cut is None:
            log.warning("commit log: stale bytes after the end of data at offset %d; cleared", process_offset)
        self.mapped_file_queue.truncate_dirty_files(process_offset)
        # a trailing preallocated segment that never received data is dropped
        files = self.mapped_file_queue.mapped_files
        while len(files) > 1 and files[-1].wrote_position == 0 and files[-2].is_full():
            log.info("commit log: removing empty trailing segment %s", files[-1].path)
            self.mapped_file_queue.delete_last_mapped_file()
            files = self.mapped_file_queue.mapped_files
        # what was scanned may still be dirty in the page cache of a killed process: flush it all again
        mfq = self.mapped_file_queue
        scanned = [f for f in mfq.mapped_files if f.file_from_offset >= first_scanned]
        for f in scanned:
            f.flushed_position = 0
        mfq.flushed_where = scanned[0].file_from_offset if scanned else process_offset
        if last_record is not None and last_record[0].file_from_offset + last_record[1] < process_offset:
            lmf, lpos = last_record
            ts = self.store_timestamp_at(lmf.file_from_offset + lpos, 91)
            if ts > 0:
                self.last_store_timestamp = ts
        if self.checkpoint is not None and self.checkpoint.flushed_offset > process_offset:
            self.checkpoint.flushed_offset = process_offset  # only a tail beyond it was cut (checked above)
        return process_offset

    @staticmethod
    def _zero_stale_tail(mf: MappedFile, pos: int) -> bool:
        """Zero bytes after ``pos`` in the segment so a stale record can never be read back as new data."""
        buf = mf.buffer
        size = mf.file_size
        chunk = len(_ZERO_CHUNK)
        found = False
        p = pos
        while p < size:
            n = min(chunk, size - p)
            if buf[p : p + n] != _ZERO_CHUNK[:n]:
                buf[p : p + n] = _ZERO_CHUNK[:n]
                found = True
            p += n
        if found:
            buf.flush()
        return found

    def _reset_empty(self) -> None:
        self.mapped_file_queue.flushed_where = 0

    def is_record_boundary(self, offset: int) -> bool:
        """True when a record (or the end-of-file blank) starts at ``offset``, or ``offset`` is the log end."""
        if offset == self.max_offset:
            return True
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return False
        pos = offset - mf.file_from_offset
        try:
            status, _size, _reason, parts = check_frame(mf.buffer, pos, mf.wrote_position, False)
        except (struct.error, IndexError, ValueError):
            return False
        if status == RecordStatus.BLANK:
            return True
        return status == RecordStatus.OK and parts is not None and parts[0][6] == offset

    def truncate_dirty_files(self, offset: int) -> None:
        """Cut the log at ``offset`` (a record boundary); later segments are deleted.

        Under the flush lock: a flush that captured the old end must not raise the checkpoint's flushed offset
        back above the cut after it (a restart would then call the cut-off bytes lost acknowledged data).
        """
        with self._flush_lock:
            mfq = self.mapped_file_queue
            mf = mfq.find_mapped_file_by_offset(offset)
            if mf is not None:
                pos = offset - mf.file_from_offset
                old = mf.wrote_position
                if old > pos:  # clear the cut-off bytes so they can never be recovered as records
                    mf.write_at(pos, bytes(old - pos))
            ckpt = self.checkpoint
            if ckpt is not None and ckpt.flushed_offset > offset:  # durable first: a restart must not call it loss
                ckpt.flushed_offset = offset
                ckpt.flush()
            mfq.truncate_dirty_files(offset)
            mfq.flushed_where = min(mfq.flushed_where, offset)
            files = mfq.mapped_files
            if files:
                self._empty_log_start = files[0].file_from_offset

    # ================================================================== flush / lifecycle
    def flush(self, least_pages: int = 0) -> int:
        """Flush (RocketMQ's least-pages rule) and return the flushed offset.

        The checkpoint's physic timestamp advances only when everything written before the flush is durable.
        """
        with self._flush_lock:
            ts, end = self.last_store_timestamp, self.max_offset
            self.mapped_file_queue.flush(least_pages)
            return self._after_flush(ts, end)

    def has_unflushed(self, least_pages: int = 0) -> bool:
        """Whether ``flush(least_pages)`` (``flush_all`` for 0) would make something new durable."""
        if least_pages == 0:
            return self.mapped_file_queue.flushed_where < self.max_offset
        return self.mapped_file_queue.wants_flush(least_pages)

    def flush_all(self) -> int:
        """Flush everything written so far, across segment boundaries."""
        with self._flush_lock:
            ts, end = self.last_store_timestamp, self.max_offset
            self.mapped_file_queue.flush_all()
            return self._after_flush(ts, end)

    def _after_flush(self, ts: int, end: int) -> int:
        where = self.mapped_file_queue.flushed_where
        if where >= end and self.checkpoint is not None:
            if ts:
                self.checkpoint.physic_msg_timestamp = ts
            if end > self.checkpoint.flushed_offset:
                self.checkpoint.flushed_offset = end
        return where

    @property
    def flushed_where(self) -> int:
        return self.mapped_file_queue.flushed_where

    def close(self) -> None:
        self.mapped_file_queue.close()

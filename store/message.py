"""The RocketMQ 4.9 commit-log record: encode, decode, properties, message ids (docs/design/store-formats.md#the-commit-log-record).

Byte layout of one record (big-endian; ``bh``/``sh`` = 8 for IPv4 hosts, 20 for IPv6, chosen by SYSFLAG bits
0x10 / 0x20)::

    TOTALSIZE i32 | MAGIC i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 | QUEUEOFFSET i64 | PHYSICALOFFSET i64
    | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST bh | STORETIMESTAMP i64 | STOREHOST sh | RECONSUMETIMES i32
    | PREPAREDTXOFFSET i64 | BODYLEN i32 + body | TOPICLEN i8 + topic | PROPLEN i16 + properties

``total = 75 + bh + sh + body + topic + properties``.
"""

from __future__ import annotations

import ipaddress
import os
import random
import re
import socket
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from raftmq.store.dispatch import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    DispatchRequest,
)
from raftmq.store.errors import MessageIllegalError, StoreError
from raftmq.store.java import JavaHashMap, java_string_hash, masked_crc32

__all__ = [
    "BLANK_MAGIC_CODE",
    "MESSAGE_MAGIC_CODE",
    "DecodeResult",
    "Message",
    "MessageExt",
    "RecordStatus",
    "UniqKeyGenerator",
    "broker_properties_string",
    "cal_msg_length",
    "create_message_id",
    "decode_dispatch",
    "decode_message_id",
    "decode_record",
    "encode_record",
    "properties_to_string",
    "string_to_properties",
    "TRANSACTION_COMMIT_TYPE",
    "TRANSACTION_NOT_TYPE",
    "TRANSACTION_PREPARED_TYPE",
    "TRANSACTION_ROLLBACK_TYPE",
]

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194
MESSAGE_MAGIC_CODE_V2 = -626843477  # 5.x int16 topic length (read only)

# MessageSysFlag
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_COMPARATOR = 0x700

# Field positions (fixed part, identical for every host width)
QUEUE_OFFSET_POSITION = 20
PHY_POS_POSITION = 28
SYSFLAG_POSITION = 36

# MessageConst keys the store itself reads or writes
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
KEY_SEPARATOR = " "
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# RocketMQ 5 timer messages (MessageConst / TimerMessageStore): the producer (or the gRPC proxy, from a DELAY
# message's delivery_timestamp) sets TIMER_DELIVER_MS; the broker stores the message in TIMER_TOPIC with
# TIMER_OUT_MS (the delivery time it will honour), REAL_TOPIC and REAL_QID until then
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_TOPIC = "rmq_sys_wheel_timer"
# system topics whose consume-queue tagsCode is a delivery time, not a tags hash
TIMED_TOPICS = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC})
MAX_TOPIC_LENGTH = 127
MAX_PROPERTIES_LENGTH = 32767
TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_I8 = struct.Struct(">b")
_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP, 48 bytes
_SIZE_MAGIC = struct.Struct(">ii")


def _host_struct(born_w: int, store_w: int) -> struct.Struct:
    """Fixed part of a record from TOTALSIZE up to BODYLEN for the given address widths (4 or 16)."""
    return struct.Struct(f">iiiiiqqiq{born_w}siq{store_w}siiqi")


RECORD_FIXED_PART = {(b, s): _host_struct(b, s) for b in (4, 16) for s in (4, 16)}


def cal_msg_length(sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """``CommitLog.calMsgLength``: the TOTALSIZE a record with these lengths must have."""
    bh = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    sh = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    return 75 + bh + sh + max(body_len, 0) + topic_len + max(props_len, 0)


# ---------------------------------------------------------------------------------------------- hosts
@lru_cache(maxsize=1024)
def host_to_bytes(host: str) -> bytes:
    """4 address bytes for an IPv4 host, 16 for IPv6 (names are resolved once and cached)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).packed
    except ValueError:
        try:
            return socket.inet_aton(socket.gethostbyname(host))
        except OSError:
            raise MessageIllegalError(f"host {host!r} is neither an IP address nor a resolvable name") from None


def bytes_to_host(b: bytes) -> str:
    return str(ipaddress.ip_address(bytes(b)))


# ---------------------------------------------------------------------------------------------- ids
def create_message_id(store_host: tuple[str, int], physical_offset: int) -> str:
    """Offset msgId: store IP + port (i32) + commit-log offset (i64), upper-case hex (32 or 56 chars)."""
    ip = host_to_bytes(store_host[0])
    return (ip + _I32.pack(store_host[1]) + _I64.pack(physical_offset)).hex().upper()


def decode_message_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """``((ip, port), physical_offset)`` of an offset msgId; a clear StoreError when it is not one."""
    text = msg_id.strip()
    if len(text) not in (32, 56):
        raise StoreError(f"msgId {msg_id!r} is not an offset message id (expected 32 or 56 hex characters)")
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise StoreError(f"msgId {msg_id!r} is not hexadecimal") from None
    iplen = 4 if len(raw) == 16 else 16
    port = _I32.unpack_from(raw, iplen)[0]
    offset = _I64.unpack_from(raw, iplen + 4)[0]
    return (bytes_to_host(raw[:iplen]), port), offset


class UniqKeyGenerator:
    """``MessageClientIDSetter``: IP | pid (i16) | class-loader hash (i32) | ms since month start (i32) | counter.

    The month base uses local time like the JVM's default time zone. Thread-safe.
    """

    def __init__(self, ip: str | None = None) -> None:
        addr = host_to_bytes(ip) if ip else _local_ip_bytes()
        fix = addr + _I16.pack(_to_short(os.getpid())) + _I32.pack(random.getrandbits(31))
        self._prefix = fix.hex().upper()
        self._lock = threading.Lock()
        self._counter = 0
        self._start_ms = 0
        self._next_start_ms = 0
        self._last_diff: tuple[int, str] = (-1, "")  # (ms since month start, its prefix): one clock tick, one text

    def _set_start_time(self, now_ms: int) -> None:
        t = time.localtime(now_ms / 1000.0)
        start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        ny, nm = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        self._start_ms = int(start * 1000)
        self._next_start_ms = int(time.mktime((ny, nm, 1, 0, 0, 0, 0, 0, -1)) * 1000)

    def next(self, now_ms: int | None = None) -> str:
        prefix, counter = self.reserve(1, now_ms)
        return f"{prefix}{counter:04X}"

    def reserve(self, n: int, now_ms: int | None = None) -> tuple[str, int]:
        """``(prefix, first counter)`` for ``n`` ids sharing one clock read: id k is ``prefix + %04X``
        of ``(first + k) & 0xFFFF``."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            if now >= self._next_start_ms or now < self._start_ms - 1_000_000:
                self._set_start_time(now)
            diff = now - self._start_ms
            if diff < 0 and diff > -1_000_000:
                diff = 0
            counter = self._counter
            self._counter = (counter + n) & 0xFFFF
            last_diff, prefix = self._last_diff
            if diff != last_diff:
                prefix = self._prefix + _I32.pack(_to_int(diff)).hex().upper()
                self._last_diff = (diff, prefix)
        return prefix, counter


def _to_short(v: int) -> int:
    v &= 0xFFFF
    return v - 0x10000 if v & 0x8000 else v


def _to_int(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - 0x100000000 if v & 0x80000000 else v


def _local_ip_bytes() -> bytes:
    """``UtilAll.getIP()`` in spirit: a non-loopback IPv4 address of this host, else 127.0.0.1."""
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            addr = info[4][0]
            if not addr.startswith("127."):
                return socket.inet_aton(addr)
    except OSError:
        pass
    return socket.inet_aton("127.0.0.1")


# ---------------------------------------------------------------------------------------------- properties
def properties_to_string(props: dict[str, str], order: Iterable[str] | None = None) -> str:
    """``messageProperties2String`` (4.9.1+: no trailing separator) in ``order`` (default: dict order)."""
    keys = props.keys() if order is None else order
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{props[k]}" for k in keys if props.get(k) is not None
    )


def string_to_properties(s: str) -> dict[str, str]:
    """``string2messageProperties`` (4.9.1+): keeps ``k\\x01v`` segments with non-empty key and value."""
    out: dict[str, str] = {}
    if not s:
        return out
    for seg in s.split(PROPERTY_SEPARATOR):
        i = seg.find(NAME_VALUE_SEPARATOR)
        if len(seg) >= 3 and 0 < i < len(seg) - 1:
            out[seg[:i]] = seg[i + 1 :]
    return out


@lru_cache(maxsize=4096)
def broker_order(keys: tuple[str, ...]) -> tuple[str, ...]:
    """Key order after the broker parses ``keys`` into a HashMap, puts CLUSTER and drops WAIT."""
    m = JavaHashMap()
    for k in keys:
        m.put(k, "")
    m.put(PROPERTY_CLUSTER, "")
    m.remove(PROPERTY_WAIT_STORE_MSG_OK)
    return tuple(m.keys())


@lru_cache(maxsize=4096)
def _order_without_wait(keys: tuple[str, ...]) -> tuple[str, ...]:
    m = JavaHashMap()
    for k in keys:
        m.put(k, "")
    m.remove(PROPERTY_WAIT_STORE_MSG_OK)
    return tuple(m.keys())


def properties_without_wait(props: dict[str, str]) -> str:
    """The broker's properties string when no CLUSTER is added (HashMap order, WAIT left out)."""
    return properties_to_string(props, _order_without_wait(tuple(props)))


def broker_properties_string(props: dict[str, str], cluster_name: str | None) -> str:
    """The properties string a 4.9.x broker stores for a client's properties (docs/design/store-formats.md#properties).

    ``props`` is taken in client order; CLUSTER is added (when ``cluster_name``) and WAIT left out.
    """
    if cluster_name is None:
        return properties_without_wait(props)
    order = broker_order(tuple(props))
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{cluster_name if k == PROPERTY_CLUSTER else props[k]}" for k in order
    )


# ---------------------------------------------------------------------------------------------- messages
class _PropertyAccessors:
    """The well-known properties of a message, read from its ``properties`` map."""

    __slots__ = ()
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if k]

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


@dataclass(slots=True)
class Message(_PropertyAccessors):
    """A message to store, as a producer hands it over (``Message`` + the broker-side send fields)."""

    topic: str
    body: bytes = b""
    queue_id: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    # The exact stored properties string, for records the broker builds itself (transaction half/commit/op
    # records re-serialize a map their own way, docs/design/store-formats.md#properties); None: derived from ``properties`` as a send.
    properties_string: str | None = None


@dataclass(slots=True)
class MessageExt(_PropertyAccessors):
    """A decoded commit-log record (RocketMQ ``MessageExt``)."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_size: int
    body: bytes
    properties: dict[str, str]
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    sys_flag: int
    flag: int
    reconsume_times: int
    body_crc: int
    prepared_transaction_offset: int

    @property
    def msg_id(self) -> str:
        """The offset msgId (store host + physical offset)."""
        return create_message_id(self.store_host, self.physical_offset)

    @property
    def tags_code(self) -> int:
        t = self.tags
        return java_string_hash(t) if t else 0

    @property
    def tran_type(self) -> int:
        return self.sys_flag & TRANSACTION_TYPE_MASK


# ---------------------------------------------------------------------------------------------- encode
def encode_record(
    *,
    topic: str,
    body: bytes,
    properties: str | dict[str, str],
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: tuple[str, int] = ("127.0.0.1", 0),
    store_timestamp: int = 0,
    store_host: tuple[str, int] = ("127.0.0.1", 10911),
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    body_crc: int | None = None,
) -> bytes:
    """One record exactly as ``MessageDecoder.encode`` lays it out (host-width bits set from the addresses).

    ``properties`` is either the final properties string or a dict written in dict order.
    """
    props = properties if isinstance(properties, str) else properties_to_string(properties)
    born_ip = host_to_bytes(born_host[0])
    store_ip = host_to_bytes(store_host[0])
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    if len(born_ip) == 16:
        sys_flag |= BORNHOST_V6_FLAG
    if len(store_ip) == 16:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    topic_b = topic.encode("utf-8", "replace")
    props_b = props.encode("utf-8", "replace")
    total = cal_msg_length(sys_flag, len(body), len(topic_b), len(props_b))
    head = RECORD_FIXED_PART[len(born_ip), len(store_ip)].pack(
        total, MESSAGE_MAGIC_CODE, masked_crc32(body) if body_crc is None else body_crc, queue_id, flag,
        queue_offset, physical_offset, sys_flag, born_timestamp, born_ip, born_host[1], store_timestamp,
        store_ip, store_host[1], reconsume_times, prepared_transaction_offset, len(body),
    )
    return b"".join((head, body, _I8.pack(len(topic_b)), topic_b, _I16.pack(len(props_b)), props_b))


# ---------------------------------------------------------------------------------------------- decode
class RecordStatus:
    OK = "ok"  # a message record
    BLANK = "blank"  # end-of-file blank record: continue in the next segment
    BAD = "bad"  # not a valid record here (end of data, torn write, corruption)


@dataclass(slots=True)
class DecodeResult:
    """Outcome of decoding at one position: ``size`` bytes, a status, the message when OK, and why when BAD.

    As in ``checkMessageAndReturnSize``: BAD with ``size`` > 0 is a length mismatch (a reader may skip
    ``size`` bytes); BAD with ``size`` <= 0 means nothing readable here.
    """

    size: int
    status: str
    message: MessageExt | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == RecordStatus.OK


def check_frame(buf, pos: int, limit: int, check_crc: bool):
    """Structural checks of the record at ``pos`` without parsing its strings (recovery's fast path).

    Returns ``(status, size, reason, parts)``; for OK, ``parts[0]`` is the tuple of fixed fields (index 6 =
    PHYSICALOFFSET, 11 = STORETIMESTAMP). Raises struct.error/IndexError on bytes too short to hold a record.
    """
    if pos + 8 > limit:
        return RecordStatus.BAD, -1, "fewer than 8 bytes left before the readable end", None
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        return RecordStatus.BLANK, 0, "", None
    if magic != MESSAGE_MAGIC_CODE:
        if total == 0 and magic == 0:
            return RecordStatus.BAD, -1, "end of data (zero bytes)", None
        return RecordStatus.BAD, -1, f"bad magic code 0x{magic & 0xFFFFFFFF:08x}", None
    if total < 91 or pos + total > limit:
        return RecordStatus.BAD, -1, f"record length {total} runs past the readable end or is too small", None
    sys_flag = _I32.unpack_from(buf, pos + SYSFLAG_POSITION)[0]
    bw = 16 if sys_flag & BORNHOST_V6_FLAG else 4
    sw = 16 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 4
    fixed = RECORD_FIXED_PART[bw, sw]
    f = fixed.unpack_from(buf, pos)
    body_len = f[16]
    body_pos = pos + fixed.size
    tpos = body_pos + max(body_len, 0)
    if body_len < 0 or tpos + 1 > pos + total:
        return RecordStatus.BAD, total, f"body length {body_len} inconsistent with record length {total}", None
    topic_len = buf[tpos]
    if topic_len > 127:
        topic_len -= 256
    ppos = tpos + 1 + topic_len
    if topic_len <= 0 or ppos + 2 > pos + total:
        return RecordStatus.BAD, total, f"topic length {topic_len} inconsistent with record length {total}", None
    props_len = _I16.unpack_from(buf, ppos)[0]
    expect = cal_msg_length(sys_flag, body_len, topic_len, props_len)
    if expect != total:
        return RecordStatus.BAD, total, f"record length {total} != calculated length {expect}", None
    if check_crc and body_len > 0:
        crc = masked_crc32(memoryview(buf)[body_pos : body_pos + body_len])
        if crc != f[2]:
            return RecordStatus.BAD, -1, f"body CRC mismatch (stored {f[2]}, computed {crc})", None
    return RecordStatus.OK, total, "", (f, bw, body_pos, body_len, tpos, topic_len, ppos, props_len)


def decode_record(buf, pos: int = 0, *, check_crc: bool = True, read_body: bool = True,
                  limit: int | None = None) -> DecodeResult:
    """Decode the record at ``buf[pos:]`` (bytes, memoryview or mmap); never raises on bad data."""
    end = len(buf) if limit is None else limit
    try:
        status, size, reason, parts = check_frame(buf, pos, end, check_crc)
    except (struct.error, IndexError, ValueError) as e:
        return DecodeResult(-1, RecordStatus.BAD, None, f"undecodable record: {e}")
    if parts is None:
        return DecodeResult(size, status, None, reason)
    f, bw, body_pos, body_len, tpos, topic_len, ppos, props_len = parts
    topic = bytes(buf[tpos + 1 : tpos + 1 + topic_len]).decode("utf-8", "replace")
    props_s = bytes(buf[ppos + 2 : ppos + 2 + props_len]).decode("utf-8", "replace") if props_len > 0 else ""
    body = bytes(buf[body_pos : body_pos + body_len]) if read_body and body_len > 0 else b""
    msg = MessageExt(
        topic=topic, queue_id=f[3], queue_offset=f[5], physical_offset=f[6], store_size=size, body=body,
        properties=string_to_properties(props_s), born_timestamp=f[8],
        born_host=(bytes_to_host(f[9]), f[10]), store_timestamp=f[11], store_host=(bytes_to_host(f[12]), f[13]),
        sys_flag=f[7], flag=f[4], reconsume_times=f[14], body_crc=f[2], prepared_transaction_offset=f[15],
    )
    return DecodeResult(size, RecordStatus.OK, msg, "")


def decode_dispatch(buf, pos: int, *, check_crc: bool, limit: int,
                    delay_level_ms: list[int] | None = None) -> DispatchRequest:
    """``checkMessageAndReturnSize`` with readBody=false: the DispatchRequest of the record at ``pos``."""
    try:
        status, size, reason, parts = check_frame(buf, pos, limit, check_crc)
    except (struct.error, IndexError, ValueError) as e:
        return DispatchRequest(msg_size=-1, success=False, reason=f"undecodable record: {e}")
    if parts is None:
        return DispatchRequest(msg_size=size, success=status == RecordStatus.BLANK, reason=reason)
    f, _bw, _body_pos, _body_len, tpos, topic_len, ppos, props_len = parts
    topic = bytes(buf[tpos + 1 : tpos + 1 + topic_len]).decode("utf-8", "replace")
    keys: str | None = ""
    uniq: str | None = None
    tags_code = 0
    props: dict[str, str] | None = None
    if props_len > 0:
        props = string_to_properties(bytes(buf[ppos + 2 : ppos + 2 + props_len]).decode("utf-8", "replace"))
        keys = props.get(PROPERTY_KEYS)
        uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        tags = props.get(PROPERTY_TAGS)
        if tags:
            tags_code = java_string_hash(tags)
        if topic == SCHEDULE_TOPIC and PROPERTY_DELAY_TIME_LEVEL in props and delay_level_ms:
            try:
                level = int(props[PROPERTY_DELAY_TIME_LEVEL])
            except ValueError:
                level = 0
            if level > 0:
                level = min(level, len(delay_level_ms))
                tags_code = f[11] + delay_level_ms[level - 1]
        elif topic == TIMER_TOPIC and PROPERTY_TIMER_OUT_MS in props:
            try:
                tags_code = int(props[PROPERTY_TIMER_OUT_MS])
            except ValueError:
                pass
    return DispatchRequest(
        topic=topic, queue_id=f[3], commit_log_offset=f[6], msg_size=size, tags_code=tags_code,
        store_timestamp=f[11], consume_queue_offset=f[5], keys=keys, uniq_key=uniq, sys_flag=f[7],
        prepared_transaction_offset=f[15], properties_map=props, success=True,
    )


def parse_delay_levels(spec: str) -> list[int]:
    """``"1s 5s 10s 30s 1m ..."`` -> delays in ms per level (level 1 first)."""
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    out: list[int] = []
    for item in spec.split():
        unit = units.get(item[-1:])
        if unit is None or not item[:-1].isdigit():
            raise StoreError(f"bad delay level {item!r} in {spec!r}: use a number with s, m, h or d")
        out.append(int(item[:-1]) * unit)
    return out


def check_topic(topic: str) -> None:
    """``DefaultMessageStore.checkMessage`` / ``TopicValidator`` rules for a topic name."""
    if not isinstance(topic, str):
        raise MessageIllegalError(f"topic must be a string, got {type(topic).__name__}")
    if not topic:
        raise MessageIllegalError("topic is empty")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise MessageIllegalError(f"topic {topic[:40]!r}... is {len(topic)} characters; the maximum is 127")
    if not TOPIC_PATTERN.match(topic):
        raise MessageIllegalError(
            f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]; use only letters, digits, %, |, _ and -"
        )


def check_properties(props: dict[str, str]) -> None:
    """Keys and values must survive the round trip through the ``\\x01``/``\\x02`` string."""
    for k, v in props.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise MessageIllegalError(
                f"property {k!r}: names and values must be strings, got {type(k).__name__} -> {type(v).__name__}"
            )
        if not k or not v:
            raise MessageIllegalError(f"property {k!r} has an empty name or value; both must be non-empty")
        if "\x01" in k or "\x02" in k or "\x01" in v or "\x02" in v:
            raise MessageIllegalError(f"property {k!r} contains a reserved separator character (\\x01 or \\x02)")

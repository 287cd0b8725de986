"""Between RocketMQ 5 messages (``apache.rocketmq.v2.Message``) and raftmq's (raftmq.v1 / the store).

Send direction: a v2 message becomes a raftmq ``Message`` (so it takes raftmq's one write path) plus the system
properties raftmq's API has no field for (delivery time, trace context). Every check here answers with the v2
code a RocketMQ client expects for that mistake, and says what to fix.

Read direction (``to_v2_message``): a stored message (as raftmq's ``MessageView``) becomes a v2 message with the
system properties the clients read; node.rocketmq5.consumer adds the delivery fields (receipt handle, attempt).
"""

from __future__ import annotations

import gzip
import hashlib
import ipaddress
import time
import zlib

from google.protobuf.timestamp_pb2 import Timestamp

from raftmq.node.rocketmq5.status import V2Error
from raftmq.node.validation import (
    RESERVED_PROPERTIES,
    RESERVED_PROPERTY_PREFIXES,
    ValidationError,
    check_keys,
    check_tags,
    check_user_properties,
)
from raftmq.rocketmq.v2 import definition_pb2 as v2
from raftmq.store.transaction import PROPERTY_TRANSACTION_PREPARED
from raftmq.v1 import raftmq_pb2 as pb

PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"  # deliver at this epoch ms (the store's timer, RocketMQ 5's name)
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"  # RocketMQ 5's MessageConst.PROPERTY_TRACE_CONTEXT
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"  # FIFO message group
MAX_MESSAGE_ID_LENGTH = 128
MAX_MESSAGE_GROUP_LENGTH = 128
MAX_TRACE_CONTEXT_LENGTH = 4096
# google.protobuf.Timestamp's valid range: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z
TIMESTAMP_MIN_SECONDS, TIMESTAMP_MAX_SECONDS = -62135596800, 253402300799
# stored properties that are system ones, never shown to a v2 client as user properties
_SYSTEM_NAMES = RESERVED_PROPERTIES | {PROPERTY_TRACE_CONTEXT}


class Outgoing:
    """One v2 message on its way to the write path: the raftmq message and what raftmq's API has no field for."""

    __slots__ = ("message", "message_type", "message_id", "deliver_at_ms", "system_properties")

    def __init__(self, message: pb.Message, message_type: int, message_id: str, deliver_at_ms: int | None,
                 system_properties: dict[str, str]):
        self.message = message
        self.message_type = message_type
        self.message_id = message_id
        self.deliver_at_ms = deliver_at_ms
        self.system_properties = system_properties


def message_type_of(m: v2.Message) -> int:
    """The declared type, or the one the fields imply (an older client may leave it unset)."""
    sp = m.system_properties
    declared = sp.message_type
    if declared != v2.MESSAGE_TYPE_UNSPECIFIED:
        return declared
    if sp.HasField("message_group"):
        return v2.FIFO
    if sp.HasField("delivery_timestamp"):
        return v2.DELAY
    return v2.NORMAL


def _body(m: v2.Message, max_body_size: int) -> bytes:
    body = m.body
    encoding = m.system_properties.body_encoding
    if encoding == v2.GZIP:
        try:  # stored plain, so raftmq's own consumers and tools read the body as sent
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error):
            raise V2Error(v2.MESSAGE_CORRUPTED, "the body is marked GZIP but is not valid gzip data; send it "
                          "uncompressed (IDENTITY) or gzip it whole") from None
    elif encoding not in (v2.IDENTITY, v2.ENCODING_UNSPECIFIED):
        raise V2Error(v2.BAD_REQUEST, f"body encoding {encoding} is not supported; use IDENTITY or GZIP")
    if not body:
        raise V2Error(v2.MESSAGE_BODY_EMPTY, "the message body is empty; send at least one byte")
    if len(body) > max_body_size:
        raise V2Error(v2.MESSAGE_BODY_TOO_LARGE, f"the message body is {len(body)} bytes; the limit is "
                      f"{max_body_size} (store.max_message_size): split the payload or store it elsewhere and "
                      "send a reference")
    return body


def _born_host(text: str) -> str:
    host = text.strip()
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return ""  # not an address (a host name): the call's peer is used instead
    return f"[{host.strip('[]')}]:0" if ":" in host else f"{host}:0"


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _delivery_ms(ts: Timestamp, now_ms: int, max_delay_ms: int) -> int:
    """A DELAY message's delivery time in epoch ms; ILLEGAL_DELIVERY_TIME (with the allowed range) for one that
    is not a valid timestamp or lies beyond the allowed delay. A time already past means "deliver now"."""
    latest = now_ms + max_delay_ms
    allowed = (f"give a time between now and {_utc(latest)} (at most {max_delay_ms // 1000} s ahead, "
               "node.rocketmq5_max_delay_seconds) as seconds and nanos since the epoch")
    if not (TIMESTAMP_MIN_SECONDS <= ts.seconds <= TIMESTAMP_MAX_SECONDS and 0 <= ts.nanos < 1_000_000_000):
        hint = " (milliseconds where seconds are expected?)" if ts.seconds > TIMESTAMP_MAX_SECONDS else ""
        raise V2Error(v2.ILLEGAL_DELIVERY_TIME, f"the delivery timestamp (seconds {ts.seconds}, nanos {ts.nanos}) is "
                      f"not a valid time{hint}: {allowed}")
    deliver_at = ts.ToMilliseconds()
    if deliver_at > latest:
        raise V2Error(v2.ILLEGAL_DELIVERY_TIME, f"the delivery time {_utc(deliver_at)} is "
                      f"{(deliver_at - now_ms) / 1000:.0f} s from now; a message is delayed at most "
                      f"{max_delay_ms // 1000} s: {allowed}")
    return deliver_at


def to_outgoing(m: v2.Message, *, max_body_size: int, max_delay_ms: int, now_ms: int) -> Outgoing:
    """Check one v2 message and turn it into a raftmq message; V2Error names the problem."""
    sp = m.system_properties
    mtype = message_type_of(m)
    if mtype not in (v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION):
        raise V2Error(v2.UNSUPPORTED, f"message type {v2.MessageType.Name(mtype)} is not supported by raftmq; send "
                      "NORMAL, FIFO, DELAY or TRANSACTION messages")
    has_group, has_delivery = sp.HasField("message_group"), sp.HasField("delivery_timestamp")
    if mtype == v2.FIFO and not (has_group and sp.message_group):
        raise V2Error(v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a FIFO message needs a message group; set it "
                      "(Java: setMessageGroup, Python: message_group)")
    if mtype != v2.FIFO and has_group:
        raise V2Error(v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, f"a {v2.MessageType.Name(mtype)} message cannot have "
                      "a message group; only FIFO messages have one")
    if mtype == v2.DELAY and not has_delivery:
        raise V2Error(v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a DELAY message needs a delivery timestamp; set it")
    if mtype != v2.DELAY and has_delivery:
        raise V2Error(v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, f"a {v2.MessageType.Name(mtype)} message cannot have a "
                      "delivery timestamp; only DELAY messages are delivered later")
    if not m.topic.name:
        raise V2Error(v2.ILLEGAL_TOPIC, "the message has no topic; set the topic name")
    message_id = sp.message_id
    if not message_id:
        raise V2Error(v2.ILLEGAL_MESSAGE_ID, "the message id is empty; the client sets one for every message")
    if len(message_id) > MAX_MESSAGE_ID_LENGTH or any(c in message_id for c in " \x01\x02") or \
            not message_id.isprintable():
        raise V2Error(v2.ILLEGAL_MESSAGE_ID, f"message id {message_id[:40]!r} is not valid: at most "
                      f"{MAX_MESSAGE_ID_LENGTH} printable characters without spaces")
    out = pb.Message(topic=m.topic.name, body=_body(m, max_body_size), uniq_key=message_id)
    if sp.HasField("tag"):
        tag = sp.tag
        if not tag.strip() or "|" in tag:
            raise V2Error(v2.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is not valid: a tag is one non-blank word without '|'")
        try:
            check_tags(tag)
        except ValidationError as e:
            raise V2Error(v2.ILLEGAL_MESSAGE_TAG, str(e)) from None
        out.tags = tag
    if sp.keys:
        keys = list(sp.keys)
        try:
            if any(not k.strip() for k in keys):
                raise ValidationError("a message key is blank; remove it or give it a value")
            check_keys(keys)
        except ValidationError as e:
            raise V2Error(v2.ILLEGAL_MESSAGE_KEY, str(e)) from None
        out.keys.extend(keys)
    if m.user_properties:
        props = dict(m.user_properties)
        try:
            check_user_properties(props)
        except ValidationError as e:
            raise V2Error(v2.ILLEGAL_MESSAGE_PROPERTY_KEY, str(e)) from None
        out.properties.update(props)
    if mtype == v2.FIFO:
        group = sp.message_group
        if len(group) > MAX_MESSAGE_GROUP_LENGTH or any(c in group for c in "\x01\x02") or not group.isprintable():
            raise V2Error(v2.ILLEGAL_MESSAGE_GROUP, f"message group {group[:40]!r} is not valid: at most "
                          f"{MAX_MESSAGE_GROUP_LENGTH} printable characters")
        out.message_group = group
    if sp.HasField("born_timestamp"):
        born = sp.born_timestamp.ToMilliseconds()
        if born > 0:
            out.born_timestamp = born
    if sp.born_host:
        out.born_host = _born_host(sp.born_host)
    deliver_at = _delivery_ms(sp.delivery_timestamp, now_ms, max_delay_ms) if mtype == v2.DELAY else None
    system: dict[str, str] = {}
    if sp.HasField("trace_context") and sp.trace_context:
        if len(sp.trace_context) > MAX_TRACE_CONTEXT_LENGTH or any(c in sp.trace_context for c in "\x01\x02"):
            raise V2Error(v2.BAD_REQUEST, f"the trace context is longer than {MAX_TRACE_CONTEXT_LENGTH} characters "
                          "or holds control characters")
        system[PROPERTY_TRACE_CONTEXT] = sp.trace_context
    return Outgoing(out, mtype, message_id, deliver_at, system)


# ---------------------------------------------------------------------------------------------- store -> v2
def _timestamp(ms: int) -> Timestamp:
    t = Timestamp()
    t.FromMilliseconds(ms)
    return t


def to_v2_message(view: pb.MessageView, *, topic: str | None = None) -> v2.Message:
    """A stored message as the v2 clients read it (``topic`` overrides the stored one, e.g. a half message's
    real topic). Bodies are stored plain, so the encoding is IDENTITY; the digest is uppercase MD5 like the
    Java proxy's."""
    props = view.properties
    sp = v2.SystemProperties(
        message_id=view.uniq_key or view.msg_id,
        body_digest=v2.Digest(type=v2.MD5, checksum=hashlib.md5(view.body).hexdigest().upper()),
        body_encoding=v2.IDENTITY,
        born_timestamp=_timestamp(view.born_timestamp),
        born_host=view.born_host.rpartition(":")[0].strip("[]") if view.born_host else "",
        store_timestamp=_timestamp(view.store_timestamp),
        store_host=view.store_host,
        queue_id=view.queue_id,
        queue_offset=view.queue_offset,
    )
    if view.tags:
        sp.tag = view.tags
    sp.keys.extend(k for k in view.keys if k)
    group = props.get(PROPERTY_SHARDING_KEY, "")
    deliver = props.get(PROPERTY_TIMER_DELIVER_MS, "")
    if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        sp.message_type = v2.TRANSACTION
    elif group:
        sp.message_type = v2.FIFO
    elif deliver.isdigit():
        sp.message_type = v2.DELAY
    else:
        sp.message_type = v2.NORMAL
    if group:
        sp.message_group = group
    if deliver.isdigit():
        sp.delivery_timestamp.CopyFrom(_timestamp(int(deliver)))
    trace = props.get(PROPERTY_TRACE_CONTEXT)
    if trace:
        sp.trace_context = trace
    user = {k: v for k, v in props.items() if k not in _SYSTEM_NAMES and not k.startswith(RESERVED_PROPERTY_PREFIXES)}
    return v2.Message(topic=v2.Resource(name=topic or view.topic), user_properties=user, system_properties=sp,
                      body=view.body)

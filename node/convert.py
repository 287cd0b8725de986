"""Between the wire (raftmq.v1 messages) and the store (store.message.Message / MessageExt, Put/Get results).

Why a module of its own: the property layout a producer's fields turn into (TAGS, KEYS, DELAY, UNIQ_KEY in a
RocketMQ client's insertion order), and the mapping of the store's GetStatus to the API's PullStatus, are
decisions; keeping them in one place keeps the handlers short and the decisions visible.
"""

from __future__ import annotations

import ipaddress
import time

import grpc

from raftmq.node.errors import RpcError, invalid
from raftmq.node.validation import check_keys, check_tags, check_user_properties
from raftmq.store.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    Message,
    UniqKeyGenerator,
)
from raftmq.v1 import raftmq_pb2 as pb


class StoreMessageBuilder:
    """Turns request messages into store Messages: checks, properties, UNIQ_KEY, born host."""

    def __init__(self, *, max_message_size: int, uniq_key_ip: str):
        self.max_message_size = max_message_size
        self._uniq = UniqKeyGenerator(uniq_key_ip)

    def to_store_messages(
        self, messages: list[pb.Message], queue_id: int, peer: tuple[str, int]
    ) -> list[Message]:
        """The store messages for one request; raises RpcError for what cannot be stored."""
        now_ms = int(time.time() * 1000)
        need = sum(1 for m in messages if not m.uniq_key)
        prefix, counter = self._uniq.reserve(need, now_ms) if need else ("", 0)  # one clock read and lock per batch
        total = 0
        out: list[Message] = []
        many = len(messages) > 1
        limit = self.max_message_size
        for i, m in enumerate(messages):
            if m.deliver_at_ms or m.delay_level:
                _check_timing(m, _where(i, many))
            body = m.body
            body_len = len(body)
            if body_len > limit:
                raise invalid(
                    f"{_where(i, many)}body is {body_len} bytes; the limit is {limit} "
                    "(store.max_message_size) - split the payload or store it elsewhere and send a reference"
                )
            total += body_len
            try:
                props = self._properties(m)
            except ValueError as e:
                raise invalid(f"{_where(i, many)}{e}") from None
            if PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:
                props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = f"{prefix}{counter & 0xFFFF:04X}"
                counter += 1
            born_host = _born_host(m.born_host, _where(i, many)) if m.born_host else peer
            out.append(Message(topic=m.topic, body=body, queue_id=queue_id, properties=props, flag=m.flag,
                               born_timestamp=m.born_timestamp or now_ms, born_host=born_host))
        if many and total > limit:
            raise invalid(
                f"the batch's bodies add up to {total} bytes; a batch is limited to {limit} "
                "(store.max_message_size) - send smaller batches"
            )
        return out

    @staticmethod
    def _properties(m: pb.Message) -> dict[str, str]:
        """The stored properties of one message (per message on the send path: each field read once)."""
        props: dict[str, str] = {}
        tags = m.tags
        if tags:
            check_tags(tags)
            props[PROPERTY_TAGS] = tags
        keys = m.keys
        if keys:
            keys = list(keys)
            check_keys(keys)
            props[PROPERTY_KEYS] = " ".join(keys)
        user = m.properties
        if user:
            user = dict(user)
            check_user_properties(user)
            props.update(user)
        group = m.message_group
        if group:  # FIFO message group, under RocketMQ 5's property name
            if len(group) > 128 or _has_separator(group):
                raise ValueError("message_group must be at most 128 characters without \\x01 / \\x02 separators")
            props["__SHARDINGKEY"] = group
        if m.delay_level > 0:  # set after TAGS/KEYS/WAIT and before UNIQ_KEY, as a RocketMQ producer does
            props[PROPERTY_DELAY_TIME_LEVEL] = str(m.delay_level)
        if m.deliver_at_ms > 0:  # issue 13: RocketMQ 5's timer property (store.timer diverts it until then)
            props[PROPERTY_TIMER_DELIVER_MS] = str(m.deliver_at_ms)
        uniq = m.uniq_key
        if uniq:
            if len(uniq) > 128 or " " in uniq or _has_separator(uniq):
                raise ValueError("uniq_key must be at most 128 characters without spaces or control separators")
            props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
        return props


def _has_separator(text: str) -> bool:
    """RocketMQ's property separators (\\x01 between name and value, \\x02 between properties)."""
    return "\x01" in text or "\x02" in text


def _where(i: int, many: bool) -> str:
    """The prefix of an error about message ``i`` of a request (none for a single message)."""
    return f"message {i}: " if many else ""


def _check_timing(m: pb.Message, where: str) -> None:
    """A delayed or timed message asks for one of the two, with a usable value."""
    if m.deliver_at_ms < 0:
        raise invalid(f"{where}deliver_at_ms {m.deliver_at_ms} is negative; give a time in milliseconds "
                      "since the epoch, or 0 to deliver now")
    if m.deliver_at_ms and m.delay_level:
        raise invalid(f"{where}both delay_level and deliver_at_ms are set; use one of them")
    if m.delay_level < 0:
        raise invalid(f"{where}delay_level {m.delay_level} is negative; use 0 to deliver now or a level "
                      "from 1 (store.message_delay_level lists the delays; a higher level is clamped to the "
                      "last one)")


def _born_host(text: str, where: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
        if not sep or not 0 <= int(port) <= 65535:
            raise ValueError
    except ValueError:
        raise invalid(f"{where}born_host {text!r} must be ip:port (IPv6 as [addr]:port), or empty") from None
    return host, int(port)


def _host(addr: tuple[str, int]) -> str:
    host, port = addr
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# ------------------------------------------------------------------------------------------------ results
def check_put_results(results: list) -> None:
    """Every PutResult must be PUT_OK; anything else fails the call with what the status means."""
    for r in results:
        status = r.status.name if getattr(r, "status", None) is not None else "PUT_OK"  # AppendResult: stored
        if status == "PUT_OK":
            continue
        code = grpc.StatusCode
        if status in ("FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"):
            raise RpcError(code.UNKNOWN, f"{status}: the message was written at offset {r.physical_offset} but its "
                           "durability was not confirmed in time; it may be lost on a crash - check and resend")
        if status in ("MESSAGE_ILLEGAL", "PROPERTIES_SIZE_EXCEEDED"):
            raise RpcError(code.INVALID_ARGUMENT, f"{status}: the store rejected the message")
        if status in ("OS_PAGE_CACHE_BUSY", "OS_PAGECACHE_BUSY", "SERVICE_NOT_AVAILABLE"):
            raise RpcError(code.UNAVAILABLE, f"{status}: the store cannot take writes right now; retry shortly")
        raise RpcError(code.INTERNAL, f"{status}: the store could not write the message (see the node log)")


def send_result(r, msg: Message, broker: str = "", duplicate: bool | None = None) -> pb.SendResult:
    """``r``: the store's PutResult or AppendResult for ``msg``, or the stored record itself (``duplicate`` then
    says whether this answers a repeat: a stored record carries no such flag); ``broker``: the group that stored it.

    A delayed message is stored in SCHEDULE_TOPIC_XXXX queue ``level - 1`` until due: topic and queue_id are the
    real ones, queue_offset is its offset in the schedule queue (as RocketMQ reports it), and the note says so and
    whether the level was clamped."""
    queue_id, note = r.queue_id, ""
    if r.topic == SCHEDULE_TOPIC and r.topic != msg.topic:
        queue_id = msg.queue_id
        level = r.queue_id + 1
        asked = int(msg.properties.get(PROPERTY_DELAY_TIME_LEVEL, level))
        if asked > level:
            note = f"delay level {asked} clamped to {level} (the last of store.message_delay_level); "
        note += (f"held in {SCHEDULE_TOPIC} queue {r.queue_id} (queue_offset is there) until its delay has passed, "
                 f"then delivered to {msg.topic}-{msg.queue_id}")
    elif r.topic == TIMER_TOPIC and r.topic != msg.topic:
        queue_id = msg.queue_id
        note = (f"held in {TIMER_TOPIC} (queue_offset is there) until "
                f"{msg.properties.get(PROPERTY_TIMER_DELIVER_MS)} ms since the epoch, then delivered to "
                f"{msg.topic}-{msg.queue_id}")
    return pb.SendResult(msg_id=r.msg_id, uniq_key=msg.uniq_key or "", topic=msg.topic,
                         queue_id=queue_id, queue_offset=r.queue_offset, physical_offset=r.physical_offset,
                         store_timestamp=r.store_timestamp, note=note, broker=broker,
                         duplicate=r.duplicate if duplicate is None else duplicate)


def add_send_results(field, results: list, msgs: list[Message], broker: str = "") -> None:
    """Append each stored message's SendResult to ``field`` (a repeated SendResult of a response being built);
    ``broker``: the group that stored them.

    Built in place: a SendResult made first and then put in a response is copied there, and the send stream
    answers tens of thousands of messages a second; a delayed or timed message takes ``send_result``'s way."""
    add = field.add
    for r, m in zip(results, msgs, strict=True):
        topic = m.topic
        if r.topic != topic:
            field.append(send_result(r, m, broker))
            continue
        add(msg_id=r.msg_id, uniq_key=m.uniq_key or "", topic=topic, queue_id=r.queue_id,
            queue_offset=r.queue_offset, physical_offset=r.physical_offset, store_timestamp=r.store_timestamp,
            broker=broker, duplicate=r.duplicate)


def message_view(m) -> pb.MessageView:
    props = m.properties
    return pb.MessageView(
        msg_id=m.msg_id, uniq_key=props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""), topic=m.topic,
        queue_id=m.queue_id, queue_offset=m.queue_offset, physical_offset=m.physical_offset,
        store_size=m.store_size, body=m.body, tags=props.get(PROPERTY_TAGS, ""), keys=m.keys, properties=props,
        born_timestamp=m.born_timestamp, born_host=_host(m.born_host), store_timestamp=m.store_timestamp,
        store_host=_host(m.store_host), sys_flag=m.sys_flag, flag=m.flag, reconsume_times=m.reconsume_times,
        body_crc=m.body_crc, prepared_transaction_offset=m.prepared_transaction_offset,
    )


# GetStatus of the store -> (PullStatus, where the consumer goes next). None: nothing new at this offset (yet),
# so a long poll may wait.
def pull_response(got, offset: int) -> pb.PullMessageResponse | None:
    status = got.status.name
    found = None
    nxt = got.next_begin_offset
    if status == "FOUND":
        found = pb.FOUND
    elif status == "NO_MATCHED_MESSAGE":
        found = pb.NO_MATCHED_MSG
    elif status in ("OFFSET_OVERFLOW_ONE",):
        return None
    elif status in ("NO_MESSAGE_IN_QUEUE", "NO_MATCHED_LOGIC_QUEUE"):
        if offset == 0:
            return None
        found, nxt = pb.OFFSET_OVERFLOW, got.max_offset
    elif status == "OFFSET_OVERFLOW_BADLY":
        found, nxt = pb.OFFSET_OVERFLOW, got.max_offset
    elif status == "OFFSET_TOO_SMALL":
        found, nxt = pb.OFFSET_TOO_SMALL, got.min_offset
    elif status in ("OFFSET_FOUND_NULL", "MESSAGE_WAS_REMOVING"):
        found = pb.OFFSET_MOVED
    else:
        raise RpcError(grpc.StatusCode.INTERNAL, f"unexpected store status {status} for a pull")
    return pb.PullMessageResponse(status=found, messages=[message_view(m) for m in got.messages],
                                  next_offset=nxt, min_offset=got.min_offset, max_offset=got.max_offset)


def no_new_message(got, offset: int) -> pb.PullMessageResponse:
    return pb.PullMessageResponse(status=pb.NO_NEW_MSG, next_offset=offset, min_offset=got.min_offset,
                                  max_offset=got.max_offset)

"""Checks on what clients send, before anything reaches the write path.

Why here and not in the store: the store rejects what would corrupt a record; the broker additionally rejects what
RocketMQ's broker and proxy reject (topic charset, system property names, separators that would silently change
the stored properties) and says, in the error, what to change.
"""

from __future__ import annotations

import re

TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
MAX_QUEUE_NUMS = 1024
PERM_READ, PERM_WRITE, PERM_INHERIT = 4, 2, 1
MAX_KEY_LENGTH = 1024  # index hashing works on any length; keep keys readable and bounded
_TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_SEPARATORS = ("\x01", "\x02")

# MessageConst system property names (RocketMQ 4.9 + 5.x) that a producer must not set as user properties: the
# broker sets them, or they change how a message is stored and delivered.
RESERVED_PROPERTIES = frozenset(
    """KEYS TAGS WAIT DELAY RETRY_TOPIC REAL_TOPIC REAL_QID TRAN_MSG PGROUP MIN_OFFSET MAX_OFFSET BUYER_ID
    ORIGIN_MESSAGE_ID TRANSFER_FLAG CORRECTION_FLAG MQ2_FLAG RECONSUME_TIME MSG_REGION TRACE_ON UNIQ_KEY
    MAX_RECONSUME_TIMES CONSUME_START_TIME TRAN_PREPARED_QUEUE_OFFSET TRANSACTION_CHECK_TIMES
    CHECK_IMMUNITY_TIME_IN_SECONDS INSTANCE_ID CORRELATION_ID REPLY_TO_CLIENT TTL ARRIVE_TIME PUSH_REPLY_TIME
    CLUSTER MSG_TYPE INNER_MULTI_DISPATCH INNER_MULTI_QUEUE_OFFSET __CRC32# DUP_INFO INNER_NUM INNER_BASE POP_CK
    __SHARDINGKEY TIMER_DELAY_SEC TIMER_DELIVER_MS TIMER_DELAY_MS TIMER_OUT_MS TIMER_ENQUEUE_MS TIMER_DEQUEUE_MS
    TIMER_ROLL_TIMES TIMER_DEL_UNIQKEY STARTDELIVERTIME""".split()
)
RESERVED_PROPERTY_PREFIXES = ("__RMQ.TRANSIENT.",)

# Topics the broker itself uses; clients may not send to, create or delete them.
SYSTEM_TOPICS = frozenset(
    """SCHEDULE_TOPIC_XXXX RMQ_SYS_TRANS_HALF_TOPIC RMQ_SYS_TRANS_OP_HALF_TOPIC TRANS_CHECK_MAX_TIME_TOPIC
    TBW102 BenchmarkTest OFFSET_MOVED_EVENT SELF_TEST_TOPIC RMQ_SYS_TRACE_TOPIC RMQ_SYS_TRANSACTION_HALF_TOPIC
    rmq_sys_REVIVE_LOG rmq_sys_wheel_timer""".split()
)
SYSTEM_TOPIC_PREFIXES = ("rmq_sys_", "RMQ_SYS_")
# System topics whose messages are not meant for any consumer yet: delayed messages before their time, half
# messages of open transactions and the transaction op log. Pulling them is refused.
UNCONSUMABLE_TOPICS = {
    "SCHEDULE_TOPIC_XXXX": "delayed messages wait there until their time; consume their real topic",
    "rmq_sys_wheel_timer": "timer messages wait there until their delivery time; consume their real topic",
    "RMQ_SYS_TRANS_HALF_TOPIC": "half messages of open transactions wait there; a commit delivers the message to "
    "its real topic",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC": "it is the broker's transaction op log",
}


class ValidationError(ValueError):
    """Client input that cannot be accepted; the message says what to fix."""


def is_system_topic(name: str) -> bool:
    return name in SYSTEM_TOPICS or name.startswith(SYSTEM_TOPIC_PREFIXES)


def check_topic_name(name: str, *, allow_system: bool = False) -> None:
    if not name:
        raise ValidationError("topic is empty; set the topic name")
    if len(name) > TOPIC_MAX_LENGTH:
        raise ValidationError(f"topic name is {len(name)} characters; the limit is {TOPIC_MAX_LENGTH}")
    if not _TOPIC.match(name):
        bad = sorted({c for c in name if not _TOPIC.match(c)})
        raise ValidationError(
            f"topic {name!r} contains {''.join(bad)!r}; use only letters, digits, '%', '|', '_' and '-'"
        )
    if not allow_system and is_system_topic(name):
        raise ValidationError(f"topic {name!r} is a system topic reserved for the broker; use another name")


def check_consumable_topic(name: str) -> None:
    """Refuse pulls from a topic whose messages are not for consumers (see ``UNCONSUMABLE_TOPICS``)."""
    why = UNCONSUMABLE_TOPICS.get(name)
    if why is not None:
        raise ValidationError(f"topic {name!r} cannot be consumed: {why}")


def check_group_name(group: str) -> None:
    if not group:
        raise ValidationError("consumer group is empty; set the group name")
    if len(group) > GROUP_MAX_LENGTH or not _TOPIC.match(group):
        raise ValidationError(
            f"consumer group {group!r} must be 1-{GROUP_MAX_LENGTH} letters, digits, '%', '|', '_' and '-'"
        )


def _check_text(what: str, value: str) -> None:
    if any(s in value for s in _SEPARATORS):
        raise ValidationError(f"{what} contains a \\x01 or \\x02 control character, which RocketMQ uses as a separator")


def check_tags(tags: str) -> None:
    _check_text("tags", tags)
    if "||" in tags:
        raise ValidationError(f"tags {tags!r} contains '||'; a message has one tag (use '||' only in tag expressions)")


def check_keys(keys: list[str]) -> None:
    for key in keys:
        if not key:
            raise ValidationError("a message key is empty; remove it or give it a value")
        if " " in key:
            raise ValidationError(f"message key {key!r} contains a space, which RocketMQ uses to join keys; split it")
        if len(key) > MAX_KEY_LENGTH:
            raise ValidationError(f"message key is {len(key)} characters; the limit is {MAX_KEY_LENGTH}")
        _check_text(f"message key {key!r}", key)


def check_user_properties(props: dict[str, str]) -> None:
    for name, value in props.items():
        if name in RESERVED_PROPERTIES or name.startswith(RESERVED_PROPERTY_PREFIXES):
            raise ValidationError(
                f"property name {name!r} is reserved by RocketMQ; use the Message field for it (tags, keys, "
                "uniq_key, delay_level) or pick another name"
            )
        if not name:
            raise ValidationError("a property has an empty name")
        if not value:
            raise ValidationError(f"property {name!r} has an empty value, which RocketMQ would drop; give it a value")
        _check_text(f"property {name!r}", name + value)


def check_queue_nums(what: str, n: int) -> None:
    if not 1 <= n <= MAX_QUEUE_NUMS:
        raise ValidationError(f"{what} is {n}; it must be between 1 and {MAX_QUEUE_NUMS}")


def check_perm(perm: int) -> None:
    if not 0 <= perm <= 7:
        raise ValidationError(f"perm {perm} is not a combination of READ 4, WRITE 2, INHERIT 1 (0..7, usually 6)")


class MessageTypeError(ValidationError):
    """A send of a kind of message its topic does not take (issue 34): INVALID_ARGUMENT on raftmq's API,
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE on RocketMQ 5's, as Apache RocketMQ 5's proxy refuses it."""


def check_message_type_name(value: str, *, allow_empty: bool = False) -> str:
    """``value`` as one of the topic message types (upper case); ValidationError naming them otherwise."""
    from raftmq.store.topic_config import MESSAGE_TYPES

    name = value.strip().upper()
    if (allow_empty and not name) or name in MESSAGE_TYPES:
        return name
    raise ValidationError(f"message type {value!r} is not one of {', '.join(MESSAGE_TYPES)}")


def message_type_of(m) -> tuple[str, str]:
    """(kind, why) of a raftmq ``Message`` as RocketMQ 5 tells it from its properties: a delay level or a
    delivery time makes it DELAY, else a message group FIFO, else NORMAL (a half message is TRANSACTION: the
    transaction service says so itself)."""
    if m.delay_level > 0:
        return "DELAY", f"it has delay level {m.delay_level}"
    if m.deliver_at_ms > 0:
        return "DELAY", "it has a delivery time"
    if m.message_group:
        return "FIFO", "it has a message group"
    return "NORMAL", "it has no message group, delay or delivery time"


def check_message_type(cfg, kind: str, why: str = "") -> None:
    """MessageTypeError unless topic ``cfg`` (store.topic_config.TopicConfig) takes messages of ``kind``."""
    if cfg.accepts(kind):
        return
    topic = cfg.topic_name
    raise MessageTypeError(
        f"topic {topic!r} takes {cfg.message_type} messages, and this is a {kind} message"
        f"{f' ({why})' if why else ''}: send it to a {kind} or MIXED topic, or change this one with `raftmq topic "
        f"update {topic} --message-type {kind}` (MIXED takes every kind)")

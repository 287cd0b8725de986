"""DispatchRequest: what the reput thread hands to the consume-queue and index builders (docs/design/store-formats.md#dispatch-reput)."""

from __future__ import annotations

from dataclasses import dataclass, field

# Transaction type bits of SYSFLAG (MessageSysFlag); only NOT and COMMIT records reach a consume queue.
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_TYPE_MASK = 0xC


@dataclass(slots=True)
class DispatchRequest:
    """One decoded commit-log record, reduced to what the dispatchers need (RocketMQ ``DispatchRequest``).

    ``msg_size`` > 0 with ``success`` is a message; ``msg_size == 0`` with ``success`` is the end-of-file
    blank record; ``success`` False means a bad record (``msg_size`` > 0: length mismatch, skip that many
    bytes; otherwise stop).
    """

    topic: str = ""
    queue_id: int = 0
    commit_log_offset: int = 0
    msg_size: int = 0
    tags_code: int = 0
    store_timestamp: int = 0
    consume_queue_offset: int = 0
    keys: str | None = ""
    uniq_key: str | None = None
    sys_flag: int = 0
    prepared_transaction_offset: int = 0
    properties_map: dict[str, str] | None = None
    bit_map: bytes | None = None
    buffer_size: int = -1
    success: bool = True
    reason: str = field(default="")  # why success is False (for logs)

    @property
    def tran_type(self) -> int:
        return self.sys_flag & TRANSACTION_TYPE_MASK

    @property
    def goes_to_consume_queue(self) -> bool:
        """BuildConsumeQueue rule: NOT and COMMIT types only."""
        return (self.sys_flag & TRANSACTION_TYPE_MASK) in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)

    @property
    def goes_to_index(self) -> bool:
        """BuildIndex rule: everything except ROLLBACK."""
        return (self.sys_flag & TRANSACTION_TYPE_MASK) != TRANSACTION_ROLLBACK_TYPE


_TAGS_NEEDLE = "\x02TAGS\x01"
_KEYS_NEEDLE = "\x02KEYS\x01"
_UNIQ_NEEDLE = "\x02UNIQ_KEY\x01"


def _last_value(text: str, needle: str, end: int) -> str | None:
    """The value of the last ``needle`` segment of ``text[:end]`` (``text`` is ``"\x02" + properties``) whose
    value is non-empty.

    A segment starts at a ``\x02`` and its key ends at its first ``\x01``; the needle is ``\x02 name \x01``
    with a name holding neither separator, so a match is exactly a segment with that key. An empty value is
    skipped as ``string2messageProperties`` skips it, sending the search back to an earlier segment.
    """
    while True:
        i = text.rfind(needle, 0, end)
        if i < 0:
            return None
        start = i + len(needle)
        stop = text.find("\x02", start)
        if stop < 0:
            stop = len(text)
        if stop > start:
            return text[start:stop]
        end = i  # the needle's only \x02 is its first character: an earlier match ends at or before i


def dispatch_properties(props: str) -> tuple[str | None, str | None, str | None]:
    """``(TAGS, KEYS, UNIQ_KEY)`` of a stored properties string, each exactly as the parsed map has it
    (None when absent): what reput needs, found with C-level searches instead of a full parse.

    Each is ``_last_value`` unrolled for its usual case (the last match has a value)."""
    text = "\x02" + props
    n = len(text)
    i = text.rfind(_TAGS_NEEDLE)
    if i < 0:
        tags = None
    else:
        stop = text.find("\x02", i + 6)
        if stop < 0:
            stop = n
        tags = text[i + 6 : stop] if stop > i + 6 else _last_value(text, _TAGS_NEEDLE, i)
    i = text.rfind(_KEYS_NEEDLE)
    if i < 0:
        keys = None
    else:
        stop = text.find("\x02", i + 6)
        if stop < 0:
            stop = n
        keys = text[i + 6 : stop] if stop > i + 6 else _last_value(text, _KEYS_NEEDLE, i)
    i = text.rfind(_UNIQ_NEEDLE)
    if i < 0:
        uniq = None
    else:
        stop = text.find("\x02", i + 10)
        if stop < 0:
            stop = n
        uniq = text[i + 10 : stop] if stop > i + 10 else _last_value(text, _UNIQ_NEEDLE, i)
    return tags, keys, uniq

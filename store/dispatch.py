"""DispatchRequest: what the reput thread hands to the consume-queue and index builders (FORMATS.md §9)."""

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

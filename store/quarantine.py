"""The records ``store repair`` writes over a damaged commit-log range: a tombstone per lost queue offset, then filler.

Every reader walks the log by TOTALSIZE, so a damaged range is overwritten in place with valid RocketMQ 4.9
records of exactly its length (every intact record after it keeps its offset):

* a **tombstone** for each message the range held that a consume queue had counted: a record of that message's
  topic, queue id and queue offset, with an empty body and the property ``RAFTMQ_QUARANTINED`` (the damaged
  range). Reput (ours and RocketMQ's) dispatches it to its queue like any message, so every queue offset keeps a
  unit that points at a real record of its own size, whoever rebuilds the queues. Before, the lost offsets were
  padded with RocketMQ's blank unit ``(0, 0x7FFFFFFF, 0)``: RocketMQ 4.9.8's ``getMessage`` then rolled to the next
  commit-log segment and skipped (while counting them) the intact messages of that pull below it, and a RocketMQ
  that rebuilt the queues from the log logged "[BUG]logic queue order maybe wrong" and shifted every later unit by
  one (the log had no record for those offsets). raftmq's reads skip tombstones; a RocketMQ consumer receives
  the tombstone (empty body, the property) in the lost message's place.
* **filler** for the rest: rolled-back transaction records in ``RMQ_SYS_QUARANTINE``, which neither reput puts into a
  consume queue nor into the index; their body says where the original bytes went.
"""

from __future__ import annotations

from raftmq.store.dispatch import TRANSACTION_ROLLBACK_TYPE
from raftmq.store.integrity import QUARANTINE_PROPERTY, QUARANTINE_TOPIC
from raftmq.store.message import encode_record

FILLER_MAX = 1 << 20

LostMessage = tuple[str, int, int]  # (topic, queue id, queue offset)


def filler_records(start: int, end: int, note: str, store_timestamp: int,
                   store_host: tuple[str, int]) -> list[bytes]:
    """Valid rolled-back records in ``QUARANTINE_TOPIC`` covering exactly ``[start, end)``."""
    out: list[bytes] = []
    pos = start
    empty = min_filler_length()
    while pos < end:
        remaining = end - pos
        n = min(remaining, FILLER_MAX)
        if remaining - n and remaining - n < empty:  # leave room for a last filler of at least the minimum
            n = remaining - empty
        if n < empty:
            raise ValueError(f"damaged range [{start}, {end}) is shorter than a filler record ({empty} bytes)")
        body = (f"raftmq quarantine: {note}".encode()[: n - empty]).ljust(n - empty, b" ")
        rec = _filler(pos, body, store_timestamp, store_host)
        assert len(rec) == n
        out.append(rec)
        pos += n
    return out


def min_filler_length() -> int:
    """Bytes of the smallest filler record (empty body)."""
    return len(_filler(0, b"", 0, ("127.0.0.1", 0)))


def _filler(pos: int, body: bytes, ts: int, host: tuple[str, int]) -> bytes:
    return encode_record(topic=QUARANTINE_TOPIC, body=body, properties="", physical_offset=pos,
                         sys_flag=TRANSACTION_ROLLBACK_TYPE, born_timestamp=ts, store_timestamp=ts,
                         store_host=host, born_host=host)


def tombstone(pos: int, lost: LostMessage, damaged: tuple[int, int], ts: int, host: tuple[str, int],
              body: bytes = b"") -> bytes:
    """The record that keeps queue offset ``lost`` of a message destroyed in ``damaged``, written at ``pos``."""
    topic, queue_id, queue_offset = lost
    return encode_record(topic=topic, body=body, properties={QUARANTINE_PROPERTY: f"{damaged[0]}-{damaged[1]}"},
                         queue_id=queue_id, queue_offset=queue_offset, physical_offset=pos, born_timestamp=ts,
                         store_timestamp=ts, store_host=host, born_host=host)


def quarantine_records(start: int, end: int, lost: list[LostMessage], note: str, store_timestamp: int,
                       store_host: tuple[str, int]) -> tuple[bytes, list[tuple[int, int]], list[LostMessage]]:
    """The bytes that replace ``[start, end)``: a tombstone for each of ``lost`` (in that order) as far as they fit
    with room left for nothing or a whole filler, then filler. Returns the bytes, the ``(offset, size)`` of every
    record written, and the lost messages that did not fit (their offsets get units pointing at one of these)."""
    length = end - start
    filler = min_filler_length()
    sizes = [len(tombstone(0, m, (start, end), store_timestamp, store_host)) for m in lost]
    kept = len(lost)
    while kept and not _fits(sum(sizes[:kept]), length, filler):
        kept -= 1
    out: list[bytes] = []
    records: list[tuple[int, int]] = []
    pos = start
    used = sum(sizes[:kept])
    for i in range(kept):
        pad = length - used if i == kept - 1 and 0 < length - used < filler else 0  # too little for a filler
        rec = tombstone(pos, lost[i], (start, end), store_timestamp, store_host, b" " * pad)
        out.append(rec)
        records.append((pos, len(rec)))
        pos += len(rec)
    if pos < end:
        for rec in filler_records(pos, end, note, store_timestamp, store_host):
            records.append((pos, len(rec)))
            out.append(rec)
            pos += len(rec)
    data = b"".join(out)
    assert len(data) == length
    return data, records, lost[kept:]


def _fits(used: int, length: int, filler: int) -> bool:
    """Tombstones of ``used`` bytes leave nothing, a whole filler, or a rest the last tombstone's body absorbs."""
    rest = length - used
    return rest >= 0 and (used > 0 or rest == 0 or rest >= filler)

"""``store.integrity`` on segment bytes built by the store's own encoder: the API the scrubber and tools share."""

from __future__ import annotations

from raftmq.store.integrity import CorruptionError, CorruptRecord, chunk_problem, scan_segment, verify_records
from raftmq.store.message import BLANK_MAGIC_CODE, encode_record

SIZE = 16 * 1024
BASE = 5 * SIZE


def _segment(n: int, full: bool = False) -> tuple[bytearray, list[int]]:
    buf = bytearray(SIZE)
    pos, starts = 0, []
    for i in range(n):
        rec = encode_record(topic="T", body=b"body-%04d" % i * 20, properties={"KEYS": f"k{i}"},
                            physical_offset=BASE + pos)
        buf[pos : pos + len(rec)] = rec
        starts.append(pos)
        pos += len(rec)
    starts.append(pos)
    if full:
        buf[pos : pos + 8] = (SIZE - pos).to_bytes(4, "big") + BLANK_MAGIC_CODE.to_bytes(4, "big", signed=True)
    return buf, starts


def test_a_clean_segment_has_no_damage_and_ends_where_the_data_ends() -> None:
    buf, starts = _segment(20)
    s = scan_segment(bytes(buf), BASE, "seg", True)
    assert (s.damaged, s.tail, s.records, s.data_end) == ([], None, 20, starts[-1])
    assert verify_records(bytes(buf), BASE, 0, SIZE, "seg") == []
    full, _ = _segment(20, full=True)
    s = scan_segment(bytes(full), BASE, "seg", False)
    assert s.damaged == [] and s.blank_at == starts[-1]


def test_damage_in_the_middle_is_one_range_up_to_the_next_valid_record() -> None:
    buf, starts = _segment(20)
    buf[starts[5] + 40 : starts[5] + 40 + 300] = bytes(range(250)) + bytes(range(50))  # records 5 and 6
    s = scan_segment(bytes(buf), BASE, "seg", True)
    assert [(r.start, r.end) for r in s.damaged] == [(BASE + starts[5], BASE + starts[7])]
    assert s.tail is None and s.records == 18 and s.data_end == starts[-1]
    assert verify_records(bytes(buf), BASE, 0, SIZE, "seg") == s.damaged
    err = CorruptionError(s.damaged, hint="do X")
    assert f"[{BASE + starts[5]}, {BASE + starts[7]})" in str(err) and str(err).endswith("do X")


def test_a_bad_last_record_is_a_tail_and_zeros_in_a_full_segment_are_damage() -> None:
    buf, starts = _segment(20)
    buf[starts[19] + 100] ^= 0xFF  # body byte of the last record
    s = scan_segment(bytes(buf), BASE, "seg", True)
    assert s.damaged == [] and s.tail is not None and s.tail.start == BASE + starts[19] and "CRC" in s.tail.reason
    full, _ = _segment(20, full=True)
    full[starts[3] : starts[3] + 300] = bytes(300)
    s = scan_segment(bytes(full), BASE, "seg", False)
    assert [(r.start, r.end) for r in s.damaged] == [(BASE + starts[3], BASE + next(x for x in starts if x >= starts[3] + 300))]


def test_chunk_problem_checks_copied_bytes() -> None:
    buf, starts = _segment(5)
    good = bytes(buf[starts[1] : starts[4]])
    assert chunk_problem(BASE + starts[1], good, SIZE) is None
    assert "PHYSICALOFFSET" in chunk_problem(BASE + starts[1] + 1, good, SIZE)
    bad = bytearray(good)
    bad[100] ^= 1
    assert "CRC" in chunk_problem(BASE + starts[1], bytes(bad), SIZE)
    assert isinstance(CorruptRecord("p", 1, 2, "r").describe(), str)

"""Where index keys go: file cuts of the broker's IndexService, computed from per-split key counts."""

from __future__ import annotations

from raftmq.pipeline.layout import IndexGeometry
from raftmq.pipeline.rebuild import plan_index

GEO = IndexGeometry(hash_slot_num=16, index_num=100)  # 99 keys per file (entry 0 is never used)


def test_keys_of_later_splits_continue_the_numbering() -> None:
    plan = plan_index([(1, 5, 40, 4), (0, 10, 30, 9), (2, 3, 50, 2)], GEO)
    assert plan.bases == {0: 0, 1: 30, 2: 70}
    assert (plan.total_keys, plan.files, plan.per_file) == (120, 2, 99)


def test_a_record_after_an_exactly_full_file_opens_an_empty_one() -> None:
    assert plan_index([(0, 10, 99, 9)], GEO).files == 1  # the last record filled it: nothing opens another
    assert plan_index([(0, 10, 99, 5)], GEO).files == 2  # four more records find it full
    assert plan_index([(0, 10, 99, 9), (1, 2, 0, -1)], GEO).files == 2  # a key-less record in a later split


def test_no_key_still_opens_one_file_and_no_record_opens_none() -> None:
    assert plan_index([(0, 3, 0, -1)], GEO).files == 1
    assert plan_index([], GEO).files == 0

"""The reconcile pass's rule (issue 37, docs/design/scale-out.md#topic-administration): the latest create or delete
of a topic among the groups wins; without marks, a topic one group holds is copied to the others."""

from __future__ import annotations

from raftmq.node.topic_reconcile import GroupTopics, latest
from raftmq.v1 import raftmq_pb2 as pb


def _group(topics: tuple[str, ...] = (), **marks: tuple[bool, int]) -> GroupTopics:
    return GroupTopics({n: pb.TopicConfig(name=n) for n in topics},
                       {n: pb.TopicMark(name=n, deleted=d, at_ms=at) for n, (d, at) in marks.items()})


def test_a_topic_no_group_marked_is_copied_to_the_groups_that_miss_it():
    assert latest({"g0": _group(("t",)), "g1": _group()}, "t") == (0, True, "g0")


def test_a_delete_that_reached_one_group_is_completed_not_undone():
    views = {"g0": _group(t=(True, 2000)), "g1": _group(("t",), t=(False, 1000)), "g2": _group(("t",))}
    assert latest(views, "t") == (2000, False, "g0")


def test_a_create_after_a_delete_wins_over_it():
    views = {"g0": _group(t=(True, 2000)), "g1": _group(("t",), t=(False, 3000))}
    assert latest(views, "t") == (3000, True, "g1")


def test_a_mark_the_table_contradicts_is_older_than_what_the_table_holds():
    """g1 created the topic again without a mark (an older member's path) after its delete at 2000: it is newer
    than g0's delete at 1500."""
    views = {"g0": _group(t=(True, 1500)), "g1": _group(("t",), t=(True, 2000))}
    assert latest(views, "t") == (2001, True, "g1")

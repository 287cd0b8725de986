"""The reconcile pass's rule (issue 37, docs/design/scale-out.md#topic-administration): the latest create or delete
of a topic among the groups wins; without marks, a topic one group holds is copied to the others."""

from __future__ import annotations

from raftmq.node.settings_reconcile import setting_changes
from raftmq.node.topic_reconcile import GroupTopics, changes, latest
from raftmq.v1 import raftmq_pb2 as pb


def _group(topics: tuple[str, ...] = (), queues: int = 4, **marks: tuple[bool, int]) -> GroupTopics:
    return GroupTopics({n: pb.TopicConfig(name=n, write_queue_nums=queues) for n in topics},
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


def test_an_update_that_reached_one_group_is_copied_to_the_group_that_missed_it():
    """g0 updated the topic at 3000 (the update marks it created then); g1 created it at 1000 and missed it."""
    views = {"g0": _group(("t",), queues=8, t=(False, 3000)), "g1": _group(("t",), t=(False, 1000))}
    assert changes(views, "g1") == [("t", 3000, "g0", "update")]
    assert changes(views, "g0") == []  # the newer settings are never undone by the older ones


def test_a_groups_own_perm_is_never_copied_to_another_group():
    """Issue 38's drain: g1 was made read-only alone (`topic update --perm r --group g1`, marked at 5000);
    perm is each group's own, so neither group's copy is changed by the other."""
    views = {"g0": GroupTopics({"t": pb.TopicConfig(name="t", write_queue_nums=4, perm=6)},
                               {"t": pb.TopicMark(name="t", at_ms=1000)}),
             "g1": GroupTopics({"t": pb.TopicConfig(name="t", write_queue_nums=4, perm=4)},
                               {"t": pb.TopicMark(name="t", at_ms=5000)})}
    assert changes(views, "g0") == [] and changes(views, "g1") == []
    views["g1"].topics["t"].write_queue_nums = 8  # a shared setting changed with it is still copied
    assert changes(views, "g0") == [("t", 5000, "g1", "update")]


def test_settings_that_differ_with_equal_marks_are_left_alone():
    views = {"g0": _group(("t",), queues=8, t=(False, 3000)), "g1": _group(("t",), t=(False, 3000))}
    assert changes(views, "g0") == [] and changes(views, "g1") == []


def test_changes_create_and_delete_as_the_latest_state_says():
    views = {"g0": _group(("new",), gone=(True, 2000), new=(False, 2500)),
             "g1": _group(("gone",), gone=(False, 1000))}
    assert changes(views, "g1") == [("gone", 2000, "g0", "delete"), ("new", 2500, "g0", "create")]


def _settings(records: dict[str, str], **marks: tuple[bool, int]) -> GroupTopics:
    return GroupTopics(records, {n: pb.TopicMark(name=n, deleted=d, at_ms=at) for n, (d, at) in marks.items()})


def test_settings_follow_the_latest_change_among_the_groups():
    """The settings pass's rule (node/settings_reconcile.py): a user changed in g0 after g1's copy, a user g0
    deleted, one g0 created, are set / deleted in g1; g0 has nothing to do."""
    views = {"g0": _settings({"alice": "new", "carol": "c"}, alice=(False, 3000), bob=(True, 2500),
                             carol=(False, 2600)),
             "g1": _settings({"alice": "old", "bob": "b"}, alice=(False, 1000), bob=(False, 1000))}
    assert setting_changes(views, "g1", str.__eq__) == [("alice", 3000, "g0", "set"), ("bob", 2500, "g0", "delete"),
                                                         ("carol", 2600, "g0", "set")]
    assert setting_changes(views, "g0", str.__eq__) == []


def test_settings_equal_by_content_are_not_copied_though_marked_at_different_times():
    """Each group marks a cluster-wide change by its own leader's clock: the same content is left alone."""
    views = {"g0": _settings({"alice": "same"}, alice=(False, 3001)), "g1": _settings({"alice": "same"},
                                                                                        alice=(False, 3000))}
    assert setting_changes(views, "g1", str.__eq__) == []

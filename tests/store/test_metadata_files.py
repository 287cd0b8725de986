import pytest

from raftmq.store import json_file
from raftmq.store.checkpoint import StoreCheckpoint
from raftmq.store.consumer_offsets import ConsumerOffsetTable
from raftmq.store.errors import StoreError, StoreLoadError
from raftmq.store.topic_config import TopicConfig, TopicConfigTable


def test_topics_json_shape_and_reload(tmp_path):
    t = TopicConfigTable(str(tmp_path))
    t.put(TopicConfig("TopicTest", read_queue_nums=4, write_queue_nums=4), 1700000000000)
    t.put(TopicConfig("B", perm=4), 1700000000001)
    assert t.delete("B", 1700000000002) and not t.delete("B", 1700000000003)
    t.fold()  # the file is written when the change log is folded (periodically, at a clean stop)
    text = (tmp_path / "topics.json").read_text()
    assert text.startswith("{\n\t\"dataVersion\":{\n\t\t\"counter\":3,")
    assert '"topicName":"TopicTest"' in text and '"perm":6' in text
    t2 = TopicConfigTable(str(tmp_path))
    t2.load()
    assert t2.get("TopicTest") == TopicConfig("TopicTest", read_queue_nums=4, write_queue_nums=4)
    assert t2.data_version == {"counter": 3, "timestamp": 1700000000002}
    assert t2.snapshot() == t.snapshot()


def test_topic_config_is_validated(tmp_path):
    t = TopicConfigTable(str(tmp_path))
    with pytest.raises(StoreError, match="queue"):
        t.put(TopicConfig("T", read_queue_nums=0), 1)
    with pytest.raises(StoreError, match="topic"):
        t.put(TopicConfig("bad name"), 1)


def test_consumer_offsets_file_has_unquoted_int_keys_and_bak_fallback(tmp_path):
    c = ConsumerOffsetTable(str(tmp_path))
    c.commit("group", "TopicTest", {0: 6, 1: 3})
    c.persist()
    c.commit("group", "TopicTest", {2: 3})
    c.persist()
    text = (tmp_path / "consumerOffset.json").read_text()
    assert '"TopicTest@group":{0:6,1:3,2:3' in text
    (tmp_path / "consumerOffset.json").write_text("{ broken")
    c2 = ConsumerOffsetTable(str(tmp_path))
    c2.load()  # falls back to the .bak (the previous version)
    assert c2.offsets("group", "TopicTest") == {0: 6, 1: 3}
    (tmp_path / "consumerOffset.json.bak").write_text("also broken")
    with pytest.raises(StoreLoadError, match="consumerOffset.json"):
        ConsumerOffsetTable(str(tmp_path)).load()
    assert c.query("group", "TopicTest", 9) == -1
    assert c.groups("TopicTest") == ["group"] and c.topics("group") == ["TopicTest"]
    assert c.delete_group("group") == 1 and c.all() == {}
    with pytest.raises(StoreError):
        c.commit("g@x", "T", {0: 1})


def test_lenient_reader_parses_fastjson_output():
    assert json_file.loads('{"offsetTable":{"T@g":{0:250,1:250\n\t\t}}}') == {"offsetTable": {"T@g": {"0": 250, "1": 250}}}


def test_checkpoint_round_trip(tmp_path):
    p = str(tmp_path / "checkpoint")
    c = StoreCheckpoint(p)
    c.physic_msg_timestamp, c.logics_msg_timestamp, c.index_msg_timestamp = 10_000, 9_000, 5_000
    c.shutdown()
    assert (tmp_path / "checkpoint").stat().st_size == 4096
    c2 = StoreCheckpoint(p)
    assert (c2.physic_msg_timestamp, c2.logics_msg_timestamp, c2.index_msg_timestamp) == (10_000, 9_000, 5_000)
    assert c2.min_timestamp() == 6_000 and c2.min_timestamp_index() == 5_000
    assert (tmp_path / "checkpoint").read_bytes()[:8] == (10_000).to_bytes(8, "big")


def test_schedule_topic_is_built_in_like_rocketmqs_topic_config_manager(tmp_path):
    """SCHEDULE_TOPIC_XXXX is in every table from the start (18 queues, perm 6, no dataVersion bump), shows in
    topics.json from the next write on, survives load/restore of files that lack it, and cannot be changed."""
    from raftmq.store.message import SCHEDULE_TOPIC

    builtin = TopicConfig(SCHEDULE_TOPIC, read_queue_nums=18, write_queue_nums=18, perm=6)
    t = TopicConfigTable(str(tmp_path))
    assert t.get(SCHEDULE_TOPIC) == builtin and t.data_version == {"counter": 0, "timestamp": 0}
    assert not (tmp_path / "topics.json").exists()  # registering writes nothing
    t.put(TopicConfig("Orders"), 1700000000000)
    t.fold()
    text = (tmp_path / "topics.json").read_text()
    assert '"topicName":"SCHEDULE_TOPIC_XXXX"' in text and '"readQueueNums":18' in text
    assert '"counter":1,' in text
    # a topics.json written before the topic was built in (or by RocketMQ without it): loaded over the built-ins
    (tmp_path / "topics.json").write_text(text.replace("SCHEDULE_TOPIC_XXXX", "Older"))
    t2 = TopicConfigTable(str(tmp_path))
    t2.load()
    assert t2.get(SCHEDULE_TOPIC) == builtin and t2.get("Older") is not None and t2.data_version["counter"] == 1
    t3 = TopicConfigTable(str(tmp_path / "other"))
    older_snapshot = t.snapshot().replace("SCHEDULE_TOPIC_XXXX", "Older")
    (tmp_path / "other").mkdir()
    t3.restore(older_snapshot)
    assert t3.get(SCHEDULE_TOPIC) == builtin
    # two members applying the same commands write the same bytes
    a, b = TopicConfigTable(str(tmp_path / "a")), TopicConfigTable(str(tmp_path / "b"))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for table in (a, b):
        table.put(TopicConfig("X", read_queue_nums=2, write_queue_nums=2), 5)
        table.delete("X", 6)
        table.fold()
    assert (tmp_path / "a" / "topics.json.changes").read_bytes() == (tmp_path / "b" / "topics.json.changes").read_bytes()
    assert (tmp_path / "a" / "topics.json").read_bytes() == (tmp_path / "b" / "topics.json").read_bytes()
    for change in (lambda: t.put(TopicConfig(SCHEDULE_TOPIC, read_queue_nums=1, write_queue_nums=1), 9),
                   lambda: t.update(SCHEDULE_TOPIC, 9, perm=4), lambda: t.delete(SCHEDULE_TOPIC, 9)):
        with pytest.raises(StoreError, match="SCHEDULE_TOPIC_XXXX is a system topic the broker registers itself"):
            change()
    assert t.get(SCHEDULE_TOPIC) == builtin and t.data_version["counter"] == 1


def test_topic_message_type_is_rocketmq_5s_attribute_and_other_attributes_are_kept(tmp_path):
    """issue 34: stored as RocketMQ 5 stores it ("attributes": {"message.type": ...}); a file RocketMQ 5 wrote
    keeps the attributes raftmq does not use; a topic without any is written as RocketMQ 4.9 writes it."""
    t = TopicConfigTable(str(tmp_path))
    t.put(TopicConfig("Plain"), 1)
    t.put(TopicConfig("Fifo").with_message_type("FIFO"), 2)
    t.fold()
    text = (tmp_path / "topics.json").read_text()
    assert '"attributes":{\n\t\t\t\t"message.type":"FIFO"\n\t\t\t},\n\t\t\t"order":false' in text, text
    assert text.count('"attributes"') == 1  # not on Plain: 4.9's shape
    from_rocketmq = TopicConfig.from_json({"topicName": "R", "attributes": {"message.type": "DELAY",
                                                                            "queue.type": "SimpleCQ"}})
    assert from_rocketmq.message_type == "DELAY" and from_rocketmq.to_json()["attributes"] == \
        {"message.type": "DELAY", "queue.type": "SimpleCQ"}
    assert TopicConfig("Old").message_type == "" and TopicConfig("Old").accepts("TRANSACTION")
    assert not t.get("Fifo").accepts("NORMAL") and TopicConfig("M").with_message_type("MIXED").accepts("DELAY")
    with pytest.raises(StoreError, match="message type must be one of"):
        t.put(TopicConfig("Bad").with_message_type("URGENT"), 3)


def test_subscription_groups_json_is_rocketmq_shaped_and_reads_rocketmq_files(tmp_path):
    """issue 34: consumer-group settings in config/subscriptionGroup.json as RocketMQ writes it."""
    from raftmq.store.subscription_groups import SubscriptionGroup, SubscriptionGroupTable

    t = SubscriptionGroupTable(str(tmp_path))
    t.put(SubscriptionGroup("billing", True, 5, (1000, 60000)), 1700000000000)
    data = json_file.loads((tmp_path / "subscriptionGroup.json").read_text())
    g = data["subscriptionGroupTable"]["billing"]
    assert (g["groupName"], g["consumeMessageOrderly"], g["retryMaxTimes"]) == ("billing", True, 4)
    assert g["groupRetryPolicy"] == {"customizedRetryPolicy": {"next": [1000, 60000]}, "type": "CUSTOMIZED"}
    assert g["consumeEnable"] is True and g["retryQueueNums"] == 1  # RocketMQ's defaults for the rest
    assert data["dataVersion"] == {"counter": 1, "timestamp": 1700000000000}
    again = SubscriptionGroupTable(str(tmp_path))
    again.load()
    assert again.get("billing") == t.get("billing") and again.snapshot() == t.snapshot()
    exp = SubscriptionGroup.from_json({"groupName": "x", "retryMaxTimes": 3, "consumeEnable": False,
                                       "groupRetryPolicy": {"type": "EXPONENTIAL", "exponentialRetryPolicy": {
                                           "initial": 1000, "max": 3000, "multiplier": 2}}})
    assert (exp.max_delivery_attempts, exp.retry_backoff_ms) == (4, (1000, 2000, 3000))
    assert exp.to_json()["consumeEnable"] is False  # kept as read
    for bad, says in [(SubscriptionGroup("g", True, 0, (1000,)), "max delivery attempts"),
                      (SubscriptionGroup("g", True, 3, ()), "retry back-off"),
                      (SubscriptionGroup("a@b", True, 3, (1000,)), "no '@'")]:
        with pytest.raises(StoreError, match=says):
            t.put(bad, 1)
    assert t.delete("billing", 2) and not t.delete("billing", 3) and t.get("billing") is None
    assert "raftmqGroupMarks" not in json_file.loads((tmp_path / "subscriptionGroup.json").read_text())


def test_subscription_group_marks_are_kept_in_the_file_and_snapshots(tmp_path):
    """issue 37: in a cluster of several groups, when each group's settings were set or dropped cluster-wide
    (the settings reconcile pass compares them); a drop of settings a group never had is remembered too."""
    from raftmq.store.subscription_groups import SubscriptionGroup, SubscriptionGroupTable
    from raftmq.store.topic_config import MARK_KEEP_MS, TopicMark

    t = SubscriptionGroupTable(str(tmp_path))
    t.put(SubscriptionGroup("billing", True, 5, (1000,)), 1000, mark_ms=1000)
    assert not t.delete("never-set", 2000, mark_ms=2000)
    assert t.marks() == {"billing": TopicMark(False, 1000), "never-set": TopicMark(True, 2000)}
    again = SubscriptionGroupTable(str(tmp_path))
    again.load()
    assert again.marks() == t.marks()
    copy = SubscriptionGroupTable(str(tmp_path / "copy"))
    (tmp_path / "copy").mkdir()
    copy.restore(t.snapshot())
    assert copy.marks() == t.marks()
    t.put(SubscriptionGroup("late", False, 3, (1000,)), 2000 + MARK_KEEP_MS + 1, mark_ms=2000 + MARK_KEEP_MS + 1)
    assert set(t.marks()) == {"late"}  # the older marks are forgotten by the change's timestamp

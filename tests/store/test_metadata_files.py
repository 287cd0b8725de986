import pytest

from store import json_file
from store.checkpoint import StoreCheckpoint
from store.consumer_offsets import ConsumerOffsetTable
from store.errors import StoreError, StoreLoadError
from store.topic_config import TopicConfig, TopicConfigTable


def test_topics_json_shape_and_reload(tmp_path):
    t = TopicConfigTable(str(tmp_path))
    t.put(TopicConfig("TopicTest", read_queue_nums=4, write_queue_nums=4), 1700000000000)
    t.put(TopicConfig("B", perm=4), 1700000000001)
    assert t.delete("B", 1700000000002) and not t.delete("B", 1700000000003)
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

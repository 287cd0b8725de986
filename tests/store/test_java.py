import random

from raftmq.store.java import JavaHashMap, hashmap_order, java_string_hash, masked_crc32, offset_to_file_name


def test_string_hash_vectors_from_the_jdk():
    assert java_string_hash("") == 0
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("TopicTest#KEY1") == -1656969516
    assert java_string_hash("polygenelubricants") == -2147483648
    assert java_string_hash("中文标签") == 622041809
    assert java_string_hash("emoji😀x") == 1217655151
    assert java_string_hash("SCHEDULE_TOPIC_XXXX") == -1995822632


def test_masked_crc32_vectors():
    assert masked_crc32(b"") == 0
    assert masked_crc32(b"Hello RocketMQ") == 1774740973
    assert masked_crc32(bytes.fromhex("FF0080")) == 744582879


def test_broker_properties_order_of_the_worked_example():
    m = JavaHashMap()
    for k in ("TAGS", "KEYS", "UNIQ_KEY", "WAIT", "CLUSTER"):
        m.put(k, "v")
    m.remove("WAIT")
    assert m.keys() == ["KEYS", "UNIQ_KEY", "CLUSTER", "TAGS"]


def test_bucket_indexes_for_cap_16():
    # docs/design/store-formats.md#properties: REAL_TOPIC 1 < KEYS 7 < TRAN_MSG 9 < UNIQ_KEY 12 < WAIT 13 < TAGS 14 < REAL_QID 15
    keys = ["REAL_QID", "TAGS", "WAIT", "UNIQ_KEY", "TRAN_MSG", "KEYS", "REAL_TOPIC"]
    assert hashmap_order(keys) == ["REAL_TOPIC", "KEYS", "TRAN_MSG", "UNIQ_KEY", "WAIT", "TAGS", "REAL_QID"]


def test_resize_keeps_every_key_and_orders_by_bucket():
    rnd = random.Random(7)
    for _ in range(200):
        keys = [f"K{rnd.randrange(1000)}" for _ in range(rnd.randrange(1, 40))]
        m = JavaHashMap()
        for k in keys:
            m.put(k, "")
        order = m.keys()
        assert sorted(order) == sorted(set(keys))
        cap = 16
        while len(set(keys)) > cap * 0.75:
            cap *= 2
        buckets = [((java_string_hash(k) & 0xFFFFFFFF) ^ ((java_string_hash(k) & 0xFFFFFFFF) >> 16)) & (cap - 1)
                   for k in order]
        assert buckets == sorted(buckets) or cap < 64  # small tables may have been grown by a long chain


def test_file_names():
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(1073741824) == "00000000001073741824"

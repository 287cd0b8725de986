"""Fast paths of the write path: CommitLog.encode reuses what consecutive messages share (topic, born host,
property plan, queue key); to_schedule_messages answers a batch without DELAY in one pass.

These tests pin that the reuse never changes a byte or an error: a batch that mixes every shared field is
compared record by record with ``encode_record`` (the reference encoder), and a warmed-up encoder (plans
cached for the property names) must refuse bad values exactly like a fresh one.
"""

import pytest

from raftmq.store.commit_log import CommitLog
from raftmq.store.config import StoreConfig
from raftmq.store.errors import MessageIllegalError
from raftmq.store.message import (
    TRANSACTION_PREPARED_TYPE,
    Message,
    broker_properties_string,
    encode_record,
)

TS = 1_700_000_000_000
STORE_HOST = ("127.0.0.1", 10911)
CLUSTER = "DefaultCluster"


def _cl(tmp_path, name="s"):
    cl = CommitLog(StoreConfig(root_dir=str(tmp_path / name), mapped_file_size_commit_log=1 << 20))
    cl.load()
    return cl


def _mixed_batch():
    """Neighbours that share a field and neighbours that do not, in every field the encoder reuses."""
    v4 = ("10.0.0.1", 5)
    topic_u = "".join(["U", "u"])  # equal to "Uu" but another object
    specs = [
        ("T", v4, {"TAGS": "a", "UNIQ_KEY": "K0"}, 0, 0),
        ("T", v4, {"TAGS": "b", "UNIQ_KEY": "K1"}, 0, 0),  # same topic, host object and keys: all reused
        ("T", ("10.0.0.1", 5), {"TAGS": "a", "UNIQ_KEY": "K2"}, 1, 0),  # equal host tuple, other queue
        ("Uu", ("::1", 7), {"KEYS": "k1 k2", "TAGS": "a", "UNIQ_KEY": "K3"}, 0, 0),  # IPv6 born host
        (topic_u, ["10.0.0.2", 9], {"UNIQ_KEY": "K4"}, 0, 0),  # list host, one property
        ("T", v4, {"TAGS": "a", "WAIT": "true", "UNIQ_KEY": "K5"}, 0, 0),  # WAIT is left out of the string
        ("T", v4, {"TAGS": "a", "CLUSTER": "theirs", "UNIQ_KEY": "K6"}, 0, 0),  # client CLUSTER is replaced
        ("T", ("::1", 7), {"TAGS": "a", "UNIQ_KEY": "K7"}, 0, TRANSACTION_PREPARED_TYPE),  # no queue advance
        ("T", v4, {"TAGS": "a", "UNIQ_KEY": "K8"}, 0, 0),
        ("Uu", v4, {"UNIQ_KEY": "K9", "TAGS": "é"}, 2, 0),  # other key order, non-ASCII value
    ]
    return [Message(topic=t, body=b"body%d" % i * (i + 1), queue_id=q, properties=dict(p), sys_flag=f,
                    born_timestamp=TS - i, born_host=h) for i, (t, h, p, q, f) in enumerate(specs)]


def _records(batch):
    out, pos = [], 0
    for size in batch.sizes:
        out.append(bytes(batch.payload[pos : pos + size]))
        pos += size
    return out


@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "plans-cached"])
def test_mixed_batch_has_the_reference_encoders_bytes(tmp_path, warm):
    cl = _cl(tmp_path)
    if warm:  # a first batch leaves property plans behind for these key sets
        cl.encode(_mixed_batch(), TS, STORE_HOST, CLUSTER)
    msgs = _mixed_batch()
    batch = cl.encode(msgs, TS, STORE_HOST, CLUSTER)
    expected = [
        encode_record(topic=m.topic, body=m.body, properties=broker_properties_string(m.properties, CLUSTER),
                      queue_id=m.queue_id, sys_flag=m.sys_flag, born_timestamp=m.born_timestamp,
                      born_host=tuple(m.born_host), store_timestamp=TS, store_host=STORE_HOST)
        for m in msgs
    ]
    assert _records(batch) == expected
    assert batch.keys == [("T", 0), ("T", 1), ("Uu", 0), ("Uu", 2)]
    advance = [ref for ref in batch.key_refs if not ref & 0x80000000]
    assert advance == [0, 0, 1, 2, 2, 0, 0, 0, 3]  # the prepared record (index 7) does not advance


def test_batch_equals_the_same_messages_encoded_one_at_a_time(tmp_path):
    together = _cl(tmp_path, "a").encode(_mixed_batch(), TS, STORE_HOST, CLUSTER)
    alone = [_records(_cl(tmp_path, f"b{i}").encode([m], TS, STORE_HOST, CLUSTER))[0]
             for i, m in enumerate(_mixed_batch())]
    assert _records(together) == alone


@pytest.mark.parametrize("props, message", [
    ({"TAGS": "", "UNIQ_KEY": "K"}, "has an empty name or value"),
    ({"TAGS": 5, "UNIQ_KEY": "K"}, "names and values must be strings"),
    ({"TAGS": None, "UNIQ_KEY": "K"}, "names and values must be strings"),
    ({"TAGS": "a\x01b", "UNIQ_KEY": "K"}, "reserved separator"),
    ({"TAGS": "a\x02b", "UNIQ_KEY": "K"}, "reserved separator"),
    ({"TAGS": "a", "WAIT": "", "UNIQ_KEY": "K"}, "has an empty name or value"),  # WAIT is not written, still checked
    ({"TAGS": "a", "CLUSTER": "", "UNIQ_KEY": "K"}, "has an empty name or value"),  # replaced, still checked
])
def test_cached_property_plan_refuses_bad_values_like_a_fresh_encoder(tmp_path, props, message):
    good = {k: "ok" for k in props}
    for cl in (_cl(tmp_path, "fresh"), _cl(tmp_path, "warm")):
        if cl.config.root_dir.endswith("warm"):
            cl.encode([Message(topic="T", body=b"x", properties=dict(good))], TS, STORE_HOST, CLUSTER)
        batch = [Message(topic="T", body=b"x", properties=dict(good)), Message(topic="T", body=b"x", properties=props)]
        with pytest.raises(MessageIllegalError, match=message):
            cl.encode(batch, TS, STORE_HOST, CLUSTER)


def test_a_bad_born_host_after_a_good_one_is_refused(tmp_path):
    cl = _cl(tmp_path)
    msgs = [Message(topic="T", body=b"x", born_host=("10.0.0.1", 1)),
            Message(topic="T", body=b"x", born_host=("10.0.0.1",))]
    with pytest.raises(MessageIllegalError, match=r"message 1: born_host must be \(ip, port\)"):
        cl.encode(msgs, TS, STORE_HOST, CLUSTER)
    msgs[1].born_host = ("10.0.0.1", 1 << 40)  # equal ip, a port that does not fit: checked per message
    with pytest.raises(MessageIllegalError, match="message 1: born_host port"):
        cl.encode(msgs, TS, STORE_HOST, CLUSTER)


def test_schedule_conversion_finds_a_delayed_message_in_any_batch():
    """``to_schedule_messages`` returns the batch itself when no message has DELAY (one pass), and otherwise
    converts exactly the delayed ones, also when a message's properties are not a map (it is left alone)."""
    from raftmq.store.message import SCHEDULE_TOPIC, UniqKeyGenerator
    from raftmq.store.schedule import DelayLevels, to_schedule_messages

    levels, uniq = DelayLevels("1s 5s 10s"), UniqKeyGenerator("127.0.0.1")
    plain = [Message(topic="T", body=b"x", properties={"TAGS": "a"}) for _ in range(3)]
    assert to_schedule_messages(plain, levels, CLUSTER, uniq) is plain
    for odd in (None, 5, "DELAY"):
        msgs = [Message(topic="T", body=b"x", properties=odd), Message(topic="T", body=b"y", properties={"DELAY": "2"}),
                Message(topic="T", body=b"z", properties={"TAGS": "a"})]
        out = to_schedule_messages(msgs, levels, CLUSTER, uniq)
        assert [m.topic for m in out] == ["T", SCHEDULE_TOPIC, "T"]
        assert out[0] is msgs[0] and out[2] is msgs[2] and out[1].queue_id == 1  # level 2 -> queue 1
        assert "UNIQ_KEY" in msgs[1].properties  # set on the original, so the caller can report it

import pytest

from raftmq.store.errors import StoreError
from raftmq.store.message import (
    BORNHOST_V6_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    RecordStatus,
    UniqKeyGenerator,
    broker_properties_string,
    cal_msg_length,
    create_message_id,
    decode_dispatch,
    decode_message_id,
    decode_record,
    encode_record,
    properties_to_string,
    string_to_properties,
)

GOLDEN_V4 = bytes.fromhex(
    "000000cedaa320a71c1fe8db0000000300000000000000000000002a00000000400004d2000000000000018bcfe568000a0000070000cfda"
    "0000018bcfe5687bc0a8000100002a9f0000000000000000000000000000001548656c6c6f20526f636b65744d5120e4b8ade6968709546f"
    "7069635465737400554b455953016b31206b3202554e49515f4b455901374630303030303130413245313842344141433235453042434441"
    "343030303002434c55535445520144656661756c74436c757374657202544147530154616741"
)
UNIQ = "7F0000010A2E18B4AAC25E0BCDA40000"
BODY = "Hello RocketMQ 中文".encode()


def _client_props():
    # client HashMap order as the producer sends it; WAIT is dropped and CLUSTER added by the broker
    return {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": UNIQ, "WAIT": "true"}


def _encode(born=("10.0.0.7", 53210), store=("192.168.0.1", 10911)):
    return encode_record(
        topic="TopicTest", body=BODY, properties=broker_properties_string(_client_props(), "DefaultCluster"),
        queue_id=3, queue_offset=42, physical_offset=1073743058, born_timestamp=1700000000000,
        born_host=born, store_timestamp=1700000000123, store_host=store,
    )


def test_worked_record_is_byte_identical_to_rocketmq():
    assert len(GOLDEN_V4) == 206
    assert _encode() == GOLDEN_V4


def test_ipv6_variant_is_230_bytes_and_round_trips():
    rec = _encode(born=("2001:db8::7", 53210), store=("2001:db8::1", 10911))
    assert len(rec) == 230
    r = decode_record(rec)
    assert r.status == RecordStatus.OK and r.size == 230
    m = r.message
    assert m.sys_flag & BORNHOST_V6_FLAG and m.sys_flag & STOREHOSTADDRESS_V6_FLAG
    assert m.born_host == ("2001:db8::7", 53210) and m.store_host == ("2001:db8::1", 10911)
    assert len(m.msg_id) == 56
    assert decode_message_id(m.msg_id) == (("2001:db8::1", 10911), 1073743058)


def test_decode_every_field_of_the_golden_record():
    r = decode_record(GOLDEN_V4, 0, check_crc=True)
    assert r.ok and r.size == 206
    m = r.message
    assert (m.topic, m.queue_id, m.queue_offset, m.physical_offset) == ("TopicTest", 3, 42, 1073743058)
    assert m.body == BODY and m.tags == "TagA" and m.keys == ["k1", "k2"] and m.uniq_key == UNIQ
    assert m.properties["CLUSTER"] == "DefaultCluster" and "WAIT" not in m.properties
    assert m.born_host == ("10.0.0.7", 53210) and m.store_host == ("192.168.0.1", 10911)
    assert (m.born_timestamp, m.store_timestamp) == (1700000000000, 1700000000123)
    assert m.msg_id == "C0A8000100002A9F00000000400004D2"
    assert m.tags_code == 2598919
    assert cal_msg_length(0, len(BODY), 9, 85) == 206


def test_uniq_key_of_the_golden_record_decodes_to_client_id_fields():
    raw = bytes.fromhex(UNIQ)
    assert raw[:4] == bytes([127, 0, 0, 1]) and len(raw) == 16
    gen = UniqKeyGenerator("10.1.2.3")
    a, b = gen.next(), gen.next()
    assert len(a) == 32 and a[:8] == "0A010203" and a != b
    assert int(b[-4:], 16) == int(a[-4:], 16) + 1


def test_dispatch_request_fields():
    dr = decode_dispatch(GOLDEN_V4, 0, check_crc=True, limit=len(GOLDEN_V4))
    assert dr.success and dr.msg_size == 206
    assert (dr.topic, dr.queue_id, dr.commit_log_offset, dr.consume_queue_offset) == ("TopicTest", 3, 1073743058, 42)
    assert dr.keys == "k1 k2" and dr.uniq_key == UNIQ and dr.tags_code == 2598919
    assert dr.store_timestamp == 1700000000123 and dr.sys_flag == 0


def test_bad_records_are_reported_not_raised():
    corrupt = bytearray(GOLDEN_V4)
    corrupt[100] ^= 0xFF  # inside the body
    r = decode_record(bytes(corrupt), check_crc=True)
    assert r.status == RecordStatus.BAD and "CRC" in r.reason
    assert decode_record(bytes(corrupt), check_crc=False).ok
    assert decode_record(bytes(300)).status == RecordStatus.BAD
    assert decode_record(GOLDEN_V4[:150]).status == RecordStatus.BAD  # torn
    wrong_len = bytearray(GOLDEN_V4)
    wrong_len[3] = 0xCD  # TOTALSIZE 205
    r = decode_record(bytes(wrong_len) + b"\0")
    assert r.status == RecordStatus.BAD and r.size == 205
    blank = (64).to_bytes(4, "big") + bytes.fromhex("cbd43194")
    assert decode_record(blank).status == RecordStatus.BLANK


def test_message_id_example_and_errors():
    assert create_message_id(("192.168.0.1", 10911), 1073743058) == "C0A8000100002A9F00000000400004D2"
    assert decode_message_id("C0A8000100002A9F00000000400004D2") == (("192.168.0.1", 10911), 1073743058)
    with pytest.raises(StoreError):
        decode_message_id("xyz")
    with pytest.raises(StoreError):
        decode_message_id("G" * 32)


def test_properties_parse_example():
    assert string_to_properties("A\x01\x02B\x01x\x02\x01y\x02C\x01\x02D\x01vv\x02") == {"B": "x", "D": "vv"}
    assert string_to_properties("") == {}
    s = properties_to_string({"a": "1", "b": "2"})
    assert s == "a\x011\x02b\x012" and string_to_properties(s) == {"a": "1", "b": "2"}


def test_broker_properties_order_without_cluster():
    s = broker_properties_string({"TAGS": "t", "WAIT": "true", "KEYS": "k"}, None)
    assert s == "KEYS\x01k\x02TAGS\x01t"

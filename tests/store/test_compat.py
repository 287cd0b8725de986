"""Byte compatibility of a whole store directory, checked by an independent reader written from docs/design/store-formats.md.

The store's own unit tests decode with the store's own code; here the commit log, consume queues, index
files and checkpoint that the store wrote are parsed with a few lines of ``struct`` that follow the RocketMQ
4.9 layouts (docs/design/store-formats.md), so a shared misunderstanding between writer and reader in
``store/`` cannot hide.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from raftmq.store import Message, MessageStore, StoreConfig
from tests.store.store_helpers import segment_files, wait_dispatched

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
SIZES = {
    "mapped_file_size_commit_log": 4096,
    "mapped_file_size_consume_queue": 7 * 20,
    "max_hash_slot_num": 5,
    "max_index_num": 12,
    "preallocate": False,
}
KEYS = ["Aa", "BB", "polygenelubricants", "k1", "中文"]


def java_hash(s: str) -> int:
    """Java String.hashCode over UTF-16 code units, as a signed int32 (docs/design/store-formats.md#java-behaviours-the-bytes-depend-on)."""
    b = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(b), 2):
        h = (31 * h + ((b[i] << 8) | b[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def index_hash(key: str) -> int:
    h = abs(java_hash(key))
    return 0 if h < 0 or h == 1 << 31 else h


def parse_record(buf: bytes, pos: int) -> dict:
    """One commit-log record (section 1.2)."""
    total, magic, body_crc, qid, flag, qo, phy, sys_flag, born_ts = struct.unpack_from(">iIiiiqqiq", buf, pos)
    assert magic == MESSAGE_MAGIC, f"magic {magic:#x} at {pos}"
    p = pos + 48
    bh = 16 if sys_flag & 0x10 else 4
    sh = 16 if sys_flag & 0x20 else 4
    born_ip, born_port = buf[p : p + bh], struct.unpack_from(">i", buf, p + bh)[0]
    p += bh + 4
    store_ts = struct.unpack_from(">q", buf, p)[0]
    p += 8
    store_ip, store_port = buf[p : p + sh], struct.unpack_from(">i", buf, p + sh)[0]
    p += sh + 4
    reconsume, prepared = struct.unpack_from(">iq", buf, p)
    p += 12
    body_len = struct.unpack_from(">i", buf, p)[0]
    body = buf[p + 4 : p + 4 + body_len]
    p += 4 + body_len
    topic_len = struct.unpack_from(">b", buf, p)[0]
    topic = buf[p + 1 : p + 1 + topic_len].decode()
    p += 1 + topic_len
    props_len = struct.unpack_from(">h", buf, p)[0]
    props_s = buf[p + 2 : p + 2 + props_len].decode()
    p += 2 + props_len
    assert total == p - pos == 75 + (bh + 4) + (sh + 4) + body_len + topic_len + props_len
    props = dict(kv.split("\x01", 1) for kv in props_s.split("\x02")) if props_s else {}
    return dict(total=total, crc=body_crc, qid=qid, flag=flag, qo=qo, phy=phy, sys_flag=sys_flag, born_ts=born_ts,
                born=(born_ip, born_port), store_ts=store_ts, store=(store_ip, store_port), body=body, topic=topic,
                props=props, reconsume=reconsume, prepared=prepared)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, StoreConfig, list]:
    root = tmp_path_factory.mktemp("compat")
    cfg = StoreConfig(root_dir=str(root), store_host="192.168.0.1:10911", **SIZES)
    st = MessageStore(cfg)
    st.open()
    sent = []
    try:
        for i in range(90):
            props = {"TAGS": ("Aa", "BB", "TagA", "标签")[i % 4], "KEYS": f"{KEYS[i % 5]} {KEYS[(i + 2) % 5]}"}
            host = ("10.0.0.7", 53210) if i % 9 else ("2001:db8::7", 40000)
            msgs = [Message(topic=("TopicTest", "Other")[i % 2], queue_id=i % 3, body=f"m{i}-{j}".encode() * (i % 40),
                            properties=dict(props), born_timestamp=1_700_000_000_000 + i, born_host=host)
                    for j in range(1 + i % 3)]
            sent += list(zip(msgs, st.put_messages(msgs), strict=True))
        wait_dispatched(st)
    finally:
        st.shutdown()
    return root, cfg, sent


def read_log(root: Path, cfg: StoreConfig) -> dict[int, dict]:
    """Every record by physical offset, walking segments and their end-of-file blank records (section 1.3)."""
    out = {}
    files = segment_files(root / "commitlog")
    for i, path in enumerate(files):
        data = path.read_bytes()
        base = int(path.name)
        assert path.name == f"{base:020d}" and len(data) == cfg.mapped_file_size_commit_log
        if i:
            assert base == int(files[i - 1].name) + len(data)
        pos = 0
        while pos + 8 <= len(data):
            size, magic = struct.unpack_from(">iI", data, pos)
            if magic == BLANK_MAGIC:
                assert size == len(data) - pos, "blank record must count the rest of the file"
                break
            if magic != MESSAGE_MAGIC:
                assert i == len(files) - 1 and not any(data[pos:]), "garbage after the end of data"
                break
            rec = parse_record(data, pos)
            assert rec["phy"] == base + pos
            out[base + pos] = rec
            pos += size
    return out


def test_commit_log_records(written) -> None:
    root, cfg, sent = written
    log = read_log(root, cfg)
    assert sorted(log) == sorted(r.physical_offset for _, r in sent)
    for m, r in sent:
        rec = log[r.physical_offset]
        assert (rec["topic"], rec["qid"], rec["qo"], rec["body"], rec["born_ts"]) == \
            (m.topic, m.queue_id, r.queue_offset, m.body, m.born_timestamp)
        assert rec["crc"] == zlib.crc32(m.body) & 0x7FFFFFFF
        assert rec["store"] == (bytes([192, 168, 0, 1]), 10911)
        assert rec["sys_flag"] & 0x10 == (0x10 if ":" in m.born_host[0] else 0)
        assert rec["props"]["TAGS"] == m.properties["TAGS"] and rec["props"]["KEYS"] == m.properties["KEYS"]
        assert rec["props"]["CLUSTER"] == "DefaultCluster" and rec["props"]["UNIQ_KEY"] == r.uniq_key
        # offset msgId: store ip + port + physical offset, upper-case hex (section 4.1)
        assert r.msg_id == (bytes([192, 168, 0, 1]) + struct.pack(">iq", 10911, r.physical_offset)).hex().upper()
        assert rec["store_ts"] == r.store_timestamp


def test_consume_queue_units(written) -> None:
    root, cfg, sent = written
    log = read_log(root, cfg)
    fs = cfg.consume_queue_file_size
    queues: dict[tuple[str, int], list] = {}
    for m, r in sent:
        queues.setdefault((m.topic, m.queue_id), []).append(r)
    for (topic, qid), results in queues.items():
        qdir = root / "consumequeue" / topic / str(qid)
        blob = b""
        for i, path in enumerate(segment_files(qdir)):
            assert path.name == f"{i * fs:020d}" and path.stat().st_size == fs
            blob += path.read_bytes()
        assert len(blob) >= len(results) * 20
        for n, r in enumerate(results):
            phy, size, tags_code = struct.unpack_from(">qiq", blob, n * 20)
            rec = log[phy]
            assert (phy, size, rec["qo"], rec["topic"], rec["qid"]) == \
                (r.physical_offset, r.wrote_bytes, n, topic, qid)
            assert tags_code == java_hash(rec["props"]["TAGS"])  # sign-extended int32
        assert not any(blob[len(results) * 20 :]), "bytes after the last unit"


def test_index_files(written) -> None:
    """Walk the hash chains like IndexFile.selectPhyOffset (section 6.7) and find every key's messages."""
    root, cfg, sent = written
    slots, num = cfg.max_hash_slot_num, cfg.max_index_num
    files = segment_files(root / "index")
    assert len(files) > 3
    parsed = []
    total_entries = 0
    for path in files:
        data = path.read_bytes()
        assert len(data) == 40 + 4 * slots + 20 * num
        assert len(path.name) == 17 and path.name.isdigit()  # yyyyMMddHHmmssSSS
        begin_ts, end_ts, begin_phy, end_phy, _slot_count, count = struct.unpack_from(">qqqqii", data, 0)
        assert 1 < count <= num
        total_entries += count - 1
        parsed.append((data, begin_ts, count))
    want_entries = sum(1 + len(m.properties["KEYS"].split()) for m, _ in sent)  # UNIQ_KEY + each key
    assert total_entries == want_entries

    def select(topic: str, key: str) -> set[int]:
        h = index_hash(f"{topic}#{key}")
        found = set()
        for data, _begin_ts, count in reversed(parsed):
            entry_no = struct.unpack_from(">i", data, 40 + 4 * (h % slots))[0]
            seen = set()
            while 0 < entry_no < count and entry_no not in seen:
                seen.add(entry_no)
                kh, phy, diff, prev = struct.unpack_from(">iqii", data, 40 + 4 * slots + 20 * entry_no)
                if kh == h:
                    found.add(phy)
                entry_no = prev
        return found

    for topic in ("TopicTest", "Other"):
        for key in KEYS:
            want = {r.physical_offset for m, r in sent if m.topic == topic and key in m.properties["KEYS"].split()}
            got = select(topic, key)
            assert want <= got, (topic, key)
            # anything else must be a full hash collision ("Aa" and "BB" collide on purpose)
            h = index_hash(f"{topic}#{key}")
            for m, r in sent:
                if r.physical_offset in got - want:
                    assert any(index_hash(f"{topic}#{k}") == h for k in m.properties["KEYS"].split()), (key, m)
        for m, r in sent:
            if m.topic == topic:
                assert r.physical_offset in select(topic, r.uniq_key)


def test_checkpoint_and_marker_files(written) -> None:
    root, cfg, sent = written
    ckpt = (root / "checkpoint").read_bytes()
    assert len(ckpt) == 4096
    physic, logics, _index = struct.unpack_from(">qqq", ckpt, 0)
    last_ts = max(r.store_timestamp for _, r in sent)
    assert 0 < physic <= last_ts and 0 < logics <= last_ts
    assert not (root / "abort").exists(), "a clean shutdown removes the abort file"

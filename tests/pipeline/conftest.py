"""A real store written by ``store.MessageStore`` (tiny geometry, several segments, queues and index files),
and one local Spark session shared by every Spark test (starting Spark is the slow part)."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field

import pytest

from raftmq.store import MessageStore, StoreConfig
from raftmq.store.message import Message

SEGMENT = 16 * 1024
CQ_FILE = 20 * 40  # 40 units per consume-queue file
INDEX_SLOTS = 16
INDEX_NUM = 100  # 99 keys per index file
TOPICS = ("Orders", "Payments", "Audit")
QUEUES = 3


@dataclass
class Put:
    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str]
    born_timestamp: int
    msg_id: str
    queue_offset: int
    physical_offset: int
    store_timestamp: int


@dataclass
class BuiltStore:
    root: str
    config: StoreConfig
    puts: list[Put] = field(default_factory=list)
    queue_counts: dict[tuple[str, int], int] = field(default_factory=dict)


def build_store(root: str, messages: int = 420) -> BuiltStore:
    cfg = StoreConfig(root_dir=root, mapped_file_size_commit_log=SEGMENT, mapped_file_size_consume_queue=CQ_FILE,
                      max_hash_slot_num=INDEX_SLOTS, max_index_num=INDEX_NUM, flush_disk_type="ASYNC",
                      preallocate=False)
    st = MessageStore(cfg)
    st.open()
    built = BuiltStore(root, cfg)
    try:
        i = k = 0
        while i < messages:
            topic = TOPICS[k % len(TOPICS)]
            qid = (k // len(TOPICS)) % QUEUES
            batch = []
            for j in range(1 + (k // 5) % 3):  # batches of 1-3 messages for one queue
                n = i + j
                props = {"TAGS": f"tag{n % 4}"}
                if n % 5:
                    props["KEYS"] = f"order-{n} cust-{n % 11}" if n % 2 else f"order-{n}"
                body = (f"message {n} ".encode() * (1 + n % 9)) + bytes([n % 256]) * (n % 40)
                batch.append(Message(topic=topic, queue_id=qid, body=body, properties=props,
                                     born_timestamp=1_700_000_000_000 + n, born_host=("10.1.2.3", 40000 + n % 7)))
            results = st.put_messages(batch)
            for m, r in zip(batch, results, strict=True):
                assert r.status.name == "PUT_OK"
                built.puts.append(Put(m.topic, m.queue_id, m.body, dict(m.properties), m.born_timestamp,
                                      r.msg_id, r.queue_offset, r.physical_offset, r.store_timestamp))
            i += len(batch)
            k += 1
            if k % 40 == 0:
                time.sleep(0.01)  # spread store timestamps a little
        deadline = time.monotonic() + 30
        while st.dispatch_behind_bytes() > 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert st.dispatch_behind_bytes() == 0, "the broker's reput did not catch up"
        for topic in TOPICS:
            for q in st.queue_ids(topic):
                built.queue_counts[(topic, q)] = st.max_offset_in_queue(topic, q) - st.min_offset_in_queue(topic, q)
    finally:
        st.shutdown()
    return built


@pytest.fixture(scope="session")
def built_store(tmp_path_factory: pytest.TempPathFactory) -> BuiltStore:
    """The reference store: do not modify it in a test, copy it (``store_copy``)."""
    b = build_store(str(tmp_path_factory.mktemp("store") / "n0"))
    assert len(os.listdir(os.path.join(b.root, "commitlog"))) >= 3
    assert len(os.listdir(os.path.join(b.root, "index"))) >= 2
    return b


@pytest.fixture
def store_copy(built_store: BuiltStore, tmp_path):  # noqa: ANN201
    def copy(name: str = "copy") -> str:
        dst = str(tmp_path / name)
        shutil.copytree(built_store.root, dst)
        return dst

    return copy


@pytest.fixture(scope="session")
def spark():  # noqa: ANN201
    from raftmq.pipeline.spark import get_session

    s = get_session("local[2]", app_name="raftmq-pipeline-tests", shuffle_partitions=4)
    yield s
    s.stop()

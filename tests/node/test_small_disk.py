"""Small disks (issue 33 item 6), on a real 100 MiB tmpfs mounted by the test (needs root; skipped otherwise).

1. With the default sizes a 100 MiB volume answered "disk full ... 104849408 bytes free" forever (a 1 GiB segment
   cannot be allocated, nor a ~400 MB index file). ``raftmq config validate`` now refuses it and says what to set,
   the starting node logs the same, and the settings it suggests pass.
2. With small segments, a full disk made reput fail to create the next index file every second while the consume
   queues waited for it: acknowledged messages stayed invisible to consumers. Consume queues are now dispatched
   on; the disk refuses writes until the next index file fits, and the index catches up when space comes back.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from raftmq.client import Admin, Message, Producer, StorageFullError
from raftmq.store import StoreConfig
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.support.metrics import metric_sum
from tests.support.processes import REPO_ROOT, node_specs, start_nodes, stop_all
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow
DEFAULT_SIZES = {k: getattr(StoreConfig, k) for k in (
    "mapped_file_size_commit_log", "mapped_file_size_consume_queue", "max_hash_slot_num", "max_index_num",
    "disk_min_free_bytes", "preallocate", "max_message_size")}


@pytest.fixture
def volume(tmp_path):
    """A 100 MiB tmpfs mounted for this test."""
    mnt = tmp_path / "vol"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=100m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _validate(config: Path, *sets: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")])
    return subprocess.run([sys.executable, "-m", "raftmq.node", "config", "validate", str(config),
                           *(f"--set={s}" for s in sets)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


def test_validate_and_the_start_say_the_volume_is_too_small_and_what_to_set(volume, tmp_path):
    [spec] = node_specs(tmp_path, 1, store=DEFAULT_SIZES)
    spec.data_dir = volume / "store"
    config = spec.write_config()
    r = _validate(config)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "too small for the configured sizes" in r.stderr and "1.00 GiB commit-log segments" in r.stderr, r.stderr
    assert str(volume) in r.stderr
    suggested = re.findall(r"store\.(\w+)=(\d+)", r.stderr)
    assert {k for k, _v in suggested} >= {"mapped_file_size_commit_log", "max_hash_slot_num", "max_index_num"}
    ok = _validate(config, *(f"store.{k}={v}" for k, v in suggested))
    assert ok.returncode == 0, (ok.stdout, ok.stderr)
    [node] = start_nodes([spec])  # it starts (what is stored stays readable) and says why writes will fail
    try:
        assert "too small for the configured sizes" in spec.log_path.read_text()
    finally:
        stop_all([node])


def test_consume_queues_do_not_wait_for_an_index_file_the_disk_cannot_take(volume, tmp_path):
    store = {"mapped_file_size_commit_log": 1 << 20, "preallocate": True, "disk_min_free_bytes": 1 << 20,
             "mapped_file_size_consume_queue": 20 * 1000, "max_hash_slot_num": 3_000_000, "max_index_num": 2000,
             "max_message_size": 4 << 20}
    index_file = 40 + 4 * 3_000_000 + 20 * 2000  # 12 MB: the second one does not fit in the 10 MiB left
    [spec] = node_specs(tmp_path, 1, store=store)
    spec.data_dir = volume / "store"
    [node] = start_nodes([spec])
    try:
        addr = node.grpc_address
        topic = f"small-{uuid.uuid4().hex[:6]}"
        with Admin(addr) as admin:
            admin.create_topic(topic, queues=1)
        with Producer(addr) as p:
            first = p.send(topic, b"first", keys="k0", queue_id=0)
        stub = pb_grpc.MessagingServiceStub(node.channel())
        # reput creates the first index file (12 MB) after the send is acknowledged: measure the space left after it
        wait_for(lambda: [m.queue_offset for m in stub.QueryMessageByKey(
            pb.QueryMessageByKeyRequest(topic=topic, key="k0"), timeout=10).messages] == [first.queue_offset],
            "the first message indexed")
        ballast = volume / "ballast"
        with open(ballast, "wb") as f:  # leave 10 MiB: room for segments, not for the next index file
            while (left := _free_bytes(volume) - (10 << 20)) > 0:
                f.write(bytes(min(left, 1 << 20)))
                f.flush()
        acked = [first]
        with Producer(addr, retry_timeout=30) as p, pytest.raises(StorageFullError):
            # the first index file holds 1999 keys (two a message); the next one does not fit. Before, writes went
            # on into the 10 MiB while reput retried that index file every second: the consume queues reached
            # 4 MiB (one dispatch slice) past it, and what was acknowledged after that stayed invisible
            for i in range(1, 12_001, 100):
                acked += p.send_batch(topic, [Message(b"m%05d" % n + b"x" * 1000, keys=f"k{n}")
                                              for n in range(i, i + 100)], queue_id=0)
        assert len(acked) > 1000, len(acked)

        def visible() -> list[int]:
            offset, got = 0, []
            while True:
                r = stub.PullMessage(pb.PullMessageRequest(topic=topic, queue_id=0, offset=offset, max_count=256),
                                     timeout=30)
                got += [m.queue_offset for m in r.messages]
                if r.next_offset == offset or not r.messages:
                    return got
                offset = r.next_offset

        wait_for(lambda: visible() == [a.queue_offset for a in acked], "every acknowledged message consumable",
                 timeout=30)
        assert metric_sum(node, "raftmq_store_index_behind_bytes") > 0
        status, text = node.http_get("/ready")
        assert status == 503 and "disk full" in text, (status, text)  # writes wait until the index file fits

        ballast.unlink()  # space comes back: the index catches up, writes are taken again
        wait_for(lambda: metric_sum(node, "raftmq_store_index_behind_bytes") == 0, "the index catches up")
        wait_for(lambda: node.http_get("/ready")[0] == 200, "ready again")
        assert len(os.listdir(spec.data_dir / "index")) == 2 and \
            os.path.getsize(spec.data_dir / "index" / sorted(os.listdir(spec.data_dir / "index"))[-1]) == index_file
        last = acked[-1]
        found = stub.QueryMessageByKey(pb.QueryMessageByKeyRequest(topic=topic, key=f"k{len(acked) - 1}"),
                                       timeout=10).messages
        assert [m.queue_offset for m in found] == [last.queue_offset]
        with Producer(addr) as p:
            assert p.send(topic, b"after", queue_id=0).queue_offset == last.queue_offset + 1
    finally:
        stop_all([node])

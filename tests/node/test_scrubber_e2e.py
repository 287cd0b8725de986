"""The scrubber in a running node: a byte flipped on disk in a sealed commit-log segment and a consume-queue unit
overwritten are found in the background; the metrics, the PrometheusRule's series and `raftmq cluster status` say
so, and the consume queue is rebuilt while the node serves."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid

from raftmq.client import Admin, Producer
from raftmq.store.message import decode_record
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.store.store_helpers import segment_files
from tests.support.metrics import metric_sum
from tests.support.processes import REPO_ROOT, running_nodes
from tests.support.waiting import wait_for


def test_scrubber_finds_damage_reports_it_and_rebuilds_the_consume_queue(tmp_path):
    store = {"scrub_rate_bytes_per_s": 32 << 20, "scrub_interval_s": 1}
    with running_nodes(tmp_path, 1, store=store) as [node]:
        addr = node.grpc_address
        topic = f"scrub-{uuid.uuid4().hex[:6]}"
        with Admin(addr) as admin:
            admin.create_topic(topic, queues=1)
        with Producer(addr) as p:
            for _batch in range(30):  # ~810 KiB: the 256 KiB segments roll, the first ones are sealed
                p.send_batch(topic, [os.urandom(900) for _ in range(30)], queue_id=0)
        data_dir = node.spec.data_dir
        first = segment_files(data_dir / "commitlog")[0]
        assert len(segment_files(data_dir / "commitlog")) >= 3
        raw = first.read_bytes()
        pos = 0
        for _ in range(5):
            pos += decode_record(raw, pos, check_crc=True).size
        with open(first, "r+b") as f:  # one body byte of the 6th record
            f.seek(pos + 200)
            f.write(bytes([raw[pos + 200] ^ 0xFF]))
        cq = segment_files(data_dir / "consumequeue" / topic / "0")[0]
        with open(cq, "r+b") as f:  # unit 20: wrong bytes
            f.seek(20 * 20)
            f.write(b"\x7f" * 20)

        def found() -> bool:
            return (metric_sum(node, "rocketmq_storage_corruption_total", kind="commitlog") == 1
                    and metric_sum(node, "rocketmq_storage_corruption_total", kind="consumequeue") >= 1
                    and metric_sum(node, "raftmq_scrub_last_full_timestamp_seconds") > 0)

        wait_for(found, "the scrubber reports the flipped byte and the damaged unit", timeout=120)
        assert metric_sum(node, "raftmq_scrub_bytes_total") > 0
        assert metric_sum(node, "raftmq_store_disk_writable") == 1

        # the damaged unit was rebuilt from the commit log: every message after the damaged record (offset 5,
        # whose bytes the read path may refuse) is consumed at its offset
        stub = pb_grpc.MessagingServiceStub(node.channel())
        offset, got = 6, []
        while offset < 900:
            resp = stub.PullMessage(pb.PullMessageRequest(topic=topic, queue_id=0, offset=offset, max_count=64,
                                                          long_poll_timeout_ms=5000), timeout=30)
            assert resp.status == pb.FOUND, resp.status
            got.extend(m.queue_offset for m in resp.messages)
            offset = resp.next_offset
        assert got == list(range(6, 900))

        env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")])
        r = subprocess.run([sys.executable, "-m", "raftmq.client", "cluster", "status", "--server", addr], cwd=REPO_ROOT,
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("n0:"))
        assert re.search(r"1 commitlog", line) and "consumequeue" in line, r.stdout
        assert "1 commit-log range(s) damaged" in line and "last full pass" in line, line

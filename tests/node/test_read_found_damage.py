"""Damage a read finds shows everywhere damage shows, and the first scrub comes soon after start (issue 33 item 5).

Single node, real process: a record whose body rots while the node runs is refused (DATA_LOSS) and is now also
counted (``rocketmq_storage_corruption_total``, which the chart's RaftmqStorageCorruption alert watches), listed by
``raftmq cluster status`` and on the console's cluster page. Before, the refusal was the only trace: status said
"no damage found" and the counter stayed 0. Older damage that no read meets is found by the scrubber's first pass
a few seconds after the start (it used to wait an hour).
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from raftmq.client import Admin, Producer
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.client.test_cluster_check_e2e import raftmq
from tests.store.store_helpers import segment_files
from tests.support.metrics import metric_sum
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow
BODY = b"R" * 1000


def _flip(store_dir: Path, needle: bytes, segment: int = 0) -> None:
    seg = segment_files(store_dir / "commitlog")[segment]
    data = seg.read_bytes()
    at = data.index(needle) + 500
    with open(seg, "r+b") as f:  # the node's mapping sees the write (same page cache)
        f.seek(at)
        f.write(bytes([data[at] ^ 0x04]))


def test_damage_found_by_a_read_is_counted_shown_and_alerted(tmp_path):
    with running_nodes(tmp_path, 1, store={"scrub_rate_bytes_per_s": 0}) as [node]:
        with Admin([node.grpc_address]) as admin:
            admin.create_topic("Rot", queues=1)
        with Producer([node.grpc_address]) as p:
            p.send_batch("Rot", [BODY + b"%05d" % n for n in range(20)], queue_id=0)
        assert "no damage found" in raftmq("cluster", "status", "-s", node.grpc_address, secret=None).stdout
        _flip(node.spec.data_dir, BODY + b"00011")
        stub = pb_grpc.MessagingServiceStub(node.channel())
        with pytest.raises(grpc.RpcError) as ei:
            stub.PullMessage(pb.PullMessageRequest(topic="Rot", queue_id=0, offset=11, max_count=4), timeout=30)
        assert ei.value.code() == grpc.StatusCode.DATA_LOSS
        assert metric_sum(node, "rocketmq_storage_corruption_total", kind="commitlog") == 1
        status = raftmq("cluster", "status", "-s", node.grpc_address, secret=None).stdout
        assert "n0: 1 commitlog; 1 commit-log range(s) damaged" in status, status
        code, page = node.http_get("/ui/cluster")
        assert code == 200 and "damaged data found on n0" in page and "1 commit-log range(s) damaged" in page
        with pytest.raises(grpc.RpcError):  # read again: still refused, counted once
            stub.PullMessage(pb.PullMessageRequest(topic="Rot", queue_id=0, offset=11, max_count=4), timeout=30)
        assert metric_sum(node, "rocketmq_storage_corruption_total", kind="commitlog") == 1


def test_the_first_scrub_pass_comes_soon_after_the_start(tmp_path):
    store = {"scrub_rate_bytes_per_s": 16 << 20, "scrub_first_delay_s": 2}  # the interval stays one hour
    with running_nodes(tmp_path, 1, store=store) as [node]:
        with Admin([node.grpc_address]) as admin:
            admin.create_topic("Old", queues=1)
        with Producer([node.grpc_address]) as p:
            for i in range(30):  # ~1.2 MB: five 256 KiB segments, so segment 0 is outside the start-up scan
                p.send_batch("Old", [BODY + b"%05d" % (i * 40 + n) for n in range(40)], queue_id=0)
        assert node.stop() == 0
        _flip(node.spec.data_dir, BODY + b"00003")
        node.start().wait_ready(60)
        wait_for(lambda: metric_sum(node, "rocketmq_storage_corruption_total", kind="commitlog") == 1,
                 "the scrubber's first pass finds the rotten byte in segment 0", timeout=90)

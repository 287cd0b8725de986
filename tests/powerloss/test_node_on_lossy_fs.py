"""A real node on the lose-unsynced-writes filesystem: it runs there, and what it acknowledged survives a cut.

One member (no Raft), its data directory a lossy_fs mount, ``flush_disk_type: SYNC`` (an acknowledged put was
fsynced) and 1 MiB commit-log segments, four producer threads. Then SIGKILL, a power cut, a restart: every
acknowledged message must be back at the queue offset it was acknowledged with, in both metadata models
(``strict``: only a directory's own fsync keeps its new names; ``any-fsync``: ext4-like).
"""

from __future__ import annotations

import pytest

from raftmq.v1 import raftmq_pb2 as pb
from tests.replication.cluster_util import Producers, admin, read_topic
from tests.support.lossy_fs import ANY_FSYNC, STRICT
from tests.support.processes import NodeProcess, node_specs

TOPIC, QUEUES = "PowerLossT", 4


def positions(node: NodeProcess) -> dict[str, tuple[int, int]]:
    """uniq key -> (queue id, queue offset) of every message the node serves."""
    return {key: (q, offset) for q, msgs in read_topic(node, TOPIC, QUEUES).items() for offset, key, _ in msgs}


@pytest.mark.parametrize("mode", [STRICT, ANY_FSYNC])
def test_acknowledged_sync_puts_survive_a_power_cut(tmp_path, lossy_mount, mode):
    [spec] = node_specs(tmp_path, 1, store={"flush_disk_type": "SYNC", "mapped_file_size_commit_log": 1 << 20})
    fs = lossy_mount(spec.data_dir, mode)
    node = NodeProcess(spec)
    try:
        node.start().wait_ready(120)
        admin(node).CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(
            name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)), timeout=30)
        producers = Producers([node], TOPIC, n=4, body_size=1000, queues=QUEUES).start()
        try:
            producers.wait_acked(3000, timeout=300)  # > 3 segments
        finally:
            log = producers.stop()
        assert not log.unknown, log.errors[:5]
        acked = {key: (q, offset) for key, (q, offset, _) in log.acked.items()}
        assert positions(node).items() >= acked.items()
        counters = fs.counters()
        assert counters["fsyncs"] > 0 and counters["synced_bytes"] >= 3 << 20, counters

        node.kill()
        report = fs.cut()
        node.start().wait_ready(120)
        after = positions(node)
        lost = {key: where for key, where in acked.items() if after.get(key) != where}
        assert not lost, (f"{len(lost)} of {len(acked)} acknowledged messages not back at their offsets after "
                          f"a cut that dropped {report.unsynced_bytes} unsynced bytes: {sorted(lost)[:5]}")
    finally:
        node.kill()

"""Rot in bytes no check covers is healed from the peers with no operator action (issue 33 item 1).

Real 3-member clusters. RocketMQ's format has a CRC over the body only: 33 rotten bytes in a record's properties
changed its UNIQ_KEY (the message id clients see) on a follower, every check accepted the record, and the member
served the altered message until someone ran `raftmq cluster check`. Anti-entropy compares the members' commit
logs in the background and replaces the block that differs from the majority.

Second case: 64 rotten bytes across the end of one record (its properties) and the start of the next (its magic):
the scrubber finds the next record damaged, and its repair now replaces the whole differing blocks from the
peers, the end of the record before included (it used to rewrite only from the damaged record's start, leaving the
altered properties behind).
"""

from __future__ import annotations

import random
import re

import pytest

from raftmq.client import Admin, Producer
from raftmq.store.message import decode_record
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.client.test_cluster_check_e2e import SECRET, converged, raftmq
from tests.store.store_helpers import segment_files
from tests.support.metrics import metric_sum
from tests.support.processes import NodeProcess, running_nodes
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow
BODY = b"e" * 700


def _cluster(tmp_path, **raft):
    store = {"scrub_rate_bytes_per_s": 0}
    return running_nodes(tmp_path, 3, cluster={"secret": SECRET, "raft": raft}, store=store)


def _fill(nodes: list[NodeProcess]) -> tuple[list, NodeProcess, NodeProcess]:
    servers = [n.grpc_address for n in nodes]
    with Admin(servers) as admin:
        admin.create_topic("Rot", queues=1)
    acked = []
    with Producer(servers) as p:
        for i in range(20):  # ~1 MB: four 256 KiB segments
            acked += p.send_batch("Rot", [BODY + b"%05d" % (i * 60 + n) for n in range(60)], queue_id=0)
    converged(servers)
    with Admin(servers) as admin:
        leader_id = admin.cluster_status().leader_id
    leader = next(n for n in nodes if n.spec.id == leader_id)
    victim = next(n for n in nodes if n.spec.id != leader_id)
    return acked, leader, victim


def _uniq_key(node: NodeProcess, sent) -> str:
    """The UNIQ_KEY (the message id clients see) ``node`` serves for the message ``sent`` stored."""
    stub = pb_grpc.MessagingServiceStub(node.channel())
    return stub.ViewMessage(pb.ViewMessageRequest(msg_id=sent.msg_id), timeout=10).message.uniq_key


def test_rotten_properties_on_a_follower_are_healed_by_anti_entropy(tmp_path):
    with _cluster(tmp_path, anti_entropy_bytes_per_s=64 << 20, anti_entropy_interval_s=1) as nodes:
        acked, leader, victim = _fill(nodes)
        target = acked[100]
        seg = segment_files(victim.spec.data_dir / "commitlog")[0]
        raw = seg.read_bytes()
        rec = raw[target.physical_offset : target.physical_offset + decode_record(raw, target.physical_offset).size]
        key = re.search(rb"UNIQ_KEY\x01([0-9A-F]{32})", rec)
        at = target.physical_offset + key.start(1)
        with open(seg, "r+b") as f:  # 33 bytes of the UNIQ_KEY rot on the running follower
            f.seek(at)
            f.write(bytes(random.Random(9).choices(b"ghijklmnopqrstuvwxyz", k=33)))
        assert _uniq_key(leader, target) == target.uniq_key
        wait_for(lambda: seg.read_bytes() == raw, "anti-entropy replaces the rotten block with the majority's copy",
                 timeout=120)
        assert _uniq_key(victim, target) == target.uniq_key
        assert metric_sum(victim, "raftmq_anti_entropy_repaired_blocks_total") == 1
        assert metric_sum(victim, "rocketmq_storage_corruption_total", kind="commitlog") == 1
        assert metric_sum(leader, "raftmq_anti_entropy_repaired_blocks_total") == 0
        wait_for(lambda: metric_sum(victim, "raftmq_anti_entropy_passes_total") >= 2, "another complete pass")
        assert metric_sum(victim, "raftmq_anti_entropy_repaired_blocks_total") == 1  # nothing else differs
        r = raftmq("cluster", "check", "-s", leader.grpc_address, "--chunk", "64K")
        assert r.returncode == 0, (r.stdout, r.stderr)


def test_the_scrubbers_repair_replaces_the_whole_block_not_only_the_damaged_record(tmp_path):
    with _cluster(tmp_path, anti_entropy_bytes_per_s=0) as nodes:  # the repair alone must heal it
        acked, leader, victim = _fill(nodes)
        seg = segment_files(victim.spec.data_dir / "commitlog")[0]
        raw = seg.read_bytes()
        nxt = acked[51].physical_offset  # 64 bytes: the last 40 of record 50 (properties) and the first 24 of record 51
        with open(seg, "r+b") as f:
            f.seek(nxt - 40)
            f.write(bytes(random.Random(3).choices(b"QRSTUVWXYZ", k=64)))
        victim.spec.overrides["store"] = {"scrub_rate_bytes_per_s": 32 << 20, "scrub_first_delay_s": 1}
        assert victim.stop() == 0  # restart with the scrubber on; the damage lies outside the start-up scan
        victim.start().wait_ready(60)
        wait_for(lambda: seg.read_bytes() == raw, "the scrubber's repair replaces every rotten byte", timeout=120)
        assert _uniq_key(victim, acked[50]) == acked[50].uniq_key
        r = raftmq("cluster", "check", "-s", leader.grpc_address, "--chunk", "64K")
        assert r.returncode == 0, (r.stdout, r.stderr)

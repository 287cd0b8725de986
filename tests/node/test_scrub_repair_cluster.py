"""A byte that rots in a sealed commit-log segment of a *running* follower: the scrubber finds it, the member
repairs the range from a healthy peer while it keeps serving, and `raftmq cluster check` then proves all three
members byte-identical with every acknowledged message readable from the repaired member (real 3-member
cluster)."""

from __future__ import annotations

from raftmq.client import Admin, Producer
from raftmq.store.message import decode_record
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.client.test_cluster_check_e2e import SECRET, converged, raftmq
from tests.store.store_helpers import segment_files
from tests.support.metrics import metric_sum
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for


def test_scrubber_damage_on_a_running_member_is_repaired_from_a_peer(tmp_path):
    store = {"scrub_rate_bytes_per_s": 32 << 20, "scrub_interval_s": 1}
    with running_nodes(tmp_path, 3, cluster={"secret": SECRET}, store=store) as nodes:
        servers = [n.grpc_address for n in nodes]
        with Admin(servers) as admin:
            admin.create_topic("Rot", queues=1)
        acked = []
        with Producer(servers) as p:
            for i in range(20):
                acked += p.send_batch("Rot", [b"%04d" % i + b"r" * 1000 for _ in range(40)], queue_id=0)
        converged(servers)
        with Admin(servers) as admin:
            leader_id = admin.cluster_status().leader_id
        victim = next(n for n in nodes if n.spec.id != leader_id)
        seg = segment_files(victim.spec.data_dir / "commitlog")[0]
        raw = seg.read_bytes()
        pos = 0
        for _ in range(30):
            pos += decode_record(raw, pos, check_crc=True).size
        with open(seg, "r+b") as f:  # the running member's mapped segment rots under it
            f.seek(pos + 150)
            f.write(bytes([raw[pos + 150] ^ 0x20]))

        def repaired() -> bool:
            return (metric_sum(victim, "rocketmq_storage_corruption_total", kind="commitlog") == 1
                    and seg.read_bytes() == raw)

        wait_for(repaired, "the scrubber finds the rotten byte and the member repairs it from a peer", timeout=120)
        r = raftmq("cluster", "check", "-s", servers[0], "--chunk", "64K")
        assert r.returncode == 0, (r.stdout, r.stderr)
        stub = pb_grpc.MessagingServiceStub(victim.channel())
        offset, got = 0, []
        while offset < len(acked):
            resp = stub.PullMessage(pb.PullMessageRequest(topic="Rot", queue_id=0, offset=offset, max_count=64),
                                    timeout=30)
            assert resp.status == pb.FOUND, (offset, resp.status)
            got += [(m.queue_offset, m.body) for m in resp.messages]
            offset = resp.next_offset
        assert [o for o, _b in got] == [a.queue_offset for a in acked]
        assert got[30][1] == b"%04d" % 0 + b"r" * 1000
        status = wait_for(lambda: "commit-log range" not in (t := raftmq("cluster", "status", "-s",
                                                                          victim.grpc_address).stdout) and t,
                          "cluster status no longer lists the repaired range")
        assert f"{victim.spec.id}: 1 commitlog" in status, status

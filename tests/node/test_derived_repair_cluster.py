"""A replicated member whose consume-queue and index files were damaged while it was stopped rebuilds them from its
commit log: the queues at start (a deleted file, units recovery cut), the old index file by the scrubber's first
pass soon after (issue 33: the start reads only what is new). `raftmq cluster check` proves its queues
byte-identical to its peers', every acknowledged message is read back from it at its offset, and query by key on
it finds them (real 3-member cluster)."""

from __future__ import annotations

import random

from raftmq.client import Admin, Message, Producer
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.client.test_cluster_check_e2e import SECRET, converged, raftmq
from tests.store.store_helpers import segment_files
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for


def test_a_member_rebuilds_damaged_consume_queues_and_index_identical_to_its_peers(tmp_path):
    store = {"mapped_file_size_consume_queue": 20 * 100, "max_hash_slot_num": 64, "max_index_num": 200}
    with running_nodes(tmp_path, 3, cluster={"secret": SECRET}, store=store) as nodes:
        servers = [n.grpc_address for n in nodes]
        with Admin(servers) as admin:
            admin.create_topic("Derived", queues=2)
        acked = []
        with Producer(servers) as p:
            for i in range(25):
                acked += p.send_batch("Derived", [Message(f"m{i}-{k}" * 20, keys=[f"key-{i}"]) for k in range(20)],
                                      queue_id=i % 2)
        converged(servers)
        with Admin(servers) as admin:
            leader_id = admin.cluster_status().leader_id
        victim = next(n for n in nodes if n.spec.id != leader_id)
        victim.stop()
        data = victim.spec.data_dir
        cq_files = segment_files(data / "consumequeue" / "Derived" / "0")
        assert len(cq_files) >= 3
        rnd = random.Random(10)
        with open(cq_files[1], "r+b") as f:  # middle file: random bytes
            f.seek(100)
            f.write(rnd.randbytes(1500))
        cq_files[-1].unlink()  # last file: gone
        index_files = segment_files(data / "index")
        assert len(index_files) >= 2
        with open(index_files[0], "r+b") as f:  # first index file: random bytes over slots and entries
            f.seek(200)
            f.write(rnd.randbytes(400))
        victim.spec.overrides["store"] = {**store, "scrub_rate_bytes_per_s": 32 << 20, "scrub_first_delay_s": 1}
        victim.start().wait_ready(90)
        converged(servers)

        r = raftmq("cluster", "check", "-s", servers[0], "--chunk", "64K")
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert "consume queues: 2 queues identical" in r.stdout, r.stdout

        stub = pb_grpc.MessagingServiceStub(victim.channel())
        for qid in (0, 1):
            expected = [a.queue_offset for a in acked if a.queue_id == qid]
            offset, got = 0, []
            while offset < len(expected):
                resp = stub.PullMessage(pb.PullMessageRequest(topic="Derived", queue_id=qid, offset=offset,
                                                              max_count=64), timeout=30)
                assert resp.status == pb.FOUND, (qid, offset, resp.status)
                got += [m.queue_offset for m in resp.messages]
                offset = resp.next_offset
            assert got == expected
        def found(i: int) -> int:
            return len(stub.QueryMessageByKey(pb.QueryMessageByKeyRequest(topic="Derived", key=f"key-{i}", max_num=64),
                                              timeout=30).messages)

        wait_for(lambda: [found(i) for i in (0, 7, 24)] == [20, 20, 20],
                 "the scrubber rebuilds the damaged index file and query by key finds every message", timeout=120)

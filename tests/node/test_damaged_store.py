"""A single node whose commit log is damaged refuses to start and names the damage and the command to run;
``raftmq store repair`` then brings it back with every intact message at its place (issue 10, must-have 3).

Real node process, real byte writes into its segment files. The old node truncated at the damage (deleting the
later segments), reported ready and reused the destroyed messages' offsets.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import grpc

from raftmq.client import Admin, Producer
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.support.processes import GRPC_OPTIONS, REPO_ROOT, TINY_STORE, NodeProcess, node_specs
from tests.support.waiting import wait_for

SEGMENT = TINY_STORE["mapped_file_size_commit_log"]
BODY = b"S" * 1000


def _pull_all(address: str, topic: str) -> tuple[list[int], str | None]:
    """Numbers of every message pulled from ``topic``, and the first pull error's details (None if none)."""
    out: list[int] = []
    with grpc.insecure_channel(address, options=GRPC_OPTIONS) as ch:
        stub = pb_grpc.MessagingServiceStub(ch)
        for q in stub.GetQueueOffsets(pb.GetQueueOffsetsRequest(topic=topic), timeout=10).queues:
            off = q.min_offset
            while off < q.max_offset:
                try:
                    r = stub.PullMessage(pb.PullMessageRequest(topic=topic, queue_id=q.queue_id, offset=off,
                                                               max_count=32), timeout=30)
                except grpc.RpcError as e:
                    return sorted(out), f"{e.code().name}: {e.details()}"
                out += [int(m.body[len(BODY):]) for m in r.messages]
                off = r.next_offset
    return sorted(out), None


def test_damaged_single_node_refuses_to_start_and_store_repair_brings_it_back(tmp_path: Path) -> None:
    [spec] = node_specs(tmp_path, 1)
    node = NodeProcess(spec).start().wait_ready(60)
    try:
        with Admin([node.grpc_address]) as admin:
            admin.create_topic("Dmg", queues=2)
        sent: list[int] = []
        with Producer([node.grpc_address]) as p:
            for i in range(10):  # three segments
                nums = [i * 50 + k for k in range(50)]
                p.send_batch("Dmg", [BODY + b"%05d" % n for n in nums], queue_id=i % 2)
                sent += nums
    finally:
        assert node.stop() == 0
    seg0 = spec.data_dir / "commitlog" / f"{0:020d}"
    data = seg0.read_bytes()
    at = data.index(BODY[:100], 40_000) + 20
    with open(seg0, "r+b") as f:
        f.seek(at)
        f.write(random.Random(5).randbytes(64))
    later = sorted((spec.data_dir / "commitlog").iterdir())

    # refuses: exits non-zero, the log names file, offsets, and the command; nothing is deleted
    node.start()
    wait_for(lambda: not node.alive, timeout=60, what="the damaged node to exit")
    assert node.proc.returncode != 0
    log = spec.log_path.read_text(errors="replace")
    assert "commit log is corrupt" in log and str(seg0) in log and "body CRC mismatch" in log, node.log_tail()
    assert f"raftmq store repair {spec.data_dir}" in log
    assert sorted((spec.data_dir / "commitlog").iterdir()) == later

    # check names the record; repair (with the node's config) quarantines it and rebuilds derived files
    env = {"PYTHONPATH": f"{REPO_ROOT}:{REPO_ROOT / 'proto'}"}
    chk = subprocess.run([sys.executable, "-m", "raftmq.client", "store", "check", str(spec.data_dir)], cwd=REPO_ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert chk.returncode == 1 and str(seg0) in chk.stdout and "body CRC mismatch" in chk.stdout, chk
    rep = subprocess.run([sys.executable, "-m", "raftmq.client", "store", "repair", "--config", str(spec.config_path),
                          str(spec.data_dir)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0 and "quarantine" in rep.stdout, rep

    node.start().wait_ready(60)
    try:
        got, err = _pull_all(node.grpc_address, "Dmg")
        assert err is None, err
        lost = set(sent) - set(got)
        assert len(lost) == 1 and set(got) <= set(sent)  # only the damaged record is gone
        with Producer([node.grpc_address]) as p:
            r = p.send("Dmg", BODY + b"99999", queue_id=0)
        assert r.queue_offset == len([n for n in sent if (n // 50) % 2 == 0])  # never a lost message's offset
    finally:
        node.stop()


def test_pull_of_a_record_damaged_while_the_node_runs_is_data_loss_not_bytes(tmp_path: Path) -> None:
    [spec] = node_specs(tmp_path, 1)
    node = NodeProcess(spec).start().wait_ready(60)
    try:
        with Admin([node.grpc_address]) as admin:
            admin.create_topic("Rot", queues=1)
        with Producer([node.grpc_address]) as p:
            p.send_batch("Rot", [BODY + b"%05d" % n for n in range(20)], queue_id=0)
        with Admin([node.grpc_address]) as admin:
            wait_for(lambda: admin.queue_offsets("Rot")[0].max_offset == 20, what="dispatch of the 20 messages")
        seg0 = spec.data_dir / "commitlog" / f"{0:020d}"
        data = seg0.read_bytes()
        at = data.index(BODY + b"00007") + 500
        with open(seg0, "r+b") as f:  # the node's mapping sees this write (same page cache)
            f.seek(at)
            f.write(bytes([data[at] ^ 0x20]))
        got, err = _pull_all(node.grpc_address, "Rot")
        assert got == list(range(7)), (got, err)
        assert err is not None and err.startswith("DATA_LOSS") and "damaged" in err and "CRC" in err, err
    finally:
        node.stop()

"""A member with an empty disk joins a group whose oldest commit-log segments retention already deleted.

This is what replacing a lost disk looks like after the first `file_reserved_time` (72 h by default): the peers'
commit logs no longer start at 0. The new member copies from the peers' oldest segment on, and takes the queue
offsets of queues whose messages all lay in deleted segments from the peer's metadata, so the next message of such
a queue gets the same queue offset (and so the same bytes) everywhere.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from raftmq.v1 import raftmq_pb2 as pb
from tests.replication.cluster_util import (
    Producers,
    create_topic,
    messaging,
    read_queue,
    wait_applied_equal,
    wait_leader,
)

EVERY_HOUR = ";".join(str(h) for h in range(24))
RETENTION = {"delete_when": EVERY_HOUR, "clean_resource_interval": 300}


def _segments(node) -> list[Path]:
    return sorted((node.spec.data_dir / "commitlog").iterdir())


def _age_all_but_last(node, keep: int = 2) -> None:
    old = time.time() - 80 * 3600  # older than file_reserved_time (72 h)
    for p in _segments(node)[:-keep]:
        os.utime(p, (old, old))


def _send(node, topic: str, queue_id: int, n: int, tag: str) -> list[tuple[int, str, int]]:
    out = []
    stub = messaging(node)
    for i in range(n):
        key = f"{tag}-{i}"
        msg = pb.Message(topic=topic, queue_id=queue_id, body=key.encode(), uniq_key=key)
        r = stub.SendMessage(pb.SendMessageRequest(message=msg), timeout=15).result
        out.append((r.queue_offset, key, r.physical_offset))
    return out


def test_empty_member_joins_after_retention_deleted_the_oldest_segments(cluster_factory):
    c = cluster_factory(store=RETENTION)
    create_topic(c.nodes, "Early", 1)
    create_topic(c.nodes, "Bulk", 4)
    leader = wait_leader(c.nodes)
    early = _send(leader, "Early", 0, 5, "early")  # only in the first segment
    p = Producers(c.nodes, "Bulk", n=4, body_size=1000, queues=4).start()
    deadline = time.monotonic() + 120
    while min(len(_segments(n)) for n in c.nodes) < 5:
        assert time.monotonic() < deadline, "the commit log did not roll"
        time.sleep(0.2)
    p.stop()
    wait_applied_equal(c.nodes)
    for n in c.nodes:
        _age_all_but_last(n)
    deadline = time.monotonic() + 60
    while any((n.spec.data_dir / "commitlog" / f"{0:020d}").exists() for n in c.nodes):
        assert time.monotonic() < deadline, "retention did not delete the oldest segment"
        time.sleep(0.2)

    leader = wait_leader(c.nodes)
    victim = next(n for n in c.nodes if n is not leader)
    victim.kill()
    shutil.rmtree(victim.spec.data_dir)
    victim.start(env=c.env).wait_ready(120)
    wait_applied_equal(c.nodes)
    assert not (victim.spec.data_dir / "commitlog" / f"{0:020d}").exists()

    # the queue whose messages all expired continues at the same queue offset on every member
    leader = wait_leader(c.nodes)
    later = _send(leader, "Early", 0, 3, "later")
    assert [qo for qo, _, _ in later] == [len(early), len(early) + 1, len(early) + 2]
    wait_applied_equal(c.nodes)
    for n in c.nodes:
        got = [e for e in read_queue(n, "Early", 0) if e[0] >= len(early)]
        assert got == later, f"{n.spec.id} serves Early/0 differently"

    # every commit-log segment the new member has is byte-identical to the same segment on the others
    names = [p.name for p in _segments(victim)]
    assert len(names) >= 2
    for n in c.nodes:
        if n is victim:
            continue
        for name in names:
            mine = (victim.spec.data_dir / "commitlog" / name).read_bytes()
            theirs = (n.spec.data_dir / "commitlog" / name).read_bytes()
            assert mine == theirs, f"segment {name} differs between {victim.spec.id} and {n.spec.id}"

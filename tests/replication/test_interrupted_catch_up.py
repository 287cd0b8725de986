"""A rebuilding member killed in the middle of its start-up copy resumes the copy when it starts again.

The copy is rate-limited (``cluster.raft.catch_up_bytes_per_s``), so on a large store it runs for a long time; a
restart in the middle (a rolling update, an OOM kill, a node drain) must not leave the member refusing to start.
"""

from __future__ import annotations

import shutil
import time

from tests.replication.cluster_util import Producers, create_topic, wait_applied_equal, wait_leader
from tests.replication.test_raft_cluster import assert_byte_identical, check_acked, replica_views

TOPIC = "ReplT"  # the name replica_views reads
SLOW_COPY = {"catch_up_bytes_per_s": 128 * 1024}


def test_member_killed_mid_copy_resumes_and_converges(cluster_factory):
    c = cluster_factory(tuning=SLOW_COPY)
    create_topic(c.nodes, TOPIC, 4)
    p = Producers(c.nodes, TOPIC, n=4, body_size=1000, queues=4).start()
    p.wait_acked(1200)  # about 1.4 MB: several 256 KiB segments, ~10 s to copy at 128 KiB/s
    log = p.stop()  # writes during the copy would outrun its rate here
    leader = wait_leader(c.nodes)
    victim = next(n for n in c.nodes if n is not leader)
    victim.kill()
    shutil.rmtree(victim.spec.data_dir)
    victim.start(env=c.env)
    second_segment = victim.spec.data_dir / "commitlog" / f"{256 * 1024:020d}"
    marker = victim.spec.data_dir / "raft" / "catch-up.partial"
    deadline = time.monotonic() + 120
    while not second_segment.exists():
        assert time.monotonic() < deadline, "the copy did not get past its first segment"
        time.sleep(0.05)
    assert marker.exists(), "the copy is running, so its marker must be there"
    victim.kill()

    # with nobody to finish the copy from, it refuses to join (it would apply the log over half a copy)
    others = [n for n in c.nodes if n is not victim]
    for n in others:
        n.stop()
    victim.start(env=c.env)
    assert victim.proc.wait(120) != 0
    assert "start-up copy from its peers was interrupted and no peer is reachable" in victim.log_tail(60)
    assert marker.exists()
    c.restart(others)

    victim.start(env=c.env).wait_ready(180)
    assert not marker.exists()
    more = Producers(c.nodes, TOPIC, n=4, body_size=1000, queues=4, prefix="Q").start()
    more.wait_acked(200)
    log.acked.update(more.stop().acked)
    wait_applied_equal(c.nodes)
    check_acked(log, replica_views(c.nodes))
    assert_byte_identical(c.nodes, crashed=True)
    assert "resuming the interrupted copy" in victim.log_tail(400)

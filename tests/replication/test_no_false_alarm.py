"""No false CRITICAL: a follower that receives entries it already applied does not cry "diverged" (issue 11).

pysyncobj truncates a follower's log after ``prevLogIdx`` whenever the follower holds more entries, even when
they match (Raft truncates only on a conflict), and logs CRITICAL "truncating already-applied log entries ... state
machine may have diverged" when applied ones are among them. It happens whenever a leader re-sends a range the
follower already has: after a short stall of the follower, a reconnect, a next-index reset. raftmq skips the
already-applied entries that match (same index and term) before pysyncobj sees the message
(``ReplicatedLog``), so the CRITICAL is left for a real conflict. Here followers stall briefly (SIGSTOP) under a
steady load; afterwards no member may have logged the alarm, and the replicas are byte-identical.
"""

from __future__ import annotations

import time

from tests.replication.cluster_util import (
    Producers,
    create_topic,
    store_digests,
    wait_applied_equal,
    wait_leader,
)

ALARM = "truncating already-applied log entries"


def test_resent_applied_entries_raise_no_critical(cluster_factory):
    c = cluster_factory()
    create_topic(c.nodes, "Alarm", 4)
    p = Producers(c.nodes, "Alarm", n=4).start()
    try:
        p.wait_acked(200)
        for round_ in range(4):
            leader = wait_leader(c.nodes)
            follower = [n for n in c.nodes if n is not leader][round_ % 2]
            follower.freeze()
            time.sleep(1.0)  # a stall, shorter than an election timeout: the leader keeps sending to it
            follower.thaw()
            p.wait_acked(len(p.log.acked) + 200)
    finally:
        p.stop()
    wait_applied_equal(c.nodes)
    digests = [store_digests(n.spec.data_dir) for n in c.nodes]
    assert digests[0] == digests[1] == digests[2]
    for n in c.nodes:
        text = n.spec.log_path.read_text(errors="replace")
        assert ALARM not in text, f"{n.spec.id} logged the false alarm:\n" + "\n".join(
            line for line in text.splitlines() if ALARM in line)[:2000]

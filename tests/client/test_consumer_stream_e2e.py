"""The SDK's PullConsumer on a pull stream (issue 17, streaming consume), against real nodes.

* A caught-up consumer of 4 queues makes no PullMessage calls at all: one PullStream keeps every queue flowing,
  SQL filters included (the node's own RPC metrics are the witness).
* The member the stream reads from is SIGKILLed: the stream reopens on another member from the consumer's
  positions and every message arrives exactly as on the pull path (nothing skipped).
"""

from __future__ import annotations

from raftmq.client import Admin, Producer, PullConsumer
from tests.replication.cluster_util import wait_leader
from tests.support.metrics import metric_sum
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for


def _rpc_count(node, method: str) -> int:
    return int(metric_sum(node, "raftmq_rpc_latency_seconds_count", method=method))


def _drain(consumer: PullConsumer, want: int) -> list:
    got: list = []
    wait_for(lambda: got.extend(consumer.poll(timeout=0.5)) or len(got) >= want, timeout=60,
             what=f"{want} messages consumed")
    return got


def test_a_caught_up_consumer_reads_every_queue_on_one_stream(tmp_path):
    with running_nodes(tmp_path, 1) as (node,):
        with Admin(node.grpc_address) as admin:
            admin.create_topic("Flow", queues=4)
        with Producer(node.grpc_address) as p, \
                PullConsumer("flow-g", "Flow", node.grpc_address, start_from="first", sql="n >= 10") as c:
            c.start()
            assert c.poll(timeout=0.5) == []  # caught up: the stream is parked at the node
            for i in range(40):
                p.send("Flow", b"m%d" % i, properties={"n": str(i)}, queue_id=i % 4)
            got = _drain(c, 30)
            assert sorted(int(m.properties["n"]) for m in got) == list(range(10, 40))
            assert {m.queue_id for m in got} == {0, 1, 2, 3}
        assert _rpc_count(node, "PullStream") >= 1
        assert _rpc_count(node, "PullMessage") == 0


def test_the_stream_moves_to_another_member_when_its_member_dies(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        leader = wait_leader(nodes)
        follower = next(n for n in nodes if n is not leader)
        others = [n.grpc_address for n in nodes if n is not follower]
        with Admin(leader.grpc_address) as admin:
            admin.create_topic("Move", queues=2)
        with Producer([n.grpc_address for n in nodes]) as p, \
                PullConsumer("move-g", "Move", [follower.grpc_address, *others], start_from="first",
                             timeout=3, retry_timeout=30) as c:
            for i in range(50):
                p.send("Move", b"a%d" % i)
            first = _drain(c, 50)
            # reads (the queue lookup, then the stream: a stream's metric is recorded when it ends) go to the
            # first address given, the member we kill
            assert _rpc_count(follower, "GetQueueOffsets") >= 1
            follower.kill()
            for i in range(50):
                p.send("Move", b"b%d" % i)
            second = _drain(c, 50)
        bodies = [m.body for m in first + second]
        assert sorted(bodies) == sorted([b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(50)])

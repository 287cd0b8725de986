"""End to end through a real node process: produce, pull, long poll, queries, offsets, topics, HTTP endpoints."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from raftmq.v1 import raftmq_pb2 as pb
from tests.support.metrics import metric_sum, samples


def test_send_and_pull_round_trip(api):
    topic = api.topic("rt")
    r = api.send(topic, b"hello", tags="A", keys=["k1", "k2"], properties={"color": "red"})
    assert r.topic == topic and r.queue_id == 0 and r.queue_offset == 0
    assert len(r.msg_id) == 32 and r.uniq_key
    got = api.pull(topic)
    assert got.status == pb.FOUND and got.next_offset == 1 and got.max_offset == 1
    [m] = got.messages
    assert m.body == b"hello" and m.tags == "A" and list(m.keys) == ["k1", "k2"]
    assert m.properties["color"] == "red" and m.properties["CLUSTER"] == "DefaultCluster"
    assert m.msg_id == r.msg_id and m.uniq_key == r.uniq_key and m.physical_offset == r.physical_offset
    assert m.store_host == "127.0.0.1:10911"
    assert m.born_host.startswith("127.0.0.1:")


def test_send_without_queue_round_robins_over_writable_queues(api):
    topic = api.topic("rr", queues=3)
    queues = [api.send(topic, b"x", queue_id=None).queue_id for _ in range(6)]
    assert sorted(queues) == [0, 0, 1, 1, 2, 2]


def test_batch_is_contiguous_in_one_queue(api):
    topic = api.topic("batch")
    msgs = [pb.Message(topic=topic, body=f"m{i}".encode(), keys=[f"bk{i}"]) for i in range(10)]
    results = api.msg.SendBatch(pb.SendBatchRequest(messages=msgs), timeout=10).results
    api.settle(topic, results[0].queue_id, 10)
    assert len({r.queue_id for r in results}) == 1
    assert [r.queue_offset for r in results] == list(range(10))
    assert len({r.uniq_key for r in results}) == 10  # broker-made UNIQ_KEYs are distinct within a batch
    got = api.pull(topic, results[0].queue_id, 0, max_count=32)
    assert [m.body for m in got.messages] == [f"m{i}".encode() for i in range(10)]


def test_pull_with_tag_filter(api):
    topic = api.topic("tags")
    for i, tag in enumerate(["A", "B", "C", "A", "B"]):
        api.send(topic, f"{tag}{i}".encode(), tags=tag)
    api.settle(topic, 0, 5)
    got = api.pull(topic, tag_expression="A || C")
    assert got.status == pb.FOUND
    assert [m.body for m in got.messages] == [b"A0", b"C2", b"A3"]
    assert got.next_offset == 5
    got = api.pull(topic, tag_expression="Z", long_poll_timeout_ms=0)
    assert got.status == pb.NO_MATCHED_MSG and not got.messages and got.next_offset == 5


def test_pull_statuses_at_the_edges(api):
    topic = api.topic("edges")
    api.send(topic, b"one")
    api.settle(topic, 0, 1)
    got = api.pull(topic, offset=1, long_poll_timeout_ms=0)
    assert got.status == pb.NO_NEW_MSG and got.next_offset == 1
    got = api.pull(topic, offset=7)
    assert got.status == pb.OFFSET_OVERFLOW and got.next_offset == 1
    got = api.pull(topic, queue_id=2, offset=0, long_poll_timeout_ms=0)  # queue never written
    assert got.status == pb.NO_NEW_MSG and got.max_offset == 0
    got = api.pull(topic, queue_id=2, offset=3)
    assert got.status == pb.OFFSET_OVERFLOW and got.next_offset == 0


def test_long_poll_woken_by_a_new_message(api):
    topic = api.topic("lp")
    result: dict = {}

    def pull():
        result["resp"] = api.pull(topic, 1, 0, long_poll_timeout_ms=20_000)

    wakeups_before = metric_sum(api.node, "raftmq_long_poll_wakeups_total")
    t = threading.Thread(target=pull)
    t.start()
    time.sleep(0.5)  # let the pull park
    assert t.is_alive(), "the pull must wait for a message, not return at once"
    api.send(topic, b"wake up", queue_id=1)
    t.join(25)
    assert not t.is_alive()
    resp = result["resp"]
    assert resp.status == pb.FOUND and [m.body for m in resp.messages] == [b"wake up"]
    # Woken by the arrival, not found by a re-read at the end of the 20 s timeout.
    assert metric_sum(api.node, "raftmq_long_poll_wakeups_total") == wakeups_before + 1


def test_filtered_long_poll_skips_other_tags_and_waits_for_its_own(api):
    topic = api.topic("lpf")
    result: dict = {}

    def pull():
        result["resp"] = api.pull(topic, 0, 0, tag_expression="B", long_poll_timeout_ms=20_000)

    t = threading.Thread(target=pull)
    t.start()
    time.sleep(0.3)
    api.send(topic, b"not for you", tags="A")
    time.sleep(0.3)
    assert t.is_alive(), "a non-matching arrival must not end a filtered long poll"
    api.send(topic, b"yours", tags="B")
    t.join(25)
    resp = result["resp"]
    assert resp.status == pb.FOUND and [m.body for m in resp.messages] == [b"yours"] and resp.next_offset == 2


def test_long_poll_times_out_with_no_new_msg(api):
    topic = api.topic("lpt")
    resp = api.pull(topic, 0, 0, long_poll_timeout_ms=300)
    assert resp.status == pb.NO_NEW_MSG and resp.next_offset == 0


def test_many_parked_pulls_are_all_woken(api):
    """Waiters are futures, not threads: 50 parked pulls on one node, all released by one message each."""
    topic = api.topic("lpmany", queues=1)
    futures = [api.msg.PullMessage.future(
        pb.PullMessageRequest(topic=topic, queue_id=0, offset=0, long_poll_timeout_ms=20_000), timeout=30)
        for _ in range(50)]
    time.sleep(0.5)
    api.send(topic, b"all of you")
    responses = [f.result(timeout=25) for f in futures]
    assert all(r.status == pb.FOUND and r.messages[0].body == b"all of you" for r in responses)


def test_query_by_key_time_and_msg_id(api):
    topic = api.topic("query")
    before = int(time.time() * 1000) - 1000  # the index keeps store times in whole seconds (as RocketMQ's)
    r1 = api.send(topic, b"first", keys=["order-1"])
    r2 = api.send(topic, b"second", keys=["order-1", "other"], uniq_key="MY-UNIQ-1")
    api.settle(topic, 0, 2)
    found = api.msg.QueryMessageByKey(pb.QueryMessageByKeyRequest(topic=topic, key="order-1"), timeout=10).messages
    assert [m.body for m in found] == [b"first", b"second"]
    found = api.msg.QueryMessageByKey(pb.QueryMessageByKeyRequest(
        topic=topic, key="order-1", begin_timestamp=before, end_timestamp=r1.store_timestamp), timeout=10).messages
    assert b"first" in [m.body for m in found]
    future = int(time.time() * 1000) + 3_600_000
    none = api.msg.QueryMessageByKey(pb.QueryMessageByKeyRequest(
        topic=topic, key="order-1", begin_timestamp=future, end_timestamp=future + 1), timeout=10).messages
    assert list(none) == []
    view = api.msg.ViewMessage(pb.ViewMessageRequest(msg_id=r1.msg_id), timeout=10).message
    assert view.body == b"first" and view.physical_offset == r1.physical_offset
    view = api.msg.ViewMessage(pb.ViewMessageRequest(msg_id="MY-UNIQ-1", topic=topic), timeout=10).message
    assert view.body == b"second" and view.msg_id == r2.msg_id
    offsets = api.msg.GetQueueOffsets(pb.GetQueueOffsetsRequest(topic=topic), timeout=10).queues
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in offsets] == [(0, 0, 2), (1, 0, 0), (2, 0, 0), (3, 0, 0)]
    assert offsets[0].last_store_timestamp == r2.store_timestamp
    off = api.msg.SearchOffset(pb.SearchOffsetRequest(topic=topic, queue_id=0, timestamp=r2.store_timestamp),
                               timeout=10).offset
    assert off in (0, 1) if r1.store_timestamp == r2.store_timestamp else off == 1
    assert api.msg.SearchOffset(pb.SearchOffsetRequest(topic=topic, queue_id=0, timestamp=future),
                                timeout=10).offset == 2


def test_group_offsets(api):
    topic = api.topic("offsets")
    for _ in range(3):
        api.send(topic, b"x")
    api.settle(topic, 0, 3)
    empty = api.msg.FetchOffset(pb.FetchOffsetRequest(group="g1", topic=topic), timeout=10).offsets
    assert dict(empty) == {}
    api.msg.CommitOffset(pb.CommitOffsetRequest(group="g1", topic=topic, offsets={0: 2, 3: 0}), timeout=10)
    api.msg.CommitOffset(pb.CommitOffsetRequest(group="g1", topic=topic, offsets={0: 3}), timeout=10)
    got = api.msg.FetchOffset(pb.FetchOffsetRequest(group="g1", topic=topic), timeout=10).offsets
    assert dict(got) == {0: 3, 3: 0}
    assert dict(api.msg.FetchOffset(pb.FetchOffsetRequest(group="g2", topic=topic), timeout=10).offsets) == {}


def test_topic_admin(api):
    name = api.topic("admin", queues=2)
    topics = {t.name: t for t in api.admin.ListTopics(pb.ListTopicsRequest(), timeout=10).topics}
    assert topics[name].read_queue_nums == 2 and topics[name].perm == 6
    updated = api.admin.UpdateTopic(pb.UpdateTopicRequest(
        topic=pb.TopicConfig(name=name, read_queue_nums=8, write_queue_nums=8)), timeout=10).topic
    assert (updated.read_queue_nums, updated.write_queue_nums, updated.perm) == (8, 8, 6)
    api.send(name, b"q7", queue_id=7)
    updated = api.admin.UpdateTopic(pb.UpdateTopicRequest(topic=pb.TopicConfig(name=name, perm=4)), timeout=10).topic
    assert updated.perm == 4
    with pytest.raises(grpc.RpcError) as e:
        api.send(name, b"read only now")
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    api.admin.DeleteTopic(pb.DeleteTopicRequest(name=name), timeout=10)
    assert name not in {t.name for t in api.admin.ListTopics(pb.ListTopicsRequest(), timeout=10).topics}
    with pytest.raises(grpc.RpcError) as e:
        api.pull(name)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_cluster_status_and_transfer_leader(api):
    st = api.admin.ClusterStatus(pb.ClusterStatusRequest(), timeout=10)
    assert st.cluster_name == "DefaultCluster" and st.leader_id == "n0" and st.durability == "async"
    [m] = st.members
    assert m.id == "n0" and m.role == "standalone" and m.ready and m.healthy
    assert m.grpc_address == api.node.grpc_address
    with pytest.raises(grpc.RpcError) as e:
        api.admin.TransferLeader(pb.TransferLeaderRequest(), timeout=10)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "single-node" in e.value.details()


def test_health_ready_and_metrics(api):
    topic = api.topic("metrics")
    for _ in range(3):
        api.send(topic, b"0123456789")
    api.settle(topic, 0, 3)
    api.pull(topic, consumer_group="mg")
    assert api.node.http_get("/health") == (200, "ok\n")
    assert api.node.http_get("/ready")[0] == 200
    assert api.node.http_get("/nope")[0] == 404
    scraped = samples(api.node)

    def value(name, **labels):
        found = [s for s in scraped if s.name == name]
        assert found, f"{name} is not exported"
        return sum(s.value for s in found if all(s.labels.get(k) == v for k, v in labels.items()))

    assert value("rocketmq_messages_in_total", topic=topic) == 3
    assert value("rocketmq_throughput_in_total", topic=topic) == 30
    assert value("rocketmq_messages_out_total", topic=topic, consumer_group="mg") == 3
    assert value("rocketmq_throughput_out_total", topic=topic, consumer_group="mg") == 30
    assert value("raftmq_put_latency_seconds_count") >= 3
    assert value("raftmq_get_latency_seconds_count") >= 1
    assert value("raftmq_rpc_latency_seconds_count", method="SendMessage", code="OK") >= 3
    assert value("raftmq_node_ready") == 1
    assert value("rocketmq_storage_dispatch_behind_bytes") >= 0
    assert value("raftmq_commitlog_max_offset") > value("raftmq_commitlog_min_offset")
    assert value("raftmq_raft_has_leader") == 1 and value("raftmq_raft_is_leader") == 1
    assert value("raftmq_raft_term") == 0 and value("raftmq_raft_leader_changes_total") == 0
    # CPU by kernel thread name: the event loop (main), reput and the single node's committer are told apart
    threads = {s.labels["thread"] for s in scraped if s.name == "raftmq_thread_cpu_seconds_total"}
    assert {"main", "reput", "local-commit"} <= threads
    assert value("raftmq_thread_cpu_seconds_total", thread="main") > 0

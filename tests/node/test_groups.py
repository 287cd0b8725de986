"""A cluster of two Raft groups with one member each (issue 37, docs/design/scale-out.md): routes, sends and reads
for another group's queues relayed from any member, a FIFO message group on one queue of one group, a group down
failing fast with its name. The 6-process failover tests are in tests/replication/test_scale_out.py."""

from __future__ import annotations

import json
import time

import grpc
import pytest

from raftmq.routing import fifo_queue
from raftmq.v1 import raftmq_pb2 as pb
from tests.replication.cluster_util import admin, messaging, wait_leader
from tests.support.processes import group_specs, start_nodes, stop_all
from tests.support.waiting import wait_for

TOPIC = "orders"


def _start(base, **overrides) -> list:
    specs = group_specs(base, groups=2, members=1, cluster={"topic_reconcile_interval_s": 1}, **overrides)
    nodes = start_nodes([s for group in specs for s in group])
    try:
        for n in nodes:
            wait_leader([n])
    except BaseException:
        stop_all(nodes)
        raise
    return nodes


def _create(nodes, name: str) -> str:
    """``name`` in every group at once (the fan-out); MIXED: FIFO and plain messages alike."""
    admin(nodes[0]).CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(
        name=name, read_queue_nums=4, write_queue_nums=4, message_type="MIXED")), timeout=30)
    return name


@pytest.fixture(scope="module")
def shared_groups(tmp_path_factory):
    """Two groups of one member for the tests that stop nothing (each uses a topic of its own)."""
    nodes = _start(tmp_path_factory.mktemp("groups"))
    try:
        yield nodes
    finally:
        stop_all(nodes)


@pytest.fixture
def topic(shared_groups, request) -> str:
    return _create(shared_groups, "t-" + request.node.name.removeprefix("test_")[:40].replace("_", "-"))


@pytest.fixture
def two_groups(tmp_path):
    """Two groups of one member of this test's own (it stops one), with the topic ``TOPIC``."""
    nodes = _start(tmp_path)
    try:
        _create(nodes, TOPIC)
        yield nodes
    finally:
        stop_all(nodes)


def _send(node, topic: str = TOPIC, **fields) -> pb.SendResult:
    msg = pb.Message(topic=topic, body=b"b", **fields)
    return messaging(node).SendMessage(pb.SendMessageRequest(message=msg), timeout=20).result


def test_route_lists_every_group_with_its_queues_and_leader(shared_groups, topic):
    g0, g1 = shared_groups
    route = messaging(g1).QueryRoute(pb.QueryRouteRequest(topic=topic), timeout=20)
    assert [g.name for g in route.groups] == ["g0", "g1"]
    assert route.group == "g1" and route.answered_by == "g1-n0"
    for g, node in zip(route.groups, shared_groups, strict=True):
        assert g.available and g.has_topic and g.write_queue_nums == 4, g
        assert g.leader == node.grpc_address and list(g.endpoints) == [node.grpc_address]
    assert [g.store_host for g in route.groups] == ["127.0.0.1:10911", "127.0.0.1:10912"]


def test_a_send_for_another_group_is_stored_there_from_any_member(shared_groups, topic):
    g0, g1 = shared_groups
    r = _send(g0, topic, broker="g1", queue_id=2, uniq_key="K-other")
    assert (r.broker, r.queue_id) == ("g1", 2)
    assert r.msg_id.startswith("7F000001" + format(10912, "08X")), r.msg_id  # g1's STOREHOST: its own msgIds
    own = _send(g0, topic)  # no group named: the receiving member's own
    assert own.broker == "g0"
    # read back from g1 through g0 (relayed), and directly on g1
    for via in (g0, g1):
        pulled = messaging(via).PullMessage(pb.PullMessageRequest(topic=topic, queue_id=2, offset=r.queue_offset,
                                                                  broker="g1"), timeout=20)
        assert [m.uniq_key for m in pulled.messages] == ["K-other"]
    # g0's queues hold only its own message
    def g0_offsets():
        queues = messaging(g0).GetQueueOffsets(pb.GetQueueOffsetsRequest(topic=topic), timeout=20).queues
        return {q.queue_id: q.max_offset for q in queues}

    wait_for(lambda: sum(g0_offsets().values()) == 1, "g0's own message in its consume queue")
    assert g0_offsets() == {q: int(q == own.queue_id) for q in range(4)}


def test_offsets_live_in_the_queues_group(shared_groups, topic):
    g0, g1 = shared_groups
    messaging(g0).CommitOffset(pb.CommitOffsetRequest(group="cg", topic=topic, offsets={1: 7}, broker="g1"),
                               timeout=20)
    assert dict(messaging(g1).FetchOffset(pb.FetchOffsetRequest(group="cg", topic=topic), timeout=20).offsets) == {1: 7}
    assert dict(messaging(g0).FetchOffset(pb.FetchOffsetRequest(group="cg", topic=topic), timeout=20).offsets) == {}
    relayed = messaging(g0).FetchOffset(pb.FetchOffsetRequest(group="cg", topic=topic, broker="g1"), timeout=20)
    assert dict(relayed.offsets) == {1: 7}


def test_a_fifo_message_group_goes_to_one_queue_of_one_group(shared_groups, topic):
    seen: dict[str, set] = {}
    for i in range(12):
        mg = f"customer-{i % 4}"
        for node in shared_groups:  # whichever member takes it
            r = _send(node, topic, message_group=mg)
            seen.setdefault(mg, set()).add((r.broker, r.queue_id))
    for mg, where in seen.items():
        assert where == {fifo_queue(mg, ["g0", "g1"], 4)}, (mg, where)
    assert len({b for where in seen.values() for b, _ in where}) == 2  # these groups land in both groups


def test_unknown_group_is_refused_naming_the_groups(shared_groups, topic):
    with pytest.raises(grpc.RpcError) as e:
        _send(shared_groups[0], topic, broker="g7")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert "unknown group 'g7'" in e.value.details() and "g0, g1" in e.value.details()


def test_a_group_down_fails_fast_naming_it_and_the_other_keeps_writing(two_groups):
    g0, g1 = two_groups
    g1.kill()
    for _ in range(3):
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as e:
            _send(g0, broker="g1")
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value.details()
        assert "group g1 is unavailable" in e.value.details() and "group g0 is not affected" in e.value.details()
        assert time.monotonic() - started < 20  # answered, not cut by the call's deadline
    assert _send(g0).broker == "g0"
    route = messaging(g0).QueryRoute(pb.QueryRouteRequest(topic=TOPIC), timeout=20)
    down = {g.name: g for g in route.groups}["g1"]
    assert not down.available and "g1" in down.error
    assert admin(g0).ClusterStatus(pb.ClusterStatusRequest(), timeout=20).leader_id == "g0-n0"


def test_the_sdk_spreads_sends_over_the_groups_and_keeps_writing_when_one_is_down(two_groups):
    from raftmq.client import Producer, errors

    g0, g1 = two_groups
    for linger_ms in (0.1, 0):  # through each group's send stream, and unary
        with Producer([g0.grpc_address], retry_timeout=5, linger_ms=linger_ms) as p:  # the route names the rest
            results = [p.send(TOPIC, b"x") for _ in range(8)]
            assert {r.broker for r in results} == {"g0", "g1"}
            batch = p.send_batch(TOPIC, [b"a", b"b"], broker="g1")
            assert {(r.broker, r.queue_id) for r in batch} == {("g1", batch[0].queue_id)}
            r = p.send(TOPIC, b"f", message_group="customer-9")
            assert (r.broker, r.queue_id) == fifo_queue("customer-9", ["g0", "g1"], 4)
    g1.kill()
    with Producer([g0.grpc_address], retry_timeout=5) as p:
        assert {p.send(TOPIC, b"y").broker for _ in range(6)} == {"g0"}  # g1's queues skipped, g0 keeps writing
        with pytest.raises(errors.UnavailableError) as e:
            p.send(TOPIC, b"z", broker="g1")
        assert "group g1 is unavailable" in str(e.value)


def _topic_in(node, name: str):
    topics = admin(node).ListTopics(pb.ListTopicsRequest(), timeout=20).topics
    return next((t for t in topics if t.name == name), None)


def test_topic_admin_acts_on_every_group_idempotently_and_reconcile_repairs_a_missed_group(two_groups):
    g0, g1 = two_groups
    a = admin(g1)
    create = pb.CreateTopicRequest(topic=pb.TopicConfig(name="fan", read_queue_nums=3, write_queue_nums=3))
    outcomes = lambda r: [(o.group, o.outcome) for o in r.groups]  # noqa: E731
    assert outcomes(a.CreateTopic(create, timeout=30)) == [("g0", "created"), ("g1", "created")]
    assert outcomes(a.CreateTopic(create, timeout=30)) == [("g0", "exists"), ("g1", "exists")]
    assert _topic_in(g0, "fan").write_queue_nums == 3 and _topic_in(g1, "fan").write_queue_nums == 3
    other = pb.CreateTopicRequest(topic=pb.TopicConfig(name="fan", read_queue_nums=5, write_queue_nums=5))
    with pytest.raises(grpc.RpcError) as e:
        a.CreateTopic(other, timeout=30)
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS and "in group g0" in e.value.details()
    update = pb.UpdateTopicRequest(topic=pb.TopicConfig(name="fan", read_queue_nums=6, write_queue_nums=6))
    assert outcomes(a.UpdateTopic(update, timeout=30)) == [("g0", "updated"), ("g1", "updated")]
    assert _topic_in(g0, "fan").write_queue_nums == 6
    delete = pb.DeleteTopicRequest(name="fan")
    assert outcomes(a.DeleteTopic(delete, timeout=30)) == [("g0", "deleted"), ("g1", "deleted")]
    assert outcomes(a.DeleteTopic(delete, timeout=30)) == [("g0", "absent"), ("g1", "absent")]

    g1.kill()
    late = pb.CreateTopicRequest(topic=pb.TopicConfig(name="late", read_queue_nums=2, write_queue_nums=2))
    with pytest.raises(grpc.RpcError) as e:
        admin(g0).CreateTopic(late, timeout=30)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "group g1 is unavailable" in e.value.details() and "done: g0 created" in e.value.details()
    assert _topic_in(g0, "late") is not None
    g1.restart()
    wait_leader([g1])
    topic = wait_for(lambda: _topic_in(g1, "late"), "the reconcile pass creates the missed topic in g1", timeout=60)
    assert (topic.read_queue_nums, topic.write_queue_nums) == (2, 2)


def test_create_topics_acts_on_every_group_and_a_missed_update_is_repaired_by_the_reconcile_pass(two_groups):
    g0, g1 = two_groups
    a = admin(g1)
    names = [f"bulk-{i}" for i in range(3)]
    bulk = pb.CreateTopicsRequest(topics=[pb.TopicConfig(name=n, read_queue_nums=2, write_queue_nums=2)
                                          for n in names])
    outcomes = lambda r: [(o.group, o.outcome) for o in r.groups]  # noqa: E731
    first = a.CreateTopics(bulk, timeout=30)
    assert outcomes(first) == [("g0", "created"), ("g1", "created")]
    assert sorted(t.name for t in first.created) == names and not first.existing
    again = a.CreateTopics(bulk, timeout=30)  # idempotent: every group holds them with the same settings
    assert outcomes(again) == [("g0", "exists"), ("g1", "exists")]
    assert not again.created and sorted(again.existing) == names
    other = pb.CreateTopicsRequest(topics=[pb.TopicConfig(name="bulk-0", read_queue_nums=7, write_queue_nums=7)])
    with pytest.raises(grpc.RpcError) as e:
        a.CreateTopics(other, timeout=30)
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS and "in group g0 with other settings" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        a.CreateTopics(pb.CreateTopicsRequest(topics=bulk.topics, broker="g7"), timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "unknown group 'g7'" in e.value.details()

    g1.kill()
    update = pb.UpdateTopicRequest(topic=pb.TopicConfig(name="bulk-1", read_queue_nums=5, write_queue_nums=5))
    with pytest.raises(grpc.RpcError) as e:
        admin(g0).UpdateTopic(update, timeout=30)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "group g1 is unavailable" in e.value.details() and "done: g0 updated" in e.value.details()
    assert "reconcile pass updates it in the groups that missed the update" in e.value.details()
    late = pb.CreateTopicsRequest(topics=[pb.TopicConfig(name="bulk-late", read_queue_nums=3, write_queue_nums=3)])
    with pytest.raises(grpc.RpcError) as e:
        admin(g0).CreateTopics(late, timeout=30)
    assert "group g1 is unavailable" in e.value.details() and "done: g0 created" in e.value.details()
    g1.restart()
    wait_leader([g1])
    wait_for(lambda: (_topic_in(g1, "bulk-1") or pb.TopicConfig()).write_queue_nums == 5,
             "the reconcile pass brings g1's bulk-1 to g0's newer settings", timeout=60)
    assert _topic_in(g1, "bulk-1").read_queue_nums == 5
    wait_for(lambda: _topic_in(g1, "bulk-late"), "the reconcile pass creates the missed topic in g1", timeout=60)
    for node in two_groups:  # the others stay as they were created
        assert [(_topic_in(node, n).read_queue_nums, _topic_in(node, n).write_queue_nums)
                for n in ("bulk-0", "bulk-2")] == [(2, 2), (2, 2)]
    assert _topic_in(g0, "bulk-1").write_queue_nums == 5  # never undone by g1's older settings


def test_a_pull_consumer_group_shares_the_union_of_both_groups_queues(shared_groups, topic):
    from raftmq.client import Producer, PullConsumer

    g0, g1 = shared_groups
    with Producer([g0.grpc_address]) as p:
        sent = {p.send(topic, f"m{i}").uniq_key for i in range(40)}
    consumers = [PullConsumer("cg", topic, [g1.grpc_address], client_id=cid, start_from="first",
                              heartbeat_interval=0.3, long_poll=0.5) for cid in ("a", "b")]
    try:
        for c in consumers:
            c.start()

        def split():  # each owns 4 of the 8 queues of the union, together all of them
            owned = [{(b, q) for b, qs in c.assigned_by_group().items() for q in qs} for c in consumers]
            return owned if all(len(o) == 4 for o in owned) and len(owned[0] | owned[1]) == 8 else None

        owned = wait_for(split, "the union's 8 queues split 4 / 4 between the members", timeout=60)
        assert sorted(owned[0]) == [("g0", 0), ("g0", 1), ("g0", 2), ("g0", 3)]  # RocketMQ's sorted union, averaged
        got: dict[str, str] = {}
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            for c in consumers:
                for m in c.poll(0.2):
                    got[m.uniq_key] = m.broker
        assert set(got) == sent and set(got.values()) == {"g0", "g1"}
        for c in consumers:
            c.commit()
    finally:
        for c in consumers:
            c.close()
    for group, node in (("g0", g0), ("g1", g1)):  # offsets live in each queue's own group
        committed = messaging(node).FetchOffset(pb.FetchOffsetRequest(group="cg", topic=topic), timeout=20).offsets
        ends = {q.queue_id: q.max_offset for q in messaging(node).GetQueueOffsets(
            pb.GetQueueOffsetsRequest(topic=topic), timeout=20).queues}
        assert dict(committed) == ends and sum(ends.values()) > 0, group


def test_a_simple_consumer_receives_and_acks_across_both_groups(shared_groups, topic):
    from raftmq.client import Producer, SimpleConsumer

    g0, g1 = shared_groups
    with Producer([g0.grpc_address]) as p:
        sent = {p.send(topic, f"s{i}").uniq_key: None for i in range(20)}
    got: dict[str, str] = {}
    with SimpleConsumer("pop-cg", topic, [g1.grpc_address], await_duration=1) as c:
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            batch = c.receive(8, invisible_duration=30)
            c.ack(batch)  # each to the group that handed it out
            got.update({m.message.uniq_key: m.broker for m in batch})
        assert set(got) == set(sent) and set(got.values()) == {"g0", "g1"}
        assert c.receive(8, invisible_duration=30) == []  # every ack took: nothing comes back


def test_a_transaction_and_a_msg_id_are_found_in_their_group_from_any_member(shared_groups, topic):
    from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

    g0, g1 = shared_groups
    half = pb_grpc.TransactionServiceStub(g0.channel()).SendHalfMessage(pb.SendHalfMessageRequest(
        producer_group="pg", message=pb.Message(topic=topic, body=b"tx", broker="g1")), timeout=20)
    assert half.result.broker == "g1"
    tx = pb_grpc.TransactionServiceStub(g0.channel())  # ended through the other group's member: relayed
    tx.EndTransaction(pb.EndTransactionRequest(producer_group="pg", transaction_id=half.transaction_id,
                                               msg_id=half.result.msg_id, resolution=pb.TX_COMMIT), timeout=20)
    r = _send(g1, topic, uniq_key="K-view")
    assert r.broker == "g1"
    viewed = messaging(g0).ViewMessage(pb.ViewMessageRequest(msg_id=r.msg_id), timeout=20).message
    assert viewed.uniq_key == "K-view"


def test_the_transaction_producer_answers_the_check_backs_of_every_group(tmp_path):
    """Its halves are stored in both groups; each group's leader asks only the producers connected to it, so the
    SDK holds a check stream to each group (learnt from the route), though it was given only g0's address."""
    from raftmq.client.transaction_producer import TransactionProducer, TransactionState

    nodes = _start(tmp_path, store={"transaction_timeout_ms": 600, "transaction_check_interval_ms": 100,
                                    "transaction_check_max": 30})
    try:
        g0, g1 = nodes
        topic = _create(nodes, "tx-groups")
        asked: list[str] = []

        def checker(view):
            asked.append(view.uniq_key)
            return TransactionState.COMMIT

        with TransactionProducer([g0.grpc_address], group="pg-groups", checker=checker) as p:
            halves = {b: p.send_in_transaction(topic, f"in {b}", broker=b,
                                               local_tx=lambda half: TransactionState.UNKNOWN).half
                      for b in ("g0", "g1")}
            assert {b: h.send_result.broker for b, h in halves.items()} == {"g0": "g0", "g1": "g1"}
            wait_for(lambda: {h.transaction_id for h in halves.values()} <= set(asked),
                     "the check-backs of both groups' leaders", timeout=60)

        def committed(broker: str) -> list[bytes]:
            return [m.body for q in range(4) for m in messaging(g0).PullMessage(pb.PullMessageRequest(
                topic=topic, queue_id=q, offset=0, broker=broker), timeout=20).messages]

        for b in ("g0", "g1"):  # each group committed its own half, in its own queues
            assert wait_for(lambda b=b: committed(b), f"the message committed in {b}") == [f"in {b}".encode()]
    finally:
        stop_all(nodes)


def test_topic_describe_shows_each_groups_queues(two_groups):
    import json
    import subprocess
    import sys

    from tests.support.processes import REPO_ROOT

    g0, g1 = two_groups
    _send(g0, broker="g1", queue_id=3)
    wait_for(lambda: sum(q.max_offset for q in messaging(g1).GetQueueOffsets(
        pb.GetQueueOffsetsRequest(topic=TOPIC), timeout=20).queues) == 1, "g1's message dispatched")
    env = {"PYTHONPATH": str(REPO_ROOT / "proto"), "PATH": "/usr/bin:/bin"}
    run = lambda *a: subprocess.run([sys.executable, "-m", "raftmq.client", "--server", g0.grpc_address, "topic",  # noqa: E731
                                     "describe", TOPIC, *a], cwd=REPO_ROOT, capture_output=True, text=True,
                                    timeout=60, env=env)
    out = run("--json")
    assert out.returncode == 0, out.stderr
    described = json.loads(out.stdout)
    queues = {(q["group"], q["queue_id"]): q["max_offset"] for q in described["queues"]}
    assert len(queues) == 8 and queues[("g1", 3)] == 1 and sum(queues.values()) == 1
    text = run()
    assert text.returncode == 0 and "Group" in text.stdout and "g1" in text.stdout, text.stdout
    g1.kill()
    down = run()
    assert down.returncode == 0 and "group g1: group g1 is unavailable" in down.stdout, down.stdout


def test_cluster_status_lists_every_group(shared_groups, topic):
    import subprocess
    import sys

    from tests.support.processes import REPO_ROOT

    g0, g1 = shared_groups
    env = {"PYTHONPATH": str(REPO_ROOT / "proto"), "PATH": "/usr/bin:/bin"}

    def status(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "raftmq.client", "--server", g0.grpc_address, "cluster",
                               "status", *extra], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, env=env)

    # issue 38: one table, a row per member of every group (g1's asked through g0), each naming its group
    out = status()
    assert out.returncode == 0, out.stderr
    rows = {line.split("|")[2].strip(): [c.strip() for c in line.split("|")[1:-1]]
            for line in out.stdout.splitlines() if line.startswith("| g")}
    assert set(rows) == {"g0-n0", "g1-n0"}, out.stdout
    assert rows["g1-n0"][:4] == ["g1", "g1-n0", g1.grpc_address, "Leader"], out.stdout
    assert rows["g0-n0"][0] == "g0" and rows["g1-n0"][-1] == "running", out.stdout
    assert "leaders: g0: g0-n0, g1: g1-n0" in out.stdout, out.stdout
    as_json = json.loads(status("--json").stdout)
    assert [(g["group"], [m["id"] for m in g["members"]]) for g in as_json["groups"]] == [
        ("g0", ["g0-n0"]), ("g1", ["g1-n0"])]
    narrowed = status("--group", "g1")
    assert narrowed.returncode == 0 and "g1-n0" in narrowed.stdout and "g0-n0" not in narrowed.stdout, narrowed
    unknown = status("--group", "g7")
    assert unknown.returncode == 3 and "unknown group 'g7'" in unknown.stderr and "g0, g1" in unknown.stderr, unknown


def test_the_async_producer_routes_like_the_blocking_one(shared_groups, topic):
    import asyncio

    from raftmq.client import AsyncProducer

    async def run():
        async with AsyncProducer([shared_groups[0].grpc_address]) as p:
            spread = {(await p.send(topic, b"a")).broker for _ in range(6)}
            named = await p.send_batch(topic, [b"x", b"y"], broker="g1")
            fifo = await p.send(topic, b"f", message_group="customer-3")
            return spread, named, fifo

    spread, named, fifo = asyncio.run(run())
    assert spread == {"g0", "g1"} and {r.broker for r in named} == {"g1"}
    assert (fifo.broker, fifo.queue_id) == fifo_queue("customer-3", ["g0", "g1"], 4)


def test_a_member_with_another_group_list_is_named_in_the_route(tmp_path):
    import copy

    specs = group_specs(tmp_path, groups=2, members=1)
    other = copy.deepcopy(specs[1][0].overrides["cluster"]["groups"])
    other[0]["store_host"] = "127.0.0.1:10999"  # g1's member was given another list (a half-rolled-out change)
    specs[1][0].overrides["cluster"]["groups"] = other
    nodes = start_nodes([specs[0][0], specs[1][0]])
    try:
        for n in nodes:
            wait_leader([n])
        route = messaging(nodes[0]).QueryRoute(pb.QueryRouteRequest(), timeout=20)
        g1 = {g.name: g for g in route.groups}["g1"]
        assert not g1.available and "has another cluster.groups list" in g1.error, g1
    finally:
        stop_all(nodes)


def _cli(node, *args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "raftmq.client", "--server", node.grpc_address, *args],
                          capture_output=True, text=True, timeout=60)


def test_group_settings_and_an_offset_reset_act_in_every_group(shared_groups, topic):
    from raftmq.client import Producer
    from raftmq.client.consumer_group import describe_consumer_group, update_consumer_group

    g0, g1 = shared_groups
    settings = update_consumer_group([g1.grpc_address], "cg-every", max_delivery_attempts=7)
    assert settings.max_delivery_attempts == 7
    for node in shared_groups:  # the settings a member answers with are its own group's
        described = admin(node).DescribeConsumerGroup(pb.DescribeConsumerGroupRequest(group="cg-every"), timeout=20)
        assert (described.settings.max_delivery_attempts, described.settings.source) == (7, "group settings"), node
    with Producer([g0.grpc_address]) as p:
        brokers = {p.send(topic, f"m{i}").broker for i in range(16)}
    assert brokers == {"g0", "g1"}
    out = _cli(g0, "group", "reset-offsets", "cg-every", topic, "--to-offset", "1000000", "--json")
    assert out.returncode == 0, out.stderr
    reset = json.loads(out.stdout)["groups"]
    for group, node in (("g0", g0), ("g1", g1)):  # each group reset its own queues, to their ends (clamped)
        ends = {str(q.queue_id): q.max_offset for q in messaging(node).GetQueueOffsets(
            pb.GetQueueOffsetsRequest(topic=topic), timeout=20).queues}
        assert reset[group] == ends and sum(ends.values()) > 0, (group, reset)
        committed = messaging(node).FetchOffset(pb.FetchOffsetRequest(group="cg-every", topic=topic), timeout=20)
        assert {str(q): o for q, o in committed.offsets.items()} == ends, group
    described = describe_consumer_group([g1.grpc_address], "cg-every")  # one view: both groups' queues
    assert sorted((q.broker, q.queue_id) for q in described.queues) == [(g, q) for g in ("g0", "g1") for q in range(4)]
    assert all(q.committed and q.lag == 0 for q in described.queues), described.queues
    assert described.settings.max_delivery_attempts == 7


def test_a_settings_change_with_a_group_down_fails_naming_it_and_keeps_the_others(two_groups):
    from raftmq.client.consumer_group import update_consumer_group
    from raftmq.client.errors import RaftmqError

    g0, g1 = two_groups
    g1.kill()
    with pytest.raises(RaftmqError) as e:
        update_consumer_group([g0.grpc_address], "cg-down", fifo=True, retry_timeout=5)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE, e.value
    assert "group g1 is unavailable" in str(e.value) and "done in: g0" in str(e.value), e.value
    described = admin(g0).DescribeConsumerGroup(pb.DescribeConsumerGroupRequest(group="cg-down", broker="g0"),
                                                timeout=20)  # g0 kept its part
    assert described.settings.fifo and described.settings.source == "group settings"


def test_access_users_and_rules_are_changed_in_every_group(tmp_path):
    from raftmq.client.acl import AclAdmin
    from raftmq.client.errors import NotFoundError
    from raftmq.client.security import ClientSecurity

    security = {"auth_enabled": True, "auth_admin_access_key": "root", "auth_admin_secret_key": "root-secret-1"}
    specs = group_specs(tmp_path, groups=2, members=1, security=security, cluster={"secret": "cluster-secret"})
    nodes = start_nodes([s for group in specs for s in group])
    root = ClientSecurity(access_key="root", secret_key="root-secret-1")
    try:
        g0, g1 = nodes
        with AclAdmin([g0.grpc_address], security=root) as a0, AclAdmin([g1.grpc_address], security=root) as a1:
            a0.put_user("alice", "alice-secret-1")
            a0.add_rule("alice", "allow", ["PUB"], ["topic:orders-*"])
            a1.add_rule("alice", "allow", ["SUB"], ["group:billing"])
            a0.add_rule("alice", "allow", ["PUB"], ["topic:orders-*"])  # already in every group: nothing added
            for acl in (a0, a1):
                [alice] = [u for u in acl.list_users() if u.access_key == "alice"]
                assert [(r.actions, r.resources) for r in alice.rules] == [(("PUB",), ("topic:orders-*",)),
                                                                           (("SUB",), ("group:billing",))]
            a1.remove_rule("alice", 0)  # the rule g1 has at 0, by value in every group
            for acl in (a0, a1):
                [alice] = [u for u in acl.list_users() if u.access_key == "alice"]
                assert [r.actions for r in alice.rules] == [("SUB",)]
            a1.delete_user("alice")
            assert all("alice" not in [u.access_key for u in acl.list_users()] for acl in (a0, a1))
            with pytest.raises(NotFoundError):  # no group has it: a typo is still an error
                a0.delete_user("alice")

            # issue 38: `acl user list` and `acl policy list` show every group's users, each line naming its group,
            # and warn of a user the groups disagree on (a change that reached only g1)
            a0.put_user("carol", "carol-secret-1")
            a0.add_rule("carol", "allow", ["PUB"], ["topic:a"])
            from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

            signed = root.channel(g0.grpc_address, [])
            pb_grpc.AclServiceStub(signed).PutAclUser(pb.PutAclUserRequest(
                access_key="bob", secret_key="bob-secret-1", broker="g1"), timeout=20)
            signed.close()
            assert "bob" in [u.access_key for u in a0.list_users(group="g1")]
            assert "bob" not in [u.access_key for u in a0.list_users(group="g0")]
        import os
        import subprocess
        import sys

        env = {**os.environ, "RAFTMQ_ACCESS_KEY": "root", "RAFTMQ_SECRET_KEY": "root-secret-1"}

        def cli(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "raftmq.client", "--server", g0.grpc_address, *args],
                                  capture_output=True, text=True, timeout=60, env=env)

        users = cli("acl", "user", "list")
        assert users.returncode == 0, users.stderr
        lines = users.stdout.splitlines()
        assert "g1\tbob\t0 rule(s)\tnetworks: any" in lines and not any(line.startswith("g0\tbob") for line in lines)
        assert {line.split("\t")[0] for line in lines if "\tcarol\t" in line} == {"g0", "g1"}, lines
        assert "user bob differs between groups (g0: absent, g1: present)" in users.stderr, users.stderr
        rules = cli("acl", "policy", "list", "carol", "--json")
        assert rules.returncode == 0, rules.stderr
        assert sorted(u["group"] for u in json.loads(rules.stdout)) == ["g0", "g1"], rules.stdout
        g1.kill()
        down = cli("acl", "user", "list", "--timeout", "3")
        assert down.returncode == 5 and "group g1:" in down.stderr and "listed: g0" in down.stderr, down
        assert "g0\tcarol\t1 rule(s)" in down.stdout, down.stdout
    finally:
        stop_all(nodes)


def test_dlq_lists_every_groups_dead_letters(shared_groups):
    g0, g1 = shared_groups
    dlq = "%DLQ%cg-dead"
    admin(g0).CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(name=dlq, read_queue_nums=1,
                                                                      write_queue_nums=1)), timeout=30)
    for group in ("g0", "g1"):  # a dead letter stays in the group that held the message
        _send(g0, dlq, broker=group, queue_id=0, uniq_key=f"dead-in-{group}")
    out = _cli(g1, "dlq", "list", "cg-dead", "--json")
    assert out.returncode == 0, out.stderr
    assert sorted((m["uniq_key"], m["broker"]) for m in map(json.loads, out.stdout.splitlines())) == [
        ("dead-in-g0", "g0"), ("dead-in-g1", "g1")]
    table = _cli(g0, "dlq", "list", "cg-dead")
    assert table.returncode == 0 and "Group" in table.stdout and "dead-in-g0" in table.stdout, table


def test_status_watch_shows_events_of_every_group(two_groups):
    """Issue 38: `cluster status --watch` through g0 reports g1 going away, naming the group."""
    import subprocess
    import sys
    import threading

    from tests.support.processes import REPO_ROOT

    g0, g1 = two_groups
    env = {"PYTHONPATH": str(REPO_ROOT / "proto"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-m", "raftmq.client", "--server", g0.grpc_address, "cluster", "status",
                             "--watch", "0.3", "--timeout", "3"], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    try:
        wait_for(lambda: any("g1 leader g1-n0: g1-n0 leader running" in line for line in lines),
                 "a first look at both groups", timeout=60)
        assert any(line.startswith("| g1 ") for line in lines), lines
        g1.kill()
        wait_for(lambda: any(line.startswith("event: group g1 unavailable (") for line in lines),
                 "the event naming g1", timeout=60)
        assert proc.poll() is None, lines  # it keeps watching
    finally:
        proc.terminate()
        proc.wait(30)


def test_every_metric_carries_the_members_group(shared_groups, topic):
    """Issue 38: each member's /metrics is its group's: every sample has group=<its group>, so dashboards and
    alerts aggregate per group (raftmq_consumer_group_members names the consumer group consumer_group)."""
    from tests.support.metrics import samples

    _send(shared_groups[0], topic, broker="g1")
    for node, group in zip(shared_groups, ("g0", "g1"), strict=True):
        found = samples(node)
        assert {s.name for s in found} >= {"raftmq_raft_term", "raftmq_node_ready", "raftmq_rpc_latency_seconds_count"}
        assert {s.labels.get("group") for s in found} == {group}, {s.name for s in found
                                                                   if s.labels.get("group") != group}


def test_console_shows_every_group_and_each_topics_queues_per_group(shared_groups, topic):
    """Issue 38: g0's console lists both groups, shows g1's members on g1's cluster page (asked through g0), and a
    topic's queues in both groups."""
    import re

    g0, g1 = shared_groups
    _send(g0, topic, broker="g1", queue_id=3)

    def cells(text: str, table_id: str) -> list[list[str]]:
        body = text[text.index(f'<table id="{table_id}">'):]
        body = body[:body.index("</table>")]
        return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
                for row in re.findall(r"<tr>(.*?)</tr>", body) if "<td" in row]

    status, text = g0.http_get("/ui/cluster")
    assert status == 200, text[:300]
    assert [r[:4] for r in cells(text, "groups")] == [["g0 (this node&#x27;s group)", "g0-n0", "1 / 1", "ok"],
                                                      ["g1", "g1-n0", "1 / 1", "ok"]], text
    assert '<a href="/ui/cluster?group=g1">g1</a>' in text
    status, text = g0.http_get("/ui/cluster?group=g1")
    assert status == 200 and "<h1>Cluster: group g1</h1>" in text, text[:500]
    members = cells(text, "members")
    assert [(r[0], r[1], r[12]) for r in members] == [("g1-n0", "leader", g1.grpc_address)], members
    status, text = g0.http_get("/ui/cluster?group=g7")
    assert status == 404 and "unknown group" in text and "g0, g1" in text, text[:500]

    def queues() -> list[list[str]]:
        status, text = g0.http_get(f"/ui/topics/{topic}")
        assert status == 200, text[:300]
        return [r[:5] for r in cells(text, "queues")]

    wait_for(lambda: ["g1", "3", "0", "1", "1"] in queues(), "g1's queue 3 holding the message, shown by g0")
    assert sorted({(r[0], r[1]) for r in queues()}) == [(g, str(q)) for g in ("g0", "g1") for q in range(4)]

    # a consumer group's page: its queues in both groups (asked through g0 from each group's leader)
    for broker, offsets in (("g0", {0: 0}), ("g1", {3: 1})):
        messaging(g0).CommitOffset(pb.CommitOffsetRequest(group="cg-console", topic=topic, offsets=offsets,
                                                          broker=broker), timeout=20)
    status, text = g0.http_get("/ui/groups/cg-console")
    assert status == 200, text[:500]
    rows = cells(text, "group-queues")
    assert ["g1", topic, "3", "-", "1", "1", "0"] in [r[:7] for r in rows], rows
    assert {r[0] for r in rows} == {"g0", "g1"}, rows
def test_a_group_made_read_only_takes_no_sends_the_others_keep_writing(shared_groups, topic):
    """issue 38's drain before a group is removed: `topic update --group g1 --perm r` changes g1's copy only; the
    SDK's round robin skips it (as RocketMQ's producer picks writable queues only), a send naming it is refused
    naming the group, and its messages stay readable."""
    from raftmq.client import Producer, errors

    g0, g1 = shared_groups
    kept = _send(g0, topic, broker="g1", queue_id=0, uniq_key="K-before-drain")
    out = _cli(g0, "topic", "update", topic, "--perm", "r", "--group", "g1")
    assert out.returncode == 0, out.stderr
    assert "perm r" in out.stdout and "in group g1" in out.stdout, out.stdout
    perms = {g.name: g.perm for g in messaging(g0).QueryRoute(pb.QueryRouteRequest(topic=topic), timeout=20).groups}
    assert perms == {"g0": 6, "g1": 4}
    with Producer([g0.grpc_address], retry_timeout=5) as p:
        assert {p.send(topic, b"x").broker for _ in range(8)} == {"g0"}
        with pytest.raises(errors.RaftmqError) as e:
            p.send(topic, b"y", broker="g1")
    assert "not writable in group g1" in str(e.value)
    pulled = messaging(g0).PullMessage(pb.PullMessageRequest(topic=topic, queue_id=0, offset=kept.queue_offset,
                                                             broker="g1"), timeout=20)
    assert [m.uniq_key for m in pulled.messages] == ["K-before-drain"]
    bad = _cli(g0, "topic", "update", topic, "--perm", "r", "--group", "g7")
    assert bad.returncode != 0 and "unknown group 'g7'" in bad.stderr, bad.stderr

"""Pop consumption against real node processes: receive/ack/nack, redelivery, retries into the DLQ, FIFO message
groups, SQL92 on pull and receive, stale and forged handles, send_back, reset-offsets; and a leader SIGKILL with 3
members (unacked messages come back on the new leader, acked ones never)."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from raftmq.client import (
    Admin,
    ConsumeResult,
    Producer,
    PullConsumer,
    PushConsumer,
    SimpleConsumer,
    StaleReceiptHandleError,
)
from raftmq.client.errors import InvalidArgumentError, RaftmqError
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.support.processes import node_specs, start_nodes, stop_all
from tests.support.waiting import wait_for

FAST = {"max_delivery_attempts": 3, "retry_backoff": "1s"}
NODE = {"group_policies": {g: FAST for g in ("retry", "dlq", "simple", "fifo", "back", "back-pull", "cli")}}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    nodes = start_nodes(node_specs(tmp_path_factory.mktemp("pop"), 1, node=NODE))
    yield nodes[0]
    stop_all(nodes)


def make_topic(node, name: str, queues: int = 2, message_type: str = "NORMAL") -> str:
    with Admin(node.grpc_address) as admin:
        admin.create_topic(name, queues=queues, message_type=message_type)
    return name


def wait_dispatched(node, topic: str, count: int) -> None:
    """Until ``count`` messages are in the topic's queues: an acknowledged send is in the commit log at once and in
    its queue a moment later (dispatch), and a receive that does not wait (await_duration=0) sees only those."""
    with Admin(node.grpc_address) as admin:
        wait_for(lambda: sum(q.max_offset for q in admin.queue_offsets(topic)) >= count,
                 f"{count} messages dispatched to {topic}'s queues")


def receive_through_failover(consumer, out: list, n: int, invisible: float) -> bool:
    """One receive that tolerates the election window (no leader yet, the dead one unreachable)."""
    try:
        out.extend(consumer.receive(n, invisible))
    except RaftmqError:
        pass
    return True


def dead_letters(node, group: str, count: int) -> list:
    seen: list = []
    with Admin(node.grpc_address) as admin:
        wait_for(lambda: any(t.name == "%DLQ%" + group for t in admin.list_topics(include_system=True)),
                 f"%DLQ%{group} created", 60)
    with PullConsumer("dlq-reader-" + group, "%DLQ%" + group, node.grpc_address, start_from="first",
                      auto_commit=False) as c:
        wait_for(lambda: seen.extend(c.poll(0.5)) or len(seen) >= count, f"{count} dead letters of {group}", 60)
    return seen


def test_handler_failing_n_times_sees_exactly_n_plus_1_deliveries(node):
    topic = make_topic(node, "PopRetry")
    with Producer(node.grpc_address) as p:
        for i in range(4):
            p.send(topic, f"r{i}", properties={"fail": str(i % 3)})  # fails 0, 1 or 2 times before succeeding
    deliveries: dict[str, list[int]] = {}
    lock = threading.Lock()

    def listener(m):
        with lock:
            seen = deliveries.setdefault(m.text, [])
            seen.append(m.delivery_attempt)
            fails = int(m.message.properties["fail"])
            return ConsumeResult.FAILURE if len(seen) <= fails else ConsumeResult.SUCCESS

    push = PushConsumer("retry", topic, listener, node.grpc_address, concurrency=2, invisible_duration=20)
    with push:
        wait_for(lambda: all(len(deliveries.get(f"r{i}", ())) == i % 3 + 1 for i in range(4)),
                 "every message consumed after its failures", 60)
    assert not push.errors
    for i in range(4):
        assert deliveries[f"r{i}"] == list(range(1, i % 3 + 2)), "attempts count up by one per redelivery"
    # nothing is left in flight: a receive that waits past every back-off gets nothing back
    with SimpleConsumer("retry", topic, node.grpc_address, await_duration=3) as c:
        assert c.receive(32, 5) == []
    _, metrics = node.http_get("/metrics")
    assert 'rocketmq_consumer_acked_messages_total{cluster="DefaultCluster",consumer_group="retry"' in metrics
    acked = [line for line in metrics.splitlines()
             if line.startswith("rocketmq_consumer_acked_messages_total") and 'consumer_group="retry"' in line]
    assert acked and acked[0].endswith(" 4.0")
    inflight = [line for line in metrics.splitlines()
                if line.startswith("rocketmq_consumer_inflight_messages") and 'consumer_group="retry"' in line]
    assert inflight and all(line.endswith(" 0.0") for line in inflight)


def test_message_failing_forever_lands_in_the_dlq_with_its_attempts(node):
    topic = make_topic(node, "PopDlq")
    with Producer(node.grpc_address) as p:
        sent = p.send(topic, "poison", tags="T", keys="k1", properties={"color": "red"})
        p.send(topic, "fine")
    attempts: list[int] = []

    def listener(m):
        if m.text == "poison":
            attempts.append(m.delivery_attempt)
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS

    with PushConsumer("dlq", topic, listener, node.grpc_address, concurrency=2, invisible_duration=20):
        [dead] = dead_letters(node, "dlq", 1)
    assert attempts == [1, 2, 3], "max_delivery_attempts=3 deliveries, then the DLQ"
    assert dead.text == "poison" and dead.topic == "%DLQ%dlq"
    assert dead.tags == "T" and dead.keys == ["k1"] and dead.properties["color"] == "red"
    assert dead.uniq_key == sent.uniq_key
    assert dead.properties["RETRY_TOPIC"] == topic
    assert dead.properties["DLQ_DELIVERY_ATTEMPTS"] == "3"
    assert dead.properties["DLQ_ORIGIN_QUEUE_ID"] == str(sent.queue_id)
    assert dead.properties["DLQ_ORIGIN_QUEUE_OFFSET"] == str(sent.queue_offset)
    assert dead.reconsume_times == 3


def test_invisible_message_comes_back_after_its_deadline_and_stale_handles_are_refused(node):
    topic = make_topic(node, "PopSimple", queues=1)
    with Producer(node.grpc_address) as p:
        p.send(topic, "a")
        p.send(topic, "b")
    wait_dispatched(node, topic, 2)
    with SimpleConsumer("simple", topic, node.grpc_address, await_duration=0) as c:
        first: list = []  # the sends are acknowledged before reput makes them receivable: gather until both came
        wait_for(lambda: first.extend(c.receive(2, 60)) or len(first) >= 2, "a and b received", 30)
        assert sorted(m.text for m in first) == ["a", "b"]
        assert {m.delivery_attempt for m in first} == {1}
        a, b = sorted(first, key=lambda m: m.text)
        c.ack(a)
        with pytest.raises(StaleReceiptHandleError, match="stale"):
            c.ack(a)
        assert c.receive(2, 60) == [], "b is invisible until its deadline"
        short = c.change_invisible_duration(b, 1)  # deadline in 1 s: then it comes back by itself
        again = wait_for(lambda: c.receive(2, 60), "b visible again after its invisible time", 30)
        assert [(m.text, m.delivery_attempt) for m in again] == [("b", 2)]
        assert time.time() * 1000 >= short.invisible_until
        for stale in (b, short):  # the handles of the first delivery are stale after the redelivery
            with pytest.raises(StaleReceiptHandleError):
                c.ack(stale)
        longer = c.change_invisible_duration(again[0], 60)
        with pytest.raises(StaleReceiptHandleError):
            c.ack(again[0])  # replaced by the change
        c.ack(longer)
        forged = longer.receipt_handle[:-4] + ("AAAA" if not longer.receipt_handle.endswith("AAAA") else "BBBB")
        with pytest.raises(InvalidArgumentError, match="not issued by this cluster"):
            c.ack(type(longer)(longer.message, forged, 1, 0))
    with SimpleConsumer("other-group", topic, node.grpc_address) as other, pytest.raises(InvalidArgumentError,
                                                                                         match="belongs to group"):
        other.ack(longer)


def test_bad_requests_get_clear_errors(node):
    topic = make_topic(node, "PopBad", queues=1)
    stub = pb_grpc.MessagingServiceStub(node.channel())
    with pytest.raises(grpc.RpcError) as e:
        stub.ReceiveMessage(pb.ReceiveMessageRequest(group="g", topic=topic, sql_expression="a > 'x'"), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "position 2" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        stub.PullMessage(pb.PullMessageRequest(topic=topic, sql_expression="a BETWEEN 1"), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "position 11" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        stub.ReceiveMessage(pb.ReceiveMessageRequest(group="g", topic=topic, invisible_duration_ms=10), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "invisible_duration_ms" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        stub.AckMessage(pb.AckMessageRequest(group="g", topic=topic, receipt_handles=["not a handle"]), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "receipt handle" in e.value.details()


def test_sql92_selects_on_properties_in_pull_and_receive(node):
    topic = make_topic(node, "PopSql", queues=1)
    with Producer(node.grpc_address) as p:
        for i in range(6):
            p.send(topic, f"s{i}", tags="A" if i % 2 else "B", properties={"a": str(i)})
    wait_dispatched(node, topic, 6)
    expr = "(TAGS is not null and TAGS in ('A', 'B')) and (a is not null and a between 0 and 3)"
    stub = pb_grpc.MessagingServiceStub(node.channel())
    resp = stub.PullMessage(pb.PullMessageRequest(topic=topic, sql_expression=expr, max_count=32), timeout=10)
    assert [m.body for m in resp.messages] == [b"s0", b"s1", b"s2", b"s3"]
    with SimpleConsumer("sql", topic, node.grpc_address, sql="a > 3 AND TAGS = 'A'", await_duration=0) as c:
        assert [m.text for m in c.receive(32, 10)] == ["s5"]


def test_fifo_message_groups_in_order_one_at_a_time_under_two_consumers(node):
    topic = make_topic(node, "PopFifo", queues=4, message_type="FIFO")
    groups, per_group = 4, 6
    with Producer(node.grpc_address) as p:
        for i in range(per_group):
            for g in range(groups):
                p.send(topic, f"G{g}-{i}", message_group=f"G{g}")
    received: dict[str, list[int]] = {f"G{g}": [] for g in range(groups)}
    done: dict[str, set[int]] = {f"G{g}": set() for g in range(groups)}
    violations: list[str] = []
    lock = threading.Lock()
    failed_once: set[str] = set()
    stop = threading.Event()

    def run(name: str) -> None:
        with SimpleConsumer("fifo", topic, node.grpc_address, fifo=True, await_duration=1) as c:
            while not stop.is_set():
                for m in c.receive(8, 20):
                    group, i = m.text.split("-")
                    i = int(i)
                    with lock:
                        if i > 0 and i - 1 not in done[group]:
                            violations.append(f"{name} got {m.text} before {group}-{i - 1} was acked")
                        received[group].append(i)
                        fail = i == 2 and m.text not in failed_once  # one redelivery in the middle of each group
                        if fail:
                            failed_once.add(m.text)
                        else:
                            done[group].add(i)  # recorded before the ack: the next may arrive once it is applied
                    if fail:
                        c.nack(m)
                    else:
                        c.ack(m)

    threads = [threading.Thread(target=run, args=(f"c{k}",), daemon=True) for k in range(2)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: all(len(d) == per_group for d in done.values()), "every FIFO message acked", 90)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert violations == []
    for group, seq in received.items():
        assert seq == [0, 1, 2, 2, 3, 4, 5], f"{group} out of order: {seq}"


def test_send_back_goes_through_the_retry_topic_then_the_dlq(node):
    topic = make_topic(node, "PopBack", queues=1)
    with Producer(node.grpc_address) as p:
        p.send(topic, "again")
    with PullConsumer("back", topic, node.grpc_address, start_from="first") as pc:
        [m] = wait_for(lambda: pc.poll(1), "the message pulled")
        r = pc.send_back(m, delay_level=1)
        assert r.topic in ("%RETRY%back", "SCHEDULE_TOPIC_XXXX")
    with SimpleConsumer("back", topic, node.grpc_address, await_duration=2) as c:
        got = wait_for(lambda: c.receive(4, 10), "the retried message at the group's receivers", 30)
        assert [x.text for x in got] == ["again"]
        assert got[0].message.topic == topic and got[0].message.reconsume_times == 1
        c.ack(got)


def test_reset_offsets_redelivers_from_there_and_the_committed_offset_follows_acks(node):
    topic = make_topic(node, "PopReset", queues=1)
    with Producer(node.grpc_address) as p:
        for i in range(3):
            p.send(topic, f"x{i}")
    with SimpleConsumer("reset", topic, node.grpc_address, await_duration=0) as c:
        c.ack(wait_for(lambda: c.receive(8, 10), "first receive"))
        stub = pb_grpc.MessagingServiceStub(node.channel())
        resp = stub.ResetGroupOffsets(pb.ResetGroupOffsetsRequest(group="reset", topic=topic, offset=1), timeout=10)
        assert dict(resp.offsets) == {0: 1}
        again = c.receive(8, 60)
        assert [m.text for m in again] == ["x1", "x2"]
        c.ack(again[1])
        # the group's consumer offset follows its acks (the lowest unacked message): x1 is still open
        fetch = pb.FetchOffsetRequest(group="reset", topic=topic)
        wait_for(lambda: dict(stub.FetchOffset(fetch, timeout=10).offsets) == {0: 1}, "offset at the open x1")
        c.ack(again[0])
        wait_for(lambda: dict(stub.FetchOffset(fetch, timeout=10).offsets) == {0: 3}, "offset after every ack")


def test_leader_sigkill_unacked_come_back_on_the_new_leader_acked_never_fifo_order_holds(tmp_path):
    nodes = start_nodes(node_specs(tmp_path, 3, node={"group_policies": {"ha": FAST, "hafifo": FAST}}))
    try:
        everyone = [n.grpc_address for n in nodes]
        with Admin(everyone) as admin:
            admin.create_topic("Ha", queues=2)
            admin.create_topic("HaFifo", queues=2, message_type="FIFO")
            leader_id = admin.cluster_status().leader_id
        with Producer(everyone) as p:
            for i in range(20):
                p.send("Ha", f"h{i}")
            for i in range(4):
                for g in range(2):
                    p.send("HaFifo", f"F{g}-{i}", message_group=f"F{g}")
        c = SimpleConsumer("ha", "Ha", everyone, await_duration=1)
        got: list = []
        wait_for(lambda: got.extend(c.receive(32, 20)) or len(got) >= 20, "all 20 received")
        assert len({m.text for m in got}) == 20
        acked = got[:10]
        c.ack(acked)
        fifo = SimpleConsumer("hafifo", "HaFifo", everyone, fifo=True, await_duration=1)
        first = wait_for(lambda: fifo.receive(8, 20), "FIFO heads")
        assert sorted(m.text for m in first) == ["F0-0", "F1-0"], "one message per group in flight"
        fifo.ack([m for m in first if m.text == "F0-0"])  # F1-0 stays unacked across the failover

        leader = next(n for n in nodes if n.spec.id == leader_id)
        leader.kill()
        back: list = []
        wait_for(lambda: receive_through_failover(c, back, 32, 30) and len(back) >= 10, "the 10 unacked back on a new leader",
                 90)
        assert sorted(m.text for m in back) == sorted(m.text for m in got[10:]), "acked ones never come back"
        assert {m.delivery_attempt for m in back} == {2}
        deadline = max(m.invisible_until for m in got[10:])
        assert time.time() * 1000 >= min(m.invisible_until for m in got[10:])
        assert deadline > 0
        c.ack(back)

        order: list[str] = []

        def drain():
            got_now: list = []
            receive_through_failover(fifo, got_now, 8, 30)
            for m in got_now:
                order.append(m.text)
                fifo.ack(m)
            return len(order) >= 7

        wait_for(drain, "the FIFO groups drained on the new leader", 90)
        f0 = [t for t in order if t.startswith("F0")]
        f1 = [t for t in order if t.startswith("F1")]
        assert f0 == ["F0-1", "F0-2", "F0-3"], order
        assert f1 == ["F1-0", "F1-1", "F1-2", "F1-3"], order
        c.close()
        fifo.close()
    finally:
        stop_all(nodes)


def test_cli_consume_pop_dlq_and_reset_offsets(node, capsys):
    from raftmq.client.cli import run

    topic = make_topic(node, "PopCli", queues=1)
    s = ["--server", node.grpc_address]
    with Producer(node.grpc_address) as p:
        for i in range(3):
            p.send(topic, f"c{i}", properties={"n": str(i)})
    assert run(["consume", "cli", topic, "--ack-mode", "pop", "--max", "3", "--idle-timeout", "5", *s]) == 0
    out = capsys.readouterr().out
    assert [line.split(" | ")[1] for line in out.splitlines()] == ["c0", "c1", "c2"]
    assert all(line.startswith("attempt=1 ") for line in out.splitlines())

    assert run(["dlq", "list", "cli", *s]) == 0
    assert "no dead letters" in capsys.readouterr().err
    with Producer(node.grpc_address) as p:
        poison = p.send(topic, "poison", properties={"why": "bad"})
    with SimpleConsumer("cli", topic, node.grpc_address, await_duration=2) as c:
        [m] = wait_for(lambda: c.receive(1, 30), "the poison message")
        c.forward_to_dead_letter_queue(m)
    assert run(["dlq", "list", "cli", *s]) == 0
    listing = capsys.readouterr().out
    assert poison.uniq_key in listing and topic in listing and "poison" in listing
    assert run(["dlq", "view", "cli", poison.uniq_key, *s]) == 0
    view = capsys.readouterr().out
    assert "why" in view and "DLQ_REASON" in view and "forwarded by the consumer" in view
    assert run(["dlq", "view", "cli", "nope", *s]) == 3
    capsys.readouterr()
    assert run(["dlq", "resend", "cli", poison.uniq_key, *s]) == 0
    assert f"to {topic}" in capsys.readouterr().out
    assert run(["consume", "cli", topic, "--ack-mode", "pop", "--max", "1", "--idle-timeout", "10", "--json",
                *s]) == 0
    import json

    [again] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert again["body"] == "poison" and again["properties"]["why"] == "bad"

    assert run(["group", "reset-offsets", "cli", topic, "--to-offset", "0", *s]) == 0
    assert "New offset" in capsys.readouterr().out
    assert run(["consume", "cli", topic, "--ack-mode", "pop", "--max", "5", "--idle-timeout", "5", *s]) == 0
    bodies = [line.split(" | ")[1] for line in capsys.readouterr().out.splitlines()]
    assert bodies == ["c0", "c1", "c2", "poison", "poison"]
    assert run(["consume", "cli", topic, "--ack-mode", "pop", "--sql", "n >", *s]) == 4
    assert "position 3" in capsys.readouterr().err
    assert run(["consume", "cli-pull", topic, "--from-beginning", "--sql", "n BETWEEN 1 AND 5", "--max", "2",
                "--idle-timeout", "10", *s]) == 0
    assert [line.split(" | ")[1] for line in capsys.readouterr().out.splitlines()] == ["c1", "c2"]


def test_push_consumer_shutdown_finishes_running_listeners_and_acks_them(node):
    topic = make_topic(node, "PopShutdown", queues=1)
    with Producer(node.grpc_address) as p:
        p.send(topic, "slow")
    started, release = threading.Event(), threading.Event()
    done: list[str] = []

    def listener(m):
        started.set()
        release.wait(30)
        done.append(m.text)
        return ConsumeResult.SUCCESS

    push = PushConsumer("shutdown", topic, listener, node.grpc_address, concurrency=1, invisible_duration=60).start()
    assert started.wait(30), "the listener got the message"
    stopper = threading.Thread(target=push.shutdown)
    stopper.start()
    release.set()
    stopper.join(60)
    assert not stopper.is_alive() and done == ["slow"] and not push.errors

    def acked() -> bool:
        _, metrics = node.http_get("/metrics")
        return any(line.startswith("rocketmq_consumer_acked_messages_total") and 'consumer_group="shutdown"' in line
                   and line.endswith(" 1.0") for line in metrics.splitlines())

    assert acked(), "the message in progress at shutdown was acked, not left to time out"


def test_push_consumer_renews_the_invisible_time_of_a_slow_listener(node):
    topic = make_topic(node, "PopRenew", queues=1)
    with Producer(node.grpc_address) as p:
        p.send(topic, "slow")
    deliveries: list[int] = []

    def listener(m):
        deliveries.append(m.delivery_attempt)
        if len(deliveries) == 1:  # outlive the first deadline by a good margin
            wait_for(lambda: time.time() * 1000 > m.invisible_until + 2000, "past the first deadline", 30)
        return ConsumeResult.SUCCESS

    push = PushConsumer("renew", topic, listener, node.grpc_address, concurrency=2, invisible_duration=6).start()
    try:
        wait_for(lambda: push.errors or (deliveries and not push._running), "the slow message finished", 60)
    finally:
        push.shutdown()
    assert not push.errors, "the ack used the renewed handle"
    assert deliveries == [1], "no redelivery while the listener was still running"


def test_a_listener_finishing_during_a_renewal_acks_with_the_renewed_handle(node):
    """The renewer extends a running message while its listener returns: the ack must wait for that renewal and
    use the handle it returned (acking with the superseded one, or renewing an acked message, is refused)."""
    topic = make_topic(node, "PopRenewRace", queues=1)
    with Producer(node.grpc_address) as p:
        p.send(topic, "finishes mid-renewal")
    renewing, deliveries = threading.Event(), []

    def listener(m):
        deliveries.append(m.delivery_attempt)
        renewing.wait(30)  # return while the renewal is on its way to the node
        return ConsumeResult.SUCCESS

    # renewed a third of 12 s before the deadline: seconds to spare for the delayed renewal on a busy box
    push = PushConsumer("renew-race", topic, listener, node.grpc_address, concurrency=1, invisible_duration=12)
    real_renew = push._consumer.change_invisible_duration

    def slow_renew(m, seconds):
        renewing.set()
        time.sleep(0.3)  # the listener has returned by now and would ack
        return real_renew(m, seconds)

    push._consumer.change_invisible_duration = slow_renew
    push.start()
    try:
        wait_for(lambda: renewing.is_set() and not push._running, "the renewed message finished", 60)
    finally:
        push.shutdown()
    assert not push.errors, "the renewal and the ack each used a handle the node still honoured"
    assert deliveries == [1]


def test_pull_only_group_retries_through_its_retry_topic_until_the_dlq(node):
    topic = make_topic(node, "PopBackPull", queues=1)
    with Producer(node.grpc_address) as p:
        sent = p.send(topic, "retry me")
    stub = pb_grpc.MessagingServiceStub(node.channel())
    with PullConsumer("back-pull", topic, node.grpc_address, start_from="first") as pc:
        [m] = wait_for(lambda: pc.poll(1), "the message pulled")
        pc.send_back(m, delay_level=1)
    seen = []
    with Admin(node.grpc_address) as admin:
        wait_for(lambda: any(t.name == "%RETRY%back-pull" for t in admin.list_topics(include_system=True)),
                 "the retry topic")
    with PullConsumer("back-pull", "%RETRY%back-pull", node.grpc_address, start_from="first") as rc:
        for times in (1, 2):  # max_delivery_attempts=3: the original delivery and two retries
            [r] = wait_for(lambda: rc.poll(1), f"retry {times}", 30)
            seen.append((r.text, r.reconsume_times, r.properties["RETRY_TOPIC"], r.uniq_key))
            resp = stub.SendMessageBack(pb.SendMessageBackRequest(
                group="back-pull", topic=r.topic, queue_id=r.queue_id, queue_offset=r.queue_offset, delay_level=1),
                timeout=10)
            assert resp.dead_lettered is (times == 2)
    assert seen == [("retry me", t, topic, sent.uniq_key) for t in (1, 2)]
    [dead] = dead_letters(node, "back-pull", 1)
    assert dead.text == "retry me" and dead.properties["RETRY_TOPIC"] == topic
    assert dead.reconsume_times == 3 and dead.properties["DLQ_DELIVERY_ATTEMPTS"] == "3"

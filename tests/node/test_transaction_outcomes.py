"""Transactions on a real node: repeated outcomes (SDK retries), check-backs with no producer connected, the
transaction metrics on /metrics, and the system topics in the topic table."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import grpc
import pytest

from raftmq.client import RaftmqError
from raftmq.client.connection import _Stubs
from raftmq.client.transaction_producer import TransactionProducer, TransactionState
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.support.metrics import samples
from tests.support.processes import REPO_ROOT, running_nodes
from tests.support.waiting import wait_for

TX_STORE = {"transaction_timeout_ms": 600, "transaction_check_interval_ms": 100, "transaction_check_max": 3}
HALF, OP, CHECK_MAX, SCHEDULE = ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                                 "TRANS_CHECK_MAX_TIME_TOPIC", "SCHEDULE_TOPIC_XXXX")
_names = itertools.count()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with running_nodes(tmp_path_factory.mktemp("txo"), store=TX_STORE) as nodes:
        yield nodes[0]


def _topic(node) -> str:
    name = f"txo-{next(_names)}"
    pb_grpc.AdminServiceStub(node.channel()).CreateTopic(pb.CreateTopicRequest(
        topic=pb.TopicConfig(name=name, read_queue_nums=1, write_queue_nums=1,
                             message_type="TRANSACTION")), timeout=10)
    return name


def _pull_all(node, topic: str) -> list[pb.MessageView]:
    r = pb_grpc.MessagingServiceStub(node.channel()).PullMessage(
        pb.PullMessageRequest(topic=topic, queue_id=0, offset=0, max_count=100), timeout=30)
    return list(r.messages)


def _metrics(node) -> dict[tuple[str, frozenset], float]:
    """(sample name, labels without cluster/node_id) -> value, for the transaction series."""
    out = {}
    for s in samples(node):
        if "transaction" in s.name or s.name.startswith(("rocketmq_commit", "rocketmq_rollback", "rocketmq_half")):
            assert s.labels.pop("node_id") == node.spec.id and s.labels.pop("cluster"), s
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _value(metrics: dict, name: str, **labels: str) -> float:
    """The sample of ``name`` with exactly these labels besides the member's ``group`` (every sample has it)."""
    want = frozenset(labels.items())
    return next((v for (n, have), v in metrics.items()
                 if n == name and frozenset((k, x) for k, x in have if k != "group") == want), 0.0)


class _AnswerLost(grpc.RpcError):
    """What the SDK sees when the answer of an applied call never arrives (deadline passed on the way back)."""

    def code(self):
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self):
        return "Deadline Exceeded"

    def trailing_metadata(self):
        return ()


class _LoseFirstEndAnswer(grpc.UnaryUnaryClientInterceptor):
    """Lets the first EndTransaction reach the broker and be applied, then drops its answer."""

    def __init__(self):
        self.calls = 0

    def intercept_unary_unary(self, continuation, details, request):
        call = continuation(details, request)
        if details.method.endswith("/EndTransaction"):
            self.calls += 1
            if self.calls == 1:
                call.result()  # applied by the broker
                raise _AnswerLost()
        return call


def _losing_producer(node, group: str) -> tuple[TransactionProducer, _LoseFirstEndAnswer]:
    p = TransactionProducer(node.grpc_address, group=group)
    lose = _LoseFirstEndAnswer()
    p._pool._stubs[node.grpc_address] = _Stubs(grpc.intercept_channel(grpc.insecure_channel(node.grpc_address), lose))
    return p, lose


@pytest.mark.parametrize("state", [TransactionState.COMMIT, TransactionState.ROLLBACK])
def test_sdk_retry_after_a_lost_answer_is_answered_as_success(node, state):
    topic = _topic(node)
    p, lose = _losing_producer(node, f"pg-retry-{state.name}")
    with p:
        r = p.send_in_transaction(topic, b"once", local_tx=lambda half: state)
        assert lose.calls == 2  # the lost first answer, then the retry the SDK made by itself
        assert r.state == state and r.end_error == ""
        got = _pull_all(node, topic)
        if state == TransactionState.COMMIT:
            assert [m.body for m in got] == [b"once"]  # stored once: the retry did not commit again
            assert (r.committed.msg_id, r.committed.queue_offset) == (got[0].msg_id, 0)  # where the first put it
            assert r.committed.topic == topic and r.committed.uniq_key == r.half.transaction_id
            assert p.end(r.half, TransactionState.COMMIT).msg_id == got[0].msg_id  # asked again: same answer
        else:
            assert got == [] and r.committed is None
            assert p.end(r.half, TransactionState.ROLLBACK) is None
        opposite = TransactionState.ROLLBACK if state == TransactionState.COMMIT else TransactionState.COMMIT
        how = "committed" if state == TransactionState.COMMIT else "rolled back"
        with pytest.raises(RaftmqError, match=f"already finished \\({how}\\); a {opposite.name.lower()} cannot "
                                              "change a finished transaction") as e:
            p.end(r.half, opposite)
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert len(_pull_all(node, topic)) == (1 if state == TransactionState.COMMIT else 0)


def test_check_backs_with_no_producer_connected_spend_checks_and_end_in_check_max_topic(node):
    """RocketMQ counts a check attempt (TRANSACTION_CHECK_TIMES) before it looks for a producer channel: with
    nobody of the group connected, the message is discarded after transaction_check_max passes, not re-checked
    forever."""
    topic = _topic(node)
    with TransactionProducer(node.grpc_address, group="pg-nobody") as p:  # no checker: no check stream
        r = p.send_in_transaction(topic, b"orphan", local_tx=lambda half: TransactionState.UNKNOWN)

    def discarded():
        try:
            return [m for m in _pull_all(node, CHECK_MAX) if m.uniq_key == r.half.transaction_id]
        except grpc.RpcError:
            return None  # the topic is registered with the first discarded message

    [m] = wait_for(discarded, f"the unchecked message in {CHECK_MAX}")
    assert m.body == b"orphan" and m.properties["TRANSACTION_CHECK_TIMES"] == "3"
    metrics = _metrics(node)
    assert _value(metrics, "raftmq_transaction_checks_total", producer_group="pg-nobody", sent="false") == 3
    assert _value(metrics, "raftmq_transaction_checks_total", producer_group="pg-nobody", sent="true") == 0
    assert _value(metrics, "raftmq_transaction_discarded_total", topic=topic) == 1
    assert _value(metrics, "rocketmq_half_messages", topic=topic) == 0
    assert _pull_all(node, topic) == []


def test_transaction_metrics_count_halves_outcomes_checks_and_pending(node):
    topic = _topic(node)
    with TransactionProducer(node.grpc_address, group="pg-metrics") as p:
        p.send_in_transaction(topic, b"c1", local_tx=lambda half: TransactionState.COMMIT)
        p.send_in_transaction(topic, b"c2", local_tx=lambda half: TransactionState.COMMIT)
        p.send_in_transaction(topic, b"r1", local_tx=lambda half: TransactionState.ROLLBACK)
        open1 = p.send_half(topic, b"open1")
        p.send_half(topic, b"open2")  # never ended: checked (nobody to ask) until discarded
        metrics = _metrics(node)
        assert _value(metrics, "raftmq_transaction_half_messages_total", topic=topic) == 5
        assert _value(metrics, "rocketmq_commit_messages_total", topic=topic) == 2
        assert _value(metrics, "rocketmq_rollback_messages_total", topic=topic) == 1
        # read from the consume queues: a record just written shows once dispatched (a moment later)
        wait_for(lambda: _value(_metrics(node), "rocketmq_half_messages", topic=topic) == 2, "two pending")
        p.end(open1, TransactionState.COMMIT)
        wait_for(lambda: _value(_metrics(node), "rocketmq_half_messages", topic=topic) == 1, "one pending")
    wait_for(lambda: _value(_metrics(node), "rocketmq_half_messages", topic=topic) == 0, "nothing pending")
    metrics = _metrics(node)
    assert _value(metrics, "rocketmq_commit_messages_total", topic=topic) == 3
    assert _value(metrics, "rocketmq_rollback_messages_total", topic=topic) == 1
    assert _value(metrics, "raftmq_transaction_discarded_total", topic=topic) == 1
    # open2's three checks, plus any open1 had before its commit
    assert _value(metrics, "raftmq_transaction_checks_total", producer_group="pg-metrics", sent="false") >= 3
    assert sorted(m.body for m in _pull_all(node, topic)) == [b"c1", b"c2", b"open1"]


def _cli(node, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")])
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args, "--server", node.grpc_address],
                          capture_output=True, text=True, timeout=60, env=env, cwd=REPO_ROOT)


def test_system_topics_are_registered_listed_with_system_and_protected(node):
    with TransactionProducer(node.grpc_address, group="pg-sys") as p:  # registers the half and op topics
        p.send_in_transaction(_topic(node), b"x", local_tx=lambda half: TransactionState.ROLLBACK)
    admin = pb_grpc.AdminServiceStub(node.channel())
    shown = {t.name for t in admin.ListTopics(pb.ListTopicsRequest(), timeout=10).topics}
    assert not shown & {SCHEDULE, HALF, OP}
    everything = {t.name: t for t in admin.ListTopics(pb.ListTopicsRequest(include_system=True), timeout=10).topics}
    # RocketMQ 4.9: SCHEDULE_TOPIC_XXXX 18 queues (TopicConfigManager), half / op 1 queue (selectTopicConfig)
    assert [(everything[n].read_queue_nums, everything[n].write_queue_nums, everything[n].perm)
            for n in (SCHEDULE, HALF, OP)] == [(18, 18, 6), (1, 1, 6), (1, 1, 6)]
    # durable on disk: in the topic table's change log until it is folded into topics.json (store.topic_changes)
    log_lines = (node.spec.data_dir / "config" / "topics.json.changes").read_text().splitlines()
    changed = {op[1]["topicName"] for line in log_lines[1:] for op in json.loads(line[9:])["ops"] if op[0] == "put"}
    assert {HALF, OP} <= changed
    r = _cli(node, "topic", "list", "--system", "--json")
    assert r.returncode == 0 and SCHEDULE in {t["name"] for t in json.loads(r.stdout)}, r.stderr
    r = _cli(node, "topic", "list")
    assert r.returncode == 0 and SCHEDULE not in r.stdout
    for args in (("topic", "delete", SCHEDULE), ("topic", "update", SCHEDULE, "--queues", "2"),
                 ("topic", "delete", HALF), ("topic", "create", OP)):
        r = _cli(node, *args)
        assert r.returncode == 4 and "is a system topic reserved for the broker" in r.stderr, (args, r.stderr)
    everything = {t.name: t for t in admin.ListTopics(pb.ListTopicsRequest(include_system=True), timeout=10).topics}
    assert everything[SCHEDULE].read_queue_nums == 18 and HALF in everything

"""Transactional messages end to end: real node processes, the SDK's TransactionProducer, check-back streams."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import grpc
import pytest

from raftmq.client import RaftmqError
from raftmq.client.errors import NotFoundError
from raftmq.client.transaction_producer import TransactionProducer, TransactionState
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.support.processes import REPO_ROOT, node_specs, running_nodes, start_nodes, stop_all
from tests.support.waiting import wait_for

# short timeouts so checks happen within a second or two; every check attempt counts, a producer connected or not
# (as in RocketMQ), so a producer that takes a moment to (re)connect must not see its message discarded first
TX_STORE = {"transaction_timeout_ms": 600, "transaction_check_interval_ms": 100, "transaction_check_max": 5}
# for the restart and failover tests: producers reconnect with backoff (up to 2 s) after the nodes come back
PATIENT_TX_STORE = {**TX_STORE, "transaction_check_max": 30}
HALF, CHECK_MAX = "RMQ_SYS_TRANS_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"
_names = itertools.count()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with running_nodes(tmp_path_factory.mktemp("tx"), store=TX_STORE) as nodes:
        yield nodes[0]


def _topic(node, queues: int = 1) -> str:
    name = f"tx-{next(_names)}"
    pb_grpc.AdminServiceStub(node.channel()).CreateTopic(pb.CreateTopicRequest(
        topic=pb.TopicConfig(name=name, read_queue_nums=queues, write_queue_nums=queues,
                             message_type="TRANSACTION")), timeout=10)
    return name


def _pull_all(node, topic: str, queue_id: int = 0, wait_ms: int = 0) -> list[pb.MessageView]:
    stub = pb_grpc.MessagingServiceStub(node.channel())
    r = stub.PullMessage(pb.PullMessageRequest(topic=topic, queue_id=queue_id, offset=0, max_count=100,
                                               long_poll_timeout_ms=wait_ms), timeout=30)
    return list(r.messages)


def test_commit_delivers_once_and_half_stays_hidden(node):
    topic = _topic(node)
    with TransactionProducer(node.grpc_address, group="pg-commit") as p:
        r = p.send_in_transaction(topic, b"order-1", tags="new", keys="k1",
                                  local_tx=lambda half: TransactionState.COMMIT)
        assert r.state == TransactionState.COMMIT and r.end_error == ""
        assert r.half.send_result.topic == HALF and r.committed.topic == topic
        got = _pull_all(node, topic, wait_ms=10_000)
        assert [m.body for m in got] == [b"order-1"]
        m = got[0]
        assert m.sys_flag & 0xC == 0x8 and m.uniq_key == r.half.transaction_id and m.tags == "new"
        assert m.prepared_transaction_offset == r.half.send_result.physical_offset
        assert m.properties["REAL_TOPIC"] == topic and m.properties["PGROUP"] == "pg-commit"
        with pytest.raises(RaftmqError, match=r"already finished \(committed\)") as e:  # a second outcome
            p.end(r.half, TransactionState.ROLLBACK)
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert len(_pull_all(node, topic)) == 1


def test_rollback_delivers_nothing(node):
    topic = _topic(node)
    with TransactionProducer(node.grpc_address, group="pg-rollback") as p:
        r = p.send_in_transaction(topic, b"x", local_tx=lambda half: TransactionState.ROLLBACK)
        assert r.committed is None and r.end_error == ""
        with pytest.raises(RaftmqError, match=r"already finished \(rolled back\)"):
            p.end(r.half, TransactionState.COMMIT)
        # a later transaction of the group is committed: the rolled-back one still never shows up
        p.send_in_transaction(topic, b"y", local_tx=lambda half: TransactionState.COMMIT)
    assert [m.body for m in _pull_all(node, topic, wait_ms=10_000)] == [b"y"]


@pytest.mark.parametrize("answer", [TransactionState.COMMIT, TransactionState.ROLLBACK])
def test_check_back_resolves_unknown(node, answer):
    topic = _topic(node)
    asked: list = []

    def checker(view):
        asked.append(view)
        return answer

    with TransactionProducer(node.grpc_address, group=f"pg-check-{answer.name}", checker=checker) as p:
        r = p.send_in_transaction(topic, b"pending", local_tx=lambda half: TransactionState.UNKNOWN)
        assert r.state == TransactionState.UNKNOWN and r.committed is None
        wait_for(lambda: asked, "the broker's check")
        assert asked[0].uniq_key == r.half.transaction_id and asked[0].body == b"pending"
        assert asked[0].properties["REAL_TOPIC"] == topic
        if answer == TransactionState.COMMIT:
            got = wait_for(lambda: _pull_all(node, topic), "the committed message")
            assert [m.body for m in got] == [b"pending"]
            assert got[0].properties["TRANSACTION_CHECK_TIMES"] == "1"  # committed from the renewed copy
        time.sleep(1.5)  # more than two timeouts: a resolved transaction is not asked about again
        assert len(asked) == 1
        opposite = TransactionState.ROLLBACK if answer == TransactionState.COMMIT else TransactionState.COMMIT
        how = "committed" if answer == TransactionState.COMMIT else "rolled back"
        with pytest.raises(RaftmqError, match=f"already finished \\({how}\\)"):
            p.end(r.half, opposite)
    assert len(_pull_all(node, topic)) == (1 if answer == TransactionState.COMMIT else 0)


def test_too_many_checks_go_to_check_max_topic(node):
    topic = _topic(node)
    asked: list = []
    with TransactionProducer(node.grpc_address, group="pg-maxed",
                             checker=lambda v: asked.append(v) or TransactionState.UNKNOWN) as p:
        r = p.send_in_transaction(topic, b"undecided", local_tx=lambda half: TransactionState.UNKNOWN)

        def discarded():
            try:
                msgs = _pull_all(node, CHECK_MAX)
            except grpc.RpcError:
                return None  # the topic is created with the first discarded message
            return [m for m in msgs if m.uniq_key == r.half.transaction_id]

        [m] = wait_for(discarded, f"the message in {CHECK_MAX}")
        assert m.body == b"undecided" and m.properties["TRANSACTION_CHECK_TIMES"] == "5"
        assert [int(v.properties.get("TRANSACTION_CHECK_TIMES", "0")) for v in asked] == [0, 1, 2, 3, 4]
        with pytest.raises(RaftmqError, match=f"already finished \\(discarded to {CHECK_MAX}"):
            p.end(r.half, TransactionState.COMMIT)
    assert _pull_all(node, topic) == []


def test_bad_input(node):
    topic = _topic(node)
    stub = pb_grpc.TransactionServiceStub(node.channel())
    with TransactionProducer(node.grpc_address, group="pg-bad") as p:
        half = p.send_half(topic, b"a")
        with pytest.raises(NotFoundError, match="no half message"):  # msg id of a non-half record
            p.end(type(half)("nope", half.msg_id[:-4] + "0000", half.send_result), TransactionState.COMMIT)
        p.end(half, TransactionState.ROLLBACK)
    other = TransactionProducer(node.grpc_address, group="pg-other")
    with other:
        h2 = TransactionProducer(node.grpc_address, group="pg-bad").send_half(topic, b"b")
        with pytest.raises(RaftmqError, match="belongs to producer group 'pg-bad'"):
            other.end(h2, TransactionState.COMMIT)
    cases = [
        (pb.SendHalfMessageRequest(message=pb.Message(topic=topic, body=b"x", delay_level=3), producer_group="g"),
         "cannot be delayed"),
        (pb.SendHalfMessageRequest(message=pb.Message(topic=topic, body=b"x")), "producer_group is empty"),
        (pb.SendHalfMessageRequest(message=pb.Message(topic=HALF, body=b"x"), producer_group="g"), "system"),
    ]
    for req, text in cases:
        with pytest.raises(grpc.RpcError) as e:
            stub.SendHalfMessage(req, timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and text in e.value.details(), e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        stub.EndTransaction(pb.EndTransactionRequest(producer_group="g", msg_id="zz", resolution=pb.TX_COMMIT),
                            timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        stub.EndTransaction(pb.EndTransactionRequest(producer_group="g", msg_id=h2.msg_id,
                                                     resolution=pb.TX_UNKNOWN), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # consumers never see the half queue: pulling it is refused; it is a system topic (registered on first use, as
    # RocketMQ does), listed only with include_system
    with pytest.raises(grpc.RpcError) as e:
        _pull_all(node, HALF)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cannot be consumed" in e.value.details()
    listed = pb_grpc.AdminServiceStub(node.channel()).ListTopics(pb.ListTopicsRequest(), timeout=10)
    assert HALF not in {t.name for t in listed.topics}
    listed = pb_grpc.AdminServiceStub(node.channel()).ListTopics(pb.ListTopicsRequest(include_system=True),
                                                                 timeout=10)
    assert HALF in {t.name for t in listed.topics}
    assert _pull_all(node, topic) == []


_CRASHING_PRODUCER = textwrap.dedent("""
    import os, signal, sys
    from raftmq.client.transaction_producer import TransactionProducer, TransactionState

    def local_tx(half):
        print(half.transaction_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # crash between the half message and the outcome

    TransactionProducer(sys.argv[1], group=sys.argv[2]).send_in_transaction(sys.argv[3], b"crashed",
                                                                             local_tx=local_tx)
""")


def test_crashed_producer_is_resolved_by_another_of_its_group(node):
    topic = _topic(node)
    proc = subprocess.run([sys.executable, "-c", _CRASHING_PRODUCER, node.grpc_address, "pg-crash", topic],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    tx_id = proc.stdout.strip()
    assert tx_id
    asked: list = []
    with TransactionProducer(node.grpc_address, group="pg-crash",
                             checker=lambda v: asked.append(v.uniq_key) or TransactionState.COMMIT):
        got = wait_for(lambda: _pull_all(node, topic), "the crashed producer's message, committed by the checker")
    assert [(m.body, m.uniq_key) for m in got] == [(b"crashed", tx_id)] and asked == [tx_id]


def _restart_all(nodes):
    for n in nodes:
        n.stop()
    for n in nodes:
        n.start()
    for n in nodes:
        n.wait_ready()


def test_everything_survives_a_restart(tmp_path):
    nodes = start_nodes(node_specs(tmp_path, 1, store=PATIENT_TX_STORE))
    try:
        topic = _topic(nodes[0])
        addr = nodes[0].grpc_address
        with TransactionProducer(addr, group="pg-restart") as p:
            done = p.send_in_transaction(topic, b"committed", local_tx=lambda h: TransactionState.COMMIT)
            open_tx = p.send_in_transaction(topic, b"open", local_tx=lambda h: TransactionState.UNKNOWN)
            rolled = p.send_in_transaction(topic, b"rolled", local_tx=lambda h: TransactionState.ROLLBACK)
        asked: list = []
        decision = {"state": TransactionState.UNKNOWN}
        with TransactionProducer(addr, group="pg-restart",
                                 checker=lambda v: asked.append(v.uniq_key) or decision["state"]) as p:
            wait_for(lambda: asked, "a check before the restart")  # the stream is up (answered UNKNOWN)
            assert [n.stop() for n in nodes] == [0]  # SIGTERM with a check stream open: a clean exit
            for n in nodes:
                n.start()
            for n in nodes:
                n.wait_ready()
            decision["state"] = TransactionState.COMMIT  # the same producer reconnects and answers
            got = wait_for(lambda: len(_pull_all(nodes[0], topic)) >= 2 and _pull_all(nodes[0], topic),
                        "the open transaction resolved after the restart")
            assert [m.body for m in got] == [b"committed", b"open"]
            assert set(asked) == {open_tx.half.transaction_id}
            for r, how, other in ((done, "committed", TransactionState.ROLLBACK),
                                  (rolled, "rolled back", TransactionState.COMMIT)):
                with pytest.raises(RaftmqError, match=f"already finished \\({how}\\)"):
                    p.end(r.half, other)
    finally:
        stop_all(nodes)


def test_leader_failover_resumes_checks(tmp_path):
    nodes = start_nodes(node_specs(tmp_path, 3, store=PATIENT_TX_STORE))
    try:
        admin = pb_grpc.AdminServiceStub(nodes[0].channel())
        status = wait_for(lambda: admin.ClusterStatus(pb.ClusterStatusRequest(), timeout=10).leader_id or None,
                       "a leader")
        leader = next(n for n in nodes if n.spec.id == status)
        topic = _topic(leader)
        addrs = [n.grpc_address for n in nodes]
        with TransactionProducer(addrs, group="pg-failover") as p:
            before = p.send_in_transaction(topic, b"before", local_tx=lambda h: TransactionState.UNKNOWN)
        leader.kill()
        rest = [n for n in nodes if n is not leader]
        asked: list = []
        lock = threading.Lock()

        def checker(view):
            with lock:
                asked.append(view.uniq_key)
            return TransactionState.COMMIT

        with TransactionProducer(addrs, group="pg-failover", checker=checker) as p:
            got = wait_for(lambda: _pull_all(rest[0], topic), "the transaction resolved by the new leader", 60)
            assert [m.body for m in got] == [b"before"]
            assert set(asked) == {before.half.transaction_id}
        # restart every member, the killed one included: all agree, and the outcome is final
        _restart_all(nodes)
        for n in nodes:
            got = wait_for(lambda n=n: _pull_all(n, topic), f"the committed message on {n.spec.id}")
            assert [m.body for m in got] == [b"before"], n.spec.id
        with TransactionProducer(addrs, group="pg-failover") as p:
            with pytest.raises(RaftmqError, match=r"already finished \(committed\)"):
                p.end(before.half, TransactionState.ROLLBACK)
    finally:
        stop_all(nodes)
    # the system topics (built-in schedule topic, half / op / check-max registered through the log) are in every
    # member's topics.json, byte for byte the same (a running member keeps recent changes in topics.json.changes; a
    # clean stop folds them into the file)
    files = [(n.spec.data_dir / "config" / "topics.json").read_bytes() for n in nodes]
    assert files[0] == files[1] == files[2]
    assert all(t in files[0] for t in (b"SCHEDULE_TOPIC_XXXX", b'"RMQ_SYS_TRANS_HALF_TOPIC"',
                                       b'"RMQ_SYS_TRANS_OP_HALF_TOPIC"'))


def test_cli_produce_transactional(node):
    topic = _topic(node)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")])

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "raftmq.client", "produce", topic, *args, "--server", node.grpc_address],
                              capture_output=True, text=True, timeout=60, env=env, cwd=REPO_ROOT)

    r = cli("--body", "via-cli", "--transactional", "commit", "--group", "cli-group", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["topic"] == topic
    r = cli("--body", "dropped", "--transactional", "rollback")
    assert r.returncode == 0 and r.stdout.startswith("rolled back transaction "), r.stdout + r.stderr
    r = cli("--transactional", "commit", "--count", "3")
    assert r.returncode != 0 and "--transactional sends one message" in r.stderr
    r = cli("--body", "x", "--transactional", "maybe")
    assert r.returncode != 0 and "invalid choice" in r.stderr
    got = _pull_all(node, topic, wait_ms=10_000)
    assert [(m.body, m.properties["PGROUP"]) for m in got] == [(b"via-cli", "cli-group")]


def test_failing_local_transaction_and_checker_are_unknown(node):
    topic = _topic(node)
    calls: list = []

    def checker(view):
        calls.append(view.uniq_key)
        if len(calls) == 1:
            raise RuntimeError("database unreachable")  # answered UNKNOWN: asked again later
        return TransactionState.COMMIT

    def local_tx(half):
        raise RuntimeError("boom")

    with TransactionProducer(node.grpc_address, group="pg-failing", checker=checker) as p:
        r = p.send_in_transaction(topic, b"eventually", local_tx=local_tx)
        assert r.state == TransactionState.UNKNOWN and r.committed is None
        got = wait_for(lambda: _pull_all(node, topic), "the commit after a failed check")
    assert [m.body for m in got] == [b"eventually"] and calls == [r.half.transaction_id] * 2
    assert got[0].properties["TRANSACTION_CHECK_TIMES"] == "2"


def test_concurrent_outcomes_apply_once(node):
    topic = _topic(node)
    stub = pb_grpc.TransactionServiceStub(node.channel())
    with TransactionProducer(node.grpc_address, group="pg-race") as p:
        halves = [p.send_half(topic, f"m{i}".encode()) for i in range(4)]
    outcomes: list = []

    def end(half, resolution):
        try:
            r = stub.EndTransaction(pb.EndTransactionRequest(
                producer_group="pg-race", transaction_id=half.transaction_id, msg_id=half.msg_id,
                resolution=resolution), timeout=30)
            outcomes.append((half.transaction_id, resolution, r.result.msg_id if r.HasField("result") else None))
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.FAILED_PRECONDITION, e.details()
            assert "already finished" in e.details()

    threads = [threading.Thread(target=end, args=(h, res)) for h in halves for res in (pb.TX_COMMIT, pb.TX_ROLLBACK)
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # one outcome each: the requests asking for it again succeed (and a commit names the one stored record),
    # the opposite ones are refused
    assert {tx for tx, _, _ in outcomes} == {h.transaction_id for h in halves}
    for h in halves:
        mine = [(res, msg_id) for tx, res, msg_id in outcomes if tx == h.transaction_id]
        assert len(set(mine)) == 1, mine
    committed = {tx for tx, res, _ in outcomes if res == pb.TX_COMMIT}
    wait_for(lambda: len(_pull_all(node, topic)) == len(committed), "the committed messages")
    got = _pull_all(node, topic)
    assert sorted(m.uniq_key for m in got) == sorted(committed)
    with pytest.raises(grpc.RpcError) as e:
        stub.EndTransaction(pb.EndTransactionRequest(producer_group="pg-race", msg_id=halves[0].msg_id,
                                                     resolution=pb.TX_COMMIT), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "transaction id is empty" in e.value.details()


def test_half_message_older_than_file_reserved_time_is_discarded(node):
    topic = _topic(node)
    stub = pb_grpc.TransactionServiceStub(node.channel())
    born = int(time.time() * 1000) - 73 * 3_600_000  # file_reserved_time defaults to 72 h
    r = stub.SendHalfMessage(pb.SendHalfMessageRequest(
        message=pb.Message(topic=topic, body=b"ancient", born_timestamp=born), producer_group="pg-old"), timeout=10)

    def discarded():
        try:
            return [m for m in _pull_all(node, CHECK_MAX) if m.uniq_key == r.transaction_id]
        except grpc.RpcError:
            return None

    [m] = wait_for(discarded, f"the old half message in {CHECK_MAX}")
    assert m.body == b"ancient" and "TRANSACTION_CHECK_TIMES" not in m.properties  # never checked
    assert _pull_all(node, topic) == []


# ---------------------------------------------------------------------------------------- AsyncTransactionProducer
def test_async_local_transaction_and_checker_run_on_the_event_loop(node):
    """local_tx and the checker are coroutines awaited on the application's loop (the check arrives on the SDK's
    stream thread and is handed over); the loop keeps turning meanwhile; a commit is delivered once."""
    from raftmq.client import AsyncTransactionProducer
    from tests.client.test_sdk_async import LoopTicks

    topic = _topic(node)
    asked: list = []

    async def main() -> tuple:
        loop_thread = threading.get_ident()
        ticks = LoopTicks()
        ran_on: set[int] = set()

        async def save(half):
            ran_on.add(threading.get_ident())
            await asyncio.sleep(0.05)  # the database round trip
            return TransactionState.COMMIT

        async def undecided(half):
            return TransactionState.UNKNOWN

        async def check(view):
            ran_on.add(threading.get_ident())
            asked.append(view.uniq_key)
            await asyncio.sleep(0.05)
            return TransactionState.COMMIT

        async with AsyncTransactionProducer(node.grpc_address, group="pg-async", checker=check) as p:
            done = await p.send_in_transaction(topic, b"async-1", local_tx=save)
            open_one = await p.send_in_transaction(topic, b"async-2", local_tx=undecided)
            # the checker's answer must reach the broker before the producer closes its stream
            await asyncio.to_thread(wait_for, lambda: len(_pull_all(node, topic)) == 2, "both messages delivered")
        ticks.stop()
        assert ran_on == {loop_thread}, "local_tx and checker ran on the loop's own thread"
        assert ticks.count >= 3
        return done, open_one

    done, open_one = asyncio.run(main())
    assert done.state == TransactionState.COMMIT and done.committed is not None and done.end_error == ""
    assert open_one.state == TransactionState.UNKNOWN and asked[0] == open_one.half.transaction_id
    assert sorted(m.body for m in _pull_all(node, topic)) == [b"async-1", b"async-2"]


def test_async_transaction_producer_refuses_plain_functions_and_a_missing_loop(node):
    from raftmq.client import AsyncTransactionProducer, InvalidArgumentError

    topic = _topic(node)
    with pytest.raises(InvalidArgumentError, match="inside the event loop"):
        AsyncTransactionProducer(node.grpc_address, group="pg-async-bad")

    async def main() -> None:
        with pytest.raises(InvalidArgumentError, match="checker must be an async function"):
            AsyncTransactionProducer(node.grpc_address, group="pg-async-bad",
                                     checker=lambda v: TransactionState.COMMIT)
        async with AsyncTransactionProducer(node.grpc_address, group="pg-async-bad") as p:
            with pytest.raises(InvalidArgumentError, match="local_tx must be an async function"):
                await p.send_in_transaction(topic, b"x", local_tx=lambda half: TransactionState.COMMIT)

            async def fails(half):
                raise RuntimeError("the database is down")

            r = await p.send_in_transaction(topic, b"y", local_tx=fails)
            assert r.state == TransactionState.UNKNOWN and r.committed is None
            assert (await p.end(r.half, TransactionState.ROLLBACK)) is None
        with pytest.raises(RaftmqError, match="closed"):
            await p.send_half(topic, b"z")

    asyncio.run(main())
    assert _pull_all(node, topic) == []

"""Consumers of one group split a topic's queues (clustering consumption) against real node processes: disjoint
allocations, hand-over on close, on SIGKILL (after the expiry) and across a leader failover, with nothing lost."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time

import grpc
import pytest

from raftmq.client import Admin, Producer, PullConsumer
from raftmq.client.consumer_group import describe_consumer_group
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pbg
from tests.client.test_cli_e2e import _env, eventually, one_error_line
from tests.support.processes import REPO_ROOT, running_nodes

QUEUES = 4
DEADLINE = 90.0  # generous: the box is shared; a bug fails here instead of hanging


@pytest.fixture(scope="module")
def server(shared_node):
    return shared_node.grpc_address


def consumer(servers, topic: str, client_id: str, **kw) -> PullConsumer:
    kw.setdefault("heartbeat_interval", 0.3)
    kw.setdefault("auto_commit_interval", 0.2)
    return PullConsumer("workers", topic, servers, start_from="first", client_id=client_id, **kw)


def settled(consumers: list[PullConsumer], members: int) -> bool:
    """Every consumer sees ``members`` members and the allocations are disjoint and cover every queue."""
    if any(len(c.members()) != members for c in consumers):
        return False
    owned = [q for c in consumers for q in c.assigned_queues()]
    return sorted(owned) == list(range(QUEUES))


def wait_settled(consumers: list[PullConsumer], members: int) -> None:
    assert eventually(lambda: settled(consumers, members), bool, timeout=DEADLINE), \
        [(c.client_id, c.members(), c.assigned_queues()) for c in consumers]


def drain_until(consumers: dict[str, PullConsumer], got: dict[str, list], want: set[str]) -> None:
    """Poll every consumer in turn until the union of what they received covers ``want`` (or the deadline)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        for name, c in consumers.items():
            got[name] += [m.text for m in c.poll(timeout=0.1)]
        if want <= {b for bodies in got.values() for b in bodies}:
            return


def produce(servers, topic: str, bodies: list[str], **kw) -> None:
    with Producer(servers, **kw) as p:
        for b in bodies:
            p.send(topic, b)


def test_two_consumers_split_the_queues_and_get_every_message_once(server):
    with Admin(server) as admin:
        admin.create_topic("Split", queues=QUEUES)
    a, b = consumer(server, "Split", "a", heartbeat_interval=1.0), consumer(server, "Split", "b",
                                                                               heartbeat_interval=1.0)
    try:
        a.start()
        b.start()
        wait_settled([a, b], 2)
        assert set(a.assigned_queues()).isdisjoint(b.assigned_queues())
        assert (a.assigned_queues(), b.assigned_queues()) == ([0, 1], [2, 3])  # sorted ids, averagely
        generation = describe_consumer_group(server, "workers").generations["Split"]

        bodies = [f"s{i}" for i in range(200)]
        produce(server, "Split", bodies)
        got: dict[str, list] = {"a": [], "b": []}
        drain_until({"a": a, "b": b}, got, set(bodies))
        assert set(got["a"]) | set(got["b"]) == set(bodies), "a message was lost"
        assert got["a"] and got["b"], "both consumers should have had a share"
        a.commit()
        b.commit()
        d = describe_consumer_group(server, "workers")
        owners = {q.queue_id: q.client_id for q in d.queues if q.topic == "Split"}
        assert owners == {0: "a", 1: "a", 2: "b", 3: "b"}, "the broker computes the same allocation"
        assert all(q.lag == 0 and q.committed for q in d.queues if q.topic == "Split")
        if d.generations["Split"] == generation:  # no membership change while consuming: no duplicate at all
            assert len(got["a"]) + len(got["b"]) == len(bodies), "a message was delivered twice without a rebalance"
    finally:
        a.close()
        b.close()
    with pytest.raises(Exception, match="no live members, no committed offsets and no settings of its own"):
        describe_consumer_group(server, "never-used")


def test_close_hands_the_queues_over_and_the_survivor_gets_the_rest(server):
    with Admin(server) as admin:
        admin.create_topic("HandOver", queues=QUEUES)
    a, b = consumer(server, "HandOver", "a"), consumer(server, "HandOver", "b")
    try:
        a.start()
        b.start()
        wait_settled([a, b], 2)
        first = [f"h{i}" for i in range(100)]
        produce(server, "HandOver", first)
        got: dict[str, list] = {"a": [], "b": []}
        deadline = time.monotonic() + DEADLINE
        while not got["a"] and time.monotonic() < deadline:
            got["a"] += [m.text for m in a.poll(timeout=0.2)]
        a.close()  # commits what it handed out and unregisters: b takes over at once

        def b_owns_all() -> bool:
            got["b"].extend(m.text for m in b.poll(timeout=0.1))
            return b.assigned_queues() == list(range(QUEUES))

        assert eventually(b_owns_all, bool, timeout=DEADLINE), b.assigned_queues()
        second = [f"h{i}" for i in range(100, 150)]
        produce(server, "HandOver", second)
        drain_until({"b": b}, got, set(first) | set(second))
        assert set(got["a"]) | set(got["b"]) >= set(first) | set(second), "a message was lost"
        assert b.members() == ["b"]
    finally:
        a.close()
        b.close()


VICTIM = textwrap.dedent("""
    import sys, time
    from raftmq.client import PullConsumer
    c = PullConsumer("workers", sys.argv[2], sys.argv[1], start_from="first", client_id="victim",
                     heartbeat_interval=0.3, auto_commit_interval=0.2)
    c.start()
    while True:
        for m in c.poll(timeout=0.2):
            print(m.text, flush=True)
            time.sleep(0.05)  # slow, so it is killed half-way through its queues
""")


def test_killed_consumer_expires_and_the_survivor_takes_its_queues(server):
    with Admin(server) as admin:
        admin.create_topic("Killed", queues=QUEUES)
    bodies = [f"k{i}" for i in range(200)]
    produce(server, "Killed", bodies)
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, server, "Killed"], stdout=subprocess.PIPE, text=True,
                              stderr=subprocess.DEVNULL, env=_env(), cwd=REPO_ROOT)
    victim_got: list[str] = []
    reader = threading.Thread(target=lambda: victim_got.extend(line.strip() for line in victim.stdout), daemon=True)
    reader.start()
    survivor = consumer(server, "Killed", "survivor")
    try:
        # the victim consumes alone first (slowly); then the survivor joins and takes half of its queues
        assert eventually(lambda: len(victim_got), lambda n: n >= 5, timeout=DEADLINE) >= 5, \
            "the victim consumer never received anything"
        survivor.start()
        got: dict[str, list] = {"survivor": []}

        def both_members() -> bool:
            got["survivor"].extend(m.text for m in survivor.poll(timeout=0.1))
            return survivor.members() == ["survivor", "victim"] and survivor.assigned_queues() == [0, 1]

        assert eventually(both_members, bool, timeout=DEADLINE), (survivor.members(), survivor.assigned_queues())
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        drain_until({"survivor": survivor}, got, set(bodies))
        assert set(victim_got) | set(got["survivor"]) == set(bodies), "a message was lost"
        assert survivor.members() == ["survivor"] and survivor.assigned_queues() == list(range(QUEUES))
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(timeout=30)
        survivor.close()


def test_leader_failover_moves_heartbeats_and_loses_nothing(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        everyone = [n.grpc_address for n in nodes]
        with Admin(everyone) as admin:
            admin.create_topic("Failover", queues=QUEUES)
            leader_id = admin.cluster_status().leader_id
        leader = next(n for n in nodes if n.spec.id == leader_id)
        follower = next(n for n in nodes if n is not leader)

        # membership lives on the leader: asked for a redirect, a follower answers a heartbeat with the leader
        # hint (by default it forwards the heartbeat to the leader: tests/node/test_forwarding.py)
        stub = pbg.MessagingServiceStub(follower.channel())
        with pytest.raises(grpc.RpcError) as err:
            stub.ConsumerHeartbeat(pb.ConsumerHeartbeatRequest(group="workers", topic="Failover", client_id="x"),
                                   timeout=10, metadata=(("x-raftmq-redirect", "1"),))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert ("x-raftmq-leader", leader.grpc_address) in tuple(err.value.trailing_metadata())

        a = consumer(everyone, "Failover", "a", retry_timeout=60)
        b = consumer(everyone, "Failover", "b", retry_timeout=60)
        try:
            a.start()
            b.start()
            wait_settled([a, b], 2)
            before = [f"f{i}" for i in range(60)]
            produce(everyone, "Failover", before, retry_timeout=60)
            got: dict[str, list] = {"a": [], "b": []}
            drain_until({"a": a, "b": b}, got, set(before[:20]))

            leader.kill()
            survivors = [n.grpc_address for n in nodes if n is not leader]
            after = [f"g{i}" for i in range(60)]
            produce(everyone, "Failover", after, retry_timeout=60)
            drain_until({"a": a, "b": b}, got, set(before) | set(after))
            assert set(got["a"]) | set(got["b"]) == set(before) | set(after), "a message was lost"

            # the new leader's table fills from the next heartbeats: both members, one allocation again
            wait_settled([a, b], 2)
            d = eventually(lambda: describe_consumer_group(survivors, "workers", retry_timeout=60),
                           lambda d: len(d.members) == 2, timeout=DEADLINE)
            assert sorted(m.client_id for m in d.members) == ["a", "b"]
            assert d.answered_by in survivors
            new_leader = next(n for n in nodes if n.grpc_address == d.answered_by)
            status, metrics = new_leader.http_get("/metrics")
            assert status == 200
            assert any(line.startswith("raftmq_consumer_group_members{") and 'consumer_group="workers"' in line
                       and line.endswith(" 2.0") for line in metrics.splitlines()), "members gauge on the leader"
        finally:
            a.close()
            b.close()


def test_bad_membership_requests_get_a_clear_status(server):
    with Admin(server) as admin:
        admin.create_topic("BadInput", queues=1)
    channel = grpc.insecure_channel(server)
    stub = pbg.MessagingServiceStub(channel)
    admin_stub = pbg.AdminServiceStub(channel)
    cases = [
        (pb.ConsumerHeartbeatRequest(group="", topic="BadInput", client_id="c"), grpc.StatusCode.INVALID_ARGUMENT,
         "consumer group is empty"),
        (pb.ConsumerHeartbeatRequest(group="g", topic="BadInput", client_id=" "), grpc.StatusCode.INVALID_ARGUMENT,
         "client_id is empty"),
        (pb.ConsumerHeartbeatRequest(group="g", topic="BadInput", client_id="a\nb"),
         grpc.StatusCode.INVALID_ARGUMENT, "printable"),
        (pb.ConsumerHeartbeatRequest(group="g", topic="NoSuchTopic", client_id="c"), grpc.StatusCode.NOT_FOUND,
         "does not exist"),
        (pb.ConsumerHeartbeatRequest(group="g", topic="BadInput", client_id="c", heartbeat_interval_ms=-1),
         grpc.StatusCode.INVALID_ARGUMENT, "negative"),
    ]
    try:
        for req, code, text in cases:
            with pytest.raises(grpc.RpcError) as err:
                stub.ConsumerHeartbeat(req, timeout=10)
            assert err.value.code() == code and text in err.value.details(), (req, err.value.details())
        with pytest.raises(grpc.RpcError) as err:
            stub.UnregisterConsumer(pb.UnregisterConsumerRequest(group="g", topic="BadInput", client_id=""),
                                    timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # unregistering someone unknown is a no-op (a retry of a close must not fail)
        resp = stub.UnregisterConsumer(pb.UnregisterConsumerRequest(group="g", topic="BadInput", client_id="z"),
                                       timeout=10)
        assert list(resp.client_ids) == []
        with pytest.raises(grpc.RpcError) as err:
            admin_stub.DescribeConsumerGroup(pb.DescribeConsumerGroupRequest(group=""), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as err:
            admin_stub.DescribeConsumerGroup(pb.DescribeConsumerGroupRequest(group="nobody"), timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        channel.close()
    with pytest.raises(Exception, match="topic 'NoSuchTopic' does not exist"):
        PullConsumer("g", "NoSuchTopic", server).start()


def raftmq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args], capture_output=True, text=True, timeout=90,
                          env=_env(), cwd=REPO_ROOT)


def test_cli_group_describe(server):
    r = raftmq("group", "describe", "no-such-group", "-s", server)
    assert r.returncode == 3, r.stderr  # NotFoundError: the CLI's "not found" exit code
    assert "no live members, no committed offsets and no settings of its own" in one_error_line(r)
    r = raftmq("group", "describe", " ", "-s", server)
    assert r.returncode == 4 and "consumer group must not be empty" in one_error_line(r)

    with Admin(server) as admin:
        admin.create_topic("CliGroup", queues=QUEUES)
    produce(server, "CliGroup", ["x"])
    c = consumer(server, "CliGroup", "cli-member", heartbeat_interval=2.0)
    try:
        got = eventually(lambda: c.poll(timeout=0.2), bool, timeout=DEADLINE)
        assert [m.text for m in got] == ["x"]
        c.commit()
        r = raftmq("group", "describe", "workers", "-s", server)
        assert r.returncode == 0, r.stderr
        assert "Group: workers" in r.stdout and "cli-member" in r.stdout and "CliGroup" in r.stdout
        r = raftmq("group", "describe", "workers", "--json", "-s", server)
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        mine = [m for m in d["members"] if m["topic"] == "CliGroup"]
        assert mine[0]["client_id"] == "cli-member" and mine[0]["queue_ids"] == list(range(QUEUES))
        queues = [q for q in d["queues"] if q["topic"] == "CliGroup"]
        assert len(queues) == QUEUES and sum(q["max_offset"] for q in queues) == 1
        assert all(q["lag"] == 0 for q in queues)
        assert "cli-member" in raftmq("group", "describe", "workers", "--json", "-s", server).stdout
    finally:
        c.close()


def test_two_cli_consumers_of_one_group_split_the_topic(server):
    with Admin(server) as admin:
        admin.create_topic("CliSplit", queues=QUEUES)
    cmd = [sys.executable, "-m", "raftmq.client", "consume", "cli-workers", "CliSplit", "--from-beginning", "--json",
           "--idle-timeout", "15", "-s", server]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                              cwd=REPO_ROOT) for _ in range(2)]
    try:
        def members() -> int:
            r = raftmq("group", "describe", "cli-workers", "--json", "-s", server)
            return len(json.loads(r.stdout)["members"]) if r.returncode == 0 else 0

        assert eventually(members, lambda n: n == 2, timeout=DEADLINE) == 2
        bodies = [f"c{i}" for i in range(80)]
        produce(server, "CliSplit", bodies)
        outs = [p.communicate(timeout=DEADLINE) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    got = [{json.loads(line)["body"] for line in out.splitlines()} for out, _ in outs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert got[0] | got[1] == set(bodies), "a message was lost"
    assert got[0] and got[1], "each consumer process should have had a share of the queues"

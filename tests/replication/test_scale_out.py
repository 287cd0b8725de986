"""A cluster of two Raft groups of three members each (6 node processes; issue 37, docs/design/scale-out.md):
one group's leader SIGKILLed while the other group keeps acknowledging writes; a whole group down, its queues
refusing fast with its name while the other group writes on; no acknowledged message lost in either."""

from __future__ import annotations

import json
import threading
import time

import grpc
import pytest

from raftmq.client import Admin, Producer, errors
from raftmq.v1 import raftmq_pb2 as pb
from tests.replication.cluster_util import admin, messaging, read_topic, wait_leader
from tests.support.processes import group_specs, start_nodes, stop_all
from tests.support.waiting import wait_for

TOPIC = "scale"
QUEUES = 4


def _start(tmp_path, **cluster) -> list:
    specs = group_specs(tmp_path, groups=2, members=3, **({"cluster": cluster} if cluster else {}))
    nodes = start_nodes([s for group in specs for s in group], timeout=120)
    try:
        for g in (nodes[:3], nodes[3:]):
            wait_leader(g)
        admin(nodes[0]).CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(
            name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)), timeout=30)
    except BaseException:
        stop_all(nodes, kill=True)
        raise
    return nodes


@pytest.fixture
def cluster(tmp_path):
    nodes = _start(tmp_path)
    try:
        yield [nodes[:3], nodes[3:]]
    finally:
        stop_all(nodes, kill=True)


class Sending:
    """Threads sending through the SDK (round robin over the groups): what each group acknowledged, and when."""

    def __init__(self, servers: list[str], threads: int = 4, pinned: dict[int, str] | None = None):
        """``pinned``: thread index -> the group that thread always sends to (the others go round robin)."""
        self.producer = Producer(servers, retry_timeout=20)
        self.acked: dict[str, tuple[str, int, int]] = {}  # uniq key -> (group, queue, queue offset)
        self.acked_at: list[tuple[float, str]] = []  # (monotonic time, group)
        self.failures: dict[int, list[str]] = {i: [] for i in range(threads)}
        self.pinned = pinned or {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, i: int) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                r = self.producer.send(TOPIC, f"t{i}-{n}", broker=self.pinned.get(i))
            except errors.RaftmqError as e:  # not acknowledged: allowed to be lost (unknown outcomes too)
                with self.lock:
                    self.failures[i].append(f"{type(e).__name__}: {e}")
                time.sleep(0.05)
            else:
                with self.lock:
                    self.acked[r.uniq_key] = (r.broker, r.queue_id, r.queue_offset)
                    self.acked_at.append((time.monotonic(), r.broker))
            n += 1

    def __enter__(self) -> Sending:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)
        self.producer.close()

    def count(self, group: str, since: float = 0.0) -> int:
        with self.lock:
            return sum(1 for at, g in self.acked_at if g == group and at >= since)


def _all_acked_are_stored(groups, acked: dict[str, tuple[str, int, int]]) -> None:
    """Every acknowledged message is in its group's queue at the offset it was acknowledged with, on every
    live member of that group (each runs its own reput)."""
    for gi, group in enumerate(groups):
        name = f"g{gi}"
        mine = {k: (q, o) for k, (g, q, o) in acked.items() if g == name}
        for node in group:
            if not node.alive:
                continue

            def stored(node=node, mine=mine):
                held = {key: (q, off) for q, entries in read_topic(node, TOPIC, QUEUES).items()
                        for off, key, _ in entries}
                return all(held.get(k) == v for k, v in mine.items())

            wait_for(stored, f"every message {name} acknowledged on {node.spec.id}", timeout=60)


def test_one_groups_leader_killed_while_the_other_keeps_acknowledging(cluster):
    g0, g1 = cluster
    # threads 0-2 round robin over the groups; thread 3 always sends to g1
    with Sending([n.grpc_address for n in g0 + g1], pinned={3: "g1"}) as s:
        wait_for(lambda: s.count("g0") > 20 and s.count("g1") > 20, "both groups acknowledging", timeout=60)
        leader = wait_leader(g0)
        killed_at = time.monotonic()
        leader.kill()
        wait_for(lambda: s.count("g1", since=killed_at) > 20, "g1 acknowledging after g0's leader died", timeout=60)
        new = wait_leader(g0, exclude={leader.spec.id}, timeout=60)
        assert new is not leader
        elected_at = time.monotonic()
        wait_for(lambda: s.count("g0", since=elected_at) > 10, "g0 acknowledging under its new leader", timeout=60)
    assert s.failures[3] == [], s.failures[3]  # g1's sends never failed while g0 lost its leader
    assert s.acked
    _all_acked_are_stored(cluster, s.acked)


def test_a_whole_group_down_refuses_fast_naming_it_and_the_other_writes_on(cluster):
    g0, g1 = cluster
    with Sending([n.grpc_address for n in g0 + g1]) as s:
        wait_for(lambda: s.count("g1") > 20, "g1 acknowledging", timeout=60)
        for n in g1:
            n.kill()
        down_at = time.monotonic()
        wait_for(lambda: s.count("g0", since=down_at + 2) > 50, "g0 acknowledging with g1 down", timeout=60)
        # a send for g1's queue through a member of g0 is refused at once, naming g1
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as e:
                messaging(g0[0]).SendMessage(pb.SendMessageRequest(message=pb.Message(
                    topic=TOPIC, body=b"x", broker="g1")), timeout=30)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value.details()
            assert "group g1 is unavailable" in e.value.details(), e.value.details()
            assert time.monotonic() - started < 15  # answered well before the call's own deadline
    acked_g1 = {k: v for k, v in s.acked.items() if v[0] == "g1"}
    assert acked_g1 and not [at for at, g in s.acked_at if g == "g1" and at > down_at + 1]
    for n in g1:  # the group comes back with everything it acknowledged
        n.start()
    for n in g1:
        n.wait_ready(120)
    wait_leader(g1, timeout=120)
    _all_acked_are_stored(cluster, s.acked)


def _holds(node, topic: str) -> bool:
    return any(t.name == topic for t in admin(node).ListTopics(pb.ListTopicsRequest(), timeout=20).topics)


def test_a_delete_that_reached_one_group_completes_after_that_groups_leader_dies(tmp_path):
    """The delete reaches g0 only (g1 is down); g0's leader is SIGKILLed before g1 is back. The delete is in g0's
    replicated topic table (its mark), so g0's new leader does not bring the topic back from g1, and g1's leader
    completes the delete once g1 is back."""
    nodes = _start(tmp_path, topic_reconcile_interval_s=1)
    g0, g1 = nodes[:3], nodes[3:]
    try:
        for n in g1:
            n.kill()
        with pytest.raises(grpc.RpcError) as e:
            admin(g0[0]).DeleteTopic(pb.DeleteTopicRequest(name=TOPIC), timeout=30)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value.details()
        assert "group g1" in e.value.details() and "done: g0 deleted" in e.value.details(), e.value.details()
        leader = wait_leader(g0)
        leader.kill()
        new = wait_leader(g0, exclude={leader.spec.id}, timeout=60)
        marks = admin(new).ListTopics(pb.ListTopicsRequest(include_marks=True), timeout=20).marks
        assert [(m.name, m.deleted) for m in marks] == [(TOPIC, True)]  # on the new leader: it was replicated
        for n in g1:
            n.start()
        for n in g1:
            n.wait_ready(120)
        wait_leader(g1, timeout=120)
        live = [n for n in nodes if n.alive]
        wait_for(lambda: not any(_holds(n, TOPIC) for n in live), "the topic gone from every live member of both "
                 "groups (g1's leader completing the delete)", timeout=120)
        # the delete is done for good: a create afterwards is a new topic in every group
        answer = admin(g1[0]).CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(name=TOPIC)), timeout=30)
        assert [(o.group, o.outcome) for o in answer.groups] == [("g0", "created"), ("g1", "created")]
        wait_for(lambda: all(_holds(n, TOPIC) for n in live), "the topic created again on every live member",
                 timeout=60)
    finally:
        stop_all(nodes, kill=True)


def test_status_and_check_cover_every_group_and_name_the_group_that_differs(cluster):
    """Issue 38: `cluster status` lists both groups' members through one member of g0; `cluster check` proves
    each group's replicas identical (each among its own members) and, after one unit of a g1 follower's
    consume queue is changed, exits 9 naming g1 and that member; `--group g0` still passes."""
    import json
    import re

    from tests.client.test_cluster_check_e2e import converged, flip_tags_code, raftmq

    g0, g1 = cluster
    with Producer([n.grpc_address for n in g0]) as p:
        for broker in ("g0", "g1"):
            p.send_batch(TOPIC, [f"{broker}-{i}".encode() for i in range(10)], broker=broker, queue_id=0)
    for group in cluster:
        converged([n.grpc_address for n in group])
    entry = g0[0].grpc_address

    status = raftmq("cluster", "status", "-s", entry, secret=None)
    assert status.returncode == 0, status.stderr
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in status.stdout.splitlines()
            if line.startswith("| g")]
    assert sorted((r[0], r[1]) for r in rows) == [(f"g{gi}", f"g{gi}-n{j}") for gi in range(2) for j in range(3)]
    assert {r[0] for r in rows if r[3] == "Leader"} == {"g0", "g1"}, status.stdout
    assert all(r[-1] == "running" for r in rows), status.stdout

    ok = raftmq("cluster", "check", "-s", entry, "--json", secret=None)
    assert ok.returncode == 0, (ok.stdout, ok.stderr)
    report = json.loads(ok.stdout)
    assert report["identical"] and [g["group"] for g in report["groups"]] == ["g0", "g1"], report
    for g, members in zip(report["groups"], cluster, strict=True):
        assert g["identical"] and g["error"] == "" and g["queues_compared"] >= 1, g
        assert sorted(m["id"] for m in g["members"]) == sorted(n.spec.id for n in members), g

    with Admin([n.grpc_address for n in g1]) as a:
        leader = a.cluster_status().leader_id
    victim = next(n for n in g1 if n.spec.id != leader)
    flip_tags_code(victim.spec.data_dir, TOPIC, 0, 5)
    bad = raftmq("cluster", "check", "-s", entry, secret=None)
    assert bad.returncode == 9, (bad.stdout, bad.stderr)
    assert re.search(rf"group g1: first consume-queue difference: {TOPIC}/0 unit at queue offset 5: "
                     rf"{victim.spec.id} differs", bad.stderr), bad.stderr
    assert "group g0" not in bad.stderr.split("raftmq: error:")[-1], bad.stderr
    assert f"DIFFERS in {TOPIC}/0 at 5" in next(line for line in bad.stdout.splitlines()
                                                if line.startswith(f"| {victim.spec.id} ")), bad.stdout
    only_g0 = raftmq("cluster", "check", "-s", entry, "--group", "g0", secret=None)
    assert only_g0.returncode == 0 and "g1-n" not in only_g0.stdout, (only_g0.stdout, only_g0.stderr)
def test_a_whole_group_that_missed_a_user_and_a_group_setting_change_gets_them_when_it_is_back(tmp_path):
    """g1's three members SIGKILLed; an access user changed and one deleted, a consumer group's settings set,
    through g0 (each call fails naming g1); g1 brought back: its leader's settings reconcile pass brings it to g0's
    newer state without the changes being run again."""
    from raftmq.client.acl import AclAdmin
    from raftmq.client.consumer_group import update_consumer_group
    from raftmq.client.errors import RaftmqError
    from raftmq.client.security import ClientSecurity
    from raftmq.signing import signed_headers

    security = {"auth_enabled": True, "auth_admin_access_key": "root", "auth_admin_secret_key": "root-secret-1"}
    specs = group_specs(tmp_path, groups=2, members=3, security=security,
                        cluster={"secret": "cluster-secret", "topic_reconcile_interval_s": 1})
    nodes = start_nodes([s for group in specs for s in group], timeout=120)
    root = ClientSecurity(access_key="root", secret_key="root-secret-1")
    g0, g1 = nodes[:3], nodes[3:]

    def leader(group):  # wait_leader's ClusterStatus, signed: authentication is on
        for n in group:
            try:
                st = admin(n).ClusterStatus(pb.ClusterStatusRequest(), timeout=5,
                                            metadata=signed_headers("root", "root-secret-1"))
            except grpc.RpcError:
                continue
            if st.leader_id:
                return next((m for m in group if m.spec.id == st.leader_id), None)
        return None

    try:
        for g in (g0, g1):
            wait_for(lambda g=g: leader(g), "a leader in each group", timeout=60)
        with AclAdmin([n.grpc_address for n in g0], security=root, retry_timeout=20) as a0:
            a0.put_user("alice", "alice-secret-1")
            a0.put_user("bob", "bob-secret-12")
            for n in g1:
                n.kill()
            with pytest.raises(RaftmqError, match="group g1 is unavailable"):
                a0.add_rule("alice", "allow", ["PUB"], ["topic:orders-*"])
            with pytest.raises(RaftmqError, match="group g1 is unavailable"):
                a0.put_user("alice", "alice-secret-2")  # a new secret: the only change of its record
            with pytest.raises(RaftmqError, match="group g1 is unavailable"):
                a0.delete_user("bob")
        with pytest.raises(RaftmqError, match="group g1 is unavailable.*reconcile pass completes it"):
            update_consumer_group([g0[0].grpc_address], "cg-late", max_delivery_attempts=9, security=root,
                                  retry_timeout=5)
        for n in g1:
            n.start()
        for n in g1:
            n.wait_ready(timeout=120)

        def arrived():
            try:
                state = admin(leader(g1)).ListSettings(pb.ListSettingsRequest(), timeout=20,
                                                       metadata=signed_headers("root", "root-secret-1"))
            except (grpc.RpcError, AttributeError):  # no leader yet, or it just changed
                return False
            users = {u.name: json.loads(u.record) for u in state.users if u.present}
            groups = {g.name: json.loads(g.record) for g in state.groups if g.present}
            alice = users.get("alice")
            return ("bob" not in users and alice is not None and [r["actions"] for r in alice["rules"]] == [["PUB"]]
                    and groups.get("cg-late", {}).get("retryMaxTimes") == 8)

        wait_for(arrived, "g1 brought to g0's users and consumer-group settings by its reconcile pass", timeout=90)
        route = pb.QueryRouteRequest()
        for member in g1:  # alice's new secret is the one every member of g1 knows
            messaging(member).QueryRoute(route, timeout=20, metadata=signed_headers("alice", "alice-secret-2"))
            with pytest.raises(grpc.RpcError) as e:
                messaging(member).QueryRoute(route, timeout=20, metadata=signed_headers("alice", "alice-secret-1"))
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, e.value
    finally:
        stop_all(nodes, kill=True)

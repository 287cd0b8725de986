"""Groups learned at run time (issue 38, cluster.group_discovery, docs/design/scale-out.md#discovery): a second
group started after the first is found by name and routed to without restarting the first.

The groups' names are real names resolved by node/group_discovery.py's ``resolve``: a hosts file the setting
points to (``cluster.group_discovery_hosts``, read before DNS by the same function), because a test cannot add
DNS records. Both groups' gRPC ports have one number, as a Service port has on Kubernetes; each group listens on
its own loopback address (127.0.0.1 and 127.0.0.2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from raftmq.node.group_discovery import read_hosts
from raftmq.v1 import raftmq_pb2 as pb
from tests.replication.cluster_util import admin, messaging, wait_leader
from tests.support.processes import REPO_ROOT, NodeSpec, free_ports, start_nodes, stop_all
from tests.support.waiting import wait_for

TOPIC = "orders"
CLUSTER = "DefaultCluster"  # group 0 is a one-group configuration (cluster.members): its group is cluster.name


def _member(spec: NodeSpec) -> dict[str, str]:
    return {"id": spec.id, "raft": spec.raft_address, "grpc": spec.grpc_address}


def _specs(base: Path, hosts: Path) -> tuple[NodeSpec, NodeSpec]:
    grpc_port, h0, r0, h1, r1 = free_ports(5)
    discovery = {"group_discovery": f"raftmq-g{{index}}-headless.test:{grpc_port}",
                 "group_discovery_hosts": str(hosts), "topic_reconcile_interval_s": 1}
    g0 = NodeSpec("g0-n0", base / "g0-n0" / "store", grpc_port, h0, r0, {"cluster": dict(discovery)})
    g0.members = [_member(g0)]  # today's one-group configuration, plus discovery
    g1 = NodeSpec("g1-n0", base / "g1-n0" / "store", grpc_port, h1, r1, {"cluster": dict(discovery)},
                  host="127.0.0.2")
    g1.overrides["cluster"].update(group="g1", groups=[{"name": "g1", "store_host": "127.0.0.1:10912",
                                                        "members": [_member(g1)]}])
    return g0, g1


def _route(node, topic: str = TOPIC) -> pb.QueryRouteResponse:
    return messaging(node).QueryRoute(pb.QueryRouteRequest(topic=topic), timeout=20)


def test_read_hosts_takes_every_name_of_a_line_and_skips_comments(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# groups\n127.0.0.1 a.test A2.test  # g0\n\n127.0.0.2 b.test\n127.0.0.3 b.test\n")
    assert read_hosts(str(f)) == {"a.test": ["127.0.0.1"], "a2.test": ["127.0.0.1"],
                                  "b.test": ["127.0.0.2", "127.0.0.3"]}


def test_a_group_started_later_is_learned_without_a_restart(tmp_path):
    from raftmq.client import Producer

    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 raftmq-g0-headless.test\n")
    g0_spec, g1_spec = _specs(tmp_path, hosts)
    (g0,) = start_nodes([g0_spec])
    nodes = [g0]
    try:
        wait_leader([g0])
        admin(g0).CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(name=TOPIC, read_queue_nums=4,
                                                                          write_queue_nums=4)), timeout=30)
        wait_for(lambda: [g.name for g in _route(g0).groups] == [CLUSTER], "g0 routes to itself", timeout=30)
        before = messaging(g0).SendMessage(pb.SendMessageRequest(message=pb.Message(topic=TOPIC, body=b"a")),
                                           timeout=20).result
        assert before.broker == ""  # a one-group cluster answers exactly as before groups
        pid = g0.proc.pid
        producer = Producer([g0.grpc_address], retry_timeout=10)  # a running client, from before g1 exists
        assert producer.send(TOPIC, b"x").broker == ""

        (g1,) = start_nodes([g1_spec])
        nodes.append(g1)
        wait_leader([g1])
        hosts.write_text(hosts.read_text() + "127.0.0.2 raftmq-g1-headless.test\n")  # the new group's Service

        def both_groups_with_the_topic():
            route = _route(g0)
            return ([g.name for g in route.groups] == [CLUSTER, "g1"]
                    and all(g.available and g.has_topic for g in route.groups))

        # g0 learns g1 from its name; g1's reconcile pass creates the topic g0 had before g1 existed
        wait_for(both_groups_with_the_topic, "g0's route lists g1 with the topic", timeout=90)
        assert g0.alive and g0.proc.pid == pid  # no restart
        g1_route = next(g for g in _route(g0).groups if g.name == "g1")
        assert list(g1_route.endpoints) == [g1.grpc_address] and g1_route.store_host == "127.0.0.1:10912"
        wait_for(lambda: [g.name for g in _route(g1).groups] == [CLUSTER, "g1"], "g1 learns g0", timeout=60)
        # RocketMQ 5's QueryRoute: the queues of both groups, each group as a broker with its own endpoints
        from raftmq.rocketmq.v2 import definition_pb2 as v2
        from raftmq.rocketmq.v2 import service_pb2 as v2s
        from raftmq.rocketmq.v2 import service_pb2_grpc as v2_grpc

        v2_route = v2_grpc.MessagingServiceStub(g0.channel()).QueryRoute(
            v2s.QueryRouteRequest(topic=v2.Resource(name=TOPIC)),
            metadata=(("x-mq-client-id", "test@1@0@abc"), ("x-mq-protocol", "GRPC_V2")), timeout=20)
        assert v2_route.status.code == v2.OK, v2_route.status
        brokers = {q.broker.name: [(a.host, a.port) for a in q.broker.endpoints.addresses]
                   for q in v2_route.message_queues}
        assert brokers == {CLUSTER: [("127.0.0.1", g0.spec.grpc_port)], "g1": [("127.0.0.2", g1.spec.grpc_port)]}
        assert len(v2_route.message_queues) == 8

        # one address (g0's) for everything: a send naming g1 is stored in g1
        r = messaging(g0).SendMessage(pb.SendMessageRequest(message=pb.Message(
            topic=TOPIC, body=b"b", broker="g1", queue_id=1, uniq_key="K-g1")), timeout=20).result
        assert (r.broker, r.queue_id) == ("g1", 1)

        def pulled_from_g1() -> list[str]:
            pulled = messaging(g1).PullMessage(pb.PullMessageRequest(topic=TOPIC, queue_id=1,
                                                                     offset=r.queue_offset), timeout=20)
            return [m.uniq_key for m in pulled.messages]

        wait_for(lambda: pulled_from_g1() == ["K-g1"], "the message in g1's queue 1", timeout=30)

        # the running SDK client asks for its one-group route again (after ROUTE_TTL_S): both groups, both written
        with producer:
            wait_for(lambda: {producer.send(TOPIC, b"x").broker for _ in range(8)} == {CLUSTER, "g1"},
                     "the running SDK client sends to both groups", timeout=120, interval=1)

        env = {"PYTHONPATH": str(REPO_ROOT / "proto"), "PATH": "/usr/bin:/bin"}
        out = subprocess.run([sys.executable, "-m", "raftmq.client", "--server", g0.grpc_address, "cluster",
                              "status"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 0, out.stderr
        assert "g1" in out.stdout and g1.grpc_address in out.stdout, out.stdout
        assert "group discovery: group g1 joined the cluster" in g0.spec.log_path.read_text()

        # the group's name gone (its Service deleted after a drain): the others stop routing to it
        hosts.write_text("127.0.0.1 raftmq-g0-headless.test\n")
        wait_for(lambda: [g.name for g in _route(g0).groups] == [CLUSTER], "g0 forgets g1", timeout=60)
        assert "group discovery: group g1 is gone" in g0.spec.log_path.read_text()
    finally:
        stop_all(nodes)


@pytest.mark.parametrize("cluster, expected", [
    ({"group_discovery": "raftmq-headless:8081"}, "has no {index}"),
    ({"group_discovery": "raftmq-g{index}-headless"}, "cluster.group_discovery"),
    ({"group_discovery": "raftmq-g{index}-{name}:8081"}, "only {index}"),
    ({"group_discovery_hosts": "/etc/hosts"}, "cluster.group_discovery is empty"),
    ({"group_discovery": "g{index}:8081", "group_discovery_hosts": "/nonexistent/hosts"}, "not a readable file"),
])
def test_bad_discovery_settings_are_refused_naming_the_key(cluster, expected):
    from raftmq.node.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, environ={}, assignments=[f"cluster.{k}={v}" for k, v in cluster.items()])
    assert expected in str(e.value)

"""Source-address allow-lists (issue 14) on real node processes: the node-wide client list on gRPC and HTTP
(IPv4 and IPv6), users' own networks (replicated, set with the CLI), the member list on the Raft port and the
replica service, and forwarded calls judged by the original client's address.

127.0.0.0/8 is all loopback, so a relay that connects from 127.0.0.N (tests/support/relay.py) plays a client on
another network."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys

import grpc
import pytest

from raftmq.client.acl import AclAdmin
from raftmq.client.admin import Admin
from raftmq.client.errors import InvalidArgumentError, PermissionDeniedError
from raftmq.client.producer import Producer
from raftmq.client.security import ClientSecurity, signed_headers
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pbg
from raftmq.v1 import replica_pb2, replica_pb2_grpc
from tests.support.metrics import samples
from tests.support.processes import REPO_ROOT, NodeProcess, node_specs, stop_all
from tests.support.relay import SourceRelay
from tests.support.waiting import wait_for

ROOT_AK, ROOT_SK = "root", "root-secret-123"
ROOT = ClientSecurity(access_key=ROOT_AK, secret_key=ROOT_SK)


def _audit(node: NodeProcess) -> list[dict]:
    return [json.loads(line.split("raftmq.audit", 1)[1].split("] ", 1)[1])
            for line in node.spec.log_path.read_text().splitlines() if "raftmq.audit" in line]


def _target(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def _http_get(port: int, path: str, source_ip: str, host: str = "127.0.0.1",
              headers: dict[str, str] | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection(host, port, timeout=10, source_address=(source_ip, 0))
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")])
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


# ---------------------------------------------------------------------------------------------- one node


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One node on the dual-stack wildcard: clients from 127.0.0.0/29 and ::1 only; 127.0.0.1 is an HTTP proxy."""
    d = tmp_path_factory.mktemp("net-single")
    [spec] = node_specs(d, 1, security={
        "auth_enabled": True, "auth_admin_access_key": ROOT_AK, "auth_admin_secret_key": ROOT_SK,
        "allowed_client_networks": ["127.0.0.0/29", "::1"], "trusted_http_proxies": ["127.0.0.1"]})
    spec.overrides["node"] = {"grpc_listen": f"[::]:{spec.grpc_port}", "http_listen": f"[::]:{spec.http_port}"}
    node = NodeProcess(spec)
    try:
        node.start()
        node.wait_ready(60)
        with Admin(node.grpc_address, security=ROOT) as admin:
            admin.create_topic("orders")
        yield node
    finally:
        stop_all([node])


def test_a_client_outside_the_node_wide_list_is_refused_on_grpc_naming_its_address(single):
    with Admin(single.grpc_address, security=ROOT) as admin:  # 127.0.0.1: inside 127.0.0.0/29
        assert any(t.name == "orders" for t in admin.list_topics())
    with Admin(f"[::1]:{single.spec.grpc_port}", security=ROOT) as admin:  # IPv6 ::1: listed
        assert any(t.name == "orders" for t in admin.list_topics())
    with SourceRelay(_target(single.grpc_address), "127.0.0.9") as relay:
        with Admin(relay.address, security=ROOT, timeout=5, retry_timeout=1) as admin:
            with pytest.raises(PermissionDeniedError) as e:
                admin.list_topics()
        text = str(e.value)
        assert "127.0.0.9" in text and "security.allowed_client_networks" in text and "127.0.0.9/32" in text
        # the CLI: exit 8, one line naming the address
        r = _cli("topic", "list", "--server", relay.address, "--access-key", ROOT_AK, "--secret-key", ROOT_SK)
        assert r.returncode == 8 and "client address 127.0.0.9 may not use" in r.stderr, r.stderr
    refusals = [a for a in _audit(single) if a["audit"] == "refused_network"]
    assert any(a["peer"] == "127.0.0.9" and a["port"] == "grpc" for a in refusals)


def test_http_refuses_outside_the_list_but_keeps_the_open_paths_open(single):
    port = single.spec.http_port
    status, body = _http_get(port, "/ui", "127.0.0.9")
    assert status == 403 and "127.0.0.9" in body and "security.allowed_client_networks" in body
    assert _http_get(port, "/metrics", "127.0.0.9")[0] == 200   # open paths (probes, scrapes) stay open
    # inside the list: now it is about credentials (a browser on the console is sent to its login page)
    assert _http_get(port, "/ui", "127.0.0.2") == (303, "log in first: /ui/login\n")
    assert _http_get(port, "/ui/login", "127.0.0.9")[0] == 403  # the login page is behind the list too
    assert _http_get(port, "/nothing", "127.0.0.2")[0] == 401
    assert _http_get(port, "/nothing", "::1", host="::1")[0] == 401  # IPv6 too
    assert any(a["audit"] == "refused_network" and a["port"] == "http" and a["peer"] == "127.0.0.9"
               for a in _audit(single))


def _refusals(node: NodeProcess) -> dict[tuple[str, str], float]:
    return {(s.labels["reason"], s.labels["port"]): s.value for s in samples(node)
            if s.name == "raftmq_security_refusals_total"}


def test_behind_a_trusted_http_proxy_the_client_it_names_is_judged(single):
    """An ingress at 127.0.0.1 (security.trusted_http_proxies) forwards for its clients: the allow-list, the audit
    line and the console's login count see the client named in X-Forwarded-For; anybody else's header is a claim
    and ignored."""
    port = single.spec.http_port

    def via(source: str, forwarded_for: str) -> tuple[int, str]:
        return _http_get(port, "/ui/cluster", source, headers={"X-Forwarded-For": forwarded_for})

    status, body = via("127.0.0.1", "127.0.0.9")
    assert status == 403 and "client address 127.0.0.9 may not use" in body
    assert via("127.0.0.1", "127.0.0.2")[0] == 303  # inside the list: on to the login page
    assert via("127.0.0.2", "127.0.0.9")[0] == 303  # not a proxy: its header is ignored, 127.0.0.2 is the client
    # each proxy appends the address it got the request from: the right-most one that is not a proxy counts,
    # so a client cannot hide behind an address it wrote into the header itself
    assert via("127.0.0.1", "127.0.0.2, 127.0.0.9")[0] == 403
    assert via("127.0.0.1", "127.0.0.9, 127.0.0.2")[0] == 303
    assert any(a["audit"] == "refused_network" and a["peer"] == "127.0.0.9" and a["port"] == "http"
               for a in _audit(single))


def test_every_kind_of_refusal_is_counted_on_metrics_by_reason_and_port(single):
    """What the audit lines say one by one, /metrics counts for dashboards and alerts."""
    before = _refusals(single)
    with SourceRelay(_target(single.grpc_address), "127.0.0.9") as relay, \
            grpc.insecure_channel(relay.address) as channel:  # outside the node-wide list
        with pytest.raises(grpc.RpcError) as e:
            pbg.AdminServiceStub(channel).ListTopics(pb.ListTopicsRequest(), timeout=10)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with grpc.insecure_channel(single.grpc_address) as channel:  # inside it, but no signature
        with pytest.raises(grpc.RpcError) as e:
            pbg.AdminServiceStub(channel).ListTopics(pb.ListTopicsRequest(), timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with AclAdmin(single.grpc_address, security=ROOT) as acl:
        acl.put_user("bob", "bob-secret-123456")
    with AclAdmin(single.grpc_address, security=ClientSecurity(access_key="bob", secret_key="bob-secret-123456"),
                  retry_timeout=1) as acl, pytest.raises(PermissionDeniedError):
        acl.list_users()  # admin only: bob is signed in but denied
    assert _http_get(single.spec.http_port, "/ui", "127.0.0.9")[0] == 403
    assert _http_get(single.spec.http_port, "/nothing", "127.0.0.2")[0] == 401  # (the console redirects to its login)
    after = _refusals(single)
    grew = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
    assert grew == {("refused_network", "grpc"): 1, ("unauthenticated", "grpc"): 1, ("denied", "grpc"): 1,
                    ("refused_network", "http"): 1, ("unauthenticated", "http"): 1}


def test_a_users_own_networks_are_set_with_the_cli_and_enforced(single):
    flags = ["--server", single.grpc_address, "--access-key", ROOT_AK, "--secret-key", ROOT_SK]
    bad = _cli("acl", "user", "add", "alice", "--network", "10.0.0.1/8", *flags)
    assert bad.returncode == 2 and "--network '10.0.0.1/8'" in bad.stderr, bad.stderr
    add = _cli("acl", "user", "add", "alice", "--json", "--network", "127.0.0.7", *flags)
    assert add.returncode == 0, add.stderr
    created = json.loads(add.stdout)
    assert created["networks"] == ["127.0.0.7/32"]
    alice = ClientSecurity(access_key="alice", secret_key=created["secret_key"])
    with AclAdmin(single.grpc_address, security=ROOT) as acl:
        acl.add_rule("alice", "allow", ["PUB", "SUB"], ["topic:orders"])
    # from 127.0.0.1 (allowed node-wide, not for alice): refused naming the user, the address and the fix
    # (on the SDK's send stream: refused when it opens, before any send is read, so a definite refusal)
    with Producer(single.grpc_address, security=alice, timeout=5, retry_timeout=1) as p:
        with pytest.raises(PermissionDeniedError) as e:
            p.send("orders", b"x")
    assert "user 'alice' may not connect from 127.0.0.1" in str(e.value)
    assert "raftmq acl user networks alice" in str(e.value)
    with SourceRelay(_target(single.grpc_address), "127.0.0.7") as relay:  # from alice's own network: fine
        with Producer(relay.address, security=alice) as p:
            assert p.send("orders", b"from 127.0.0.7").topic == "orders"
            # a topic alice may not write: that send's own outcome is the refusal, the stream goes on
            with pytest.raises(PermissionDeniedError, match="may not PUB on topic:other"):
                p.send("other", b"no")
            assert p.send("orders", b"still streaming").topic == "orders"
    # HTTP: the same user check
    headers = dict(signed_headers("alice", created["secret_key"]))
    conn = http.client.HTTPConnection("127.0.0.1", single.spec.http_port, timeout=10)
    conn.request("GET", "/ui", headers=headers)
    r = conn.getresponse()
    assert r.status == 403 and "user 'alice' may not connect from 127.0.0.1" in r.read().decode()
    conn.close()
    # the list shows it; --any lifts it; a bad network on the server side is INVALID_ARGUMENT
    listed = _cli("acl", "user", "list", *flags)
    assert "alice\t1 rule(s)\tnetworks: 127.0.0.7/32" in listed.stdout, listed.stdout
    assert _cli("acl", "user", "networks", "alice", *flags).returncode == 2  # neither --network nor --any
    lifted = _cli("acl", "user", "networks", "alice", "--any", *flags)
    assert lifted.returncode == 0 and "may sign from: any" in lifted.stdout, lifted.stderr
    with Producer(single.grpc_address, security=alice) as p:
        assert p.send("orders", b"from anywhere").topic == "orders"
    with AclAdmin(single.grpc_address, security=ROOT) as acl:
        with pytest.raises(InvalidArgumentError, match="did you mean 10.0.0.0/8"):
            acl.set_networks("alice", ["10.0.0.1/8"])
        assert acl.set_networks("alice", ["fd00::/8", "127.0.0.7"]).networks == ("fd00::/8", "127.0.0.7/32")
    refusals = [a for a in _audit(single) if a["audit"] == "refused_network" and a.get("user") == "alice"]
    assert {a["port"] for a in refusals} == {"grpc", "http"}
    changes = [a for a in _audit(single) if a["audit"] == "acl_change" and a["op"] == "user_networks"]
    assert changes and changes[-1]["networks"] == ["fd00::/8", "127.0.0.7/32"]


# ---------------------------------------------------------------------------------------------- three members

CLIENT_NET, MEMBER_NET = "127.0.0.3/32", "127.0.0.1/32"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("net-cluster")
    specs = node_specs(d, 3, cluster={"secret": "cluster-secret"}, security={
        "auth_enabled": True, "auth_admin_access_key": ROOT_AK, "auth_admin_secret_key": ROOT_SK,
        "allowed_client_networks": [CLIENT_NET], "allowed_member_networks": [MEMBER_NET]})
    nodes = [NodeProcess(s) for s in specs]
    try:
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_ready(90)
        yield nodes
    finally:
        stop_all(nodes)


def _leader_and_follower(nodes):
    with Admin([n.grpc_address for n in nodes], security=ROOT) as admin:
        status = admin.cluster_status()
    leader = next(m.id for m in status.members if m.role == "leader")
    by_id = {n.spec.id: n for n in nodes}
    return by_id[leader], next(n for n in nodes if n.spec.id != leader)


def test_members_replicate_and_the_raft_port_drops_strangers(cluster):
    with Admin([n.grpc_address for n in cluster], security=ROOT) as admin:
        admin.create_topic("events")
        status = admin.cluster_status()
    assert all(m.healthy for m in status.members), status
    target = cluster[1]
    with socket.create_connection(("127.0.0.1", target.spec.raft_port), timeout=10,
                                  source_address=("127.0.0.5", 0)) as s:
        s.settimeout(10)
        try:
            s.sendall(b"\x00\x00\x00\x10hello raft port!")
            got = s.recv(100)
        except ConnectionResetError:
            got = b""
    assert got == b""  # closed before anything was read or answered
    wait_for(lambda: any(a["audit"] == "refused_network" and a["port"] == "raft" and a["peer"] == "127.0.0.5"
                         for a in _audit(target)), "the Raft port's refusal in the audit log", timeout=30)


def test_the_replica_service_takes_members_only(cluster):
    node = cluster[0]
    md = (("x-raftmq-secret", "cluster-secret"),)
    with SourceRelay(_target(node.grpc_address), "127.0.0.3") as relay:  # a client network, not a member one
        with grpc.insecure_channel(relay.address) as ch:
            stub = replica_pb2_grpc.ReplicaServiceStub(ch)
            with pytest.raises(grpc.RpcError) as e:
                stub.GetReplicaStatus(replica_pb2.GetReplicaStatusRequest(), metadata=md, timeout=10)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "127.0.0.3" in e.value.details() and "security.allowed_member_networks" in e.value.details()


def test_a_forwarded_call_is_judged_by_the_original_clients_address(cluster):
    leader, follower = _leader_and_follower(cluster)
    with AclAdmin([n.grpc_address for n in cluster], security=ROOT) as acl:
        acl.put_user("bob", "bob-secret-123", networks=["127.0.0.3"])
        bob = acl.add_rule("bob", "allow", ["PUB"], ["topic:events"])
    # the change is committed; each member applies it when it gets there (a loaded box: seconds later)
    _wait_acl_everywhere(cluster, bob, "events")
    request = pb.SendMessageRequest(message=pb.Message(topic="events", body=b"relayed"))

    def send_as_bob(address: str, extra=()):
        with grpc.insecure_channel(address) as ch:
            stub = pbg.MessagingServiceStub(ch)
            return stub.SendMessage(request, metadata=(*signed_headers("bob", "bob-secret-123"), *extra),
                                    timeout=20)

    with SourceRelay(_target(follower.grpc_address), "127.0.0.3") as relay:
        # the follower relays it from 127.0.0.1 (a member); the leader judges bob by 127.0.0.3, his network
        r = wait_for(lambda: _ok(lambda: send_as_bob(relay.address)), "bob's send through the follower", timeout=60)
        assert r.result.msg_id
    with SourceRelay(_target(follower.grpc_address), "127.0.0.4") as relay:  # no allowed network at all
        with pytest.raises(grpc.RpcError) as e:
            send_as_bob(relay.address)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED and "127.0.0.4" in e.value.details()
    # a member address claiming to relay, without the cluster secret: refused, its claim not believed
    forged = (("x-raftmq-forwarded-by", "n9"), ("x-raftmq-forwarded-for", "ipv4:127.0.0.3:1000"))
    with pytest.raises(grpc.RpcError) as e:
        send_as_bob(leader.grpc_address, forged)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED and "cluster secret" in e.value.details()
    with Admin([n.grpc_address for n in cluster], security=ROOT) as admin:  # reads any member: wait for its reput
        wait_for(lambda: sum(q.max_offset for q in admin.queue_offsets("events")) >= 1, "bob's message stored",
                 timeout=60)


def _wait_acl_everywhere(nodes, user, topic: str) -> None:
    """Until every member's own copy of the ACL holds ``user`` as given (ListAclUsers answers from it) and every
    member knows ``topic`` (the member that relays a send checks it)."""
    def applied(node) -> bool:
        with AclAdmin(node.grpc_address, security=ROOT) as acl, Admin(node.grpc_address, security=ROOT) as admin:
            return user in acl.list_users() and topic in {t.name for t in admin.list_topics()}
    wait_for(lambda: all(applied(n) for n in nodes), f"user {user.access_key} and topic {topic} on every member",
             timeout=60)


def _ok(call):
    """The call's answer, or None while the cluster cannot take it yet (an election)."""
    try:
        return call()
    except grpc.RpcError as e:
        if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN):
            return None
        raise

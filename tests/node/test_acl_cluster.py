"""Three real members with mutual TLS, authentication and access rules: users and rules are replicated and in
force on every member without restarts; members keep talking to each other over TLS; the CLI drives it all."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys

import pytest

from raftmq.client.acl import AclAdmin
from raftmq.client.admin import Admin
from raftmq.client.errors import PermissionDeniedError, RaftmqError, UnauthenticatedError
from raftmq.client.producer import Producer
from raftmq.client.security import ClientSecurity
from tests.support.certs import CertificateAuthority
from tests.support.processes import REPO_ROOT, NodeProcess, node_specs, stop_all
from tests.support.waiting import wait_for

ROOT_AK, ROOT_SK = "root", "root-secret-123"


@pytest.fixture(scope="module")
def secured_cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("acl-cluster")
    ca = CertificateAuthority(d)
    server, client = ca.issue("member"), ca.issue("client", server=False)
    security = {"tls_cert_file": str(server.cert), "tls_key_file": str(server.key),
                "tls_client_ca_file": str(ca.cert_file), "auth_enabled": True,
                "auth_admin_access_key": ROOT_AK, "auth_admin_secret_key": ROOT_SK}
    specs = node_specs(d, 3, security=security, cluster={"secret": "cluster-secret"})
    nodes = [NodeProcess(s) for s in specs]
    http = ssl.create_default_context(cafile=str(ca.cert_file))
    http.load_cert_chain(str(client.cert), str(client.key))
    try:
        for n in nodes:
            n.http_context = http
            n.start()
        for n in nodes:
            n.wait_ready(90)
        tls = {"ca_file": str(ca.cert_file), "cert_file": str(client.cert), "key_file": str(client.key)}
        yield nodes, tls
    finally:
        stop_all(nodes)


def _sec(tls: dict, ak: str = ROOT_AK, sk: str = ROOT_SK) -> ClientSecurity:
    return ClientSecurity(**tls, access_key=ak, secret_key=sk)


def _outcome(fn) -> str:
    try:
        fn()
        return "ok"
    except PermissionDeniedError:
        return "denied"
    except UnauthenticatedError:
        return "unauthenticated"
    except RaftmqError as e:
        return f"error: {e}"


def _everywhere(nodes, tls, ak, sk, want: str, topic: str = "orders") -> None:
    """Each member, asked directly, answers ``want`` to a SUB-needing read of ``topic``."""
    for n in nodes:
        def read(n=n):
            with Admin(n.grpc_address, timeout=5, retry_timeout=1, security=_sec(tls, ak, sk)) as admin:
                return _outcome(lambda: admin.queue_offsets(topic))
        wait_for(lambda read=read: read() == want, f"{n.spec.id} answering {want}", timeout=30)


def test_members_talk_over_mutual_tls_and_a_policy_change_reaches_every_member(secured_cluster):
    nodes, tls = secured_cluster
    addresses = [n.grpc_address for n in nodes]
    with Admin(addresses, security=_sec(tls)) as admin:
        status = admin.cluster_status()  # the answering member asks its peers over TLS
        assert sorted(m.id for m in status.members) == ["n0", "n1", "n2"]
        assert all(m.healthy and not m.error for m in status.members), status
        admin.create_topic("orders")
    with AclAdmin(addresses, security=_sec(tls)) as acl:
        acl.put_user("alice", "alice-secret-1")
        _everywhere(nodes, tls, "alice", "alice-secret-1", "denied")   # known everywhere, no rule yet
        acl.add_rule("alice", "allow", ["SUB", "PUB"], ["topic:orders"])
        _everywhere(nodes, tls, "alice", "alice-secret-1", "ok")
        with Producer(addresses, security=_sec(tls, "alice", "alice-secret-1")) as p:
            assert p.send("orders", b"signed").topic == "orders"
        acl.add_rule("alice", "deny", ["SUB"], ["topic:ord*"])
        _everywhere(nodes, tls, "alice", "alice-secret-1", "denied")
        acl.remove_rule("alice", 1)
        _everywhere(nodes, tls, "alice", "alice-secret-1", "ok")
        acl.delete_user("alice")
        _everywhere(nodes, tls, "alice", "alice-secret-1", "unauthenticated")
        acl.put_user("bob", "bob-secret-12")
        with AclAdmin(addresses, security=_sec(tls, "bob", "bob-secret-12")) as as_bob, \
                pytest.raises(PermissionDeniedError, match="user 'bob' may not ADMIN on cluster"):
            as_bob.put_user("mallory", "mallory-secret")


def test_a_user_or_rule_just_added_is_honoured_at_once_by_every_member(secured_cluster):
    """A follower learns of a commit a few ms after the leader acknowledged it; asked right away, it must not
    refuse a user or rule on its older copy of the ACL (it catches up with the leader before refusing)."""
    nodes, tls = secured_cluster
    addresses = [n.grpc_address for n in nodes]
    with Admin(addresses, security=_sec(tls)) as admin:
        if "fresh" not in [t.name for t in admin.list_topics()]:
            admin.create_topic("fresh")
    users = [(f"carol{i}", f"carol-secret-{i:02d}") for i in range(8)]
    members = {}
    for ak, sk in users:  # connected before the user exists, so nothing stands between the change and the read
        # one try each (no retry), given the time a loaded box needs: the answer must be the first one
        members[ak] = [Admin(n.grpc_address, timeout=30, retry_timeout=0, security=_sec(tls, ak, sk))
                       for n in nodes]
        for m in members[ak]:
            assert _outcome(lambda m=m: m.queue_offsets("fresh")) == "unauthenticated"
    try:
        with AclAdmin(addresses, security=_sec(tls)) as acl:
            for ak, sk in users:
                acl.put_user(ak, sk)
                assert [_outcome(lambda m=m: m.queue_offsets("fresh")) for m in members[ak]] == ["denied"] * 3
                acl.add_rule(ak, "allow", ["SUB"], ["topic:fresh"])
                assert [_outcome(lambda m=m: m.queue_offsets("fresh")) for m in members[ak]] == ["ok"] * 3
            for ak, _ in users:
                acl.delete_user(ak)
    finally:
        for clients in members.values():
            for m in clients:
                m.close()


def _cli(*args: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
    full["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")])
    full.update(env)
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args], cwd=REPO_ROOT, env=full, capture_output=True,
                          text=True, timeout=60, input=stdin)


def test_cli_acl_commands_with_every_security_flag(secured_cluster):
    nodes, tls = secured_cluster
    server = ",".join(n.grpc_address for n in nodes)
    flags = ["--server", server, "--tls", "--ca", tls["ca_file"], "--cert", tls["cert_file"], "--key",
             tls["key_file"], "--access-key", ROOT_AK, "--secret-key", ROOT_SK]
    env_root = {"RAFTMQ_SERVER": server, "RAFTMQ_TLS": "1", "RAFTMQ_TLS_CA": tls["ca_file"],
                "RAFTMQ_TLS_CERT": tls["cert_file"], "RAFTMQ_TLS_KEY": tls["key_file"],
                "RAFTMQ_ACCESS_KEY": ROOT_AK, "RAFTMQ_SECRET_KEY": ROOT_SK}

    add = _cli("acl", "user", "add", "carol", "--json", *flags, env={})
    assert add.returncode == 0, add.stderr
    carol_sk = json.loads(add.stdout)["secret_key"]
    stdin_add = _cli("acl", "user", "add", "dave", "--secret-key-stdin", env=env_root, stdin="dave-secret-1\n")
    assert stdin_add.returncode == 0 and "dave-secret-1" not in stdin_add.stdout
    rule = _cli("acl", "policy", "add", "carol", "--allow", "PUB,ADMIN", "-r", "topic:carol-*", env=env_root)
    assert rule.returncode == 0, rule.stderr
    listed = _cli("acl", "policy", "list", "carol", env=env_root)
    assert "carol\t0\tallow PUB,ADMIN on topic:carol-*" in listed.stdout
    users = _cli("acl", "user", "list", "--json", env=env_root)
    assert {u["access_key"] for u in json.loads(users.stdout)} >= {"root", "carol", "dave"}
    assert carol_sk not in users.stdout and "dave-secret-1" not in users.stdout

    env_carol = env_root | {"RAFTMQ_ACCESS_KEY": "carol", "RAFTMQ_SECRET_KEY": carol_sk}
    ok = _cli("topic", "create", "carol-events", env=env_carol)
    assert ok.returncode == 0, ok.stderr
    denied = _cli("topic", "create", "payments", env=env_carol)
    assert denied.returncode == 8
    assert "user 'carol' may not ADMIN on topic:payments" in denied.stderr.strip().splitlines()[-1]
    wrong = _cli("topic", "list", env=env_carol | {"RAFTMQ_SECRET_KEY": "not-carols-secret"})
    assert wrong.returncode == 8 and "signature does not match for access key 'carol'" in wrong.stderr
    unsigned = _cli("topic", "list", env={k: v for k, v in env_root.items() if "KEY" not in k or "TLS" in k})
    assert unsigned.returncode == 8 and "requires signed requests" in unsigned.stderr
    assert _cli("acl", "policy", "remove", "carol", "0", env=env_root).returncode == 0
    gone = _cli("acl", "user", "delete", "nobody", env=env_root)
    assert gone.returncode == 3 and "no user with access key 'nobody'" in gone.stderr


def test_denied_and_changes_are_audited_without_secrets(secured_cluster):
    nodes, tls = secured_cluster
    logs = "".join(n.spec.log_path.read_text() for n in nodes)
    audit = [json.loads(line.split("raftmq.audit", 1)[1].split("] ", 1)[1]) for line in logs.splitlines()
             if "raftmq.audit" in line]
    assert any(a["audit"] == "acl_change" and a["op"] == "user_put" and a["by"] == ROOT_AK for a in audit)
    assert any(a["audit"] == "denied" and a.get("user") and a.get("resource") and a.get("peer") for a in audit)
    for secret in (ROOT_SK, "alice-secret-1", "dave-secret-1"):
        assert secret not in logs


def test_transactions_and_the_check_stream_under_access_rules(secured_cluster):
    """Transactions pass the same rules: the half message needs PUB on the topic, ending it PUB on the group."""
    from raftmq.client.transaction_producer import TransactionProducer, TransactionState

    nodes, tls = secured_cluster
    addresses = [n.grpc_address for n in nodes]
    with Admin(addresses, security=_sec(tls)) as admin:
        admin.create_topic("payments", message_type="TRANSACTION")
    with AclAdmin(addresses, security=_sec(tls)) as acl:
        acl.put_user("erin", "erin-secret-1")
        acl.add_rule("erin", "allow", ["PUB"], ["topic:payments"])
        erin = _sec(tls, "erin", "erin-secret-1")
        with TransactionProducer(addresses, group="pg-erin", security=erin) as p:
            # the half message needs PUB on the topic only; ending the transaction needs PUB on the group
            r = p.send_in_transaction("payments", b"tx", local_tx=lambda half: TransactionState.COMMIT)
            assert "user 'erin' may not PUB on group:pg-erin" in r.end_error
        acl.add_rule("erin", "allow", ["PUB"], ["group:pg-*"])
        with TransactionProducer(addresses, group="pg-erin", security=erin) as p:
            r = wait_for(lambda: _try_tx(p), "a transaction once the group rule is applied", timeout=60)
            assert r.state == TransactionState.COMMIT and r.end_error == ""


def _try_tx(p):
    from raftmq.client.transaction_producer import TransactionState

    r = p.send_in_transaction("payments", b"tx", local_tx=lambda half: TransactionState.COMMIT)
    return None if r.end_error else r

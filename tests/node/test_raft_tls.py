"""Mutual TLS on the Raft port (security.tls_raft) with three real members: data replicates over TLS, the port
refuses a plaintext peer and a TLS peer without a member certificate, and a member whose certificate comes from
another CA cannot join until it gets a proper one."""

from __future__ import annotations

import socket
import ssl
import struct

import pytest

from raftmq.client.admin import Admin
from raftmq.client.errors import RaftmqError
from raftmq.client.producer import Producer
from raftmq.client.security import ClientSecurity
from raftmq.node.config import ConfigError, load_config
from tests.support.certs import CertificateAuthority
from tests.support.processes import NodeProcess, node_specs, stop_all
from tests.support.waiting import wait_for


def _security(pem, ca_file) -> dict:
    return {"tls_cert_file": str(pem.cert), "tls_key_file": str(pem.key), "tls_client_ca_file": str(ca_file),
            "tls_ca_file": str(ca_file), "tls_raft": True}


def _context(ca_file, pem=None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca_file))
    if pem is not None:
        ctx.load_cert_chain(str(pem.cert), str(pem.key))
    return ctx


def _stored(node: NodeProcess, sec: ClientSecurity, topic: str) -> int:
    try:
        with Admin(node.grpc_address, timeout=5, retry_timeout=1, security=sec) as admin:
            return sum(q.max_offset for q in admin.queue_offsets(topic))
    except Exception:  # noqa: BLE001 - not serving yet
        return -1


def _sent(p: Producer) -> bool:
    try:
        p.send("orders", b"after the failover")
        return True
    except RaftmqError:
        return False


def test_tls_raft_needs_tls_and_a_ca():
    with pytest.raises(ConfigError, match="security.tls_raft: needs TLS on"):
        load_config(environ={"RAFTMQ_SECURITY_TLS_RAFT": "true"})
    with pytest.raises(ConfigError, match="security.tls_raft: set security.tls_ca_file"):
        load_config(environ={"RAFTMQ_SECURITY_TLS_RAFT": "true", "RAFTMQ_SECURITY_TLS_CERT_FILE": "/c",
                             "RAFTMQ_SECURITY_TLS_KEY_FILE": "/k"})


def test_members_replicate_over_tls_and_strangers_cannot_join(tmp_path):
    (tmp_path / "ca").mkdir()
    (tmp_path / "rogue").mkdir()
    ca = CertificateAuthority(tmp_path / "ca")
    rogue_ca = CertificateAuthority(tmp_path / "rogue")
    member, client = ca.issue("member"), ca.issue("client", server=False)
    rogue = rogue_ca.issue("member")
    specs = node_specs(tmp_path, 3, cluster={"secret": "cluster-secret"}, security=_security(member, ca.cert_file))
    specs[2].overrides["security"] = _security(rogue, rogue_ca.cert_file)  # a certificate from another CA
    nodes = [NodeProcess(s) for s in specs]
    for n in nodes[:2]:
        n.http_context = _context(ca.cert_file, client)
    nodes[2].http_context = _context(rogue_ca.cert_file, rogue_ca.issue("client", server=False))
    sec = ClientSecurity(ca_file=str(ca.cert_file), cert_file=str(client.cert), key_file=str(client.key))
    try:
        for n in nodes:
            n.start()
        for n in nodes[:2]:
            n.wait_ready(90)
        good = [n.grpc_address for n in nodes[:2]]
        with Admin(good, security=sec) as admin:
            admin.create_topic("orders")
        with Producer(good, security=sec) as p:
            for i in range(20):
                p.send("orders", f"over tls {i}".encode())
        wait_for(lambda: all(_stored(n, sec, "orders") == 20 for n in nodes[:2]), "20 messages on n0 and n1",
                 timeout=60)

        # the rogue member: both sides refuse the handshake; it never learns of a leader
        wait_for(lambda: "Raft TLS with" in nodes[2].spec.log_path.read_text(), "n2 logging its refused TLS",
                 timeout=60)
        wait_for(lambda: any("Raft TLS with" in n.spec.log_path.read_text() for n in nodes[:2]),
                 "a good member logging the rogue handshake", timeout=60)
        status, body = nodes[2].http_get("/ready")
        assert status == 503, body

        # socket level: the Raft port speaks TLS and only to members
        raft = ("127.0.0.1", nodes[0].spec.raft_port)
        with socket.create_connection(raft, timeout=10) as s:  # pysyncobj's plaintext framing
            s.settimeout(10)
            payload = b"\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00\x8c\x07n9:9999\x94."
            try:
                s.sendall(struct.pack("i", len(payload)) + payload)
                got = s.recv(100)
            except ConnectionResetError:
                got = b""
            assert got == b"", got  # dropped: no TLS, no answer
        with socket.create_connection(raft, timeout=10) as s:  # TLS without a member certificate
            s.settimeout(10)
            with pytest.raises((ssl.SSLError, ConnectionResetError, AssertionError)):
                with _context(ca.cert_file).wrap_socket(s, server_hostname="127.0.0.1") as t:
                    assert t.recv(100) != b""  # TLS 1.3: the refusal arrives after the client's handshake
        with socket.create_connection(raft, timeout=10) as s:  # a member certificate: a TLS session
            with _context(ca.cert_file, member).wrap_socket(s, server_hostname="127.0.0.1") as t:
                assert t.version() in ("TLSv1.2", "TLSv1.3")
                assert t.getpeercert()["subject"] == ((("commonName", "member"),),)

        # the rogue member gets a proper certificate: it joins and catches up over TLS
        nodes[2].stop()
        specs[2].overrides["security"] = _security(member, ca.cert_file)
        nodes[2].http_context = _context(ca.cert_file, client)
        nodes[2].start()
        nodes[2].wait_ready(90)
        wait_for(lambda: _stored(nodes[2], sec, "orders") == 20, "n2 catching up over TLS", timeout=90)
        with Producer([n.grpc_address for n in nodes], security=sec) as p:
            p.send("orders", b"after the join")
        wait_for(lambda: all(_stored(n, sec, "orders") == 21 for n in nodes), "21 messages everywhere",
                 timeout=60)

        # the leader dies: the other two elect a new one over TLS and nothing acknowledged is lost
        with Admin([n.grpc_address for n in nodes], security=sec) as admin:
            leader_id = next(m.id for m in admin.cluster_status().members if m.role == "leader")
        leader = next(n for n in nodes if n.spec.id == leader_id)
        leader.kill()
        survivors = [n for n in nodes if n is not leader]
        with Producer([n.grpc_address for n in survivors], security=sec) as p:
            wait_for(lambda: _sent(p), "a send accepted by the new leader", timeout=90)
        wait_for(lambda: all(_stored(n, sec, "orders") >= 22 for n in survivors), "all 22 acknowledged on the survivors",
                 timeout=60)
    finally:
        stop_all(nodes)

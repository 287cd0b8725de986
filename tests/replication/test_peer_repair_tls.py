"""Repair from peers at start also works when the members' gRPC ports speak only TLS.

The start-up repair runs before the write path (and its member channels) exists, so it opens channels of its
own; those must be the same TLS channels the members use for each other, or a damaged member of a TLS cluster
stays not ready for ever. Three real members with TLS, a stopped follower's log damaged by real byte writes.
"""

from __future__ import annotations

import random

from raftmq.client import Admin, Producer
from raftmq.client.security import ClientSecurity
from tests.client.test_cluster_check_e2e import SECRET
from tests.replication.test_peer_repair import BODY, _patch
from tests.support.certs import CertificateAuthority
from tests.support.processes import running_nodes


def test_damaged_follower_of_a_tls_cluster_repairs_from_its_peers(tmp_path):
    ca = CertificateAuthority(tmp_path)
    member = ca.issue("member")
    security = {"tls_cert_file": str(member.cert), "tls_key_file": str(member.key),
                "tls_ca_file": str(ca.cert_file), "tls_http": False}  # probes stay plain HTTP in the harness
    client = ClientSecurity(tls=True, ca_file=str(ca.cert_file))
    with running_nodes(tmp_path, 3, cluster={"secret": SECRET}, security=security) as nodes:
        servers = [n.grpc_address for n in nodes]
        with Admin(servers, security=client) as admin:
            admin.create_topic("HealTls", queues=1)
        with Producer(servers, security=client) as p:
            for i in range(4):
                p.send_batch("HealTls", [BODY + b"%05d" % (i * 50 + k) for k in range(50)])
        with Admin(servers, security=client) as admin:
            leader_id = admin.cluster_status().leader_id
        victim = next(n for n in nodes if n.spec.id != leader_id)
        victim.stop()
        seg0 = (victim.spec.data_dir / "commitlog" / f"{0:020d}").read_bytes()
        _patch(victim.spec.data_dir, seg0.index(BODY[:100], 50_000) + 10, random.Random(5).randbytes(64))
        victim.start().wait_ready(120)  # never ready when the repair cannot reach its peers
        log = victim.spec.log_path.read_text(errors="replace")
        assert "repaired commit-log range" in log, victim.log_tail(60)
        with Admin([victim.grpc_address], security=client) as admin:
            offsets = admin.queue_offsets("HealTls")
        assert sum(q.max_offset - q.min_offset for q in offsets) == 200

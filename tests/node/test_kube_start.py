"""A (re)started member clears its pod's role label before it serves anything (issue 11).

A SIGKILLed leader's pod kept ``raftmq.io/role=leader`` until it was replaced, so the leader Service briefly
selected two pods. A real node process here runs "in a pod": the Kubernetes service environment and a
service-account token point at a recording API server (TLS, the real kubernetes client). The pod starts out
labelled ``leader``; the API holds the node's first PATCH open, and meanwhile the node must not be ready.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess

import pytest

from raftmq.node.kube import ROLE_LABEL
from tests.node.test_kube import NS, POD, FakeApiServer, role_of
from tests.support.processes import NodeProcess, node_specs
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command for a test CA")]


def test_restarted_member_drops_a_stale_leader_label_before_it_is_ready(tmp_path):
    account = tmp_path / "serviceaccount"
    account.mkdir()
    cert, key = account / "ca.crt", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    (account / "token").write_text("sa-token")
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    api = FakeApiServer(tls_context=tls)
    api.labels[ROLE_LABEL] = "leader"  # left over from the previous container
    api.plan = ["hang"]  # the first PATCH is held until released
    [spec] = node_specs(tmp_path, 1, kubernetes={"role_label": "true"})
    node = NodeProcess(spec)
    try:
        node.start(env={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api.port),
                        "POD_NAME": POD, "POD_NAMESPACE": NS, "RAFTMQ_SERVICE_ACCOUNT_DIR": str(account)})
        api.wait_for(lambda reqs: len(reqs) >= 1, timeout=60)
        assert role_of(api.requests[0]) == "unknown"
        # while that PATCH is pending the node says why it is not ready, and is not
        status, body = wait_for(lambda: (lambda r: r if "role label" in r[1] else None)(node.http_get("/ready")),
                                "the node to report that it is clearing its role label", timeout=60)
        assert status == 503, body
        assert api.labels[ROLE_LABEL] == "leader"
        api.release.set()
        node.wait_ready(60)
        wait_for(lambda: api.labels.get(ROLE_LABEL) == "leader" and len(api.requests) >= 2,
                 "the single member to label itself leader once it leads", timeout=60)
        assert [role_of(r) for r in api.requests[:2]] == ["unknown", "leader"]
    finally:
        node.stop()
        api.close()

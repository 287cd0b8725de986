"""HTTP with authentication on (open paths vs signed requests), and users and rules surviving a restart."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from raftmq.client.security import signed_headers
from tests.support.processes import running_nodes


def _get(url: str, headers: list[tuple[str, str]] = ()) -> tuple[int, str]:
    req = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_metrics_needs_a_signature_when_not_listed_open(tmp_path):
    security = {"auth_enabled": True, "auth_admin_access_key": "root", "auth_admin_secret_key": "root-secret-1",
                "open_http_paths": ["/health", "/ready"]}
    with running_nodes(tmp_path, 1, security=security) as [node]:
        assert node.http_get("/health")[0] == 200
        code, body = _get(node.http_url + "/metrics")
        assert code == 401 and "requires signed requests" in body
        code, body = _get(node.http_url + "/metrics", signed_headers("root", "wrong-secret-1"))
        assert code == 401 and "signature does not match" in body
        code, body = _get(node.http_url + "/metrics", signed_headers("root", "root-secret-1"))
        assert code == 200 and "raftmq_" in body


def test_users_and_rules_survive_a_restart(tmp_path):
    from raftmq.client.acl import AclAdmin
    from raftmq.client.admin import Admin
    from raftmq.client.errors import PermissionDeniedError
    from raftmq.client.security import ClientSecurity

    security = {"auth_enabled": True, "auth_admin_access_key": "root", "auth_admin_secret_key": "root-secret-1"}
    root = ClientSecurity(access_key="root", secret_key="root-secret-1")
    alice = ClientSecurity(access_key="alice", secret_key="alice-secret-1")
    with running_nodes(tmp_path, 1, security=security) as [node]:
        with Admin(node.grpc_address, security=root) as admin:
            admin.create_topic("orders")
        with AclAdmin(node.grpc_address, security=root) as acl:
            acl.put_user("alice", "alice-secret-1")
            acl.add_rule("alice", "allow", ["SUB"], ["topic:orders"])
        acl_file = node.spec.data_dir / "config" / "acl.json"
        assert "alice-secret-1" not in acl_file.read_text() and oct(acl_file.stat().st_mode)[-3:] == "600"
        node.restart()
        with Admin(node.grpc_address, security=alice) as admin:
            assert len(admin.queue_offsets("orders")) == 4
            with pytest.raises(PermissionDeniedError):
                admin.create_topic("mine")

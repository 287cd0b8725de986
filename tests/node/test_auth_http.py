"""HTTP with authentication on: the open paths (probes) answer anyone, every other path needs a signed request."""

from __future__ import annotations

import urllib.error
import urllib.request

from client.security import signed_headers
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

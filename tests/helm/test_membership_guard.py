"""The chart's guard against changing `replicas` of a live group behind Raft's back.

The guard reads the live StatefulSet with Helm's `lookup`, so it is exercised with Helm's cluster-aware render
(`helm upgrade --dry-run=server` does the same) against a loopback HTTP server that plays the API server: API
discovery for apps/v1 and one StatefulSet with a chosen replica count (or none, for a fresh install).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import helm_python as helm
import pytest

from tests.helm.chart import CHART_DIR, NAMESPACE, RELEASE

FULL = f"{RELEASE}-raftmq"
STS_PATH = f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets/{FULL}"
NOT_FOUND = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}


class FakeApiServer:
    def __init__(self) -> None:
        self.live_replicas: int | None = None
        self.gets: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, code: int, obj: dict) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                server.gets.append(path)
                if path == "/api":
                    return self._send(200, {"kind": "APIVersions", "versions": ["v1"]})
                if path == "/apis":
                    gv = {"groupVersion": "apps/v1", "version": "v1"}
                    return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                        {"name": "apps", "versions": [gv], "preferredVersion": gv}]})
                if path == "/api/v1":
                    return self._send(200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": []})
                if path == "/apis/apps/v1":
                    return self._send(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
                                            "resources": [{"name": "statefulsets", "singularName": "statefulset",
                                                           "namespaced": True, "kind": "StatefulSet",
                                                           "verbs": ["get", "list"]}]})
                if path == STS_PATH and server.live_replicas is not None:
                    return self._send(200, {"apiVersion": "apps/v1", "kind": "StatefulSet",
                                            "metadata": {"name": FULL, "namespace": NAMESPACE},
                                            "spec": {"replicas": server.live_replicas}})
                return self._send(404, NOT_FOUND)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def api():
    srv = FakeApiServer()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def upgrade(api):
    """render(live_replicas, values): what `helm upgrade` would render against a cluster with that StatefulSet."""
    with helm.Config(kube_apiserver=api.url, kube_token="test", namespace=NAMESPACE) as cfg, \
            helm.Chart.load(CHART_DIR) as chart:

        def render(live_replicas: int | None, values: dict) -> dict[str, str]:
            api.live_replicas = live_replicas
            api.gets.clear()
            try:
                return cfg.render(chart, values, name=RELEASE, namespace=NAMESPACE, is_upgrade=True)
            finally:
                assert STS_PATH in api.gets  # the guard really asked the cluster

        yield render


def test_fresh_install_takes_any_valid_count(upgrade):
    assert upgrade(None, {"replicas": 5})


def test_same_count_upgrades_freely(upgrade):
    assert upgrade(3, {"replicas": 3, "cluster": {"durability": "sync"}})


def test_plain_scale_down_is_refused(upgrade):
    with pytest.raises(helm.HelmRenderError, match=f"from 5 to 3 replicas: member {FULL}-3 is still in the Raft"):
        upgrade(5, {"replicas": 3})


def test_scale_down_with_one_member_unacknowledged_is_refused(upgrade):
    with pytest.raises(helm.HelmRenderError, match=f"member {FULL}-4 is still in the Raft group"):
        upgrade(5, {"replicas": 3, "scaleDown": {"removedMembers": [f"{FULL}-3"]}})


def test_acknowledged_scale_down_renders(upgrade):
    out = upgrade(5, {"replicas": 3, "scaleDown": {"removedMembers": [f"{FULL}-3", f"{FULL}-4"]}})
    sts = next(text for path, text in out.items() if path.endswith("statefulset.yaml"))
    assert "replicas: 3" in sts


def test_plain_scale_up_is_refused(upgrade):
    with pytest.raises(helm.HelmRenderError, match=f"from 3 to 5 replicas: member {FULL}-3 is not in the Raft"):
        upgrade(3, {"replicas": 5})


def test_acknowledged_scale_up_renders(upgrade):
    assert upgrade(3, {"replicas": 5, "scaleUp": {"addedMembers": [f"{FULL}-3", f"{FULL}-4"]}})

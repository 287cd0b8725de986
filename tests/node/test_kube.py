"""RoleLabeler through the real ``kubernetes`` client against a recording HTTP API server on loopback.

No cluster is reachable in CI, so a small HTTP server plays the API server's pod PATCH endpoint: it records
every request and can answer with errors, drop the connection, or hold a request open.
"""

from __future__ import annotations

import json
import logging
import shutil
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client as k8s

from raftmq.node.kube import ROLE_LABEL, RoleLabeler, RoleLabelerError

POD = "raftmq-1"
NS = "mq"
PATH = f"/api/v1/namespaces/{NS}/pods/{POD}"


class FakeApiServer:
    """Records requests; ``plan`` is a list of actions for the next requests: an int status, "drop" or "hang"."""

    def __init__(self, tls_context: ssl.SSLContext | None = None) -> None:
        self.requests: list[dict] = []
        self.plan: list[int | str] = []
        self.labels: dict[str, str] = {}
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_PATCH(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                with server.lock:
                    server.requests.append(
                        {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                    )
                    action = server.plan.pop(0) if server.plan else 200
                    server.arrived.notify_all()
                if action == "hang":
                    server.release.wait(30)
                    action = 200
                if action == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if action != 200:
                    payload = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                          "message": "injected", "code": action}).encode()
                else:
                    with server.lock:
                        server.labels.update(body["metadata"]["labels"])
                        labels = dict(server.labels)
                    payload = json.dumps({"apiVersion": "v1", "kind": "Pod",
                                          "metadata": {"name": POD, "namespace": NS, "labels": labels}}).encode()
                self.send_response(action)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls_context is not None:
            self.httpd.socket = tls_context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def wait_for(self, predicate, timeout: float = 20.0) -> None:
        """Block until predicate(requests) holds; fail (not hang) otherwise."""
        with self.arrived:
            assert self.arrived.wait_for(lambda: predicate(self.requests), timeout), self.requests

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    srv = FakeApiServer()
    yield srv
    srv.close()


def make_labeler(port: int, scheme: str = "http", **options) -> RoleLabeler:
    cfg = k8s.Configuration()
    cfg.host = f"{scheme}://127.0.0.1:{port}"
    cfg.retries = False
    opts = {"initial_backoff": 0.01, "max_backoff": 0.05, "request_timeout": 10.0}
    opts.update(options)
    return RoleLabeler(k8s.CoreV1Api(k8s.ApiClient(cfg)), POD, NS, **opts)


def wait_applied(labeler: RoleLabeler, role: str, server: FakeApiServer) -> None:
    """Poll until the labeler reports ``role`` as written (the server's condition does not see that)."""
    pause = threading.Event()
    for _ in range(2000):
        if labeler.applied_role == role:
            return
        pause.wait(0.01)
    raise AssertionError(f"role {role!r} never applied; requests: {server.requests}")


def role_of(request: dict) -> str:
    return request["body"]["metadata"]["labels"][ROLE_LABEL]


def test_patch_sets_only_the_role_label_with_a_merge_patch(server):
    labeler = make_labeler(server.port)
    labeler.set_role("leader")
    labeler.start()
    try:
        server.wait_for(lambda reqs: any(role_of(r) == "leader" for r in reqs))
        first = server.requests[0]
        assert first["path"] == PATH
        assert first["headers"]["content-type"] == "application/merge-patch+json"
        assert first["body"] == {"metadata": {"labels": {ROLE_LABEL: "leader"}}}
        labeler.set_role("follower")
        server.wait_for(lambda reqs: role_of(reqs[-1]) == "follower")
        assert server.labels == {ROLE_LABEL: "follower"}
    finally:
        labeler.stop(final_role=None)
    assert [role_of(r) for r in server.requests] == ["leader", "follower"]
    assert labeler.failures == 0


def test_start_clears_a_stale_role_before_the_node_reports_one(server):
    server.labels[ROLE_LABEL] = "leader"  # left by the previous container of this pod
    labeler = make_labeler(server.port)
    labeler.start()
    try:
        server.wait_for(lambda reqs: len(reqs) >= 1)
        assert role_of(server.requests[0]) == "unknown"
    finally:
        labeler.stop(final_role=None)


def test_server_errors_are_retried_with_backoff_until_success(server, caplog):
    server.plan = [500, 503, 500]
    labeler = make_labeler(server.port)
    labeler.set_role("leader")
    with caplog.at_level(logging.WARNING, logger="raftmq.node.kube"):
        labeler.start()
        try:
            server.wait_for(lambda reqs: len(reqs) >= 4)
            wait_applied(labeler, "leader", server)
        finally:
            labeler.stop(final_role=None)
    assert [role_of(r) for r in server.requests] == ["leader"] * 4
    assert labeler.failures == 3
    assert server.labels[ROLE_LABEL] == "leader"
    assert sum("HTTP 500" in m for m in caplog.messages) == 2
    assert sum("HTTP 503" in m for m in caplog.messages) == 1


def test_forbidden_is_logged_and_retried(server, caplog):
    server.plan = [403]
    labeler = make_labeler(server.port)
    labeler.set_role("candidate")
    with caplog.at_level(logging.WARNING, logger="raftmq.node.kube"):
        labeler.start()
        try:
            server.wait_for(lambda reqs: len(reqs) >= 2)
            wait_applied(labeler, "candidate", server)
        finally:
            labeler.stop(final_role=None)
    assert any("HTTP 403" in m and "retrying" in m for m in caplog.messages)


def test_dropped_connections_are_retried(server):
    server.plan = ["drop", "drop"]
    labeler = make_labeler(server.port)
    labeler.set_role("leader")
    labeler.start()
    try:
        server.wait_for(lambda reqs: len(reqs) >= 3)
        wait_applied(labeler, "leader", server)
    finally:
        labeler.stop(final_role=None)
    assert labeler.failures == 2


def test_refused_connections_are_retried_until_the_api_comes_back():
    # Reserve a port, close it, point the labeler at it: connections are refused until a server listens there.
    probe = FakeApiServer()
    port = probe.port
    probe.close()
    labeler = make_labeler(port)
    labeler.set_role("leader")
    labeler.start()
    try:
        pause = threading.Event()
        for _ in range(2000):
            if labeler.failures >= 2:
                break
            pause.wait(0.01)
        assert labeler.failures >= 2
        assert labeler.applied_role is None
    finally:
        labeler.stop(final_role=None)


def test_set_role_never_blocks_while_the_api_hangs(server):
    server.plan = ["hang"]
    labeler = make_labeler(server.port)
    labeler.set_role("follower")
    labeler.start()
    try:
        server.wait_for(lambda reqs: len(reqs) == 1)  # the first PATCH is now stuck in the server
        # If set_role waited for the API, this loop would hang until pytest-timeout fails the test.
        for i in range(1000):
            labeler.set_role("candidate" if i % 2 else "follower")
        labeler.set_role("leader")
        assert labeler.desired_role == "leader"
        assert labeler.applied_role is None
        assert len(server.requests) == 1
        server.release.set()
        wait_applied(labeler, "leader", server)
    finally:
        labeler.stop(final_role=None)
    # Intermediate roles were coalesced: after the stuck request, only the latest one was sent.
    assert [role_of(r) for r in server.requests] == ["follower", "leader"]


def test_stop_returns_even_when_the_api_hangs(server):
    server.plan = ["hang"]
    labeler = make_labeler(server.port)
    labeler.set_role("leader")
    labeler.start()
    server.wait_for(lambda reqs: len(reqs) == 1)
    labeler.stop(timeout=0.2)  # bounded: the worker is a daemon thread stuck in I/O
    assert labeler.desired_role == "unknown"
    server.release.set()


def test_stop_takes_the_pod_out_of_the_leader_service(server):
    labeler = make_labeler(server.port)
    labeler.set_role("leader")
    labeler.start()
    wait_applied(labeler, "leader", server)
    labeler.stop(timeout=10)
    assert [role_of(r) for r in server.requests] == ["leader", "unknown"]
    assert server.labels[ROLE_LABEL] == "unknown"


def test_stop_can_publish_the_latest_role_instead(server):
    labeler = make_labeler(server.port)
    labeler.set_role("leader")
    labeler.start()
    wait_applied(labeler, "leader", server)
    labeler.set_role("follower")
    labeler.stop(timeout=10, final_role=None)
    assert [role_of(r) for r in server.requests] == ["leader", "follower"]


def test_invalid_roles_are_ignored_without_raising(server):
    labeler = make_labeler(server.port)
    labeler.set_role("leader")
    labeler.set_role("Not A Label!")
    labeler.set_role("x" * 64)
    assert labeler.desired_role == "leader"


def test_resync_reasserts_a_label_edited_by_hand(server):
    labeler = make_labeler(server.port, resync_interval=0.05)
    labeler.set_role("follower")
    labeler.start()
    try:
        server.wait_for(lambda reqs: len(reqs) >= 3)
    finally:
        labeler.stop(final_role=None)
    assert {role_of(r) for r in server.requests} == {"follower"}


# ---------------------------------------------------------------- from_environment


def test_from_environment_is_off_outside_a_pod(tmp_path):
    assert RoleLabeler.from_environment(environ={}, token_path=str(tmp_path / "none")) is None
    assert RoleLabeler.from_environment("auto", environ={}, token_path=str(tmp_path / "none")) is None


def test_from_environment_disabled_even_inside_a_pod(tmp_path):
    token = tmp_path / "token"
    token.write_text("t")
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1",
           "POD_NAME": POD, "POD_NAMESPACE": NS}
    assert RoleLabeler.from_environment(False, environ=env, token_path=str(token)) is None
    assert RoleLabeler.from_environment("false", environ=env, token_path=str(token)) is None


def test_from_environment_explicitly_on_outside_a_pod_says_what_is_missing(tmp_path):
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(RoleLabelerError, match="POD_NAME, POD_NAMESPACE"):
        RoleLabeler.from_environment(True, environ=env, token_path=str(tmp_path / "none"))


def test_from_environment_rejects_a_bad_mode():
    with pytest.raises(RoleLabelerError, match="auto, true or false"):
        RoleLabeler.from_environment("sometimes", environ={})


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a test CA")
def test_from_environment_uses_the_in_cluster_token_and_ca(tmp_path):
    cert, key = tmp_path / "ca.crt", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    srv = FakeApiServer(tls_context=tls)
    token = tmp_path / "token"
    token.write_text("sa-token-123")
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(srv.port),
           "POD_NAME": POD, "POD_NAMESPACE": NS}
    labeler = RoleLabeler.from_environment("auto", environ=env, token_path=str(token), ca_path=str(cert),
                                           initial_backoff=0.01, max_backoff=0.05)
    assert labeler is not None
    labeler.set_role("leader")
    labeler.start()
    try:
        srv.wait_for(lambda reqs: len(reqs) >= 1)
        wait_applied(labeler, "leader", srv)
    finally:
        labeler.stop(final_role=None)
        srv.close()
    request = srv.requests[0]
    assert request["path"] == PATH
    assert request["headers"]["authorization"].lower() == "bearer sa-token-123"
    assert role_of(request) == "leader"


def test_without_the_kubernetes_client_auto_is_off_and_true_says_how_to_fix(tmp_path, monkeypatch):
    token = tmp_path / "token"
    token.write_text("t")
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "443",
           "POD_NAME": POD, "POD_NAMESPACE": NS}
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # as if the [k8s] extra were not installed
    assert RoleLabeler.from_environment("auto", environ=env, token_path=str(token)) is None
    with pytest.raises(RoleLabelerError, match=r"raftmq\[k8s\]"):
        RoleLabeler.from_environment("true", environ=env, token_path=str(token))


def test_role_changes_do_not_cut_the_backoff_short(server):
    """The node reports its role every second; while the API fails, that must not turn into a retry storm."""
    server.plan = [500] * 50
    labeler = make_labeler(server.port, initial_backoff=30.0, max_backoff=30.0)
    labeler.set_role("leader")
    labeler.start()
    try:
        server.wait_for(lambda reqs: len(reqs) == 1)
        for i in range(200):
            labeler.set_role("follower" if i % 2 else "leader")
        threading.Event().wait(0.5)  # a retry cut short by set_role would arrive within milliseconds
        assert len(server.requests) == 1
    finally:
        labeler.stop(timeout=10, final_role=None)  # stop does end the backoff: one last attempt, then exit
    assert len(server.requests) == 2


def test_repeating_the_same_role_sends_nothing(server):
    labeler = make_labeler(server.port, resync_interval=3600)
    labeler.set_role("follower")
    labeler.start()
    try:
        wait_applied(labeler, "follower", server)
        for _ in range(100):
            labeler.set_role("follower")
        labeler.set_role("leader")
        wait_applied(labeler, "leader", server)
    finally:
        labeler.stop(final_role=None)
    assert [role_of(r) for r in server.requests] == ["follower", "leader"]

"""The console over plain HTTP on a single (standalone) node: headers, read-only, downloads, clear errors."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from raftmq.client import Admin, Producer
from tests.support.processes import running_nodes


def fetch(url: str, method: str = "GET", data: bytes | None = None, redirect: bool = True):
    req = urllib.request.Request(url, data=data, method=method)
    opener = urllib.request.build_opener() if redirect else urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with running_nodes(tmp_path_factory.mktemp("console-http"), 1) as [n]:
        with Admin(n.grpc_address) as admin:
            admin.create_topic("t", queues=2)
        yield n


def test_pages_answer_with_security_headers(node):
    code, headers, _ = fetch(node.http_url + "/ui", redirect=False)
    assert code == 302 and headers["Location"] == "/ui/cluster"
    for path in ("/ui/cluster", "/ui/topics", "/ui/topics/t", "/ui/groups", "/ui/messages", "/ui/check"):
        code, headers, body = fetch(node.http_url + path)
        assert code == 200, (path, body[:300])
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert b"<script src=\"/ui/static/console.js\"" in body
    _, _, body = fetch(node.http_url + "/ui/cluster")
    assert b"standalone" in body


def test_static_files_and_unknown_paths(node):
    code, headers, body = fetch(node.http_url + "/ui/static/console.js")
    assert code == 200 and headers["Content-Type"].startswith("text/javascript") and b"data-live" in body
    code, headers, _ = fetch(node.http_url + "/ui/static/console.css")
    assert code == 200 and headers["Content-Type"].startswith("text/css")
    for path in ("/ui/static/../app.py", "/ui/static/app.py", "/ui/static/nope.js", "/ui/nope",
                 "/ui/topics/t/extra/segments"):
        code, _, body = fetch(node.http_url + path)
        assert code == 404, path
    code, _, body = fetch(node.http_url + "/nope")
    assert code == 404 and b"/ui" in body


def test_the_console_is_read_only(node):
    for method in ("POST", "PUT", "DELETE"):
        code, headers, body = fetch(node.http_url + "/ui/topics/t", method=method, data=b"perm=2")
        assert code == 405 and headers["Allow"] == "GET" and b"read-only" in body, method
    code, _, _ = fetch(node.http_url + "/metrics", method="POST", data=b"")
    assert code == 405


def test_body_download_is_an_attachment_with_every_byte(node):
    body = b"<html><script>alert(1)</script>" + bytes(range(256))
    with Producer(node.grpc_address) as p:
        sent = p.send("t", body)
    code, headers, got = fetch(f"{node.http_url}/ui/messages/{sent.msg_id}/body")
    assert code == 200 and got == body
    assert headers["Content-Type"] == "application/octet-stream"
    assert headers["Content-Disposition"] == f'attachment; filename="{sent.msg_id}.bin"'
    assert headers["X-Content-Type-Options"] == "nosniff"


def test_replica_check_on_a_single_node_says_there_is_nothing_to_compare(node):
    code, _, body = fetch(node.http_url + "/ui/check?run=1&queues=1")
    assert code == 200 and b"single-member cluster" in body


@pytest.mark.parametrize("query,code,text", [
    ("by=offset&topic=t&queue=x", 400, "queue 'x' is not a whole number"),
    ("by=offset&topic=t&offset=-1", 400, "offset -1 is out of range"),
    ("by=offset&topic=bad%20name", 400, "topic 'bad name' contains"),
    ("by=key&topic=t&key=k&from=yesterday", 400, "from 'yesterday' is not a time"),
    ("by=key&topic=t&key=k&from=2030-01-02T00:00&to=2030-01-01T00:00", 400, "ends"),
    ("by=key&topic=t&key=", 400, "give the key"),
    ("by=id&id=abc", 400, "also give the topic"),
    ("by=nope", 400, "unknown search"),
])
def test_bad_searches_are_explained(node, query, code, text):
    got, _, body = fetch(f"{node.http_url}/ui/messages?{query}")
    assert got == code and text.encode() in body.replace(b"&#x27;", b"'"), body[-600:]

"""Web console login with authentication on: admins log in once (a session cookie) instead of signing every
request, everybody else is sent to the login page or refused with the reason. One real node process over HTTP."""

from __future__ import annotations

import http.client
import re
import time
from urllib.parse import urlencode, urlsplit

import pytest

from raftmq.client.security import signed_headers
from raftmq.node.auth import Authenticator
from raftmq.node.auth import console_sessions as session
from raftmq.node.config import SecuritySection
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for

SECURITY = {"auth_enabled": True, "auth_admin_access_key": "root", "auth_admin_secret_key": "root-secret-1"}


class Http:
    """Requests that do not follow redirects, so each 303 and its cookie can be looked at."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port

    def request(self, method: str, path: str, *, cookie: str = "", form: dict | None = None,
                headers: list[tuple[str, str]] = ()) -> tuple[int, dict[str, str], str]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            h = dict(headers)
            body = None
            if cookie:
                h["Cookie"] = f"{session.COOKIE}={cookie}"
            if form is not None:
                body = urlencode(form)
                h["Content-Type"] = "application/x-www-form-urlencoded"
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
        finally:
            conn.close()

    def login(self, access_key: str, secret_key: str, next_page: str = "") -> tuple[int, dict[str, str], str]:
        return self.request("POST", "/ui/login", form={"access_key": access_key, "secret_key": secret_key,
                                                        "next": next_page})


def cookie_of(headers: dict[str, str]) -> str:
    name, _, rest = headers["set-cookie"].partition("=")
    assert name == session.COOKIE
    return rest.split(";", 1)[0]


def test_an_admin_logs_in_once_and_everybody_else_is_sent_to_the_login_page_or_refused(tmp_path):
    from raftmq.client.acl import AclAdmin
    from raftmq.client.security import ClientSecurity

    with running_nodes(tmp_path, 1, security=SECURITY) as [node]:
        web = Http(node.http_url)
        # a browser without a session is sent to the login page, which leads back to where it wanted to go
        code, headers, _ = web.request("GET", "/ui/topics")
        assert code == 303 and headers["location"] == "/ui/login?next=%2Fui%2Ftopics"
        code, headers, _ = web.request("GET", "/ui/messages?by=key&topic=t&key=k")
        assert code == 303 and headers["location"] == "/ui/login?next=%2Fui%2Fmessages%3Fby%3Dkey%26topic%3Dt%26key%3Dk"
        code, _, body = web.request("GET", "/ui/login?next=%2Fui%2Ftopics")
        assert code == 200 and 'name="secret_key"' in body and 'value="/ui/topics"' in body
        assert web.request("GET", "/ui/static/console.css")[0] == 200  # what the form loads
        assert web.request("GET", "/metrics")[0] == 200  # open paths stay open

        code, _, body = web.login("root", "wrong-secret")
        assert code == 401 and "the secret key does not match access key &#x27;root&#x27;" in body
        code, _, body = web.login("nobody", "x")
        assert code == 401 and "unknown access key" in body
        code, _, body = web.login("root", "")
        assert code == 401 and "give both the access key and the secret key" in body

        with AclAdmin(node.grpc_address, security=ClientSecurity(access_key="root",
                                                                  secret_key="root-secret-1")) as acl:
            acl.put_user("bob", "bob-secret-1")
            acl.put_user("ops", "ops-secret-1", admin=True)

            # the bootstrap admin: a cookie no script can read and no other site can send, then every page
            code, headers, _ = web.login("root", "root-secret-1", "/ui/topics")
            assert code == 303 and headers["location"] == "/ui/topics"
            attributes = {a.strip() for a in headers["set-cookie"].split(";")[1:]}
            assert {"Path=/ui", "HttpOnly", "SameSite=Strict", "Max-Age=28800"} <= attributes
            assert "Secure" not in attributes  # plaintext HTTP here; with TLS on the HTTP port it is set
            root = cookie_of(headers)
            for page in ("/ui/cluster", "/ui/topics", "/ui/groups", "/ui/messages"):
                code, _, body = web.request("GET", page, cookie=root)
                assert code == 200, (page, body[:300])
            assert "<span>root</span>" in body and 'action="/ui/logout"' in body
            assert web.request("GET", "/metrics", cookie=root)[0] == 200

            # a damaged or forged cookie is no session
            payload, _, mac = root.partition(".")
            for bad in (payload + "." + "0" * len(mac), payload[:-2] + "." + mac, "garbage", "."):
                assert web.request("GET", "/ui/cluster", cookie=bad)[0] == 303, bad
            # signed requests (scripts) work as before, without a cookie
            code, _, _ = web.request("GET", "/ui/cluster", headers=signed_headers("root", "root-secret-1"))
            assert code == 200
            code, _, body = web.request("GET", "/ui/cluster", headers=signed_headers("root", "wrong"))
            assert code == 401 and "signature does not match" in body

            # a replicated admin's session ends when its secret changes or it stops being an admin
            code, headers, _ = web.login("ops", "ops-secret-1")
            ops = cookie_of(headers)
            assert web.request("GET", "/ui/cluster", cookie=ops)[0] == 200
            acl.put_user("ops", "ops-secret-2", admin=True)
            assert web.request("GET", "/ui/cluster", cookie=ops)[0] == 303
            ops = cookie_of(web.login("ops", "ops-secret-2")[1])
            assert web.request("GET", "/ui/cluster", cookie=ops)[0] == 200
            acl.delete_user("ops")
            assert web.request("GET", "/ui/cluster", cookie=ops)[0] == 303

        # logging out clears the cookie in the browser
        code, headers, _ = web.request("POST", "/ui/logout", cookie=root)
        assert code == 303 and headers["location"] == "/ui/login"
        assert "Max-Age=0" in headers["set-cookie"] and cookie_of(headers) == ""
        assert web.request("GET", "/ui/logout")[0] == 405  # a link cannot log anybody out

        # after logging in the browser goes to a console page of this node, never elsewhere
        for target in ("//evil.example/ui", "https://evil.example/ui/cluster", "/ui/login", "/uix", "/\\evil"):
            code, headers, _ = web.login("root", "root-secret-1", target)
            assert code == 303 and headers["location"] == "/ui/cluster", target


def groups_cell(body: str, topic: str) -> str:
    """The topic list's last column (consuming groups) in the row of ``topic``."""
    row = re.search(rf'<tr><td[^>]*><a href="/ui/topics/{topic}">.*?</tr>', body, re.S)
    assert row, f"no row for {topic}"
    return re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)[-1]


def test_a_user_sees_what_its_rules_allow_logged_in_or_signing(tmp_path):
    """The console decides with the gRPC API's ACL: topics and their messages need SUB on the topic, a group SUB
    on the group, the replica check ADMIN on the cluster; the cluster page any user. Signed requests (scripts)
    are judged by the same rules as a login."""
    from raftmq.client import Admin, Producer, PullConsumer
    from raftmq.client.acl import AclAdmin
    from raftmq.client.security import ClientSecurity

    root = ClientSecurity(access_key="root", secret_key="root-secret-1")
    with running_nodes(tmp_path, 1, security=SECURITY) as [node]:
        web = Http(node.http_url)
        with Admin(node.grpc_address, security=root) as admin:
            admin.create_topic("orders")
            admin.create_topic("secret")
        with Producer(node.grpc_address, security=root) as producer:
            mine = producer.send("orders", b"an order").msg_id
            hidden = producer.send("secret", b"a secret").msg_id
        for group in ("billing", "payroll"):  # two groups with offsets on orders; bob may read only billing
            with PullConsumer(group, "orders", node.grpc_address, start_from="first", auto_commit=False,
                              security=root) as c:
                wait_for(lambda c=c: c.poll(0.5), f"{group} got the order", 30)
                c.commit()
        with AclAdmin(node.grpc_address, security=root) as acl:
            acl.put_user("bob", "bob-secret-1")
            code, headers, _ = web.login("bob", "bob-secret-1")
            assert code == 303
            bob = cookie_of(headers)
            # no rule yet (acl_default deny): the cluster, nothing else
            assert web.request("GET", "/ui/cluster", cookie=bob)[0] == 200
            code, _, body = web.request("GET", "/ui/topics", cookie=bob)
            assert code == 200 and "/ui/topics/orders" not in body and "/ui/topics/secret" not in body
            code, _, body = web.request("GET", "/ui/topics/orders", cookie=bob)
            assert code == 403 and "user &#x27;bob&#x27; may not SUB on topic:orders" in body

            acl.add_rule("bob", "allow", ["SUB"], ["topic:orders", "group:billing"])
            code, _, body = web.request("GET", "/ui/topics", cookie=bob)
            assert code == 200 and "/ui/topics/orders" in body and "/ui/topics/secret" not in body
            # the totals chart and the group counts are of what bob may read, not everybody's
            assert "the topics you may read, messages/s" in body and "all topics" not in body
            assert groups_cell(body, "orders") == "1"
            code, _, body = web.request("GET", "/ui/topics", headers=signed_headers("root", "root-secret-1"))
            assert groups_cell(body, "orders") == "2"
            assert web.request("GET", "/ui/topics/orders", cookie=bob)[0] == 200
            assert "an order" in web.request("GET", f"/ui/messages/{mine}", cookie=bob)[2]
            pages = {
                "/ui/topics/secret": "topic:secret",
                f"/ui/messages/{hidden}": "topic:secret",
                f"/ui/messages/{hidden}/body": "topic:secret",
                f"/ui/messages?by=id&id={hidden}": "topic:secret",
                "/ui/messages?by=offset&topic=secret&queue=0&offset=0": "topic:secret",
                "/ui/messages?by=key&topic=secret&key=x": "topic:secret",
                "/ui/groups/payroll": "group:payroll",
                "/ui/check": "cluster",
            }
            for path, resource in pages.items():
                code, _, body = web.request("GET", path, cookie=bob)
                assert code == 403 and f"may not {'ADMIN' if resource == 'cluster' else 'SUB'} on {resource}" \
                    in body and "a secret" not in body, (path, code, body[:300])
                # a script signing as bob gets the same answer
                code, _, body = web.request("GET", path, headers=signed_headers("bob", "bob-secret-1"))
                assert code == 403 and "a secret" not in body, path
            # an admin sees everything
            code, _, body = web.request("GET", f"/ui/messages/{hidden}",
                                        headers=signed_headers("root", "root-secret-1"))
            assert code == 200 and "a secret" in body


def test_login_without_authentication_says_there_is_nothing_to_log_in_to(tmp_path):
    with running_nodes(tmp_path, 1) as [node]:
        code, _, body = Http(node.http_url).request("GET", "/ui/login")
        assert code == 200 and "Authentication is off on this cluster" in body


# ------------------------------------------------------------------------------------------------ in process
class _Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _sessions(clock, **security) -> session.ConsoleSessions:
    settings = SecuritySection(**{**SECURITY, **security})
    return session.ConsoleSessions(settings, Authenticator(settings, lambda: None), clock)


def test_a_session_ends_at_its_expiry_and_only_this_clusters_key_makes_one():
    clock = _Clock()
    sessions = _sessions(clock, console_session_hours=1)
    value = sessions.login("root", "root-secret-1", "127.0.0.1")
    assert sessions.user(value, "127.0.0.1") == "root"
    clock.now += 3599
    assert sessions.user(value, "127.0.0.1") == "root"
    clock.now += 2
    assert sessions.user(value, "127.0.0.1") is None
    # another cluster (another admin secret) cannot make a session for this one
    other = _sessions(clock, auth_admin_secret_key="other-secret-1").login("root", "other-secret-1", "127.0.0.1")
    assert sessions.user(other, "127.0.0.1") is None


def test_changing_the_bootstrap_admins_secret_ends_its_sessions():
    """Like a replicated user's: a session names the secret it was opened with, and a rotated member's admin
    secret is the new one (members not restarted yet keep theirs until they are)."""
    clock = _Clock()
    before = _sessions(clock)
    during = _sessions(clock, auth_admin_secret_key="root-secret-2", auth_admin_previous_secret_key="root-secret-1")
    old = before.login("root", "root-secret-1", "127.0.0.1")
    assert before.user(old, "127.0.0.1") == "root"
    assert during.user(old, "127.0.0.1") is None
    new = during.login("root", "root-secret-1", "127.0.0.1")  # the previous secret still logs in, as it signs
    assert during.user(new, "127.0.0.1") == "root"
    assert before.user(new, "127.0.0.1") is None


@pytest.mark.parametrize("hours", [0, -1, 721])
def test_a_session_lifetime_out_of_range_is_refused_by_validation(hours, tmp_path):
    from raftmq.node.config import ConfigError, load_config

    path = tmp_path / "node.yaml"
    path.write_text(f"security:\n  console_session_hours: {hours}\n")
    with pytest.raises(ConfigError, match="security.console_session_hours: must be > 0 and at most 720"):
        load_config(path, environ={})


def test_an_address_that_failed_too_often_waits_even_with_the_right_secret():
    clock = _Clock()
    sessions = _sessions(clock)
    for _ in range(session.MAX_FAILED_LOGINS):
        with pytest.raises(session.LoginRefused) as e:
            sessions.login("root", "guess", "10.0.0.7")
        assert e.value.code == 401
    with pytest.raises(session.LoginRefused) as e:
        sessions.login("root", "root-secret-1", "10.0.0.7")
    assert e.value.code == 429
    assert str(e.value) == ("too many failed logins from 10.0.0.7 (10 in 5 min): try again in 300 s")
    assert sessions.user(sessions.login("root", "root-secret-1", "10.0.0.8"), "10.0.0.8") == "root"  # others not
    clock.now += session.FAILED_LOGIN_WINDOW_S / 2
    with pytest.raises(session.LoginRefused, match="try again in 150 s"):
        sessions.login("root", "root-secret-1", "10.0.0.7")
    clock.now += session.FAILED_LOGIN_WINDOW_S / 2  # the failures have aged out of the window
    assert sessions.user(sessions.login("root", "root-secret-1", "10.0.0.7"), "10.0.0.7") == "root"
    # a success starts the count again
    for _ in range(session.MAX_FAILED_LOGINS - 1):
        with pytest.raises(session.LoginRefused):
            sessions.login("root", "guess", "10.0.0.7")
    sessions.login("root", "root-secret-1", "10.0.0.7")
    for _ in range(session.MAX_FAILED_LOGINS - 1):
        with pytest.raises(session.LoginRefused):
            sessions.login("root", "guess", "10.0.0.7")
    sessions.login("root", "root-secret-1", "10.0.0.7")


def test_the_failure_count_keeps_bounded_memory_under_many_addresses():
    clock = _Clock()
    failures = session.FailedLogins(clock)
    for i in range(3 * session.MAX_TRACKED_ADDRESSES):
        failures.record(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}")
    assert len(failures._failures) <= session.MAX_TRACKED_ADDRESSES


@pytest.mark.parametrize(("peer", "forwarded_for", "client"), [
    ("10.0.0.5", "", "10.0.0.5"),                                    # no header
    ("192.0.2.1", "203.0.113.7", "192.0.2.1"),                       # not a trusted proxy: the header is a claim
    ("10.0.0.5", "203.0.113.7", "203.0.113.7"),                      # an ingress forwarding for its client
    ("10.0.0.5", "203.0.113.7, 10.0.0.6", "203.0.113.7"),            # two proxies in a row
    ("10.0.0.5", "198.51.100.1, 203.0.113.7", "203.0.113.7"),        # a spoofed left-most entry is not believed
    ("10.0.0.5", "[2001:db8::1]", "2001:db8::1"),
    ("10.0.0.5", "::ffff:203.0.113.7", "203.0.113.7"),
    ("10.0.0.5", "203.0.113.7, garbage", "10.0.0.5"),                # malformed: stop at the proxy before it
    ("10.0.0.5", "10.0.0.7, 10.0.0.6", "10.0.0.7"),                  # only proxies: the first of them
])
def test_the_http_client_behind_trusted_proxies(peer, forwarded_for, client):
    from raftmq.node.networks import NetworkList, forwarded_http_client

    assert forwarded_http_client(peer, forwarded_for, NetworkList(["10.0.0.0/8"])) == client
    assert forwarded_http_client(peer, forwarded_for, NetworkList()) == peer  # no proxies configured


def _tile(body: str, label_start: str) -> str:
    m = re.search(rf'{re.escape(label_start)}[^<]*</[^>]+>\s*<[^>]+>([^<]*)<', body)
    assert m, f"no tile {label_start!r}"
    return m.group(1).strip()


def test_console_issue_34_log_out_on_every_member_unknown_numbers_and_what_a_visitor_sees(tmp_path):
    """Issue 34 on a 3-member cluster with authentication on:
    * logging out ends the session on the server: a copy of the cookie is refused by every member;
    * the login page says nothing about the cluster (name, members, leader) before a login;
    * the replica-check tab is offered only to users who may run it;
    * an unreachable member's numbers are "-" with the short cause, not 0 and the raw gRPC text;
    * the "leader changes seen here" tile agrees with the list below it (a restarted member counted the leader
      it found at start, which the list never showed)."""
    from raftmq.client.acl import AclAdmin
    from raftmq.client.security import ClientSecurity

    root = ClientSecurity(access_key="root", secret_key="root-secret-1")
    with running_nodes(tmp_path, 3, security=SECURITY, cluster={"secret": "cluster-secret-34"}) as nodes:
        webs = [Http(n.http_url) for n in nodes]
        code, _, body = webs[0].request("GET", "/ui/login")
        assert code == 200 and 'name="secret_key"' in body
        for secret in ("DefaultCluster", "n0", "n1", "n2", "this node", "leader", 'href="/ui/check"'):
            assert secret not in body, secret
        code, _, body = webs[1].request("GET", "/ui/nowhere")  # an error page for a visitor: the same
        assert "DefaultCluster" not in body and "this node" not in body

        # log out on n0; the cookie, copied before, works nowhere any more
        cookie = cookie_of(webs[0].login("root", "root-secret-1")[1])
        assert all(w.request("GET", "/ui/cluster", cookie=cookie)[0] == 200 for w in webs)
        code, headers, _ = webs[0].request("POST", "/ui/logout", cookie=cookie)
        assert code == 303 and headers["location"] == "/ui/login" and cookie_of(headers) == ""
        for w in webs:
            wait_for(lambda w=w: w.request("GET", "/ui/cluster", cookie=cookie)[0] == 303,
                     "the logged-out cookie refused", timeout=10)

        # the replica check is for users who may run it
        with AclAdmin(nodes[0].grpc_address, security=root) as acl:
            acl.put_user("bob", "bob-secret-1")
        bob = cookie_of(webs[0].login("bob", "bob-secret-1")[1])
        code, _, body = webs[0].request("GET", "/ui/cluster", cookie=bob)
        assert code == 200 and 'href="/ui/check"' not in body and 'href="/ui/topics"' in body
        admin = cookie_of(webs[1].login("root", "root-secret-1")[1])
        assert 'href="/ui/check"' in webs[1].request("GET", "/ui/cluster", cookie=admin)[2]

        # a member started after the leader was elected: no change seen, and the tile says so too
        restarted = nodes[2]
        restarted.restart()
        web = Http(restarted.http_url)
        mine = cookie_of(web.login("root", "root-secret-1")[1])
        _, _, body = web.request("GET", "/ui/cluster", cookie=mine)
        assert "no leader change since this node&#x27;s console started sampling" in body
        assert _tile(body, "leader changes seen here") == "0", body

        # an unreachable member: "-" for what nobody knows, and why in a few words
        nodes[1].kill()
        _, _, body = webs[0].request("GET", "/ui/cluster", cookie=admin)  # a session n1 issued, read on n0
        row = re.search(r'<tr><td[^>]*><b title="Raft [^"]*">n1</b>.*?</tr>', body, re.S)
        assert row, body
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)
        assert "unreachable" in cells[1]
        assert cells[2] == "voter" and cells[5:12] == ["-"] * 7, cells  # membership (from the group), term .. undispatched
        assert "connection refused" in cells[-1] and "failed to connect" not in cells[-1].split(">", 1)[-1], cells

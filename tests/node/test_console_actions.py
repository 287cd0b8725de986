"""Console actions (authentication on): an admin transfers leadership from the cluster page; others, other
sites and a console without authentication cannot. Real member processes over HTTP."""

from __future__ import annotations

import pytest

from raftmq.client import Admin
from raftmq.client.acl import AclAdmin
from raftmq.client.security import ClientSecurity
from tests.node.test_console_login import Http, cookie_of
from tests.support.processes import node_specs, running_nodes, start_nodes, stop_all
from tests.support.waiting import wait_for

SECURITY = {"auth_enabled": True, "auth_admin_access_key": "root", "auth_admin_secret_key": "root-secret-1"}
ROOT = ClientSecurity(access_key="root", secret_key="root-secret-1")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = start_nodes(node_specs(tmp_path_factory.mktemp("console-actions"), 3, security=SECURITY,
                                   cluster={"secret": "cluster-secret"}))
    try:
        yield nodes
    finally:
        stop_all(nodes)


def _leader(nodes) -> str:
    with Admin([n.grpc_address for n in nodes], security=ROOT) as admin:
        return wait_for(lambda: admin.cluster_status().leader_id or None, "a leader", timeout=60)


def test_an_admin_transfers_leadership_from_the_cluster_page(cluster):
    web = Http(cluster[1].http_url)  # any member's console
    root = cookie_of(web.login("root", "root-secret-1")[1])
    before = _leader(cluster)
    code, _, body = web.request("GET", "/ui/cluster", cookie=root)
    assert code == 200 and 'action="/ui/cluster/transfer-leader"' in body
    target = next(n.spec.id for n in cluster if n.spec.id != before)
    code, headers, _ = web.request("POST", "/ui/cluster/transfer-leader", cookie=root, form={"to": target})
    assert code == 303 and headers["location"] == "/ui/cluster?transferred=1"
    assert _leader(cluster) == target
    code, _, body = web.request("GET", headers["location"], cookie=root)
    assert code == 200 and f"leadership transferred: the leader is now {target}" in body
    # a member that is not a voter is refused with the reason, and nothing moves
    code, _, body = web.request("POST", "/ui/cluster/transfer-leader", cookie=root, form={"to": "n9"})
    assert code == 409 and "&#x27;n9&#x27; (transfer-leader --to) is not a voter of the group" in body
    assert _leader(cluster) == target


def test_only_admins_from_the_console_itself_may_act(cluster):
    web = Http(cluster[0].http_url)
    with AclAdmin([n.grpc_address for n in cluster], security=ROOT) as acl:
        acl.put_user("bob", "bob-secret-1")
        acl.add_rule("bob", "allow", ["SUB"], ["topic:*", "group:*"])
    bob = cookie_of(web.login("bob", "bob-secret-1")[1])
    before = _leader(cluster)
    code, _, body = web.request("GET", "/ui/cluster", cookie=bob)
    assert code == 200 and "transfer-leader" not in body  # no form for a user who may not use it
    code, _, body = web.request("POST", "/ui/cluster/transfer-leader", cookie=bob, form={"to": ""})
    assert code == 403 and "user &#x27;bob&#x27; may not ADMIN on cluster" in body
    # another site's page posting with the admin's cookie (a browser would not send a SameSite=Strict cookie
    # there at all; the Origin check holds even for one that does)
    root = cookie_of(web.login("root", "root-secret-1")[1])
    code, _, body = web.request("POST", "/ui/cluster/transfer-leader", cookie=root, form={"to": ""},
                                headers=[("Origin", "https://evil.example")])
    assert code == 403 and "sent from another site (https://evil.example) is refused" in body
    # no session, no signature: to the login page, never an action
    code, headers, _ = web.request("POST", "/ui/cluster/transfer-leader", form={"to": ""})
    assert code == 303 and headers["location"].startswith("/ui/login")
    assert web.request("GET", "/ui/cluster/transfer-leader", cookie=root)[0] == 404
    assert _leader(cluster) == before


def test_without_authentication_the_console_stays_read_only(tmp_path):
    with running_nodes(tmp_path, 1) as [node]:
        web = Http(node.http_url)
        code, _, body = web.request("GET", "/ui/cluster")
        assert code == 200 and "transfer-leader" not in body
        code, _, body = web.request("POST", "/ui/cluster/transfer-leader", form={"to": ""})
        assert code == 403 and "authentication is off, so the console is read-only" in body
        code, headers, _ = web.request("POST", "/ui/topics", form={})
        assert code == 405 and headers["allow"] == "GET"


def test_an_admin_resets_a_groups_offsets_from_the_group_page(cluster):
    from raftmq.client import Producer

    servers = [n.grpc_address for n in cluster]
    with Admin(servers, security=ROOT) as admin:
        admin.create_topic("ledger", queues=1)
        with Producer(servers, security=ROOT) as producer:
            for i in range(5):
                producer.send("ledger", f"entry {i}")
        admin.commit_offsets("auditors", "ledger", {0: 5})  # the group has read all five
    web = Http(cluster[2].http_url)
    root = cookie_of(web.login("root", "root-secret-1")[1])
    code, _, body = web.request("GET", "/ui/groups/auditors", cookie=root)
    assert code == 200 and 'action="/ui/groups/reset-offsets"' in body

    code, headers, _ = web.request("POST", "/ui/groups/reset-offsets", cookie=root,
                                   form={"group": "auditors", "topic": "ledger", "to_offset": "2"})
    assert code == 303 and headers["location"] == "/ui/groups/auditors?reset=ledger"
    code, _, body = web.request("GET", headers["location"], cookie=root)
    assert code == 200 and "offsets of auditors on ledger reset" in body
    # a crafted link claims nothing about a topic the group does not have
    assert "offsets of auditors on nope reset" not in web.request("GET", "/ui/groups/auditors?reset=nope",
                                                                  cookie=root)[2]
    with Admin(servers, security=ROOT) as admin:
        wait_for(lambda: admin.committed_offsets("auditors", "ledger") == {0: 2}, "the reset offsets replicated")

    for form, message in (({"group": "auditors", "topic": "ledger"}, "give either a time or an offset"),
                          ({"group": "auditors", "topic": "ledger", "to_offset": "-1"}, "out of range"),
                          ({"group": "auditors", "topic": "ledger", "to_time": "yesterday"}, "is not a time"),
                          ({"group": "bad group!", "topic": "ledger", "to_offset": "0"}, "group")):
        code, _, body = web.request("POST", "/ui/groups/reset-offsets", cookie=root, form=form)
        assert code == 400 and message in body, (form, body[:400])
    with AclAdmin(servers, security=ROOT) as acl:
        acl.put_user("carol", "carol-secret-1")
        acl.add_rule("carol", "allow", ["SUB"], ["group:auditors", "topic:ledger"])
    carol = cookie_of(web.login("carol", "carol-secret-1")[1])
    code, _, body = web.request("GET", "/ui/groups/auditors", cookie=carol)
    assert code == 200 and "reset-offsets" not in body
    code, _, body = web.request("POST", "/ui/groups/reset-offsets", cookie=carol,
                                form={"group": "auditors", "topic": "ledger", "to_offset": "0"})
    assert code == 403 and "may not ADMIN on group:auditors" in body


def test_a_followers_console_shows_the_leaders_live_group_members_with_authentication_on(cluster):
    """Live members are in the leader's memory: a follower's console asks the leader, signing as the node (the
    viewer's own right was decided here). Unsigned, the leader refused it and the page said members unknown."""
    from raftmq.client import Producer, PullConsumer

    servers = [n.grpc_address for n in cluster]
    with Admin(servers, security=ROOT) as admin:
        admin.create_topic("watched", queues=2)
    with Producer(servers, security=ROOT) as p:
        p.send("watched", b"x")
    follower = next(n for n in cluster if n.spec.id != _leader(cluster))
    web = Http(follower.http_url)
    root = cookie_of(web.login("root", "root-secret-1")[1])
    with PullConsumer("watchers", "watched", servers, start_from="first", client_id="watcher-1",
                      security=ROOT) as consumer:
        wait_for(lambda: consumer.poll(0.5), "the consumer joined and read", 30)
        consumer.commit()
        code, _, body = web.request("GET", "/ui/groups/watchers", cookie=root)
    assert code == 200 and "watcher-1" in body and "live members unknown" not in body, body[:2000]

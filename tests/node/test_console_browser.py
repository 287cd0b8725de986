"""The web console in a real browser (Debian's chromium, driven by playwright) against a live 3-member cluster.

Every page is reached by clicking, and what it shows is checked against the gRPC API (the SDK): members and
their state, topics and queue offsets, a group's members / committed offsets / lag / dead letters (asked on a
follower, which must fetch the members from the leader), the message browser's three searches, hostile and
binary bodies, the download of a truncated body, the replica check, the JS live refresh, the page without JS,
and an election shown after the leader is killed.

Needs /usr/bin/chromium (``make browser-deps``) and the ``playwright`` package (the ``dev`` extra); the test
installs nothing and never downloads a browser.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from raftmq.client import Admin, Producer
from raftmq.client.consumer_group import describe_consumer_group
from raftmq.client.replica_check import ReplicaChecker
from raftmq.node.console.safe import visible_controls
from tests.support.console_scenario import (
    BINARY_BODY,
    DLQ_TOPIC,
    GROUP,
    HOSTILE_TEXT,
    LARGE_BODY,
    OTHER_TOPIC,
    TOPIC,
    populate,
)
from tests.support.processes import node_specs, start_nodes, stop_all
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: the console's browser test needs Debian's chromium "
                    "(`make browser-deps` installs it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: install the dev extra (pip install -e '.[dev]')")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = start_nodes(node_specs(tmp_path_factory.mktemp("console"), 3))
    servers = [n.grpc_address for n in nodes]
    scenario = None
    try:
        scenario = populate(servers)
        with Admin(servers) as admin:
            def settled():  # every member applied and dispatched the same log
                st = admin.cluster_status()
                offsets = {m.applied_offset for m in st.members}
                ok = (st.leader_id and len(offsets) == 1 and all(m.ready for m in st.members)
                      and all(m.dispatch_behind_bytes == 0 for m in st.members))
                return st if ok else None
            wait_for(settled, "all members applied the same log")
        yield nodes, servers, scenario
    finally:
        if scenario is not None:
            scenario.close()
        stop_all(nodes)


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    p = context.new_page()
    dialogs: list[str] = []
    p.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    yield p
    context.close()
    assert dialogs == [], f"a body or property ran script in the console: {dialogs}"


def leader_and_follower(nodes, servers):
    with Admin(servers) as admin:
        leader_id = admin.cluster_status().leader_id
    leader = next(n for n in nodes if n.spec.id == leader_id)
    follower = next(n for n in nodes if n.spec.id != leader_id and n.alive)
    return leader, follower


def cells(page, table_id: str) -> list[list[str]]:
    return page.eval_on_selector_all(f"#{table_id} tbody tr",
                                     "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))")


def number(text: str) -> int:
    return int(text.replace(",", ""))


# ---------------------------------------------------------------------------------------------- cluster
def test_cluster_page_shows_every_member_as_the_api_does(cluster, page):
    nodes, servers, _ = cluster
    leader, follower = leader_and_follower(nodes, servers)
    page.goto(follower.http_url + "/ui")
    assert page.url.endswith("/ui/cluster")
    with Admin(follower.grpc_address) as admin:
        status = admin.cluster_status()
    rows = {r[0].split()[0]: r for r in cells(page, "members")}
    assert sorted(rows) == sorted(m.id for m in status.members) == ["n0", "n1", "n2"]
    for m in status.members:
        r = rows[m.id]
        assert r[1] == m.role, r
        assert r[2] == m.membership == "voter" and r[3] == "yes" and r[4] == "yes"
        assert number(r[5]) == m.term
        assert number(r[9]) == m.applied_offset  # settled: nothing is written meanwhile
        assert r[12] == m.grpc_address
    assert "(this node)" in rows[follower.spec.id][0]
    assert page.inner_text("header .who").count(status.leader_id) >= 1
    assert f"leader {status.leader_id}" in page.inner_text("header .who")


# ---------------------------------------------------------------------------------------------- topics
def test_topics_and_queues_match_the_api(cluster, page):
    nodes, servers, _ = cluster
    _, follower = leader_and_follower(nodes, servers)
    page.goto(follower.http_url + "/ui/cluster")
    page.click("nav >> text=Topics")
    with Admin(servers) as admin:
        types = {t.name: t.message_type for t in admin.list_topics()}
        names = sorted(types)
        offsets = {t: admin.queue_offsets(t) for t in names}
    rows = {r[0]: r for r in cells(page, "topics")}
    assert sorted(rows) == names == sorted([TOPIC, OTHER_TOPIC, DLQ_TOPIC])
    for t in names:
        assert rows[t][4] == types[t]  # issue 34: the message type, as `topic describe` shows it
        assert number(rows[t][5]) == sum(q.max_offset - q.min_offset for q in offsets[t])
        assert number(rows[t][6]) == sum(q.max_offset for q in offsets[t])
    assert page.locator("svg#chart-all").count() == 1
    page.click(f"#topics >> text={TOPIC}")
    page.wait_for_url(f"**/ui/topics/{TOPIC}")
    qrows = cells(page, "queues")
    assert [(number(r[0]), number(r[1]), number(r[2])) for r in qrows] == \
        [(q.queue_id, q.min_offset, q.max_offset) for q in offsets[TOPIC]]
    assert [r[0] for r in cells(page, "topic-groups")] == [GROUP]


# ---------------------------------------------------------------------------------------------- groups
def test_group_pages_on_a_follower_show_the_leaders_members_and_lag(cluster, page):
    nodes, servers, scenario = cluster
    _, follower = leader_and_follower(nodes, servers)
    page.goto(follower.http_url + "/ui/cluster")
    page.click("nav >> text=Consumer groups")
    desc = describe_consumer_group(servers, GROUP)
    with Admin(servers) as admin:
        dlq = sum(q.max_offset - q.min_offset for q in admin.queue_offsets(DLQ_TOPIC))
        committed = admin.committed_offsets(GROUP, TOPIC)
    rows = {r[0]: r for r in cells(page, "groups")}
    assert list(rows) == [GROUP]
    assert rows[GROUP][1] == TOPIC
    assert number(rows[GROUP][2]) == len({m.client_id for m in desc.members}) == 1
    assert number(rows[GROUP][3]) == sum(q.lag for q in desc.queues)
    assert number(rows[GROUP][4]) == dlq == 2
    page.click(f"#groups >> text={GROUP}")
    page.wait_for_url(f"**/ui/groups/{GROUP}")
    members = cells(page, "members")
    assert [(r[0], r[1], r[2]) for r in members] == \
        [(m.client_id, m.topic, ", ".join(map(str, m.queue_ids))) for m in desc.members]
    assert members[0][0] == scenario.consumer.client_id
    queues = cells(page, "group-queues")
    assert len(queues) == len(desc.queues) == 4
    for r, q in zip(queues, desc.queues, strict=True):
        assert (r[0], number(r[1]), r[2]) == (q.topic, q.queue_id, q.client_id)
        shown = number(r[3]) if q.committed else None
        assert shown == (committed.get(q.queue_id) if q.committed else None)
        assert (number(r[4]), number(r[5])) == (q.max_offset, q.lag)


# ---------------------------------------------------------------------------------------------- messages
def test_browse_by_queue_offset_shows_hostile_bodies_as_text(cluster, page):
    nodes, servers, scenario = cluster
    _, follower = leader_and_follower(nodes, servers)
    page.goto(follower.http_url + "/ui/cluster")
    page.click("nav >> text=Messages")
    form = page.locator("#form-offset")
    form.locator("input[name=topic]").fill(TOPIC)
    form.locator("input[name=queue]").fill("0")
    form.locator("input[name=offset]").fill("0")
    form.locator("button").click()
    page.wait_for_selector("#results")
    rows = cells(page, "results")
    with Admin(servers) as admin:
        q0 = admin.queue_offsets(TOPIC)[0]
    assert len(rows) == min(20, q0.max_offset - q0.min_offset)
    first = rows[0]
    assert first[0] == scenario.hostile.msg_id and number(first[3]) == 0
    assert first[5] == "<img src=x onerror=alert(1)>"  # the tag, shown as text
    assert first[8].startswith("<script>document.title='pwned'</script><b>bold?</b> & \\x1b[2K\\x0d\\x1b[31mFAKE")
    assert page.locator("#results script, #results img, #results b").count() == 0
    assert "pwned" not in page.title()


def test_message_page_text_binary_and_truncated_download(cluster, page):
    nodes, servers, scenario = cluster
    leader, follower = leader_and_follower(nodes, servers)
    page.goto(follower.http_url + "/ui/messages")
    # by msgId -> the binary message -> its page
    page.locator("#form-id input[name=id]").fill(scenario.binary.msg_id)
    page.locator("#form-id button").click()
    page.click(f"#results >> text={scenario.binary.msg_id}")
    page.wait_for_url(f"**/ui/messages/{scenario.binary.msg_id}")
    with Admin(servers) as admin:
        binary = admin.view_message(scenario.binary.msg_id)
        hostile = admin.view_message(scenario.hostile.msg_id)
        large = admin.view_message(scenario.large.msg_id)
    assert binary.body == BINARY_BODY
    assert page.get_attribute("#body", "data-kind") == "binary"
    dump = page.inner_text("#body").splitlines()
    assert dump[0].startswith("00000000  00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f")
    assert dump[2].endswith("|" + bytes(range(0x20, 0x30)).decode() + "|")
    assert len(dump) == len(BINARY_BODY) // 16
    meta = dict(cells(page, "message-meta"))
    assert meta["queue offset"] == str(binary.queue_offset) and meta["topic"] == binary.topic
    assert meta["body"] == f"{len(BINARY_BODY)} bytes, binary"
    # the hostile text message, on the leader's console this time
    page.goto(f"{leader.http_url}/ui/messages/{scenario.hostile.msg_id}")
    assert page.get_attribute("#body", "data-kind") == "text"
    assert page.inner_text("#body") == visible_controls(HOSTILE_TEXT) == \
        visible_controls(hostile.body.decode())
    assert page.locator("#body *:not(span.ctl)").count() == 0
    props = dict(cells(page, "properties"))
    assert props["note"] == "<i>not italic</i>" and page.locator("#properties i").count() == 0
    assert "pwned" not in page.title()
    # the large one is cut, and the download link gives every byte
    page.goto(f"{follower.http_url}/ui/messages/{scenario.large.msg_id}")
    assert "showing the first" in page.inner_text("#truncated")
    shown = page.inner_text("#body")
    assert LARGE_BODY.decode().startswith(shown.rstrip("\n")) and len(shown) < len(LARGE_BODY)
    with page.expect_download() as got:
        page.click("#truncated a")
    assert Path(got.value.path()).read_bytes() == LARGE_BODY == large.body


def test_search_by_key_and_time_range(cluster, page):
    nodes, servers, scenario = cluster
    _, follower = leader_and_follower(nodes, servers)
    page.goto(follower.http_url + "/ui/messages")
    form = page.locator("#form-key")
    form.locator("input[name=topic]").fill(TOPIC)
    form.locator("input[name=key]").fill("batch-a")
    form.locator("button").click()
    page.wait_for_selector("#results")
    with Admin(servers) as admin:
        api = admin.query_by_key(TOPIC, "batch-a", max_num=20)
    shown = [r[0] for r in cells(page, "results")]
    assert sorted(shown) == sorted(m.msg_id for m in api)
    assert set(shown) <= {s.msg_id for s in scenario.keyed}
    # a time range holding exactly one keyed message, then one holding none
    with Admin(servers) as admin:
        one = admin.query_by_key(TOPIC, "order-3")
    assert len(one) == 1
    at = one[0].store_timestamp
    page.goto(follower.http_url + f"/ui/messages?by=key&topic={TOPIC}&key=order-3&from={at}&to={at}")
    assert [r[0] for r in cells(page, "results")] == [one[0].msg_id] == [scenario.keyed[3].msg_id]
    page.goto(follower.http_url + f"/ui/messages?by=key&topic={TOPIC}&key=order-3&from=2000-01-01T00:00"
              "&to=2000-01-02T00:00")
    assert page.locator("#results").inner_text() == "no message matched"
    # a queue from a point in time (as SearchOffset)
    k = scenario.keyed[3]
    with Admin(servers) as admin:
        at = admin.view_message(k.msg_id).store_timestamp
        expect = admin.search_offset(TOPIC, k.queue_id, at)
    page.goto(follower.http_url + f"/ui/messages?by=offset&topic={TOPIC}&queue={k.queue_id}&at={at}&count=5")
    rows = cells(page, "results")
    assert number(rows[0][3]) == expect <= k.queue_offset
    assert k.msg_id in [r[0] for r in rows]


def test_bad_input_gets_a_clear_page(cluster, page):
    nodes, servers, _ = cluster
    n = nodes[0] if nodes[0].alive else nodes[1]
    resp = page.goto(n.http_url + f"/ui/messages?by=offset&topic={TOPIC}&queue=9")
    assert resp.status == 400 and "queue 9 is out of range" in page.inner_text("main")
    resp = page.goto(n.http_url + "/ui/messages?by=offset&topic=nope")
    assert resp.status == 404 and "topic 'nope' does not exist" in page.inner_text("main")
    resp = page.goto(n.http_url + "/ui/messages/not-an-id")
    assert resp.status == 400 and "not an offset message id" in page.inner_text("main")
    resp = page.goto(n.http_url + "/ui/groups/no-such-group")
    assert resp.status == 404 and "no live members, no committed offsets and no settings of its own" in page.inner_text("main")
    req = urllib.request.Request(n.http_url + "/ui/cluster", data=b"x=1", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 405 and "read-only" in e.value.read().decode()


# ---------------------------------------------------------------------------------------------- replica check
def test_replica_check_page_runs_the_cluster_check(cluster, page):
    nodes, servers, _ = cluster
    _, follower = leader_and_follower(nodes, servers)
    page.goto(follower.http_url + "/ui/cluster")
    page.click("nav >> text=Replica check")
    page.click("#run-check")
    page.wait_for_selector("#verdict")
    with ReplicaChecker(servers) as checker:
        report = checker.check()
    assert page.inner_text("#verdict").startswith("IDENTICAL")
    rows = {r[0]: r for r in cells(page, "check-members")}
    assert sorted(rows) == sorted(m.id for m in report.members)
    for m in report.members:
        assert rows[m.id][5] == m.verdict == "identical"
        assert rows[m.id][6] == m.queue_verdict == "identical"
        assert number(rows[m.id][3]) == m.applied_offset


# ---------------------------------------------------------------------------------------------- live and no-JS
def test_live_refresh_updates_the_page_without_a_reload(cluster, page):
    nodes, servers, _ = cluster
    _, follower = leader_and_follower(nodes, servers)
    page.goto(follower.http_url + f"/ui/topics/{TOPIC}")
    before = {number(r[0]): number(r[2]) for r in cells(page, "queues")}
    page.evaluate("window.__same_document = true")
    with Producer(servers) as p:
        p.send_batch(TOPIC, [b"live %d" % i for i in range(5)], queue_id=3)
    page.wait_for_function(
        f"() => [...document.querySelectorAll('#queues tbody tr')].some(r => r.cells[0].innerText.trim() === '3' "
        f"&& Number(r.cells[2].innerText) === {before[3] + 5})", timeout=30_000)
    assert page.evaluate("window.__same_document") is True  # swapped in place, not reloaded


def test_pages_show_their_content_without_javascript(cluster, browser):
    nodes, servers, _ = cluster
    context = browser.new_context(java_script_enabled=False)
    try:
        p = context.new_page()
        for path, table_id in (("/ui/cluster", "members"), ("/ui/topics", "topics"), ("/ui/groups", "groups"),
                               (f"/ui/messages?by=key&topic={TOPIC}&key=binary-key", "results")):
            p.goto(nodes[0].http_url + path)
            assert len(cells(p, table_id)) >= 1, path
    finally:
        context.close()


# ---------------------------------------------------------------------------------------------- failover (last)
def test_cluster_page_shows_an_election_after_the_leader_is_killed(cluster, page):
    nodes, servers, _ = cluster
    leader, follower = leader_and_follower(nodes, servers)
    with Admin(follower.grpc_address) as admin:
        old_term = admin.cluster_status().members[0].term
    leader.kill()
    with Admin([n.grpc_address for n in nodes if n.alive]) as admin:
        new = wait_for(lambda: (lambda s: s if s.leader_id and s.leader_id != leader.spec.id else None)(
            admin.cluster_status()), "a new leader", timeout=60)
    survivor = next(n for n in nodes if n.spec.id == new.leader_id)

    def shown():
        page.goto(survivor.http_url + "/ui/cluster")
        rows = {r[0].split()[0]: r for r in cells(page, "members")}
        events = [r[1] for r in cells(page, "events")]
        return (rows, events) if rows[leader.spec.id][1] == "unreachable" and any(
            f"→ {new.leader_id}" in e for e in events) else None

    rows, events = wait_for(shown, "the election on the survivor's cluster page", timeout=60, interval=1.0)
    assert rows[new.leader_id][1] == "leader" and number(rows[new.leader_id][5]) > old_term
    assert rows[leader.spec.id][12] != "-"  # says why it could not be asked


# ---------------------------------------------------------------------------------------------- login
def test_an_admin_logs_in_once_in_the_browser_and_every_member_takes_the_session(browser, tmp_path):
    """Authentication on: the browser is sent to the login form, a wrong secret is shown on it, the right one
    leads back to the page first asked for, and the cookie (cookies ignore ports, so the same browser sends it to
    every member here) opens the other members' consoles too, until the user logs out."""
    security = {"auth_enabled": True, "auth_admin_access_key": "root", "auth_admin_secret_key": "root-secret-1"}
    nodes = start_nodes(node_specs(tmp_path, 3, security=security, cluster={"secret": "cluster-secret"}))
    context = browser.new_context()
    try:
        p = context.new_page()
        p.goto(nodes[0].http_url + "/ui/topics")
        assert p.url == nodes[0].http_url + "/ui/login?next=%2Fui%2Ftopics"
        p.fill("input[name=access_key]", "root")
        p.fill("input[name=secret_key]", "not-the-secret")
        p.click("form.login button")
        assert "the secret key does not match access key 'root'" in p.inner_text("main")
        p.fill("input[name=secret_key]", "root-secret-1")
        p.click("form.login button")
        assert p.url == nodes[0].http_url + "/ui/topics" and p.inner_text("h1") == "Topics"
        cookie = next(c for c in context.cookies() if c["name"] == "raftmq_console")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
        assert p.evaluate("document.cookie") == ""  # no script of the page can read it
        for n in nodes:
            p.goto(n.http_url + "/ui/cluster")
            assert p.url == n.http_url + "/ui/cluster", n.spec.id
            wait_for(lambda: len(cells(p, "members")) == 3, f"{n.spec.id}'s cluster page lists the members")
            assert "root" in p.inner_text("form.account")
        p.click("form.account button")
        assert p.url == nodes[2].http_url + "/ui/login"
        p.goto(nodes[1].http_url + "/ui/cluster")
        assert p.url.startswith(nodes[1].http_url + "/ui/login?")
    finally:
        context.close()
        stop_all(nodes)

"""Thousands of topics on a real 3-member group (issue 43): 10,000 created from one file with the CLI, listed page
by page and by filter, kept by a clean restart of every member (a clean stop leaves a clean store), and paged and
filtered in the console's topics page in a real browser."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from raftmq.client import Admin, Producer, PullConsumer
from raftmq.client.errors import AlreadyExistsError, InvalidArgumentError
from raftmq.client.types import TopicConfig
from tests.client.test_cli_e2e import _env
from tests.support.processes import REPO_ROOT, node_specs, start_nodes, stop_all
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

TOPICS = 10_000
NAMES = [f"many-t{i:05d}" for i in range(TOPICS)]
UNCLEAN_STOP = "dispatch not caught up at shutdown"
UNCLEAN_START = "was not shut down cleanly"


def raftmq(servers: list[str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args, "--server", ",".join(servers)],
                          capture_output=True, text=True, timeout=300, env=_env(), cwd=REPO_ROOT)


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    base = tmp_path_factory.mktemp("many-topics")
    nodes = start_nodes(node_specs(base, 3))
    try:
        yield nodes, [n.grpc_address for n in nodes], base
    finally:
        stop_all(nodes)


def _listed(servers: list[str], page: int, *extra: str) -> list[str]:
    names, after = [], []
    while True:
        out = raftmq(servers, "topic", "list", "--json", "--limit", str(page), *after, *extra)
        assert out.returncode == 0, out.stderr
        rows = json.loads(out.stdout)
        names += [r["name"] for r in rows]
        assert len(rows) <= page
        if "next page: --after" not in out.stderr:  # the last page
            return names
        assert len(rows) == page
        after = ["--after", rows[-1]["name"]]


def test_ten_thousand_topics_from_a_file_are_listed_and_kept_by_a_clean_restart(group):
    nodes, servers, base = group
    bad = base / "bad.txt"
    bad.write_text("# a file with mistakes\nfile-ok-1\nbad name!\nfile-ok-2 --queues x\n\nfile-ok-3\n")
    out = raftmq(servers, "topic", "create", "--from-file", str(bad))
    assert out.returncode == 2, out
    assert ":3:" in out.stderr and ":4:" in out.stderr and "nothing was created" in out.stderr
    with Admin(servers) as admin:
        assert admin.list_topics(filter="file-ok") == []  # checked whole before anything was sent

    good = base / "topics.txt"
    good.write_text("# ten thousand topics\n" + "".join(f"{n} --queues 2\n" for n in NAMES))
    out = raftmq(servers, "topic", "create", "--from-file", str(good))
    assert out.returncode == 0 and f"created {TOPICS} topics" in out.stdout, out
    again = raftmq(servers, "topic", "create", "--from-file", str(good))
    assert again.returncode == 6 and "exist already (many-t00000" in again.stderr, again
    assert "--skip-existing" in again.stderr
    skipped = raftmq(servers, "topic", "create", "--from-file", str(good), "--skip-existing")
    assert skipped.returncode == 0 and f"{TOPICS} existed already" in skipped.stdout, skipped

    assert _listed(servers, 1000) == NAMES  # by name, page after page
    assert _listed(servers, 1000, "--filter", "T0012") == [f"many-t0012{i}" for i in range(10)]
    with Producer(servers) as p:
        sent = {n: p.send(n, b"body of " + n.encode(), queue_id=1).queue_offset for n in NAMES[::1000]}

    with Admin(servers) as admin:
        def applied_everywhere():
            st = admin.cluster_status()
            return len({m.applied_offset for m in st.members}) == 1 and all(
                m.dispatch_behind_bytes == 0 for m in st.members)
        wait_for(applied_everywhere, "every member applied and dispatched the sends")
    logs_before = [n.spec.log_path.read_text(errors="replace") for n in nodes]
    for n in nodes:  # a clean stop of every member, then a start
        assert n.stop(timeout=120) == 0
    for n, before in zip(nodes, logs_before, strict=True):
        assert UNCLEAN_STOP not in n.spec.log_path.read_text(errors="replace")[len(before):]
    for n in nodes:
        n.start()
    for n in nodes:
        n.wait_ready(timeout=120)
    for n, before in zip(nodes, logs_before, strict=True):
        assert UNCLEAN_START not in n.spec.log_path.read_text(errors="replace")[len(before):], n.log_tail()
        with Admin([n.grpc_address]) as admin:  # every member kept every topic
            assert [t.name for t in admin.list_topics(filter="many-t")] == NAMES
    for name, offset in sent.items():
        with PullConsumer("many-topics-check", name, servers, start_from="first", auto_commit=False) as c:
            got = wait_for(lambda c=c: c.poll(timeout=5.0), f"the message of {name}")
            assert [(m.queue_id, m.queue_offset, m.body) for m in got] == [(1, offset, b"body of " + name.encode())]


def test_the_console_pages_and_filters_thousands_of_topics(group):
    """Needs /usr/bin/chromium and playwright, as tests/node/test_console_browser.py."""
    nodes, servers, _ = group
    with Admin(servers) as admin:
        if len(admin.list_topics(filter="many-t")) < TOPICS:
            admin.create_topics(_configs(), skip_existing=True)
    from tests.node.test_console_browser import CHROMIUM, CHROMIUM_ARGS, cells

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing (`make browser-deps` installs it)")
    from playwright.sync_api import sync_playwright

    node = next(n for n in nodes if n.alive)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(node.http_url + "/ui/topics")
            assert page.inner_text("#topics-shown") == f"topics 1-100 of {TOPICS}"
            rows = cells(page, "topics")
            assert [r[0] for r in rows] == NAMES[:100]
            page.click("#topics-live >> text=next page")
            page.wait_for_url("**after=many-t00099**")
            assert page.inner_text("#topics-shown") == f"topics 101-200 of {TOPICS}"
            assert [r[0] for r in cells(page, "topics")] == NAMES[100:200]
            page.fill("#topic-filter input[name=filter]", "T0999")
            page.click("#topic-filter button")
            page.wait_for_url("**filter=T0999**")
            assert page.inner_text("#topics-shown") == "topics 1-10 of 10"
            assert [r[0] for r in cells(page, "topics")] == NAMES[9990:]
            assert page.input_value("#topic-filter input[name=filter]") == "T0999"
            assert page.locator("#topics-live >> text=next page").count() == 0
            page.goto(node.http_url + "/ui/topics?filter=no-such-topic")
            assert "no topic name contains 'no-such-topic'" in page.inner_text("#topics")
            page.goto(node.http_url + "/ui/topics?size=1001")
            assert "size 1001 is out of range" in page.inner_text("main")
        finally:
            browser.close()


def _configs():
    return [TopicConfig(n, read_queue_nums=2, write_queue_nums=2) for n in NAMES]


def test_concurrent_creates_all_land_and_a_bad_batch_is_refused_whole(group):
    _nodes, servers, _ = group
    errors: list[BaseException] = []

    def create(worker: int) -> None:
        try:
            with Admin(servers) as admin:
                for i in range(50):
                    admin.create_topic(f"conc-{worker}-{i:02d}", queues=2)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=create, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == []
    for server in servers:
        # every member lists all 400 once it applied them (a member answers a list from what it applied: one that
        # forwarded the last create to the leader may be a few milliseconds behind it)
        with Admin(server) as one:
            wait_for(lambda one=one: len(one.list_topics(filter="conc-")) == 400, f"{server} lists all 400 topics")
    with Admin(servers) as admin:
        with pytest.raises(InvalidArgumentError, match="given twice"):
            admin.create_topics([TopicConfig("batch-a"), TopicConfig("batch-b"), TopicConfig("batch-a")])
        with pytest.raises(InvalidArgumentError, match=r"topics\[1\] 'bad name!'"):
            admin.create_topics([TopicConfig("batch-c"), TopicConfig("bad name!")])
        with pytest.raises(AlreadyExistsError, match="conc-0-00"):
            admin.create_topics([TopicConfig("batch-d"), TopicConfig("conc-0-00")])
        assert admin.list_topics(filter="batch-") == []  # each refused batch created nothing
        created, existing = admin.create_topics([TopicConfig("batch-d"), TopicConfig("conc-0-00")],
                                                skip_existing=True)
        assert [t.name for t in created] == ["batch-d"] and existing == ["conc-0-00"]
        with pytest.raises(InvalidArgumentError):
            admin.list_topics_page(limit=-1)
        page = admin.list_topics_page(filter="CONC-7-", limit=20)
        assert [t.name for t in page.topics] == [f"conc-7-{i:02d}" for i in range(20)]
        assert page.matching == 50 and page.more

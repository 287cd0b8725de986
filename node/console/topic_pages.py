"""The topic list (with throughput) and one topic's queues, rates and consuming groups."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftmq.node.console.charts import Series, line_chart
from raftmq.node.console.history import rates
from raftmq.node.console.layout import BadRequest, Response, cards, int_arg, link, page, section, table, utc
from raftmq.node.console.safe import html, join, seg, url
from raftmq.node.validation import is_system_topic

if TYPE_CHECKING:
    from raftmq.node.console.context import ConsoleContext

BROWSE_DEFAULT = 20  # "browse latest" links show this many messages
PAGE_SIZE = 100  # topics per page of the list (a node may hold thousands: docs/operations/console.md#topics)
MAX_PAGE_SIZE = 1000


def topics_page(c: ConsoleContext, query: dict[str, str], name: str | None = None) -> Response:
    if name is not None:
        return _topic_page(c, name)
    st = c.store()
    show_system = query.get("system") == "1"
    wanted = query.get("filter", "").strip()
    after = query.get("after", "")
    size = int_arg(query, "size", PAGE_SIZE, 1, MAX_PAGE_SIZE)
    snap = c.history.snapshot()
    configs = sorted(st.topics.list(), key=lambda t: t.topic_name)
    readable = {cfg.topic_name for cfg in configs if c.may("SUB", "topic", cfg.topic_name)}
    matching = [cfg for cfg in configs if cfg.topic_name in readable and (show_system or not is_system_topic(
        cfg.topic_name)) and wanted.lower() in cfg.topic_name.lower()]
    start = next((i for i, cfg in enumerate(matching) if cfg.topic_name > after), len(matching)) if after else 0
    shown = matching[start:start + size]
    rows = []
    for cfg in shown:  # offsets and rates of this page's topics only
        t = cfg.topic_name
        lo = sum(st.min_offset_in_queue(t, q) for q in range(cfg.read_queue_nums))
        hi = sum(st.max_offset_in_queue(t, q) for q in range(cfg.read_queue_nums))
        rin, rout = rates(snap.samples, "stored", t), rates(snap.samples, "consumed", t)
        rows.append([link(f"/ui/topics/{seg(t)}", t), f"{cfg.read_queue_nums} / {cfg.write_queue_nums}",
                     _perm(cfg.perm), "yes" if cfg.order else "", _message_type(cfg), hi - lo, hi,
                     _rate(rin), _rate(rout), sum(c.may("SUB", "group", g) for g in st.consumer_offsets.groups(t))])
    empty = (f"no topic name contains {wanted!r}" if wanted else
             "no topics yet: create one with `raftmq topic create NAME`")
    topics = table(["topic", "queues (read / write)", "perm", "ordered", "message type", "messages kept",
                    "messages ever", "in /s", "consumed /s", "groups"], rows, table_id="topics",
                   numeric=(5, 6, 7, 8, 9), empty=empty)
    # with authentication on, the totals are of the topics this user may read: others' traffic is theirs
    charted, title = (None, "all topics") if c.sees_everything else (readable, "the topics you may read")
    chart = line_chart([Series("in (stored)", rates(snap.samples, "stored", charted)),
                        Series("consumed (committed)", rates(snap.samples, "consumed", charted))],
                       title=f"{title}, messages/s", unit="/s", chart_id="chart-all", width=1180, height=170)
    system = "1" if show_system else ""
    toggle = link(url("/ui/topics", system="" if show_system else "1", filter=wanted),
                  "hide system topics" if show_system else "show system topics")
    size_arg = size if size != PAGE_SIZE else ""
    form = html('<form method="get" action="/ui/topics" class="inline" id="topic-filter"><label>topics whose '
                'name contains <input name="filter" value="{}" size="24"></label>'
                '<input type="hidden" name="system" value="{}"><input type="hidden" name="size" value="{}"> '
                '<button type="submit">filter</button></form>', wanted, system, size_arg)
    pages = []
    if start > 0:
        pages.append(link(url("/ui/topics", system=system, filter=wanted, size=size_arg), "first page"))
    if start + size < len(matching):
        pages.append(link(url("/ui/topics", system=system, filter=wanted, size=size_arg,
                              after=shown[-1].topic_name), "next page"))
    counted = html('<span id="topics-shown">{}</span>',
                   f"topics {start + 1}-{start + len(shown)} of {len(matching)}" if shown
                   else f"0 of {len(matching)} topics")
    # the filter stays outside what the live refresh replaces, so typing in it is never undone
    listing = html('<div id="topics-live" data-live="1"><p>{} {}</p>{}</div>', counted, join(pages, " · "), topics)
    body = join([
        section("Throughput", chart, "throughput", live=True,
                note="in = messages stored (replicated queue offsets); consumed = progress of the groups' "
                     "committed offsets, summed over groups"),
        section("Topics", join([html("<div>{} {}</div>", form, toggle), listing]), "topics-section"),
    ])
    return page(c.frame(), "topics", "Topics", body)

def _topic_page(c: ConsoleContext, name: str) -> Response:
    st = c.store()
    c.require("SUB", "topic", name)  # as GetQueueOffsets (before saying whether it exists)
    cfg = st.topics.get(name)
    if cfg is None:
        raise BadRequest(f"topic {name!r} does not exist on {c.node.node_id}", 404)
    snap = c.history.snapshot()
    queues = c.node.queue_offsets(name, cfg.read_queue_nums)
    rows = [[q.queue_id, q.min_offset, q.max_offset, q.max_offset - q.min_offset, utc(q.last_store_timestamp),
             link(url("/ui/messages", by="offset", topic=name, queue=q.queue_id,
                      offset=max(q.min_offset, q.max_offset - BROWSE_DEFAULT)), "browse latest")]
            for q in queues]
    many = c.node.groups.many
    if many:  # issue 38: a topic has queues in every group; this node's own from its store, the others asked
        rows = [[c.node.groups.own, *r] for r in rows] + _other_groups_queues(c, name)
    qtable = table((["group"] if many else []) + ["queue", "min offset", "max offset", "messages",
                                                   "last stored (UTC)", ""], rows,
                   table_id="queues", numeric=(1, 2, 3, 4) if many else (0, 1, 2, 3))
    grows = []
    for g in st.consumer_offsets.groups(name):
        if not c.may("SUB", "group", g):
            continue
        committed = st.consumer_offsets.offsets(g, name)
        lag = sum(max(0, q.max_offset - max(committed.get(q.queue_id, 0), q.min_offset)) if q.queue_id in
                  committed else q.max_offset - q.min_offset for q in queues)
        grows.append([link(f"/ui/groups/{seg(g)}", g), len(committed), lag])
    gtable = table(["group", "queues committed", "lag (messages)"], grows, table_id="topic-groups",
                   numeric=(1, 2), empty="no consumer group has committed offsets on this topic")
    chart = line_chart([Series("in (stored)", rates(snap.samples, "stored", name)),
                        Series("consumed (committed)", rates(snap.samples, "consumed", name))],
                       title=f"{name}, messages/s", unit="/s", chart_id="chart-topic", width=1180,
                       height=170)
    summary = cards([("read / write queues", f"{cfg.read_queue_nums} / {cfg.write_queue_nums}"),
                     ("perm", _perm(cfg.perm)), ("ordered", "yes" if cfg.order else "no"),
                     ("message type", _message_type(cfg)),
                     ("messages kept", sum(q.max_offset - q.min_offset for q in queues))], card_id="summary")
    body = join([summary, section("Throughput", chart, "throughput", live=True),
                 section("Queues", qtable, "queues-section", live=True,
                         note=f"the queues of every group: {c.node.node_id}'s group {c.node.groups.own} from its "
                              "own store, the others asked through it (as raftmq topic describe does); the "
                              "browse links, the rates and the consumer groups below are this group's"
                         if many else ""),
                 section("Consumer groups", gtable, "groups-section", live=True)])
    return page(c.frame(), "topics", f"Topic {name}", body)


def _other_groups_queues(c: ConsoleContext, name: str) -> list[list]:
    """Rows of the topic's queues in every other group (min / max offsets relayed there), or one row saying
    why a group did not answer."""
    from raftmq.node.console.cluster_calls import cluster_calls, member_credentials

    calls = cluster_calls()
    rows: list[list] = []
    for group in c.node.groups.names:
        if group == c.node.groups.own:
            continue
        try:
            queues = calls.queue_offsets(c.node.config.advertised_address, member_credentials(c.node.config), name,
                                         group)
        except calls.Error as e:
            rows.append([group, "-", "-", "-", "-", "-", f"did not answer: {e}"])
            continue
        rows += [[group, q.queue_id, q.min_offset, q.max_offset, q.max_offset - q.min_offset,
                  utc(q.last_store_timestamp), ""] for q in queues]
    return rows


def _message_type(cfg) -> str:
    """What the topic takes (issue 34); a topic from before message types takes every kind (as the API says)."""
    return cfg.message_type or "MIXED"


def _rate(points: list[tuple[float, float]]) -> str:
    return f"{points[-1][1]:.1f}" if points else "-"


def _perm(perm: int) -> str:
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-") + (" (inherit)" if perm & 1 else "")

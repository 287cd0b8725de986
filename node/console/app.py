"""The web console on the node's HTTP port (``/ui``): cluster, topics, consumer groups, messages, replica check.

Read-only by design: every page is a GET that reads what the node already holds (the store, the write path's
Raft state, the leader's consumer-group table) through the same functions the gRPC services use
(node.cluster_views, the store's read API); nothing here writes. Cluster-wide facts come from the same status
fan-out as ``AdminService.ClusterStatus``; consumer-group members, which only the leader knows, are asked of the
leader over its AdminService when this node follows.

Admin actions (transfer leadership, reset offsets, ...) are not offered yet. When the access-control issue lands,
add them to ``Console.admin_actions`` as POST handlers and set ``Console.authorize_admin`` to check the caller's
ADMIN right: until then every non-GET request is refused with 405 and a reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote

import grpc
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

from node.cluster_views import cluster_status, describe_group
from node.console import safe
from node.console.charts import Series, line_chart
from node.console.history import History, Sample, rates
from node.console.layout import (
    SECURITY_HEADERS,
    Frame,
    Response,
    badge,
    cards,
    esc_or_dash,
    link,
    notice,
    page,
    section,
    table,
    utc,
    yes_no,
)
from node.console.safe import Markup, html, join, seg, url
from node.errors import RpcError
from node.validation import ValidationError, check_group_name, check_topic_name, is_system_topic
from store.errors import StoreError

if TYPE_CHECKING:
    from node.broker import Broker

log = logging.getLogger(__name__)

DLQ_PREFIX = "%DLQ%"
RETRY_PREFIX = "%RETRY%"
BROWSE_MAX = 64            # messages per browser page (RocketMQ's query cap)
BROWSE_DEFAULT = 20
LEADER_CALL_TIMEOUT_S = 3.0
GROUPS_LISTED_MAX = 200    # the group list asks the leader once per group: bounded
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


class BadRequest(Exception):
    """A console request the user can fix (bad offset, unknown topic): shown on the page with status 400/404."""

    def __init__(self, message: str, code: int = 400):
        super().__init__(message)
        self.code = code


class Console:
    """Routes ``/ui`` requests of one node to page renderers; samples history for the charts."""

    def __init__(self, node: Broker):
        self.node = node
        self.history = History(self._sample)
        self._check_lock = threading.Lock()
        # issue 14 hook: POST path -> handler(query) for admin actions, allowed only when authorize_admin says so
        self.admin_actions: dict[str, Callable[[dict[str, str]], Response]] = {}
        self.authorize_admin: Callable[[dict[str, str]], bool] = lambda headers: False
        self._routes: list[tuple[str, Callable[..., Response]]] = [
            ("/ui/cluster", self.cluster_page), ("/ui/topics", self.topics_page),
            ("/ui/groups", self.groups_page), ("/ui/messages", self.messages_page), ("/ui/check", self.check_page),
        ]

    def start(self) -> None:
        self.history.start()

    def stop(self) -> None:
        self.history.stop()

    # ------------------------------------------------------------------ dispatch
    def handle(self, method: str, raw_path: str, headers: dict[str, str]) -> Response:
        """One request; never raises (an unexpected error becomes a 500 page and a log line)."""
        path, _, query_string = raw_path.partition("?")
        query = {k: v[-1] for k, v in parse_qs(query_string, keep_blank_values=True).items()}
        try:
            if method != "GET":
                return self._admin(method, path, query, headers)
            if path in ("/ui", "/ui/"):
                return Response(302, b"", headers={"Location": "/ui/cluster"})
            if path.startswith("/ui/static/"):
                return self._static(path[len("/ui/static/"):])
            for prefix, handler in self._routes:
                if path == prefix:
                    return handler(query)
                if path.startswith(prefix + "/"):
                    return handler(query, *(unquote(p) for p in path[len(prefix) + 1:].split("/")))
            return self._error(404, f"no console page at {path}; start at /ui")
        except BadRequest as e:
            return self._error(e.code, str(e))
        except TypeError:  # a path with more segments than the page takes
            return self._error(404, f"no console page at {path}; start at /ui")
        except Exception as e:
            log.exception("console: %s %s failed", method, path)
            return self._error(500, f"internal error: {type(e).__name__}: {e} (see the node log)")

    def _admin(self, method: str, path: str, query: dict[str, str], headers: dict[str, str]) -> Response:
        action = self.admin_actions.get(path) if method == "POST" else None
        if action is None:
            resp = self._error(405, f"{method} {path}: the console is read-only (GET only); admin actions will "
                               "require the ADMIN right once access control is enabled")
            resp.headers["Allow"] = "GET"
            return resp
        if not self.authorize_admin(headers):
            return self._error(403, "this action needs the ADMIN right")
        return action(query)

    def _static(self, name: str) -> Response:
        suffix = name[name.rfind("."):] if "." in name else ""
        if "/" in name or suffix not in STATIC_TYPES:
            return self._error(404, f"no static file {name}")
        data = resources.files(__package__).joinpath("static", name)
        if not data.is_file():
            return self._error(404, f"no static file {name}")
        headers = {"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"}
        return Response(200, data.read_bytes(), STATIC_TYPES[suffix], headers)

    def _frame(self) -> Frame:
        node = self.node
        wp = node.write_path
        leader = wp.leader() if wp is not None else None
        if wp is None:
            role = "starting"
        elif not node.config.members:
            role = "standalone"
        else:
            role = "leader" if leader is not None and leader.id == node.node_id else "follower"
        return Frame(node.config.cluster.name, node.node_id, role, leader.id if leader else "")

    def _error(self, code: int, message: str) -> Response:
        titles = {400: "Bad request", 403: "Forbidden", 404: "Not found", 405: "Read-only", 503: "Not ready"}
        return page(self._frame(), "", titles.get(code, "Error"), notice(message, "bad"), code)

    def _store(self):
        node = self.node
        if node.store is None or not node.serving:
            raise BadRequest(f"node {node.node_id} is not serving yet ({node.readiness()[1]}); this page needs "
                             "its store: try again shortly or open another member's console", 503)
        return node.store

    # ------------------------------------------------------------------ history samples
    def _sample(self) -> Sample | None:
        node = self.node
        st, wp = node.store, node.write_path
        if st is None or wp is None or not node.serving:
            return None
        stored: dict[str, int] = {}
        consumed: dict[str, int] = {}
        for cfg in st.topics.list():
            t = cfg.topic_name
            stored[t] = sum(st.max_offset_in_queue(t, q) for q in range(cfg.read_queue_nums))
        for key, offsets in st.consumer_offsets.all().items():
            topic = key.rsplit("@", 1)[0]
            consumed[topic] = consumed.get(topic, 0) + sum(offsets.values())
        leader = wp.leader()

        def counter(name: str) -> int:
            fn = getattr(wp, name, None)
            return int(fn()) if callable(fn) else 0

        return Sample(time.time(), node.leader_term(), leader.id if leader else "", counter("commit_index"),
                      counter("raft_applied_index"), st.dispatch_behind_bytes(), stored, consumed)

    # ------------------------------------------------------------------ cluster
    def cluster_page(self, query: dict[str, str]) -> Response:
        status = cluster_status(self.node)
        snap = self.history.snapshot()
        members = sorted(status.members, key=lambda m: m.id)
        rows = []
        for m in members:
            role = m.role or "unknown"
            rows.append([
                html('<b title="Raft {}">{}</b>{}', m.raft_address or "-", m.id,
                     Markup(" (this node)") if m.id == self.node.node_id else Markup("")),
                badge(role), yes_no(m.ready), yes_no(m.healthy), m.term, m.commit_index, m.applied_index,
                max(0, m.commit_index - m.applied_index), m.applied_offset, safe.human_bytes(m.lag_bytes),
                safe.human_bytes(m.dispatch_behind_bytes), m.grpc_address, esc_or_dash(_short(m.error)),
            ])
        members_table = table(
            ["member", "role", "ready", "healthy", "term", "commit index", "applied index", "apply lag",
             "applied offset", "behind leader", "undispatched", "gRPC address", "error"],
            rows, table_id="members", numeric=(4, 5, 6, 7, 8, 9, 10), wrap=(12,))
        leader_changes = getattr(self.node.write_path, "leader_changes", 0) if self.node.write_path else 0
        terms = [m.term for m in members if m.term]
        summary = cards([
            ("cluster", status.cluster_name), ("leader", status.leader_id or "none (election)"),
            ("term", max(terms) if terms else 0), ("durability", status.durability or "-"),
            ("members ready", f"{sum(m.ready for m in members)} / {len(members)}"),
            ("leader changes seen here", leader_changes),
        ], card_id="summary")
        samples = snap.samples
        term_chart = line_chart([Series("term", [(s.at, s.term) for s in samples], step=True)],
                                title="Raft term (each step = an election)", chart_id="chart-term", width=580)
        lag_chart = line_chart([
            Series("commit−applied (entries)", [(s.at, s.commit_index - s.applied_index) for s in samples]),
            Series("dispatch behind (KiB)", [(s.at, s.dispatch_behind_bytes / 1024) for s in samples]),
        ], title=f"apply / dispatch lag on {self.node.node_id}", chart_id="chart-lag", width=580)
        events = table(["time (UTC)", "event"],
                       [[utc(int(e.at * 1000)), e.describe()] for e in reversed(snap.events)],
                       table_id="events", empty="no leader change since this node's console started sampling "
                       f"at {utc(int(snap.since * 1000))} UTC")
        body = join([
            summary,
            section("Members", members_table, "members-section", live=True,
                    note="as this node sees them right now: peers are asked directly, an unreachable one shows "
                         "its error"),
            section("Over time", html('<div class="charts">{}{}</div>', term_chart, lag_chart), "charts",
                    live=True),
            section("Leader changes", events, "events-section", live=True,
                    note=f"seen by {self.node.node_id}; the Raft term counts every election in the cluster"),
        ])
        return page(self._frame(), "cluster", "Cluster", body)

    # ------------------------------------------------------------------ topics
    def topics_page(self, query: dict[str, str], name: str | None = None) -> Response:
        if name is not None:
            return self._topic_page(name)
        st = self._store()
        show_system = query.get("system") == "1"
        snap = self.history.snapshot()
        rows = []
        for cfg in sorted(st.topics.list(), key=lambda c: c.topic_name):
            t = cfg.topic_name
            if is_system_topic(t) and not show_system:
                continue
            lo = sum(st.min_offset_in_queue(t, q) for q in range(cfg.read_queue_nums))
            hi = sum(st.max_offset_in_queue(t, q) for q in range(cfg.read_queue_nums))
            rin, rout = rates(snap.samples, "stored", t), rates(snap.samples, "consumed", t)
            rows.append([link(f"/ui/topics/{seg(t)}", t), f"{cfg.read_queue_nums} / {cfg.write_queue_nums}",
                         _perm(cfg.perm), "yes" if cfg.order else "", hi - lo, hi,
                         _rate(rin), _rate(rout), len(st.consumer_offsets.groups(t))])
        topics = table(["topic", "queues (read / write)", "perm", "ordered", "messages kept", "messages ever",
                        "in /s", "consumed /s", "groups"], rows, table_id="topics", numeric=(4, 5, 6, 7, 8),
                       empty="no topics yet: create one with `raftmq topic create NAME`")
        chart = line_chart([Series("in (stored)", rates(snap.samples, "stored")),
                            Series("consumed (committed)", rates(snap.samples, "consumed"))],
                           title="all topics, messages/s", unit="/s", chart_id="chart-all", width=1180, height=170)
        toggle = link(url("/ui/topics", system="" if show_system else "1"),
                      "hide system topics" if show_system else "show system topics")
        body = join([
            section("Throughput", chart, "throughput", live=True,
                    note="in = messages stored (replicated queue offsets); consumed = progress of the groups' "
                         "committed offsets, summed over groups"),
            section("Topics", html("<p>{}</p>{}", toggle, topics), "topics-section", live=True),
        ])
        return page(self._frame(), "topics", "Topics", body)

    def _topic_page(self, name: str) -> Response:
        st = self._store()
        cfg = st.topics.get(name)
        if cfg is None:
            raise BadRequest(f"topic {name!r} does not exist on {self.node.node_id}", 404)
        snap = self.history.snapshot()
        queues = self.node.queue_offsets(name, cfg.read_queue_nums)
        rows = [[q.queue_id, q.min_offset, q.max_offset, q.max_offset - q.min_offset, utc(q.last_store_timestamp),
                 link(url("/ui/messages", by="offset", topic=name, queue=q.queue_id,
                          offset=max(q.min_offset, q.max_offset - BROWSE_DEFAULT)), "browse latest")]
                for q in queues]
        qtable = table(["queue", "min offset", "max offset", "messages", "last stored (UTC)", ""], rows,
                       table_id="queues", numeric=(0, 1, 2, 3))
        grows = []
        for g in st.consumer_offsets.groups(name):
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
                         ("messages kept", sum(q.max_offset - q.min_offset for q in queues))], card_id="summary")
        body = join([summary, section("Throughput", chart, "throughput", live=True),
                     section("Queues", qtable, "queues-section", live=True),
                     section("Consumer groups", gtable, "groups-section", live=True)])
        return page(self._frame(), "topics", f"Topic {name}", body)

    # ------------------------------------------------------------------ consumer groups
    def _group_view(self, group: str) -> tuple[pb.DescribeConsumerGroupResponse, str]:
        """The group as the leader describes it (asked over gRPC when this node follows); when the leader cannot
        be asked, the replicated offsets from here with a note saying members are unknown."""
        node = self.node
        leader = node.write_path.leader() if node.write_path is not None else None
        if leader is not None and leader.id == node.node_id:
            return describe_group(node, group), ""
        if leader is not None and leader.grpc_address:
            try:
                with grpc.insecure_channel(leader.grpc_address) as ch:
                    return pb_grpc.AdminServiceStub(ch).DescribeConsumerGroup(
                        pb.DescribeConsumerGroupRequest(group=group), timeout=LEADER_CALL_TIMEOUT_S), ""
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    raise BadRequest(e.details() or f"consumer group {group!r} not found", 404) from None
                why = f"the leader {leader.id} could not be asked ({e.code().name}: {_short(e.details() or '')})"
        else:
            why = "there is no leader right now"
        return describe_group(node, group, with_members=False), f"live members unknown: {why}; offsets and lag " \
                                                                 f"below are {node.node_id}'s replicated copy"

    def _known_groups(self) -> list[str]:
        st = self._store()
        groups = set(st.consumer_offsets.groups())
        if self.node._is_leader():
            groups |= set(self.node.consumer_groups.group_sizes())
        return sorted(groups)

    def groups_page(self, query: dict[str, str], name: str | None = None) -> Response:
        if name is not None:
            return self._group_page(name)
        st = self._store()
        rows = []
        notes = set()
        for g in self._known_groups()[:GROUPS_LISTED_MAX]:
            try:
                view, note = self._group_view(g)
            except (BadRequest, RpcError, ValidationError):
                continue  # gone between listing and describing
            if note:
                notes.add(note.split(";")[0])
            members = {m.client_id for m in view.members}
            rows.append([link(f"/ui/groups/{seg(g)}", g), ", ".join(sorted({q.topic for q in view.queues})),
                         len(members) if not note else Markup('<span class="muted">?</span>'),
                         sum(q.lag for q in view.queues), _dlq_cell(st, g)])
        gtable = table(["group", "topics", "live members", "lag (messages)", "DLQ messages"], rows,
                       table_id="groups", numeric=(2, 3, 4),
                       empty="no consumer groups yet: a group appears once a consumer heartbeats or commits")
        note = "; ".join(sorted(notes))
        body = join([notice(note, "warn") if note else Markup(""),
                     section("Groups", gtable, "groups-section", live=True,
                             note="members as the leader knows them (heartbeats go to the leader); lag = "
                                  "messages stored past the committed offset")])
        return page(self._frame(), "groups", "Consumer groups", body)

    def _group_page(self, group: str) -> Response:
        st = self._store()
        try:
            check_group_name(group)
        except ValidationError as e:
            raise BadRequest(str(e)) from None
        try:
            view, note = self._group_view(group)
        except RpcError as e:
            raise BadRequest(e.message, 404 if e.code == grpc.StatusCode.NOT_FOUND else 400) from None
        now_ms = int(time.time() * 1000)
        mrows = [[m.client_id, m.topic, ", ".join(map(str, m.queue_ids)) or "-",
                  f"{max(0, now_ms - m.last_heartbeat_ms) / 1000:.1f} s ago", f"{m.expires_in_ms / 1000:.1f} s"]
                 for m in view.members]
        mtable = table(["client id", "topic", "queues", "last heartbeat", "expires in"], mrows, table_id="members",
                       empty="no live members" if not note else "unknown (see above)")
        qrows = [[link(f"/ui/topics/{seg(q.topic)}", q.topic), q.queue_id, esc_or_dash(q.client_id),
                  q.committed_offset if q.committed else Markup('<span class="muted">never committed</span>'),
                  q.max_offset, q.lag,
                  link(url("/ui/messages", by="offset", topic=q.topic, queue=q.queue_id,
                           offset=q.committed_offset), "browse from committed") if q.committed else ""]
                 for q in view.queues]
        qtable = table(["topic", "queue", "owner", "committed offset", "max offset", "lag", ""], qrows,
                       table_id="group-queues", numeric=(1, 3, 4, 5))
        dlq = DLQ_PREFIX + group
        summary = cards([("topics", len({q.topic for q in view.queues})),
                         ("live members", len({m.client_id for m in view.members}) if not note else "?"),
                         ("total lag", sum(q.lag for q in view.queues)),
                         ("DLQ messages", _dlq_cell(st, group))], card_id="summary")
        body = join([notice(note, "warn") if note else Markup(""), summary,
                     section("Members", mtable, "members-section", live=True),
                     section("Queues", qtable, "queues-section", live=True,
                             note=f"dead letters of this group go to topic {dlq}")])
        return page(self._frame(), "groups", f"Consumer group {group}", body)

    # ------------------------------------------------------------------ messages
    def messages_page(self, query: dict[str, str], msg_id: str | None = None, part: str | None = None) -> Response:
        if msg_id is not None:
            return self._message(msg_id, part)
        self._store()
        by = query.get("by", "")
        results: Markup = Markup("")
        if by:
            found, title = self._browse(by, query)
            rows = [[link(f"/ui/messages/{seg(m.msg_id)}", m.msg_id), link(f"/ui/topics/{seg(m.topic)}", m.topic),
                     m.queue_id, m.queue_offset, utc(m.store_timestamp), esc_or_dash(m.tags),
                     esc_or_dash(" ".join(m.keys)), m.body and safe.human_bytes(len(m.body)) or "0 B",
                     safe.preview(m.body)] for m in found]
            results = section(title, table(["msgId", "topic", "queue", "offset", "stored (UTC)", "tags", "keys",
                                            "size", "body"], rows, table_id="results", numeric=(2, 3, 7),
                                           wrap=(5, 6, 8),
                                           empty="no message matched"), "results-section")
        body = join([_browse_forms(query), results])
        return page(self._frame(), "messages", "Messages", body)

    def _browse(self, by: str, q: dict[str, str]) -> tuple[list, str]:
        st = self._store()
        if by not in ("id", "key", "offset"):
            raise BadRequest(f"unknown search {by!r}: use by=id, by=key or by=offset")
        if by == "id":
            msg_id = q.get("id", "").strip()
            if not msg_id:
                raise BadRequest("give a msgId (or a UNIQ_KEY together with a topic)")
            topic = q.get("topic", "").strip()
            return self._find_by_id(msg_id, topic), f"message {msg_id}"
        topic = _topic_arg(st, q)
        if by == "key":
            key = q.get("key", "")
            if not key.strip():
                raise BadRequest("give the key to look up (a KEYS entry or a UNIQ_KEY)")
            begin = _time_arg(q, "from", 0)
            end = _time_arg(q, "to", int(time.time() * 1000))
            if end < begin:
                raise BadRequest(f"the range ends ({utc(end)}) before it begins ({utc(begin)})")
            limit = _int_arg(q, "count", BROWSE_DEFAULT, 1, BROWSE_MAX)
            try:
                found = st.query_messages(topic, key, limit, begin, end)
            except StoreError as e:
                raise BadRequest(str(e)) from None
            return sorted(found, key=lambda m: (m.store_timestamp, m.physical_offset)), \
                f"key {key!r} in {topic}"
        cfg = st.topics.get(topic)  # by == "offset"
        queue = _int_arg(q, "queue", 0, 0, cfg.read_queue_nums - 1)
        lo, hi = st.min_offset_in_queue(topic, queue), st.max_offset_in_queue(topic, queue)
        count = _int_arg(q, "count", BROWSE_DEFAULT, 1, BROWSE_MAX)
        if q.get("offset", "").strip() or not q.get("at", "").strip():
            offset = _int_arg(q, "offset", max(lo, hi - count), 0, None)
        else:  # the first message stored at or after a time (as SearchOffset), when no offset is given
            offset = st.get_offset_by_time(topic, queue, _time_arg(q, "at", 0))
            if offset >= hi:
                return [], f"{topic} queue {queue} has nothing stored at or after {utc(_time_arg(q, 'at', 0))}"
        if hi == lo:
            return [], f"{topic} queue {queue} is empty (offsets {lo}..{hi})"
        if not lo <= offset < hi:
            raise BadRequest(f"offset {offset} is outside queue {queue} of {topic}: it holds offsets "
                             f"{lo}..{hi - 1}")
        got = st.get_messages(topic, queue, offset, count, 8 << 20, None)
        return got.messages, f"{topic} queue {queue} from offset {offset} (queue holds {lo}..{hi - 1})"

    def _find_by_id(self, msg_id: str, topic: str) -> list:
        """As ViewMessage: an offset msgId anywhere, or a UNIQ_KEY within a topic."""
        st = self._store()
        is_offset_id = len(msg_id) in (32, 56) and all(c in "0123456789abcdefABCDEF" for c in msg_id)
        if topic:
            _topic_arg(st, {"topic": topic})
            found = [m for m in st.query_messages(topic, msg_id, BROWSE_MAX, 0, int(time.time() * 1000))
                     if m.uniq_key == msg_id]
            if found:
                return [min(found, key=lambda m: m.physical_offset)]
        elif not is_offset_id:
            raise BadRequest(f"{msg_id!r} is not an offset msgId (32 or 56 hex characters); to look up a UNIQ_KEY, "
                             "also give the topic")
        if is_offset_id:
            m = st.view_message_by_id(msg_id.upper())
            if m is not None and (not topic or m.topic == topic):
                return [m]
        return []

    def _message(self, msg_id: str, part: str | None) -> Response:
        st = self._store()
        try:
            m = st.view_message_by_id(msg_id.strip().upper())
        except StoreError as e:
            raise BadRequest(str(e)) from None
        if m is None:
            raise BadRequest(f"no message with msgId {msg_id!r} (removed by retention, or never stored)", 404)
        if part == "body":
            headers = dict(SECURITY_HEADERS)
            headers["Content-Disposition"] = f'attachment; filename="{m.msg_id}.bin"'
            return Response(200, bytes(m.body), "application/octet-stream", headers)
        if part is not None:
            raise BadRequest(f"no page {part!r} under a message; its body is at /ui/messages/{msg_id}/body", 404)
        view = safe.render_body(m.body)
        download = link(f"/ui/messages/{seg(m.msg_id)}/body", f"download the whole body ({len(m.body)} bytes)")
        if view.truncated:
            shown = html('<p class="notice warn" id="truncated">showing the first {} of {} bytes: {}</p>',
                         view.shown, view.size, download)
        else:
            shown = html('<p class="muted">{}</p>', download)
        body_html = html('<pre class="body {}" id="body" data-kind="{}">{}</pre>', view.kind, view.kind, view.html)
        props = table(["property", "value"], sorted(m.properties.items()), table_id="properties", wrap=(1,),
                      cls="kv")
        meta = table(["field", "value"], [
            ["msgId", m.msg_id], ["UNIQ_KEY", esc_or_dash(m.uniq_key)],
            ["topic", link(f"/ui/topics/{seg(m.topic)}", m.topic)], ["queue", m.queue_id],
            ["queue offset", m.queue_offset], ["physical offset", m.physical_offset],
            ["stored (UTC)", utc(m.store_timestamp)], ["born (UTC)", utc(m.born_timestamp)],
            ["born host", _host(m.born_host)], ["store host", _host(m.store_host)],
            ["tags", esc_or_dash(m.tags)], ["keys", esc_or_dash(" ".join(m.keys))],
            ["body", f"{len(m.body)} bytes, {view.kind}"], ["reconsume times", m.reconsume_times],
            ["sys flag", m.sys_flag], ["flag", m.flag], ["body CRC", m.body_crc],
        ], table_id="message-meta", wrap=(1,), cls="kv")
        body = join([html('<div class="cols">{}{}</div>', section("Message", meta), section("Properties", props)),
                     section("Body", join([shown, body_html]))])
        return page(self._frame(), "messages", f"Message {m.msg_id}", body)

    # ------------------------------------------------------------------ replica check
    def check_page(self, query: dict[str, str]) -> Response:
        run = query.get("run") == "1"
        limit_mib = query.get("mib", "").strip()
        queues = query.get("queues", "1" if not run else "") == "1"
        form = html(
            '<form method="get" action="/ui/check" class="inline" id="check-form"><input type="hidden" name="run" '
            'value="1"><label>check at most <input name="mib" size="6" value="{}" placeholder="all"> MiB of '
            'commit log</label> <label><input type="checkbox" name="queues" value="1"{}> consume queues too</label>'
            ' <button type="submit" id="run-check">Run check</button></form>',
            limit_mib, Markup(" checked") if queues else Markup(""))
        intro = html('<p class="note">Compares every member\'s committed commit log (and consume queues) by '
                     'SHA-256 digests of fixed chunks, as <code>raftmq cluster check</code> does. It reads the '
                     'members\' files and changes nothing.</p>')
        result: Markup = Markup("")
        if run:
            max_bytes = None
            if limit_mib:
                try:
                    max_bytes = int(float(limit_mib) * (1 << 20))
                except ValueError:
                    raise BadRequest(f"MiB to check {limit_mib!r} is not a number (leave it empty for all)") from None
            result = self._run_check(max_bytes, queues)
        return page(self._frame(), "check", "Replica check", join([intro, form, result]))

    def _run_check(self, max_bytes: int | None, queues: bool) -> Markup:
        from client.errors import RaftmqError
        from client.replica_check import ReplicaChecker

        if not self._check_lock.acquire(blocking=False):
            return notice("a check started from this console is still running; wait for it and reload", "warn")
        t0 = time.monotonic()
        try:
            with ReplicaChecker(self.node.config.advertised_address, secret=self.node.config.cluster.secret) as c:
                report = c.check(max_bytes=max_bytes, queues=queues)
        except RaftmqError as e:
            return notice(f"check failed: {e}", "bad")
        finally:
            self._check_lock.release()
        took = time.monotonic() - t0
        data = report.to_json()
        ok = data["identical"]
        verdict = html('<p class="verdict {}" id="verdict">{}</p>', "ok" if ok else "bad",
                       "IDENTICAL: every reachable member holds the same bytes" if ok else
                       "NOT IDENTICAL: see below")
        rows = [[m.id, m.address, esc_or_dash(m.min_offset), esc_or_dash(m.applied_offset),
                 safe.human_bytes(m.bytes_checked), badge(m.verdict, _verdict_kind(m.verdict)),
                 badge(m.queue_verdict, _verdict_kind(m.queue_verdict)) if m.queue_verdict else "-",
                 esc_or_dash(_short(m.error))] for m in report.members]
        mtable = table(["member", "address", "first offset", "applied end", "checked", "commit log",
                        "consume queues", "error"], rows, table_id="check-members", numeric=(2, 3, 4), wrap=(7,))
        facts = cards([("range", f"[{report.range_from}, {report.range_to})"),
                       ("bytes compared", safe.human_bytes(report.range_to - report.range_from)),
                       ("queues compared", f"{report.queues_compared} ({report.queue_units} units)"),
                       ("asked via", report.answered_by), ("took", f"{took:.2f} s")])
        extra = []
        if report.difference is not None:
            d = report.difference
            extra.append(notice(f"commit logs differ in [{d.offset}, {d.end}) (chunk [{d.chunk_offset}, "
                                f"{d.chunk_end})): differing {', '.join(d.differing)}; majority "
                                f"{', '.join(d.majority) or 'none'}", "bad"))
        if report.queue_difference is not None:
            qd = report.queue_difference
            extra.append(notice(f"consume queue {qd.topic}/{qd.queue_id} differs at offsets [{qd.from_offset}, "
                                f"{qd.to_offset}): differing {', '.join(qd.differing)}", "bad"))
        if report.queues_not_everywhere:
            extra.append(notice("queues not on every member: " + "; ".join(report.queues_not_everywhere), "warn"))
        return section("Result", join([verdict, facts, *extra, mtable]), "check-result")


# ---------------------------------------------------------------------------------------------- helpers
def _browse_forms(q: dict[str, str]) -> Markup:
    by = q.get("by", "")

    def val(name: str, mode: str) -> str:
        return q.get(name, "") if by == mode else ""

    return html(
        '<div class="forms">'
        '<form method="get" action="/ui/messages" id="form-id"><h3>By msgId</h3><input type="hidden" name="by" '
        'value="id"><label>msgId or UNIQ_KEY <input name="id" size="40" value="{id}"></label>'
        '<label>topic (for a UNIQ_KEY) <input name="topic" value="{id_topic}"></label>'
        '<button type="submit">Find</button></form>'
        '<form method="get" action="/ui/messages" id="form-key"><h3>By key and time</h3><input type="hidden" '
        'name="by" value="key"><label>topic <input name="topic" value="{key_topic}" required></label>'
        '<label>key <input name="key" value="{key}" required></label>'
        '<label>from (UTC) <input type="datetime-local" step="1" name="from" value="{key_from}"></label>'
        '<label>to (UTC) <input type="datetime-local" step="1" name="to" value="{key_to}"></label>'
        '<label>at most <input name="count" size="4" value="{key_count}" placeholder="20"></label>'
        '<button type="submit">Search</button></form>'
        '<form method="get" action="/ui/messages" id="form-offset"><h3>By queue offset</h3><input type="hidden" '
        'name="by" value="offset"><label>topic <input name="topic" value="{off_topic}" required></label>'
        '<label>queue <input name="queue" size="4" value="{queue}"></label>'
        '<label>offset <input name="offset" size="10" value="{offset}" placeholder="latest"></label>'
        '<label>or from time (UTC) <input type="datetime-local" step="1" name="at" value="{at}"></label>'
        '<label>count <input name="count" size="4" value="{count}" placeholder="20"></label>'
        '<button type="submit">Browse</button></form></div>',
        id=val("id", "id"), id_topic=val("topic", "id"), key_topic=val("topic", "key"), key=val("key", "key"),
        key_from=val("from", "key"), key_to=val("to", "key"), key_count=val("count", "key"),
        off_topic=val("topic", "offset"), queue=val("queue", "offset") or "0", offset=val("offset", "offset"), at=val("at", "offset"),
        count=val("count", "offset"))


def _topic_arg(st, q: dict[str, str]) -> str:
    topic = q.get("topic", "").strip()
    if not topic:
        raise BadRequest("give a topic")
    try:
        check_topic_name(topic, allow_system=True)
    except ValidationError as e:
        raise BadRequest(str(e)) from None
    if st.topics.get(topic) is None:
        raise BadRequest(f"topic {topic!r} does not exist", 404)
    return topic


def _int_arg(q: dict[str, str], name: str, default: int, lo: int, hi: int | None) -> int:
    text = q.get(name, "").strip()
    if not text:
        return default
    try:
        v = int(text)
    except ValueError:
        raise BadRequest(f"{name} {text!r} is not a whole number") from None
    if v < lo or (hi is not None and v > hi):
        raise BadRequest(f"{name} {v} is out of range: give {lo}..{hi if hi is not None else 'any'}")
    return v


def _time_arg(q: dict[str, str], name: str, default: int) -> int:
    """A UTC time from a datetime-local input (``2026-11-23T20:16[:39]``) or epoch milliseconds."""
    text = q.get(name, "").strip()
    if not text:
        return default
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(f"{name} {text!r} is not a time: give YYYY-MM-DDTHH:MM[:SS] (UTC) or epoch ms") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def _rate(points: list[tuple[float, float]]) -> str:
    return f"{points[-1][1]:.1f}" if points else "-"


def _perm(perm: int) -> str:
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-") + (" (inherit)" if perm & 1 else "")


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _dlq_cell(st, group: str) -> Markup | int:
    dlq = DLQ_PREFIX + group
    cfg = st.topics.get(dlq)
    if cfg is None:
        return 0
    n = sum(st.max_offset_in_queue(dlq, q) - st.min_offset_in_queue(dlq, q) for q in range(cfg.read_queue_nums))
    return link(f"/ui/topics/{seg(dlq)}", n) if n else 0


def _host(addr: tuple[str, int]) -> str:
    host, port = addr
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _verdict_kind(verdict: str) -> str:
    return {"identical": "ok", "matches majority": "warn", "DIFFERS": "bad", "unreachable": "bad"}.get(verdict, "")

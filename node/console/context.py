"""What a console page works with (ConsoleContext): the node, the viewer and its rights, the frame, the store and
the chart history. node/console/app.py routes requests to the pages; the pages depend on this module, never on
the router, so the console's modules import one way.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from raftmq.node.auth import AuthError
from raftmq.node.auth import console_sessions as session
from raftmq.node.console.history import History, Sample
from raftmq.node.console.layout import NAV, BadRequest, Frame, Response, notice, page
from raftmq.node.networks import NetworkRefused

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore


class ConsoleContext:
    """One node's console as its pages see it: the node (its BrokerCore), who the request being served acts as
    and what it may see, the page frame, the store, the chart history."""

    def __init__(self, node: BrokerCore):
        self.node = node
        self.history = History(self._sample)
        self.check_lock = threading.Lock()  # one replica check at a time from this console
        self._request = threading.local()  # per HTTP server thread: who is logged in on the request it serves
        self.secure_cookies = False  # the HTTP port speaks TLS: session cookies are marked Secure

    def begin_request(self, headers: dict[str, str], address: str) -> None:
        """Who the request this thread is about to serve acts as (its session, its signature)."""
        self._request.cookie = session.cookie_value(headers)
        self._request.user = self._session_user(headers, address)
        self._request.viewer = self._viewer(headers)

    def viewer(self) -> str:
        """The user this request acts as ("" with authentication off or nobody)."""
        return getattr(self._request, "viewer", "") or ""

    @property
    def sees_everything(self) -> bool:
        """Authentication is off: every page shows everything (no user's rules to follow)."""
        return getattr(self._request, "viewer", "") is None

    def may(self, action: str, kind: str, name: str) -> bool:
        """Whether the viewer of this request may ``action`` (SUB, ADMIN) on the resource: as the gRPC API would
        decide for the same user (everything with authentication off, nothing for nobody)."""
        viewer = getattr(self._request, "viewer", "")
        if viewer is None:
            return True
        return bool(viewer) and self.node.auth.allows(viewer, action, kind, name)

    def require(self, action: str, kind: str, name: str) -> None:
        """BadRequest(403) naming user, action and resource unless the viewer ``may``; as the gRPC API, a refusal
        is decided again after this member applied what the leader has committed (a rule just added elsewhere)."""
        if self.may(action, kind, name):
            return
        if not (self.node.catch_up_with_leader_blocking() and self.may(action, kind, name)):
            raise BadRequest(str(self.node.auth.denial(self.viewer(), action, kind, name)), 403)

    def _viewer(self, headers: dict[str, str]) -> str | None:
        """Whose rules decide what this request may see: None with authentication off (everything), else the
        logged-in user, or the user whose signature the request carries, or "" (nothing)."""
        auth = self.node.auth
        if auth is None:
            return None
        if self._request.user:
            return self._request.user
        try:
            return auth.authenticate([(k.lower(), v) for k, v in headers.items()]).access_key
        except AuthError:
            return ""

    def request_cookie(self) -> str:
        """The session cookie's value on the request this thread serves ("" when none)."""
        return getattr(self._request, "cookie", "")

    def request_user(self) -> str:
        """The user logged in on the request this thread serves ("" when none)."""
        return getattr(self._request, "user", "")

    def _session_user(self, headers: dict[str, str], address: str) -> str:
        """Who is logged in on this request ("" when nobody: auth off, or signed requests)."""
        sessions = self.node.console_sessions
        if sessions is None:
            return ""
        try:
            return sessions.user(self.request_cookie(), address) or ""
        except NetworkRefused:
            return ""

    def frame(self) -> Frame:
        node = self.node
        if self.viewer() == "" and not self.sees_everything:  # authentication on, nobody logged in or signing
            return Frame("", "", "", "", anonymous=True)
        tabs = tuple(key for key, _, _ in NAV if key != "check" or self.may("ADMIN", "cluster", ""))
        wp = node.write_path
        leader = wp.leader() if wp is not None else None
        if wp is None:
            role = "starting"
        elif not node.config.members:
            role = "standalone"
        else:
            role = "leader" if leader is not None and leader.id == node.node_id else "follower"
        return Frame(node.config.cluster.name, node.node_id, role, leader.id if leader else "",
                     self.request_user(), tabs=tabs)

    def error(self, code: int, message: str) -> Response:
        titles = {400: "Bad request", 401: "Not logged in", 403: "Forbidden", 404: "Not found", 405: "Read-only",
                  503: "Not ready"}
        return page(self.frame(), "", titles.get(code, "Error"), notice(message, "bad"), code)

    def store(self):
        """The node's store, or BadRequest(503) while the node is not serving (starting, stopping)."""
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

        return Sample(time.time(), node.leader_term(), leader.id if leader else "", wp.commit_index(),
                      wp.raft_applied_index(), st.dispatch_behind_bytes(), stored, consumed)

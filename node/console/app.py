"""The web console on the node's HTTP port (``/ui``): cluster, topics, consumer groups, messages, replica check.

Pages are GETs that read what the node already holds (the store, the write path's Raft state, the leader's
consumer-group table) through the same functions the gRPC services use (node.cluster_views, the store's read
API). Cluster-wide facts come from the same status fan-out as ``AdminService.ClusterStatus``; consumer-group
members, which only the leader knows, are asked of the leader over its AdminService when this node follows.

Actions (``Console.actions``: a POST path -> handler) change the cluster through the gRPC API, as the CLI would. They
exist only with authentication on (a viewer with the ADMIN right the action needs), and a request whose Origin is
another site is refused; with authentication off the console stays read-only.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote, urlsplit

from raftmq.node.auth import AuthError
from raftmq.node.console import cluster_pages, group_pages, login_pages, message_pages, session, topic_pages
from raftmq.node.console.history import History, Sample
from raftmq.node.console.layout import NAV, BadRequest, Frame, Response, notice, page
from raftmq.node.networks import NetworkRefused

if TYPE_CHECKING:
    from raftmq.node.broker import Broker

log = logging.getLogger(__name__)

STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


class Console:
    """Routes ``/ui`` requests of one node to page renderers; samples history for the charts."""

    def __init__(self, node: Broker):
        self.node = node
        self.history = History(self._sample)
        self.check_lock = threading.Lock()  # one replica check at a time from this console
        self._request = threading.local()  # per HTTP server thread: who is logged in on the request it serves
        self.secure_cookies = False  # the HTTP port speaks TLS: session cookies are marked Secure
        # POST path -> handler(console, form, client address): each checks the right it needs (Console.require)
        self.actions: dict[str, Callable[[Console, dict[str, str], str], Response]] = {
            "/ui/cluster/transfer-leader": cluster_pages.transfer_leader,
            "/ui/groups/reset-offsets": group_pages.reset_offsets,
        }
        self._routes: list[tuple[str, Callable[..., Response]]] = [  # page(console, query, *path segments)
            ("/ui/cluster", cluster_pages.cluster_page), ("/ui/topics", topic_pages.topics_page),
            ("/ui/groups", group_pages.groups_page), ("/ui/messages", message_pages.messages_page),
            ("/ui/check", cluster_pages.check_page),
        ]

    def start(self) -> None:
        self.history.start()

    def stop(self) -> None:
        self.history.stop()

    # ------------------------------------------------------------------ dispatch
    def handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes = b"",
               address: str = "") -> Response:
        """One request (the HTTP server checked who may send it; ``address`` is its client, behind a trusted proxy
        the one the proxy names); never raises (an unexpected error becomes a 500 page and a log line)."""
        path, _, query_string = raw_path.partition("?")
        query = _fields(query_string)
        form = _fields(body.decode("utf-8", "replace")) if body else {}  # a POSTed form (url-encoded)
        self._request.cookie = session.cookie_value(headers)
        self._request.user = self._session_user(headers, address)
        self._request.viewer = self._viewer(headers)
        try:
            if path in (session.LOGIN_PATH, session.LOGOUT_PATH):
                return login_pages.handle(self, method, path, query, form, address)
            if method != "GET":
                return self._action(method, path, headers, form, address)
            if path in ("/ui", "/ui/"):
                return Response(302, b"", headers={"Location": "/ui/cluster"})
            if path.startswith("/ui/static/"):
                return self._static(path[len("/ui/static/"):])
            for prefix, handler in self._routes:
                if path != prefix and not path.startswith(prefix + "/"):
                    continue
                segments = [unquote(p) for p in path[len(prefix) + 1:].split("/")] if path != prefix else []
                try:
                    inspect.signature(handler).bind(self, query, *segments)
                except TypeError:  # more path segments than the page takes
                    break
                return handler(self, query, *segments)
            return self._error(404, f"no console page at {path}; start at /ui")
        except BadRequest as e:
            return self._error(e.code, str(e))
        except Exception as e:
            log.exception("console: %s %s failed", method, path)
            return self._error(500, f"internal error: {type(e).__name__}: {e} (see the node log)")

    def _action(self, method: str, path: str, headers: dict[str, str], form: dict[str, str],
                address: str) -> Response:
        action = self.actions.get(path) if method == "POST" else None
        if action is None:
            resp = self._error(405, f"{method} {path}: console pages are read-only (GET); its actions are POSTs to "
                               f"{', '.join(sorted(self.actions))}")
            resp.headers["Allow"] = "GET"
            return resp
        if self.node.auth is None:
            return self._error(403, "authentication is off, so the console is read-only (anyone who reaches this "
                               "port could act): turn on security.auth_enabled to use its actions, or use the CLI")
        lowered = {k.lower(): v for k, v in headers.items()}
        origin = lowered.get("origin")
        if origin is not None and urlsplit(origin).netloc != lowered.get("host", ""):
            return self._error(403, f"a request sent from another site ({origin}) is refused; use the console's "
                               "own page")
        return action(self, form, address)

    def viewer(self) -> str:
        """The user this request acts as ("" with authentication off or nobody)."""
        return getattr(self._request, "viewer", "") or ""

    def _static(self, name: str) -> Response:
        suffix = name[name.rfind("."):] if "." in name else ""
        if "/" in name or suffix not in STATIC_TYPES:
            return self._error(404, f"no static file {name}")
        data = resources.files(__package__).joinpath("static", name)
        if not data.is_file():
            return self._error(404, f"no static file {name}")
        headers = {"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"}
        return Response(200, data.read_bytes(), STATIC_TYPES[suffix], headers)

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

    def _error(self, code: int, message: str) -> Response:
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

        def counter(name: str) -> int:
            fn = getattr(wp, name, None)
            return int(fn()) if callable(fn) else 0

        return Sample(time.time(), node.leader_term(), leader.id if leader else "", counter("commit_index"),
                      counter("raft_applied_index"), st.dispatch_behind_bytes(), stored, consumed)


def _fields(text: str) -> dict[str, str]:
    """A query string or url-encoded form as name -> value (the last one of a repeated name)."""
    return {k: v[-1] for k, v in parse_qs(text, keep_blank_values=True).items()}

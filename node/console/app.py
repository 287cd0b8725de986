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
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote, urlsplit

from raftmq.node.auth import console_sessions as session
from raftmq.node.console import cluster_pages, group_pages, login_pages, message_pages, topic_pages
from raftmq.node.console.context import ConsoleContext
from raftmq.node.console.layout import BadRequest, Response

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)

STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


class Console(ConsoleContext):
    """Routes ``/ui`` requests of one node to page renderers; samples history for the charts."""

    def __init__(self, node: BrokerCore):
        super().__init__(node)
        # POST path -> handler(console, form, client address): each checks the right it needs (Console.require)
        self.actions: dict[str, Callable[[ConsoleContext, dict[str, str], str], Response]] = {
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
        self.history.shutdown()

    # ------------------------------------------------------------------ dispatch
    def handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes = b"",
               address: str = "") -> Response:
        """One request (the HTTP server checked who may send it; ``address`` is its client, behind a trusted proxy
        the one the proxy names); never raises (an unexpected error becomes a 500 page and a log line)."""
        path, _, query_string = raw_path.partition("?")
        query = _fields(query_string)
        form = _fields(body.decode("utf-8", "replace")) if body else {}  # a POSTed form (url-encoded)
        self.begin_request(headers, address)
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
            return self.error(404, f"no console page at {path}; start at /ui")
        except BadRequest as e:
            return self.error(e.code, str(e))
        except Exception as e:
            log.exception("console: %s %s failed", method, path)
            return self.error(500, f"internal error: {type(e).__name__}: {e} (see the node log)")

    def _action(self, method: str, path: str, headers: dict[str, str], form: dict[str, str],
                address: str) -> Response:
        action = self.actions.get(path) if method == "POST" else None
        if action is None:
            resp = self.error(405, f"{method} {path}: console pages are read-only (GET); its actions are POSTs to "
                               f"{', '.join(sorted(self.actions))}")
            resp.headers["Allow"] = "GET"
            return resp
        if self.node.auth is None:
            return self.error(403, "authentication is off, so the console is read-only (anyone who reaches this "
                               "port could act): turn on security.auth_enabled to use its actions, or use the CLI")
        lowered = {k.lower(): v for k, v in headers.items()}
        origin = lowered.get("origin")
        if origin is not None and urlsplit(origin).netloc != lowered.get("host", ""):
            return self.error(403, f"a request sent from another site ({origin}) is refused; use the console's "
                               "own page")
        return action(self, form, address)

    def _static(self, name: str) -> Response:
        suffix = name[name.rfind("."):] if "." in name else ""
        if "/" in name or suffix not in STATIC_TYPES:
            return self.error(404, f"no static file {name}")
        data = resources.files(__package__).joinpath("static", name)
        if not data.is_file():
            return self.error(404, f"no static file {name}")
        headers = {"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"}
        return Response(200, data.read_bytes(), STATIC_TYPES[suffix], headers)


def _fields(text: str) -> dict[str, str]:
    """A query string or url-encoded form as name -> value (the last one of a repeated name)."""
    return {k: v[-1] for k, v in parse_qs(text, keep_blank_values=True).items()}

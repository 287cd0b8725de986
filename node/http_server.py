"""The node's HTTP endpoint: ``/metrics`` (Prometheus), ``/health`` (process alive), ``/ready`` (serving).

``/ready`` answers its verdict on the first line and who answered on the second (``node=n0 pid=1234``), so a
launcher such as ``make run`` can tell its own process from another one holding the port.

Why a separate tiny server: probes and scrapes must answer while gRPC is busy or still starting, and Kubernetes
probes speak HTTP. It runs in its own daemon threads and only reads state.
"""

from __future__ import annotations

import logging
import socket
import ssl
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # a console form is a few hundred bytes


class _Server(ThreadingHTTPServer):
    """Wraps each accepted connection in TLS (in its own thread, so a slow handshake blocks nobody) when a
    context is set; a failed handshake is one clear log line, not a traceback."""

    tls: Any = None  # node.tls.HttpServerTls

    def finish_request(self, request, client_address) -> None:
        if self.tls is not None:
            try:
                request.settimeout(10)
                request = self.tls.context().wrap_socket(request, server_side=True)
                request.settimeout(None)
            except (ssl.SSLError, OSError) as e:
                reason = getattr(e, "reason", None) or e
                log.warning("HTTP TLS handshake with %s failed: %s (plaintext client, or a certificate the "
                            "other side does not trust?)", client_address[0], reason)
                return
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address) -> None:
        """socketserver prints a traceback for every failed request; a client that drops its connection (a probe
        that timed out, a browser leaving a page, a scraper cut off) is ordinary: one debug line."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError, ssl.SSLError)):
            log.debug("HTTP client %s went away: %s", client_address[0], error)
            return
        log.exception("HTTP request from %s failed", client_address[0])


class _IPv6Server(_Server):
    address_family = socket.AF_INET6


class HealthServer:
    """Serves the three endpoints; ``readiness()`` returns (ready, reason); ``identity`` is the second line of
    ``/ready`` (e.g. ``node=n0 pid=1234``)."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry, readiness: Callable[[], tuple[bool, str]],
                 console: Callable[[str, str, dict[str, str], bytes, str], Any] | None = None,
                 *, tls: Any = None, guard: Callable[[str, Any, str, str], tuple | None] | None = None,
                 client_address: Callable[[str, Any], str] | None = None, identity: str = ""):
        """``console(method, path_and_query, headers, body, client_ip)`` answers ``/ui`` with a node.console
        Response; ``tls``: a node.tls.HttpServerTls (None: plaintext); ``guard(path, headers, client_ip,
        path_and_query)`` returns (status, reason) or (status, reason, headers) to refuse a request
        (authentication; e.g. a redirect to a login page), None to serve it; ``client_address(peer_ip, headers)``
        says who the client is (behind a trusted proxy: its X-Forwarded-For; default the peer); ``identity`` is
        added to /ready's body ("node=ID pid=PID")."""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                path = self.path.split("?", 1)[0]
                refused = (outer._guard(path, self.headers, self._client(), self.path) if outer._guard is not None
                           else None)
                if refused is not None:
                    self._refuse(refused)
                elif path == "/metrics":
                    self._send(200, generate_latest(outer._registry), CONTENT_TYPE_LATEST)
                elif path == "/health":
                    self._send(200, b"ok\n")
                elif path == "/ready":
                    ok, reason = outer._readiness()
                    body = reason + "\n" + (outer._identity + "\n" if outer._identity else "")
                    self._send(200 if ok else 503, body.encode())
                elif outer._console is not None and (path == "/ui" or path.startswith("/ui/")):
                    self._console("GET", b"")
                else:
                    self._send(404, b"not found; try /metrics, /health, /ready or /ui\n")

            def _other(self) -> None:
                """Anything but GET: only the console answers (its login form; otherwise read-only, it says so)."""
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                body = b""
                if 0 <= length <= MAX_BODY:
                    body = self.rfile.read(length)
                else:
                    self.close_connection = True
                path = self.path.split("?", 1)[0]
                refused = (outer._guard(path, self.headers, self._client(), self.path) if outer._guard is not None
                           else None)
                if refused is not None:
                    self._refuse(refused)
                elif length < 0 or length > MAX_BODY:
                    self._send(413, f"a request body of at most {MAX_BODY} bytes, with its Content-Length\n".encode())
                elif outer._console is not None and path.startswith("/ui"):
                    self._console(self.command, body)
                else:
                    self._send(405, f"{self.command} is not supported here; only GET\n".encode(),
                               extra={"Allow": "GET"})

            do_POST = do_PUT = do_DELETE = do_PATCH = _other  # noqa: N815

            def _console(self, method: str, body: bytes) -> None:
                resp = outer._console(method, self.path, dict(self.headers.items()), body, self._client())
                self._send(resp.code, resp.body, resp.content_type, resp.headers)

            def _client(self) -> str:
                peer = self.client_address[0]
                return outer._client_address(peer, self.headers) if outer._client_address is not None else peer

            def _refuse(self, refused: tuple) -> None:
                self._send(refused[0], (refused[1] + "\n").encode(), extra=refused[2] if len(refused) > 2 else None)

            def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8",
                      extra: dict[str, str] | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt: str, *args) -> None:
                log.debug("http %s " + fmt, self.address_string(), *args)

        self._registry = registry
        self._readiness = readiness
        self._guard = guard
        self._client_address = client_address
        self._console = console
        self._identity = identity
        server_cls = _IPv6Server if ":" in host else _Server
        self._server = server_cls((host, port), Handler)
        self._server.tls = tls
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

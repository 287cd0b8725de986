"""The node's HTTP endpoint: ``/metrics`` (Prometheus), ``/health`` (process alive), ``/ready`` (serving), and
the web console under ``/ui`` (node.console) when the broker passes one.

Why a separate tiny server: probes and scrapes must answer while gRPC is busy or still starting, and Kubernetes
probes speak HTTP. It runs in its own daemon threads and only reads state.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class HealthServer:
    """Serves the three endpoints; ``readiness()`` returns (ready, reason)."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry, readiness: Callable[[], tuple[bool, str]],
                 console: Callable[[str, str, dict[str, str]], Any] | None = None):
        """``console(method, path_and_query, headers)`` answers ``/ui`` with a node.console Response."""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(outer._registry), CONTENT_TYPE_LATEST)
                elif path == "/health":
                    self._send(200, b"ok\n")
                elif path == "/ready":
                    ok, reason = outer._readiness()
                    self._send(200 if ok else 503, (reason + "\n").encode())
                elif outer._console is not None and (path == "/ui" or path.startswith("/ui/")):
                    self._console("GET")
                else:
                    self._send(404, b"not found; try /metrics, /health, /ready or /ui\n")

            def _other(self) -> None:
                """Anything but GET: only the console answers (read-only: it says so); the body is discarded."""
                length = int(self.headers.get("Content-Length") or 0)
                if 0 < length <= 1 << 20:
                    self.rfile.read(length)
                else:
                    self.close_connection = True
                if outer._console is not None and self.path.split("?", 1)[0].startswith("/ui"):
                    self._console(self.command)
                else:
                    self._send(405, f"{self.command} is not supported here; only GET\n".encode(),
                               extra={"Allow": "GET"})

            do_POST = do_PUT = do_DELETE = do_PATCH = _other  # noqa: N815

            def _console(self, method: str) -> None:
                resp = outer._console(method, self.path, dict(self.headers.items()))
                self._send(resp.code, resp.body, resp.content_type, resp.headers)

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
        self._console = console
        server_cls = _IPv6Server if ":" in host else ThreadingHTTPServer
        self._server = server_cls((host, port), Handler)
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

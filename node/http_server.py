"""The node's HTTP endpoint: ``/metrics`` (Prometheus), ``/health`` (process alive), ``/ready`` (serving).

``/ready`` answers its verdict on the first line and who answered on the second (``node=n0 pid=1234``), so a
launcher such as ``make run`` can tell its own process from another one holding the port.

Why a separate tiny server: probes and scrapes must answer while gRPC is busy or still starting, and Kubernetes
probes speak HTTP. It runs in its own daemon threads and only reads state.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class HealthServer:
    """Serves the three endpoints; ``readiness()`` returns (ready, reason); ``identity`` is the second line of
    ``/ready`` (e.g. ``node=n0 pid=1234``)."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry, readiness: Callable[[], tuple[bool, str]],
                 identity: str = ""):
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
                    body = reason + "\n" + (outer._identity + "\n" if outer._identity else "")
                    self._send(200 if ok else 503, body.encode())
                else:
                    self._send(404, b"not found; try /metrics, /health or /ready\n")

            def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt: str, *args) -> None:
                log.debug("http %s " + fmt, self.address_string(), *args)

        self._registry = registry
        self._readiness = readiness
        self._identity = identity
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

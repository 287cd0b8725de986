"""A client that drops its connection mid-request is ordinary for the node's HTTP server (issue 43): no traceback,
and the server goes on answering; a real failure inside a request is still logged with its traceback."""

from __future__ import annotations

import logging
import socket
import struct
import time
import urllib.request

from prometheus_client import CollectorRegistry

from raftmq.node.http_server import HealthServer


def _reset(port: int, data: bytes) -> None:
    """Send ``data`` and close with a TCP reset (SO_LINGER 0), as a client killed mid-request."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(data)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def test_a_client_that_resets_its_connection_logs_no_traceback(capfd, caplog):
    def readiness():
        return True, "ready"

    server = HealthServer("127.0.0.1", 0, CollectorRegistry(), readiness)
    server.start()
    try:
        with caplog.at_level(logging.DEBUG, logger="raftmq.node.http_server"):
            for _ in range(20):  # the headers never end: the server's read meets the reset
                _reset(server.port, b"GET /ready HTTP/1.1\r\nHost: x\r\n")
            # the server still answers, and has handled every reset before this answer's connection
            for _ in range(3):
                with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/ready", timeout=30) as r:
                    assert r.status == 200
            deadline = time.monotonic() + 60  # the resets are handled on the server's threads: wait for them
            while not any("went away" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
                time.sleep(0.05)
        err = capfd.readouterr().err
        assert "Traceback" not in err and "ConnectionResetError" not in err, err
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert any("went away" in r.getMessage() for r in caplog.records), "no reset reached the server"
    finally:
        server.stop()

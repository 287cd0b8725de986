"""What the CLI says when the transport, not raftmq, refuses: a request over gRPC's size limits (refused at once,
the limit named, exit 4) and a peer that is not a raftmq node ("not a raftmq server at X", never "outcome
unknown")."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from raftmq.client.cli import run
from tests.support.odd_servers import Http2NotFound, SilentTcp
from tests.support.processes import TINY_STORE

SERVER_LIMIT = 2 * TINY_STORE["max_message_size"] + (1 << 20)


@pytest.fixture(scope="module")
def node(shared_node):
    assert run(["topic", "create", "Big", "-s", shared_node.grpc_address]) == 0
    return shared_node


def test_body_over_the_servers_receive_limit_is_refused_at_once_naming_it(node, tmp_path, capsys):
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * (2 * SERVER_LIMIT))
    assert run(["produce", "Big", "--file", str(big), "-s", node.grpc_address]) == 4
    err = capsys.readouterr().err
    assert f"vs. {SERVER_LIMIT}" not in err and str(SERVER_LIMIT) in err, err
    assert "receive limit" in err and "busy" not in err


def test_batch_over_the_limit_is_refused_naming_it(node, capsys):
    # 40000 one-byte bodies are far below store.max_message_size, but the request is over the transport's limit
    code = run(["produce", "Big", "--count", "40000", "--size", "1", "--batch", "40000", "-s", node.grpc_address])
    assert code == 4
    err = capsys.readouterr().err
    assert str(SERVER_LIMIT) in err and "--batch" in err


def test_request_over_the_clients_limit_is_never_sent(node, tmp_path, capsys):
    big = tmp_path / "huge.bin"
    big.write_bytes(b"x" * (65 << 20))
    assert run(["produce", "Big", "--file", str(big), "-s", node.grpc_address]) == 4
    err = capsys.readouterr().err
    assert "this client's send limit" in err and "nothing was sent" in err


@pytest.mark.parametrize("command", [["produce", "T", "--body", "x"], ["topic", "list"]])
def test_http2_server_answering_404_is_not_raftmq(command, capsys):
    with Http2NotFound() as srv:
        code = run([*command, "-s", srv.address, "--timeout", "3"])
    err = capsys.readouterr().err
    assert code == 5, err
    assert f"not a raftmq server at {srv.address}" in err and "outcome unknown" not in err


def test_http1_server_is_not_raftmq(capsys):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_error(404)

        def log_message(self, *a) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{srv.server_address[1]}"
    try:
        code = run(["produce", "T", "--body", "x", "-s", address, "--timeout", "3"])
    finally:
        srv.shutdown()
        srv.server_close()
    err = capsys.readouterr().err
    assert code == 5 and f"not a raftmq server at {address}" in err, err


def test_silent_port_like_raft_is_not_raftmq_and_not_unknown(capsys):
    with SilentTcp() as srv:
        code = run(["produce", "T", "--body", "x", "-s", srv.address, "--timeout", "1"])
    err = capsys.readouterr().err
    assert code == 5, err
    assert f"not a raftmq server at {srv.address}" in err and "outcome unknown" not in err

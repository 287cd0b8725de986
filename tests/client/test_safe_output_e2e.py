"""Human output of consume / view / query against a real node: a producer's bytes never reach the operator's
terminal raw (escape sequences escaped, binary as a hexdump, long bodies cut); --json is unchanged."""

from __future__ import annotations

import base64
import json

import pytest

from raftmq.client import Admin, Producer
from raftmq.client.cli import run
from tests.support.waiting import wait_for

EVIL = "\x1b[2K\r\x1b[31mFAKE: all replicas identical\x1b[0m"
BINARY = bytes(range(256)) * 200  # 51200 bytes, under the test store's 64 KiB message limit


@pytest.fixture(scope="module")
def sent(shared_node):
    n0 = shared_node
    assert run(["topic", "create", "Safe", "--queues", "1", "-s", n0.grpc_address]) == 0
    with Producer(n0.grpc_address) as p:
        evil = p.send("Safe", EVIL, tags="t\x1b[1m", keys=["evil"], properties={"p": "\x1b]0;title\x07"})
        binary = p.send("Safe", BINARY, keys=["bin"])
    with Admin(n0.grpc_address) as admin:  # the key index is built after the ack (reput)
        wait_for(lambda: admin.query_by_key("Safe", "evil"), "the key index")
    return n0.grpc_address, evil, binary


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = run(list(argv))
    out = capsys.readouterr().out
    return code, out


def test_consume_escapes_and_cuts(sent, capsys):
    server, _, _ = sent
    code, out = _run(capsys, "consume", "g1", "Safe", "--from-beginning", "--max", "2", "-s", server)
    assert code == 0 and "\x1b" not in out and "\r" not in out
    lines = out.splitlines()
    assert lines[0].endswith("| \\x1b[2K\\r\\x1b[31mFAKE: all replicas identical\\x1b[0m")
    assert "tags=t\\x1b[1m" in lines[0]
    assert "<binary, 51200 bytes> 00 01 02" in lines[1] and len(lines[1]) < 300


def test_consume_json_is_unchanged(sent, capsys):
    server, _, _ = sent
    code, out = _run(capsys, "consume", "g2", "Safe", "--from-beginning", "--max", "2", "--json", "-s", server)
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["body"] == EVIL and base64.b64decode(second["body_base64"]) == BINARY


def test_view_binary_is_a_short_hexdump_and_all_of_it_on_request(sent, capsys, tmp_path):
    server, _, binary = sent
    code, out = _run(capsys, "view", binary.msg_id, "-s", server)
    assert code == 0 and len(out) < 8000, len(out)
    assert "00000000  00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f  |................|" in out
    assert "50944 more bytes of 51200" in out
    code, out = _run(capsys, "view", binary.msg_id, "--full", "-s", server)
    assert out.count("|\n") >= 3200
    path = tmp_path / "body.bin"
    code, out = _run(capsys, "view", binary.msg_id, "--body-file", str(path), "-s", server)
    assert code == 0 and path.read_bytes() == BINARY and "written to" in out


def test_view_and_query_escape_text_fields(sent, capsys):
    server, evil, _ = sent
    code, out = _run(capsys, "view", evil.msg_id, "-s", server)
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    assert "p=\\x1b]0;title\\x07" in out and "\\x1b[31mFAKE" in out
    code, out = _run(capsys, "query", "Safe", "--key", "evil", "-s", server)
    assert code == 0 and "\x1b" not in out and "\\x1b[2K" in out

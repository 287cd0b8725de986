"""The raftmq command end to end: a real node process, the CLI run as a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support.processes import REPO_ROOT, free_ports


def _ctrl_c_works() -> None:
    """Run in the CLI child before exec: Ctrl-C (SIGINT) reaches it even when this test run ignores SIGINT (a
    background job of a non-interactive shell does, and the child would inherit the ignore and never stop)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")])
    return env


@pytest.fixture(scope="module")
def node(shared_node):
    return shared_node


class Cli:
    def __init__(self, server: str):
        self.server = server

    def argv(self, *args: str, server: str | None = None) -> list[str]:
        return [sys.executable, "-m", "raftmq.client", *args, "--server", server or self.server]

    def __call__(self, *args: str, stdin: str | None = None, server: str | None = None,
                 timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*args, server=server), input=stdin, capture_output=True, text=True,
                              timeout=timeout, env=_env(), cwd=REPO_ROOT)

    def ok(self, *args: str, **kw) -> subprocess.CompletedProcess:
        r = self(*args, **kw)
        assert r.returncode == 0, f"raftmq {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def json(self, *args: str, **kw):
        return json.loads(self.ok(*args, "--json", **kw).stdout)

    def json_lines(self, *args: str, **kw) -> list:
        return [json.loads(line) for line in self.ok(*args, "--json", **kw).stdout.splitlines() if line.strip()]


def eventually(fetch, check, timeout: float = 30.0):
    """``fetch()`` until ``check(value)`` holds: consume queues and the index are built asynchronously after the
    write is acknowledged (reput), so reads of them catch up shortly after. Returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if check(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    lines = [line for line in r.stderr.splitlines() if not line.startswith("raftmq: warning:")]
    assert len(lines) == 1 and lines[0].startswith("raftmq: error: "), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


@pytest.fixture
def cli(node) -> Cli:
    return Cli(node.grpc_address)


def test_topic_admin(cli):
    r = cli.ok("topic", "create", "AdminT", "--queues", "2")
    assert "created topic AdminT" in r.stdout
    assert cli("topic", "create", "AdminT").returncode == 6
    topics = {t["name"]: t for t in cli.json("topic", "list")}
    assert topics["AdminT"]["read_queue_nums"] == 2 and topics["AdminT"]["perm_text"] == "rw"
    updated = cli.json("topic", "update", "AdminT", "--queues", "3", "--perm", "r")
    assert (updated["read_queue_nums"], updated["write_queue_nums"], updated["perm"]) == (3, 3, 4)
    table = cli.ok("topic", "list").stdout
    assert "AdminT" in table and "| r- " in table
    assert cli("topic", "update", "NoSuchTopic", "--queues", "2").returncode == 3
    cli.ok("topic", "delete", "AdminT")
    assert "AdminT" not in {t["name"] for t in cli.json("topic", "list")}
    r = cli("topic", "delete", "AdminT")
    assert r.returncode == 3 and "AdminT" in one_error_line(r)


def test_invalid_and_unknown_topics(cli):
    r = cli("topic", "create", "bad topic!")
    assert r.returncode == 4 and "bad topic!" in one_error_line(r)
    r = cli("produce", "bad topic!", "--body", "x")
    assert r.returncode == 4
    one_error_line(r)
    for args in (["produce", "NoSuchTopic", "--body", "x"], ["consume", "g", "NoSuchTopic", "--max", "1"],
                 ["offsets", "NoSuchTopic"], ["query", "NoSuchTopic", "--key", "k"]):
        r = cli(*args)
        assert r.returncode == 3, (args, r.stderr)
        assert "NoSuchTopic" in one_error_line(r)


def test_unreachable_server_is_one_line_exit_5(cli):
    dead = f"127.0.0.1:{free_ports(1)[0]}"
    for args in (["produce", "T", "--body", "x"], ["cluster", "status"], ["topic", "list"]):
        r = cli(*args, server=dead)
        assert r.returncode == 5
        assert dead in one_error_line(r)


def test_produce_consume_round_trip_and_offsets_with_lag(cli):
    cli.ok("topic", "create", "RoundTrip", "--queues", "2")
    sent = cli.json_lines("produce", "RoundTrip", "--body", "hello", "--tags", "A", "--keys", "k1 k2",
                          "--property", "color=red")
    assert len(sent) == 1 and len(sent[0]["msg_id"]) == 32 and len(sent[0]["uniq_key"]) == 32
    cli.ok("produce", "RoundTrip", "--tags", "B", stdin="line one\nline two\n\nline three\n")
    got = cli.json_lines("consume", "g1", "RoundTrip", "--from-beginning", "--max", "4")
    assert sorted(m["body"] for m in got) == ["hello", "line one", "line three", "line two"]
    first = next(m for m in got if m["body"] == "hello")
    assert first["tags"] == "A" and first["keys"] == ["k1", "k2"] and first["properties"]["color"] == "red"
    assert first["uniq_key"] == sent[0]["uniq_key"] and first["msg_id"] == sent[0]["msg_id"]

    offsets = cli.json("offsets", "RoundTrip", "--group", "g1")
    assert offsets["total_lag"] == 0
    assert sum(q["committed_offset"] for q in offsets["queues"]) == 4

    cli.ok("produce", "RoundTrip", "--body", "later", "--count", "2")
    offsets = eventually(lambda: cli.json("offsets", "RoundTrip", "--group", "g1"), lambda o: o["total_lag"] == 2)
    assert offsets["total_lag"] == 2
    table = cli.ok("offsets", "RoundTrip", "--group", "g1").stdout
    assert "Committed" in table and "total lag 2" in table

    # the group resumes where it committed: only the two new messages
    again = cli.json_lines("consume", "g1", "RoundTrip", "--max", "2", "--idle-timeout", "30")
    assert [m["body"] for m in again] == ["later", "later"]
    assert cli.json("offsets", "RoundTrip", "--group", "g1")["total_lag"] == 0

    tagged = cli.json_lines("consume", "g-tags", "RoundTrip", "--from-beginning", "--tags", "B", "--max", "3",
                            "--idle-timeout", "30")
    assert sorted(m["body"] for m in tagged) == ["line one", "line three", "line two"]


def test_consume_follows_new_messages(cli):
    cli.ok("topic", "create", "Follow", "--queues", "2")
    cli.ok("produce", "Follow", "--body", "before")
    proc = subprocess.Popen(cli.argv("consume", "gf", "Follow", "--max", "2", "--json"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO_ROOT)
    try:
        ready = proc.stderr.readline()
        assert "consuming Follow as gf" in ready, ready
        cli.ok("produce", "Follow", "--body", "after-1")
        cli.ok("produce", "Follow", "--body", "after-2")
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert [json.loads(line)["body"] for line in out.splitlines()] == ["after-1", "after-2"]
    assert "consumed 2 message(s)" in err


def test_load_with_count_and_size(cli):
    cli.ok("topic", "create", "Load", "--queues", "4")
    r = cli.ok("produce", "Load", "--count", "300", "--size", "100", "--batch", "10", "--concurrency", "2")
    assert "sent 300/300 messages of 100 B" in r.stdout and "msg/s" in r.stdout
    assert "sent 300/300 (100%)" in r.stderr  # progress on stderr
    total = eventually(lambda: sum(q["max_offset"] - q["min_offset"] for q in cli.json("offsets", "Load")["queues"]),
                       lambda n: n == 300)
    assert total == 300
    summary = cli.json("produce", "Load", "--count", "20", "--size", "10")
    assert summary["sent"] == 20 and summary["body_bytes"] == 10


def test_query_and_view(cli):
    cli.ok("topic", "create", "Lookup")
    sent = cli.json("produce", "Lookup", "--body", "find me", "--keys", "order-42")
    cli.ok("produce", "Lookup", "--body", "other", "--keys", "order-43")
    found = eventually(lambda: cli.json_lines("query", "Lookup", "--key", "order-42", "--begin", "now-1h"),
                       lambda ms: len(ms) > 0)
    assert [m["body"] for m in found] == ["find me"]
    assert cli.json_lines("query", "Lookup", "--key", "order-42", "--begin", "1000", "--end", "2000") == []
    table = cli.ok("query", "Lookup", "--key", "order-42").stdout
    assert sent["msg_id"] in table
    assert cli.json_lines("query", "Lookup", "--key", "no-such-key") == []

    view = cli.ok("view", sent["msg_id"]).stdout
    assert "find me" in view and sent["uniq_key"] in view and "KEYS=order-42" in view
    by_uniq = cli.json("view", sent["uniq_key"], "--topic", "Lookup")
    assert by_uniq["msg_id"] == sent["msg_id"]
    r = cli("view", "7F000001000027170000000FFFFFFFFF")
    assert r.returncode == 3
    one_error_line(r)
    r = cli("view", "not-an-id")
    assert r.returncode == 4
    one_error_line(r)


def test_cluster_status_table_json_and_watch(cli, node):
    table = cli.ok("cluster", "status").stdout
    lines = table.splitlines()
    assert lines[0].startswith("+ Cluster: ")
    for col in ("Member", "Address", "Role", "Term", "Commit index", "Applied offset", "Dispatch behind", "Lag",
                "State"):
        assert col in lines[1]
    assert any(line.startswith("| n0 ") and "running" in line for line in lines)
    doc = cli.json("cluster", "status")
    assert [m["id"] for m in doc["members"]] == ["n0"] and doc["members"][0]["state"] == "running"
    assert doc["answered_by"] == node.grpc_address

    proc = subprocess.Popen(cli.argv("cluster", "status", "--watch", "0.2", "--json"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO_ROOT,
                            preexec_fn=_ctrl_c_works)
    try:
        snapshots = [json.loads(proc.stdout.readline()) for _ in range(2)]
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert all(s["members"][0]["id"] == "n0" for s in snapshots)


def test_transfer_leader_on_a_single_node_says_why(cli):
    r = cli("cluster", "transfer-leader", "--to", "n1")
    assert r.returncode != 0
    one_error_line(r)


def test_console_script(node):
    script = os.path.join(os.path.dirname(sys.executable), "raftmq")
    if not os.path.exists(script):
        pytest.skip("raftmq console script not installed (make install)")
    env = _env()
    env["RAFTMQ_SERVER"] = node.grpc_address
    r = subprocess.run([script, "cluster", "status"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "n0" in r.stdout


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stopping_a_follower_commits_what_it_printed(cli, sig):
    topic = f"Stop{sig.name}"
    cli.ok("topic", "create", topic, "--queues", "1")
    cli.ok("produce", topic, "--body", "x", "--count", "3")
    proc = subprocess.Popen(cli.argv("consume", "gs", topic, "--from-beginning"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO_ROOT,
                            preexec_fn=_ctrl_c_works)
    try:
        printed = [proc.stdout.readline() for _ in range(3)]
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert all("| x" in line for line in printed)
    assert proc.returncode == 0, err
    assert "consumed 3 message(s)" in err and "offsets committed" in err
    offsets = cli.json("offsets", topic, "--group", "gs")
    assert offsets["queues"][0]["committed_offset"] == 3 and offsets["total_lag"] == 0


def test_grpc_core_log_lines_reach_neither_the_cli_nor_the_node(cli, node, tmp_path):
    """issue 34: gRPC's C core wrote its own lines (`I1129 ... Handshake failed`, `E1129 ... add_port.cc`) to
    the CLI's and the node's stderr, next to raftmq's one-line reason."""
    import re
    import socket

    from tests.support.processes import NodeProcess, node_specs

    core_line = re.compile(r"^[IWE]\d{4} \d\d:\d\d:\d\d", re.MULTILINE)
    r = cli("topic", "list", "--tls", "--timeout", "3")  # TLS against a plaintext node: a failed handshake
    assert r.returncode == 5 and "TLS handshake failed" in r.stderr
    assert not core_line.search(r.stderr) and len(r.stderr.strip().splitlines()) == 1, r.stderr
    with socket.socket() as busy:  # a node whose gRPC port is taken: the C core's add_port error line
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        [spec] = node_specs(tmp_path, 1)
        spec.grpc_port = busy.getsockname()[1]
        other = NodeProcess(spec).start()
        try:
            assert other.proc.wait(60) == 1
        finally:
            other.kill()
    log = spec.log_path.read_text()
    assert "cannot listen for gRPC" in log and not core_line.search(log), log


def test_lowering_the_read_queues_warns_and_needs_force(cli):
    """issue 34: `topic update --queues` lower made the removed queues' messages unreadable without a word."""
    cli.ok("topic", "create", "Shrink", "--queues", "4")
    for q in range(4):
        cli.ok("produce", "Shrink", "--body", f"m{q}", "--queue", str(q))
    r = cli("topic", "update", "Shrink", "--queues", "2")
    assert r.returncode == 2, r.stderr
    reason = r.stderr.strip().splitlines()[-1]
    assert "makes queues 2..3 unreadable: their 2 stored message(s) can no longer be consumed" in reason
    assert "--force" in reason
    assert cli.json("topic", "describe", "Shrink")["read_queue_nums"] == 4  # nothing changed
    r = cli.ok("topic", "update", "Shrink", "--write-queues", "2")  # the way to drain first: no --force
    assert "warning" not in r.stderr
    r = cli.ok("topic", "update", "Shrink", "--queues", "2", "--force")
    assert "warning: lowering topic Shrink's read queues from 4 to 2" in r.stderr
    assert "read queues 2, write queues 2" in r.stdout

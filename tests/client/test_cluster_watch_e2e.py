"""`raftmq cluster status --watch` during a leader SIGKILL on a real 3-member cluster: events as they happen,
short reasons instead of raw gRPC errors, plain lines when piped and an in-place redraw on a terminal."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading

from raftmq.client import Admin
from raftmq.client.cluster_watch import Watch, events_between
from raftmq.client.types import ClusterStatus, MemberStatus
from tests.client.test_cli_e2e import _env
from tests.support.processes import REPO_ROOT, running_nodes
from tests.support.waiting import wait_for


class _Reader:
    """Collects a stream's text in a thread, so the test can wait for a line without blocking on it."""

    def __init__(self, fd: int):
        self.text = ""
        self._fd = fd
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            ready, _, _ = select.select([self._fd], [], [], 0.2)
            if not ready:
                continue
            try:
                data = os.read(self._fd, 65536)
            except OSError:
                return
            if not data:
                return
            self.text += data.decode(errors="replace")


def test_watch_prints_events_and_short_reasons_through_a_failover(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        servers = ",".join(n.grpc_address for n in nodes)
        with Admin(servers) as admin:
            old_leader = admin.cluster_status().leader_id
        argv = [sys.executable, "-m", "raftmq.client", "cluster", "status", "--watch", "0.5", "--timeout", "3",
                "--server", servers]
        piped = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), cwd=REPO_ROOT)
        main_fd, child_fd = pty.openpty()
        tty = subprocess.Popen(argv, stdout=child_fd, stderr=subprocess.PIPE, env=_env(), cwd=REPO_ROOT)
        os.close(child_fd)
        plain, drawn = _Reader(piped.stdout.fileno()), _Reader(main_fd)
        try:
            wait_for(lambda: f"leader {old_leader}:" in plain.text and "Cluster:" in drawn.text, "first looks",
                     timeout=60)
            next(n for n in nodes if n.spec.id == old_leader).kill()
            # the leader goes (to none while the survivors elect), a new one comes, each as an event with its time
            wait_for(lambda: re.search(rf"event: leader ({old_leader}|none) -> n\d at \d\d:\d\d:\d\d", plain.text),
                     "the leader change event", timeout=90)
            assert f"event: leader {old_leader} -> " in plain.text
            wait_for(lambda: re.search(rf"event: {old_leader} leader \S+ -> unreachable", plain.text),
                     "the dead member event", timeout=90)
            wait_for(lambda: f"leader {old_leader} -> " in drawn.text, "the event on the terminal", timeout=60)
        finally:
            for p in (piped, tty):
                p.send_signal(signal.SIGTERM)
            codes = [p.wait(30) for p in (piped, tty)]
            os.close(main_fd)
        assert codes == [0, 0]
        lines = plain.text.splitlines()
        assert all(len(line) < 250 for line in lines), max(lines, key=len)
        assert "\x1b" not in plain.text  # piped: no terminal control
        assert plain.text.count("Cluster:") == 1  # the table once, then one line per look
        assert drawn.text.count("\x1b[H") >= 2 and "\x1b[2J" not in drawn.text  # redrawn in place, not appended


def _status(leader: str, *roles: tuple[str, str, str]) -> ClusterStatus:
    members = [MemberStatus(i, "", "", role, 3, 0, 0, 0, 0, 0, role != "unreachable", role != "unreachable", err)
               for i, role, err in roles]
    return ClusterStatus("c", leader, "async", members, "n0:1")


def test_events_name_leader_changes_and_member_states():
    before = _status("n1", ("n0", "follower", ""), ("n1", "leader", ""))
    long_error = ('<_InactiveRpcError of RPC that terminated with: status = StatusCode.UNAVAILABLE details = '
                  '"failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:8181: Failed to '
                  'connect to remote host: Connection refused" debug_error_string = "..." >' * 2)
    after = _status("n0", ("n0", "leader", ""), ("n1", "unreachable", long_error))
    events = events_between(before, after, "15:30:16")
    assert events[0] == "leader n1 -> n0 at 15:30:16 (term 3)"
    assert "n1 leader running -> unreachable (connection refused) at 15:30:16" in events


def test_plain_output_when_piped(capsys):
    looks = iter([_status("n1", ("n1", "leader", "")), _status("n2", ("n1", "follower", ""),
                                                                ("n2", "leader", ""))])
    w = Watch(lambda: next(looks), lambda s: "Cluster: table", tty=False)
    w.tick()
    w.tick()
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Cluster: table" and out[1].endswith("leader n1: n1 leader running")
    assert out[2].startswith("event: leader n1 -> n2 at ")
    assert out[3].startswith("event: n1 leader running -> follower running at ") and "n2 joined" in out[4]


def test_events_of_every_group_name_their_group():
    """Issue 38: --watch over a cluster of several groups reports each group's events, naming the group, and a
    group that stops or starts answering."""
    from raftmq.client.cluster_view import ClusterView, GroupStatus
    from raftmq.client.cluster_watch import view_events, view_summary

    def view(g0: ClusterStatus | None, g1: ClusterStatus | None) -> ClusterView:
        return ClusterView("c", [GroupStatus("g0", g0, "" if g0 else "group g0 is unavailable: no leader"),
                                 GroupStatus("g1", g1, "" if g1 else "group g1 is unavailable: none answers")],
                           "n0:1", many=True)

    a = _status("a1", ("a0", "follower", ""), ("a1", "leader", ""))
    b = _status("b0", ("b0", "leader", ""), ("b1", "follower", ""))
    b_failed_over = _status("b1", ("b0", "unreachable", "connection refused"), ("b1", "leader", ""))
    first, second, third = view(a, b), view(a, b_failed_over), view(a, None)
    assert view_events(None, first, "t") == []
    assert view_events(first, second, "t") == ["group g1: leader b0 -> b1 at t (term 3)",
                                               "group g1: b0 leader running -> unreachable (connection refused) at t",
                                               "group g1: b1 follower running -> leader running at t"]
    assert view_events(second, third, "t") == ["group g1 unavailable (group g1 is unavailable: none answers) at t"]
    assert view_events(third, first, "t") == ["group g1 answers again (leader b0) at t"]
    assert view_summary(third, "t") == "t g0 leader a1: a0 follower running, a1 leader running; g1 unavailable " \
                                       "(group g1 is unavailable: none answers)"

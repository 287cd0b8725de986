"""A group of real node processes that grows, shrinks and loses members (issue 39), and the checks every
membership test ends with: every acknowledged message readable, never two leaders in one term, replicas
byte-identical (``raftmq cluster check``)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from raftmq.client import Admin
from raftmq.client.errors import RaftmqError
from tests.client.test_cli_e2e import _env
from tests.replication.cluster_util import ProduceLog, read_topic, wait_leader
from tests.replication.conftest import TEST_TUNING
from tests.support.processes import REPO_ROOT, NodeProcess, node_specs, stop_all

LEADER_LINE = re.compile(r"\[(?P<member>[^\]]+)\] became the Raft leader of term (?P<term>\d+)")


def ready_text(node: NodeProcess) -> str:
    """The node's /ready answer ("" while it does not listen yet)."""
    try:
        return node.http_get("/ready")[1]
    except OSError:
        return ""


def member_entry(node: NodeProcess) -> dict[str, str]:
    return {"id": node.spec.id, "raft": node.spec.raft_address, "grpc": node.spec.grpc_address}


class Group:
    """``total`` members' specs (ports chosen up front); the first ``seed`` form the group. The others are new
    members: their ``cluster.members`` lists the seed and themselves, as an operator would write it."""

    def __init__(self, base: Path, total: int, seed: int = 3, tuning: dict | None = None,
                 ids: list[str] | None = None, **sections: dict):
        cluster = {**sections.pop("cluster", {}), "raft": {**TEST_TUNING, **(tuning or {})}}
        specs = node_specs(base, total, cluster=cluster, **sections)
        for spec, member_id in zip(specs, ids or [], strict=False):
            spec.id = member_id  # e.g. pod names (the data directories keep their n<i> names)
        self.nodes = {s.id: NodeProcess(s) for s in specs}
        seed_members = [member_entry(n) for n in list(self.nodes.values())[:seed]]
        for i, n in enumerate(self.nodes.values()):
            n.spec.members = seed_members if i < seed else [*seed_members, member_entry(n)]
        self.seed = list(self.nodes)[:seed]

    def __getitem__(self, member_id: str) -> NodeProcess:
        return self.nodes[member_id]

    def start(self, *ids: str, wait: bool = True) -> None:
        for i in ids or self.seed:
            self.nodes[i].start()
        if wait:
            for i in ids or self.seed:
                self.nodes[i].wait_ready(120)

    def live(self) -> list[NodeProcess]:
        return [n for n in self.nodes.values() if n.alive]

    def admin(self, timeout: float = 15.0) -> Admin:
        return Admin([n.grpc_address for n in self.live()], timeout=timeout, retry_timeout=timeout * 2)

    def leader(self, timeout: float = 90.0) -> NodeProcess:
        return wait_leader(self.live(), timeout=timeout)

    def wait_configuration(self, voters: set[str], learners: set[str] = frozenset(), timeout: float = 180.0) -> None:
        """Until the leader's configuration is exactly ``voters`` and ``learners``."""
        deadline = time.monotonic() + timeout
        seen = None
        while time.monotonic() < deadline:
            try:
                with Admin([self.leader(timeout=max(1.0, deadline - time.monotonic())).grpc_address],
                           timeout=10) as admin:
                    rows = admin.cluster_status().members
            except (RaftmqError, TimeoutError) as e:
                seen = str(e)
            else:
                seen = ({m.id for m in rows if m.membership == "voter"},
                        {m.id for m in rows if m.membership == "learner"})
                if seen == (voters, set(learners)):
                    return
            time.sleep(0.3)
        raise AssertionError(f"configuration not {sorted(voters)} + learners {sorted(learners)} after {timeout}s: "
                             f"{seen}\n{self.logs()}")

    def leaders_by_term(self) -> dict[int, set[str]]:
        """Every term some member led, with who led it, from every member's log."""
        out: dict[int, set[str]] = {}
        for n in self.nodes.values():
            try:
                text = n.spec.log_path.read_text(errors="replace")
            except FileNotFoundError:
                continue
            for m in LEADER_LINE.finditer(text):
                out.setdefault(int(m["term"]), set()).add(m["member"])
        return out

    def assert_one_leader_per_term(self) -> None:
        terms = self.leaders_by_term()
        assert terms, "no member ever logged its leadership"
        twice = {t: who for t, who in terms.items() if len(who) > 1}
        assert not twice, f"terms with two leaders: {twice}"

    def assert_nothing_lost(self, log: ProduceLog, topic: str, queues: int = 4) -> None:
        """Every acknowledged message is readable from the leader (with its acknowledged queue offset)."""
        got = read_topic(self.leader(), topic, queues)
        where = {key: (q, off) for q, msgs in got.items() for off, key, _ in msgs}
        missing = [k for k in log.acked if k not in where]
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
        moved = [k for k, (q, off, _) in log.acked.items() if where[k] != (q, off)]
        assert not moved, f"acknowledged messages at other offsets than acknowledged: {moved[:5]}"

    def cluster_check(self) -> subprocess.CompletedProcess:
        """``raftmq cluster check`` over the live members (exit 0: byte-identical)."""
        servers = ",".join(n.grpc_address for n in self.live())
        return raftmq("cluster", "check", "-s", servers, "--chunk", "64K", "--lag-wait", "30")

    def logs(self, lines: int = 25) -> str:
        return "\n".join(f"--- {n.spec.id}\n{n.log_tail(lines)}" for n in self.nodes.values() if n.proc is not None)

    def stop(self) -> None:
        stop_all(list(self.nodes.values()), kill=True)


def raftmq(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The ``raftmq`` CLI of this checkout."""
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env(), cwd=REPO_ROOT)

"""Fixtures for the replication suite: a 3-member cluster of real node processes on loopback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from raftmq.store import MessageStore, StoreConfig
from tests.support.processes import NodeProcess, node_specs, stop_all

# Small compaction budget so compaction, snapshot install and restart-after-compaction are exercised quickly.
TEST_TUNING = {"compaction_min_entries": 300, "compaction_min_time": 30.0, "put_timeout_s": 6.0}


class Cluster:
    def __init__(self, base, durability: str = "async", tuning: dict | None = None, n: int = 3,
                 host_names: bool = False, secret: str = "", store: dict | None = None):
        self.specs = node_specs(base, n, cluster={"durability": durability, "secret": secret,
                                                  "raft": {**TEST_TUNING, **(tuning or {})}}, store=store or {})
        if host_names:  # peers addressed by name (as on Kubernetes), resolved by pysyncobj on every connect
            members = [{**m, "raft": m["raft"].replace("127.0.0.1", "localhost")} for m in self.specs[0].members]
            for s in self.specs:
                s.members = members
                s.overrides.setdefault("cluster", {})["raft_address"] = next(
                    m["raft"] for m in members if m["id"] == s.id)
        self.env: dict[str, str] = {}  # extra environment for every (re)start; Raft tuning is in the config
        self.nodes = [NodeProcess(s) for s in self.specs]

    def start(self, wait: bool = True) -> Cluster:
        for n in self.nodes:
            n.start(env=self.env)
        if wait:
            for n in self.nodes:
                n.wait_ready(90)
        return self

    def restart(self, nodes: list[NodeProcess] | None = None) -> None:
        """Start stopped or killed members again (all by default), all at once, and wait until each is ready
        (recovery after a kill takes longer than a first start)."""
        nodes = self.nodes if nodes is None else nodes
        for n in nodes:
            n.start(env=self.env)
        for n in nodes:
            n.wait_ready(120)

    def by_id(self, node_id: str) -> NodeProcess:
        return next(n for n in self.nodes if n.spec.id == node_id)

    def logs(self) -> str:
        return "\n".join(f"--- {n.spec.id}\n{n.log_tail(30)}" for n in self.nodes)


@pytest.fixture
def cluster_factory(tmp_path) -> Iterator:
    made: list[Cluster] = []

    def make(durability: str = "async", tuning: dict | None = None, host_names: bool = False,
             secret: str = "", store: dict | None = None) -> Cluster:
        c = Cluster(tmp_path, durability, tuning, host_names=host_names, secret=secret, store=store)
        made.append(c)
        return c.start()

    yield make
    for c in made:
        for n in c.nodes:
            if n.proc is not None and n.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    n.thaw()  # in case a test left it frozen
        stop_all(c.nodes, kill=True)


@pytest.fixture
def make_group(tmp_path) -> Iterator:
    """``make_group(total, seed=3, **kw)``: a membership test's group (tests/replication/membership_util.py),
    every one made killed at the end."""
    from tests.replication.membership_util import Group  # it imports this module's tuning

    made: list[Group] = []

    def make(total: int, seed: int = 3, **kw) -> Group:
        g = Group(tmp_path, total, seed, **kw)
        made.append(g)
        return g

    yield make
    for g in made:
        g.stop()


def open_store(tmp_path, **kw) -> MessageStore:
    """A small single-node store (64 KiB segments) for write-path tests; ``kw`` overrides StoreConfig fields."""
    cfg = StoreConfig(root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=64 * 1024,
                      mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=256, max_index_num=1024,
                      max_message_size=16 * 1024, preallocate=False, **kw)
    st = MessageStore(cfg)
    st.open()
    return st


@pytest.fixture
def store(tmp_path):
    st = open_store(tmp_path)
    yield st
    st.shutdown()

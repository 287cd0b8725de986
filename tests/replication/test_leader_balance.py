"""Leader balancing and failures across groups with real processes (issue 38, docs/design/leader-balance.md):
two groups of three on three "machines" (member j of each group names host machine-j), so a machine's death
kills one member of each group. SIGKILL a machine that leads both groups while producers write: both groups fail
over, nothing acknowledged is lost, `cluster check` passes per group; once it is back, `raftmq cluster
balance-leaders` brings each group back to its preferred leader. A rolling restart keeps both groups writing. The
automatic rebalance hands leadership back by itself. Durations are printed (-s), never asserted."""

from __future__ import annotations

import os
import signal
import time

from raftmq.client.cli import run as raftmq
from raftmq.node.config import GroupSpec, Member
from raftmq.node.preferred_leaders import preferred_leaders
from raftmq.v1 import raftmq_pb2 as pb
from tests.replication.cluster_util import admin, lead_by, wait_applied_equal, wait_leader
from tests.replication.test_scale_out import QUEUES, TOPIC, Sending, _all_acked_are_stored
from tests.support.metrics import metric_sum
from tests.support.processes import group_specs, start_nodes, stop_all
from tests.support.waiting import wait_for

MACHINES = 3


def _start(tmp_path, **cluster) -> list[list]:
    """2 groups of 3; member j of each group runs on machine-j (its `host`)."""
    specs = group_specs(tmp_path, groups=2, members=MACHINES, **({"cluster": cluster} if cluster else {}))
    for g in specs[0][0].overrides["cluster"]["groups"]:  # one list object, shared by every member's config
        for j, m in enumerate(g["members"]):
            m["host"] = f"machine-{j}"
    nodes = start_nodes([s for group in specs for s in group], timeout=120)
    try:
        for g in (nodes[:3], nodes[3:]):
            wait_leader(g, timeout=120)
        admin(nodes[0]).CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(
            name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)), timeout=30)
    except BaseException:
        stop_all(nodes, kill=True)
        raise
    return [nodes[:3], nodes[3:]]


def _preferred(groups) -> dict[str, str]:
    """What the rule gives for this layout, computed here from the same configuration the members have."""
    return preferred_leaders([GroupSpec(f"g{gi}", "", (), tuple(Member(n.spec.id, n.spec.raft_address,
                                                                       n.spec.grpc_address, f"machine-{j}")
                                                                for j, n in enumerate(g)))
                              for gi, g in enumerate(groups)])


def _leaders(groups) -> dict[str, str]:
    return {f"g{gi}": wait_leader(g, timeout=120).spec.id for gi, g in enumerate(groups)}


def _servers(groups) -> str:
    return ",".join(n.grpc_address for g in groups for n in g if n.alive)


def _cli(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = raftmq(list(args))
    out = capsys.readouterr()
    with capsys.disabled():
        print(out.out + out.err, end="")
    return code, out.out + out.err


def _check_every_group(groups, capsys) -> None:
    for gi, g in enumerate(groups):
        wait_applied_equal(g, timeout=120)
        code, out = _cli(capsys, "cluster", "check", "--server", ",".join(n.grpc_address for n in g))
        assert code == 0, f"g{gi}: {out}"
        assert "3 members identical" in out, out


def test_a_machine_with_both_leaders_dies_both_fail_over_and_balance_brings_them_back(tmp_path, capsys):
    groups = _start(tmp_path)
    nodes = [n for g in groups for n in g]
    try:
        preferred = _preferred(groups)
        assert preferred == {"g0": "g0-n0", "g1": "g1-n1"}  # one leader on machine-0, one on machine-1
        # both groups led from machine-0: its death costs both groups their leader
        machine = [g[0] for g in groups]
        for g, n in zip(groups, machine, strict=True):
            lead_by(g, n.spec.id)
        # producers write to both groups from before the machine dies until after the leaders are balanced back
        with Sending([n.grpc_address for n in nodes], pinned={2: "g0", 3: "g1"}) as s:
            wait_for(lambda: s.count("g0") > 20 and s.count("g1") > 20, "both groups acknowledging", timeout=120)
            for n in machine:  # the machine dies: both processes SIGKILLed at once, then reaped
                os.kill(n.proc.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            for n in machine:
                n.kill()
            for g, dead in zip(groups, machine, strict=True):  # both groups elect a leader on another machine
                wait_leader(g, exclude={dead.spec.id}, timeout=120)
            failover_s = time.monotonic() - killed_at
            elected_at = time.monotonic()
            wait_for(lambda: s.count("g0", since=elected_at) > 10 and s.count("g1", since=elected_at) > 10,
                     "both groups acknowledging under their new leaders", timeout=120)
            # while the machine is down its members cannot take over: refused, naming the group and why
            code, out = _cli(capsys, "cluster", "balance-leaders", "--server", _servers(groups))
            assert code == 12, out
            assert "group g0: cannot move: g0-n0 is unreachable" in out, out
            assert "group g1: cannot move" not in out, out  # g1's preferred leader (machine-1) is up
            code, out = _cli(capsys, "cluster", "balance-leaders", "--group", "g9", "--server", _servers(groups))
            assert code == 2 and "--group g9: no such group; the groups are g0, g1" in out, out
            for n in machine:  # the machine comes back
                n.start()
            for n in machine:
                n.wait_ready(120)
            code, out = _cli(capsys, "cluster", "balance-leaders", "--dry-run", "--server", _servers(groups))
            leaders = _leaders(groups)
            if leaders != preferred:
                assert code == 12, out
                for g in (g for g in leaders if leaders[g] != preferred[g]):
                    assert f"group {g} would move" in out, out
            started = time.monotonic()
            code, out = _cli(capsys, "cluster", "balance-leaders", "--server", _servers(groups))
            balance_s = time.monotonic() - started
            assert code == 0, out
            assert _leaders(groups) == preferred
            balanced_at = time.monotonic()
            wait_for(lambda: s.count("g0", since=balanced_at) > 10 and s.count("g1", since=balanced_at) > 10,
                     "both groups acknowledging under their preferred leaders", timeout=120)
        _all_acked_are_stored(groups, s.acked)  # on every member, the restarted ones included
        _check_every_group(groups, capsys)
        code, out = _cli(capsys, "cluster", "balance-leaders", "--dry-run", "--server", _servers(groups))
        assert code == 0 and "every group (2) is led by its preferred leader" in out, out
        with capsys.disabled():
            print(f"\nmachine failure: both groups had new leaders {failover_s:.1f}s after the SIGKILL; "
                  f"balance-leaders moved {sum(leaders[g] != preferred[g] for g in leaders)} group(s) back "
                  f"in {balance_s:.1f}s; {len(s.acked)} acknowledged, all read back; sends that failed and were "
                  f"not acknowledged: {sum(len(f) for f in s.failures.values())}")
    finally:
        stop_all(nodes, kill=True)


def test_a_rolling_restart_keeps_both_groups_writing(tmp_path, capsys):
    groups = _start(tmp_path)
    nodes = [n for g in groups for n in g]
    try:
        steps = []
        started = time.monotonic()
        with Sending([n.grpc_address for n in nodes], pinned={0: "g0", 1: "g1", 2: "g0", 3: "g1"}) as s:
            wait_for(lambda: s.count("g0") > 20 and s.count("g1") > 20, "both groups acknowledging", timeout=120)
            started = time.monotonic()
            for j in range(MACHINES):  # a machine at a time, as a rolling restart of the StatefulSets goes
                for n in (g[j] for g in groups):
                    t0 = time.monotonic()
                    n.restart(timeout=120)
                    steps.append((n.spec.id, time.monotonic() - t0))
                    back = time.monotonic()
                    # both groups acknowledge after each member's restart: writes kept flowing
                    wait_for(lambda back=back: s.count("g0", since=back) > 5 and s.count("g1", since=back) > 5,
                             f"both groups acknowledging after {n.spec.id} restarted", timeout=120)
            rolled_s = time.monotonic() - started
        _all_acked_are_stored(groups, s.acked)
        _check_every_group(groups, capsys)
        t0 = time.monotonic()
        code, out = _cli(capsys, "cluster", "balance-leaders", "--server", _servers(groups))
        balance_s = time.monotonic() - t0
        assert code == 0, out
        assert _leaders(groups) == _preferred(groups)
        with capsys.disabled():
            print(f"\nrolling restart of 6 members: {rolled_s:.1f}s ("
                  + ", ".join(f"{i} {t:.1f}s" for i, t in steps) + f"); {len(s.acked)} acknowledged, all read back; "
                  f"sends that failed and were not acknowledged: {sum(len(f) for f in s.failures.values())}; "
                  f"balance-leaders afterwards {balance_s:.1f}s")
    finally:
        stop_all(nodes, kill=True)


def test_auto_balance_hands_leadership_back_to_the_preferred_leader(tmp_path, capsys):
    groups = _start(tmp_path, auto_balance_leaders=True, auto_balance_after_s=2)
    nodes = [n for g in groups for n in g]
    try:
        preferred = _preferred(groups)
        wait_for(lambda: _leaders(groups) == preferred, "every group led by its preferred leader, by itself",
                 timeout=120)
        g0 = groups[0]
        first = next(n for n in g0 if n.spec.id == preferred["g0"])
        others = [n for n in g0 if n is not first]

        def moves() -> dict[str, float]:  # hand-overs to `first`, counted by the members that made them
            return {n.spec.id: metric_sum(n, "raftmq_leader_balance_moves_total", to_member=first.spec.id,
                                          outcome="moved") for n in others}

        first.kill()
        wait_leader(g0, exclude={first.spec.id}, timeout=120)
        before = moves()
        back = time.monotonic()
        first.start().wait_ready(120)
        wait_for(lambda: wait_leader(g0, timeout=60).spec.id == first.spec.id,
                 f"{first.spec.id} leading g0 again once healthy for 2 s", timeout=120)
        took = time.monotonic() - back
        # the leader that handed over counts it once its transfer call returns (a moment after the new leader
        # is visible) ...
        def counted() -> dict[str, float] | None:
            now = moves()
            return now if now != before else None

        after = wait_for(counted, f"a hand-over to {first.spec.id} counted", timeout=30)
        movers = [n for n in others if after[n.spec.id] > before[n.spec.id]]
        assert movers, (before, after)
        for n in movers:  # ... and wrote the event line
            assert '"audit": "leader_balance"' in n.spec.log_path.read_text()
        assert _leaders(groups) == preferred
        with capsys.disabled():
            print(f"\nauto balance: {first.spec.id} led g0 again {took:.1f}s after it was started")
    finally:
        stop_all(nodes, kill=True)

"""`raftmq produce --count` is an SRE's load generator: it rides through a SIGKILLed leader and accounts for every
message (ok / unknown / failed), never stopping at the first unknown outcome."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading

import pytest

from raftmq.client import Admin, Producer, errors
from tests.client.test_cli_e2e import _env
from tests.support.processes import REPO_ROOT, running_nodes
from tests.support.waiting import wait_for

COUNT = 3000


def _stored(admin: Admin, topic: str) -> int:
    return sum(q.max_offset - q.min_offset for q in admin.queue_offsets(topic))


def test_load_rides_through_a_sigkilled_leader(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        everyone = ",".join(n.grpc_address for n in nodes)
        with Admin(everyone) as admin:
            admin.create_topic("Drill", queues=4)
            leader_id = admin.cluster_status().leader_id
        leader = next(n for n in nodes if n.spec.id == leader_id)
        survivors = [n.grpc_address for n in nodes if n is not leader]

        load = subprocess.Popen(
            [sys.executable, "-m", "raftmq.client", "produce", "Drill", "--count", str(COUNT), "--size", "64",
             "--concurrency", "4", "--json", "--server", everyone],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO_ROOT)
        try:
            with Admin(survivors) as followers:
                wait_for(lambda: _stored(followers, "Drill") >= 200, "the load to get going", timeout=120)
            leader.kill()
            out, err = load.communicate(timeout=600)
        finally:
            if load.poll() is None:
                load.kill()
                load.communicate()

        assert load.returncode in (0, 7), f"exit {load.returncode}\n{out}\n{err}"
        summary = json.loads(out.strip().splitlines()[-1])
        print({k: v for k, v in summary.items() if not k.endswith("uniq_keys")})
        assert summary["ok"] + summary["unknown"] + summary["failed"] == COUNT, summary
        assert summary["failed"] == 0 and summary["not_sent"] == 0, summary
        assert len(summary["unknown_uniq_keys"]) == summary["unknown"], summary
        assert (load.returncode == 7) == (summary["unknown"] > 0), (load.returncode, summary)
        assert summary["longest_gap_s"] > 0 and summary["sent"] == summary["ok"]

        # every acknowledged message is on the survivors; at most the unknown ones come on top
        with Admin(survivors) as admin:
            stored = wait_for(lambda: (n := _stored(admin, "Drill")) >= summary["ok"] and n, "acked messages",
                              timeout=60)
            assert summary["ok"] <= stored <= summary["ok"] + summary["unknown"], (stored, summary)

        # --server pointed at a member's Raft port by mistake: named as such, not an "outcome unknown"
        survivor = next(n for n in nodes if n is not leader)
        r = subprocess.run([sys.executable, "-m", "raftmq.client", "produce", "Drill", "--body", "x", "--timeout", "2",
                            "--server", survivor.spec.raft_address], capture_output=True, text=True, env=_env(),
                           cwd=REPO_ROOT, timeout=60)
        assert r.returncode == 5, r.stderr
        assert f"not a raftmq server at {survivor.spec.raft_address}" in r.stderr, r.stderr


def test_sdk_load_rides_through_a_sigtermed_leader(tmp_path):
    """Issue 34: SIGTERM to the leader under SDK load (streamed sends). It hands leadership off first, then tells
    the SendStreams still open on it who leads now, so the producers move there and its drain ends: it exits
    long before its shutdown grace, with no send cancelled into an unknown outcome and none lost. Before, its
    streams kept sending to it (each send refused, then re-sent elsewhere), the drain never saw a quiet moment
    and lasted the whole grace, and the gRPC stop then cancelled the sends on those streams."""
    grace = 120.0
    with running_nodes(tmp_path, 3, node={"shutdown_grace_seconds": grace}) as nodes:
        everyone = [n.grpc_address for n in nodes]
        with Admin(everyone) as admin:
            admin.create_topic("Roll", queues=4)
            leader_id = admin.cluster_status().leader_id
        leader = next(n for n in nodes if n.spec.id == leader_id)
        stop = threading.Event()
        outcomes: dict[str, int] = {"ok": 0, "unknown": 0, "failed": 0}
        problems: list[str] = []
        lock = threading.Lock()

        def produce(i: int) -> None:
            with Producer(everyone, timeout=10, retry_timeout=60) as p:
                n = 0
                while not stop.is_set():
                    try:
                        p.send("Roll", f"{i}-{n}")
                        kind = "ok"
                    except errors.UnknownOutcomeError as e:
                        kind = "unknown"
                        problems.append(str(e))
                    except errors.RaftmqError as e:
                        kind = "failed"
                        problems.append(str(e))
                    with lock:
                        outcomes[kind] += 1
                    n += 1

        threads = [threading.Thread(target=produce, args=(i,), daemon=True) for i in range(4)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: outcomes["ok"] >= 300, "the load to get going", timeout=120)
            leader.proc.send_signal(signal.SIGTERM)
            try:
                leader.proc.wait(timeout=grace / 2)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the leader was still draining {grace / 2:.0f} s after SIGTERM:\n{leader.log_tail()}")
            assert leader.stop() == 0, leader.log_tail()
            after_exit = outcomes["ok"]
            wait_for(lambda: outcomes["ok"] >= after_exit + 300, "writes to go on at the new leader", timeout=120)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert outcomes["unknown"] == 0 and outcomes["failed"] == 0, (outcomes, problems[:5])
        survivors = [n.grpc_address for n in nodes if n is not leader]
        with Admin(survivors) as admin:
            wait_for(lambda: _stored(admin, "Roll") >= outcomes["ok"], "every acknowledged message", timeout=60)
            assert _stored(admin, "Roll") == outcomes["ok"]

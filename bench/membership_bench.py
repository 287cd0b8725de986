"""Membership-change benchmark: how long each online change takes and how long writes stop meanwhile (issue 39).

Not a test: it prints numbers and never fails on time. A group of real node processes on loopback starts with 3
members; producer threads (the SDK, one message per send, closed loop) write all the time. After a prefill (the
data every new member copies as a learner) it measures a baseline window without any change, then, one after the
other: add n3, add n4 (3 -> 5), remove n4, remove n3 (5 -> 3; whoever leads, so a leader may remove itself by
handing leadership away), then the replacement of a dead member: n2 is SIGKILLed and replaced by n5.

Per change it prints the time from the command to the configuration every member reports, the longest time
without any acknowledged write in that interval (the write-availability gap), the writes that failed, and the
write rate; the baseline row is the same over a window with no change, from the same run.

    .venv/bin/python bench/membership_bench.py                    # ~2 minutes
    .venv/bin/python bench/membership_bench.py --prefill-mb 128 --producers 8
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "proto"))

from raftmq.client import Admin, Producer, errors  # noqa: E402
from tests.replication.cluster_util import create_topic  # noqa: E402
from tests.replication.membership_util import Group  # noqa: E402

TOPIC = "MembershipBench"


class Load:
    """Producer threads; the end time of every acknowledged send and the count of failed ones."""

    def __init__(self, servers: list[str], producers: int, size: int, timeout: float):
        self.servers, self.size, self.timeout = servers, size, timeout
        self.acked: list[float] = []
        self.failed: list[float] = []
        self.acked_bytes = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(producers)]

    def start(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout * 3)

    def _run(self, i: int) -> None:
        body = b"m" * self.size
        with Producer(self.servers, timeout=self.timeout, retry_timeout=self.timeout * 2) as p:
            while not self._stop.is_set():
                try:
                    p.send(TOPIC, body)
                except errors.RaftmqError:
                    with self._lock:
                        self.failed.append(time.monotonic())
                    continue
                with self._lock:
                    self.acked.append(time.monotonic())
                    self.acked_bytes += self.size

    def window(self, t0: float, t1: float) -> tuple[float, int, int]:
        """(longest time without an acknowledged write, acknowledged, failed) in [t0, t1]."""
        with self._lock:
            acks = sorted(t for t in self.acked if t0 <= t <= t1)
            failed = sum(1 for t in self.failed if t0 <= t <= t1)
        edges = [t0, *acks, t1]
        return max(b - a for a, b in zip(edges, edges[1:], strict=False)), len(acks), failed


def configuration(g: Group, members: set[str]) -> tuple[set[str], set[str]] | None:
    """The configuration ``members`` report, when they all agree (a removed member keeps its old view)."""
    seen = set()
    for member in members:
        try:
            with Admin([g[member].grpc_address], timeout=3, retry_timeout=3) as admin:
                rows = admin.cluster_status().members
        except errors.RaftmqError:
            return None
        seen.add((frozenset(m.id for m in rows if m.membership == "voter"),
                  frozenset(m.id for m in rows if m.membership == "learner")))
    return (set(next(iter(seen))[0]), set(next(iter(seen))[1])) if len(seen) == 1 else None


def wait_voters(g: Group, voters: set[str], timeout: float) -> float | None:
    """When every member of ``voters`` reports exactly those voters and no learner; None after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if configuration(g, voters) == (voters, set()):
            return time.monotonic()
        time.sleep(0.1)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--producers", type=int, default=4, help="producer threads (default 4)")
    ap.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    ap.add_argument("--prefill-mb", type=int, default=32, help="MiB written before the first change (default 32)")
    ap.add_argument("--baseline-s", type=float, default=10.0, help="seconds of the no-change window (default 10)")
    ap.add_argument("--timeout", type=float, default=2.0, help="SDK per-call timeout, seconds (default 2)")
    ap.add_argument("--change-timeout", type=float, default=300.0,
                    help="seconds a change may take before it is reported as not completed (default 300)")
    args = ap.parse_args()

    base = Path(tempfile.mkdtemp(prefix="raftmq-membership-"))
    g = Group(base, 6, 3, store={"mapped_file_size_commit_log": 64 << 20})
    load = None
    try:
        g.start()
        create_topic(g.live(), TOPIC)
        load = Load([n.grpc_address for n in g.nodes.values()], args.producers, args.size, args.timeout).start()
        while load.acked_bytes < args.prefill_mb << 20:
            time.sleep(0.5)
        print(f"prefilled {load.acked_bytes >> 20} MiB with {len(load.acked)} messages of {args.size} B")

        rows = []
        t0 = time.monotonic()
        time.sleep(args.baseline_s)
        rows.append(("baseline (no change)", t0, time.monotonic()))

        def change(name: str, act, voters: set[str]) -> bool:
            t0 = time.monotonic()
            act()
            t1 = wait_voters(g, voters, args.change_timeout)
            rows.append((name, t0, t1))
            print(f"{name}: " + (f"{t1 - t0:.2f}s" if t1 else f"NOT COMPLETED within {args.change_timeout:.0f}s"),
                  flush=True)
            if t1 is None:
                print(g.logs(), flush=True)
            return t1 is not None

        def add(member: str) -> None:
            n = g[member]
            n.start()
            with g.admin() as admin:
                admin.add_member(member, n.spec.raft_address, n.grpc_address)

        def remove(member: str) -> None:
            with g.admin() as admin:
                admin.remove_member(member)

        def replace(old: str, new: str) -> None:
            g[old].kill()
            n = g[new]
            n.start()
            with g.admin() as admin:
                admin.add_member(new, n.spec.raft_address, n.grpc_address, replaces=old)

        ok = change("add n3 (3 -> 4)", lambda: add("n3"), {"n0", "n1", "n2", "n3"}) and \
            change("add n4 (4 -> 5)", lambda: add("n4"), {"n0", "n1", "n2", "n3", "n4"})
        if ok:
            leader = g.leader().spec.id
            ok = change(f"remove n4 (5 -> 4){' leader' if leader == 'n4' else ''}", lambda: remove("n4"),
                        {"n0", "n1", "n2", "n3"})
        if ok:
            leader = g.leader().spec.id
            ok = change(f"remove n3 (4 -> 3){' leader' if leader == 'n3' else ''}", lambda: remove("n3"),
                        {"n0", "n1", "n2"})
        if ok:
            for gone in ("n3", "n4"):
                g[gone].stop()
            if g.leader().spec.id == "n2":
                with g.admin() as admin:
                    admin.transfer_leader("n0")
            change("replace dead n2 by n5", lambda: replace("n2", "n5"), {"n0", "n1", "n5"})
        time.sleep(1.0)
        load.stop()

        print(f"\n{'change':<26} {'took s':>7} {'max gap ms':>11} {'acked':>7} {'failed':>7} {'writes/s':>9}")
        for name, t0, t1 in rows:
            done = t1 is not None
            t1 = t1 if done else t0 + args.change_timeout
            gap, acked, failed = load.window(t0, t1)
            took = f"{t1 - t0:7.2f}" if done else "   n/c "
            print(f"{name:<26} {took} {gap * 1000:11.0f} {acked:7d} {failed:7d} {acked / (t1 - t0):9.0f}")
        if any(t1 is None for _, _, t1 in rows):
            print("n/c: the change did not complete within --change-timeout (the member logs are printed above)")
        print(f"\n{len(load.acked)} messages acknowledged, {len(load.failed)} sends failed over the run")
    finally:
        if load is not None:
            load.stop()
        g.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

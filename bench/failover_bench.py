"""Failover benchmark: how long writes stop when the leader fails, through the SDK (issue 11).

Not a test: it prints numbers and never fails on time. A 3-member cluster of real node processes on loopback,
a load generator process with N producer threads (the SDK, 1 message per send, closed loop), and repeated
faults of the current leader:

* ``kill``: SIGKILL the leader (it is restarted afterwards, so the next fault again has 3 members);
* ``stop``: SIGSTOP the leader for ``--hold`` seconds, then SIGCONT;
* ``cut``:  the client's connections to the leader stop carrying bytes for ``--hold`` seconds, while the members
  still reach each other. The load generator runs with ``grpc_proxy`` pointing at a small HTTP CONNECT proxy in
  this process, so every gRPC connection of the SDK (also to leader addresses it learns from hints) goes through
  it and the proxy can stall the ones to the leader; the members' own traffic does not use it.
* ``roll``: a rolling restart, as a StatefulSet update does it: every member in turn (highest id first, whoever
  leads) gets SIGTERM, exits, is started again and is ready before the next one. Not a failure: a graceful stop.

Per fault kind it prints the time from the fault to the first acknowledged write that was *sent after* the
fault (median and max over the faults), and the ops ok / unknown outcome / failed during that kind's run.
For ``roll`` (one fault = one whole rolling restart) it prints the write outage per member restarted: the
longest time without any acknowledged write from its SIGTERM until it is ready again, for the leaders and the
followers separately, and how long the members took to exit after SIGTERM.

    .venv/bin/python bench/failover_bench.py                      # 5 faults of each kind, ~4 minutes
    .venv/bin/python bench/failover_bench.py --faults 2 --kinds stop,cut --hold 4
    .venv/bin/python bench/failover_bench.py --faults 3 --kinds roll
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "proto"))

TOPIC = "FailoverBench"


# ---------------------------------------------------------------------------------------------- the load process
def load_main(args: argparse.Namespace) -> None:
    """Producer threads; one JSON line per send on stdout: [start, end, outcome, producer] (time.monotonic is
    system-wide on Linux, so the parent compares it with its own fault times)."""
    from raftmq.client import Producer, errors

    servers = args.servers.split(",")
    stop = threading.Event()
    lock = threading.Lock()

    def producer(i: int) -> None:
        with Producer(servers, timeout=args.timeout, retry_timeout=args.timeout * 2) as p:
            n = 0
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    p.send(TOPIC, b"x" * 256 + b"-%d-%d" % (i, n))
                    outcome = "ok"
                    why = ""
                except errors.UnknownOutcomeError as e:
                    outcome, why = "unknown", str(e)[:160]
                except errors.RaftmqError as e:
                    outcome, why = "failed", str(e)[:160]
                n += 1
                with lock:
                    sys.stdout.write(json.dumps([t0, time.monotonic(), outcome, i, why]) + "\n")
                    sys.stdout.flush()

    threads = [threading.Thread(target=producer, args=(i,), daemon=True) for i in range(args.producers)]
    for t in threads:
        t.start()
    try:
        sys.stdin.read()  # until the parent closes our stdin
    finally:
        stop.set()
        for t in threads:
            t.join(args.timeout * 3)


# ---------------------------------------------------------------------------------------------- the cut
class ConnectProxy:
    """An HTTP CONNECT proxy whose tunnels to ``blocked`` addresses stop carrying bytes (new and existing)."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.blocked: set[str] = set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self.listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _wait_open(self, target: str) -> bool:
        while target in self.blocked:
            if self._closed:
                return False
            time.sleep(0.02)
        return True

    def _tunnel(self, client: socket.socket) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            line = head.split(b"\r\n", 1)[0].decode()
            target = line.split()[1]
            if not self._wait_open(target):
                return
            host, port = target.rsplit(":", 1)
            upstream = socket.create_connection((host, int(port)), timeout=5)
            upstream.settimeout(None)
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            rest = head.split(b"\r\n\r\n", 1)[1]
            if rest:
                upstream.sendall(rest)
            peers = {client: upstream, upstream: client}
            while not self._closed:
                ready, _, _ = select.select([client, upstream], [], [], 0.2)
                for s in ready:
                    if not self._wait_open(target):
                        return
                    data = s.recv(65536)
                    if not data:
                        return
                    peers[s].sendall(data)
        except OSError:
            return
        finally:
            client.close()


# ---------------------------------------------------------------------------------------------- the run
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--servers", default="", help=argparse.SUPPRESS)
    ap.add_argument("--faults", type=int, default=5, help="faults per kind (default 5)")
    ap.add_argument("--kinds", default="kill,stop,cut", help="comma-separated: kill, stop, cut, roll")
    ap.add_argument("--hold", type=float, default=6.0, help="seconds a SIGSTOP or a cut lasts (default 6)")
    ap.add_argument("--producers", type=int, default=4, help="producer threads (default 4)")
    ap.add_argument("--timeout", type=float, default=2.0, help="SDK per-call timeout, seconds (default 2)")
    ap.add_argument("--durability", default="async", choices=("async", "sync"))
    ap.add_argument("--verbose", action="store_true", help="print the slowest producer's failures per fault")
    ap.add_argument("--raft", default="{}", help='cluster.raft overrides as JSON, e.g. \'{"raft_min_timeout": 3}\'')
    args = ap.parse_args()
    if args.load:
        load_main(args)
        return

    import grpc

    from raftmq.v1 import raftmq_pb2 as pb
    from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
    from tests.support.processes import node_specs, start_nodes, stop_all

    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    for k in kinds:
        if k not in ("kill", "stop", "cut", "roll"):
            sys.exit(f"unknown fault kind {k!r}: choose from kill, stop, cut, roll")
    base = Path(tempfile.mkdtemp(prefix="raftmq-failover-"))
    specs = node_specs(base, 3, cluster={"durability": args.durability, "raft": json.loads(args.raft)},
                       store={"mapped_file_size_commit_log": 16 << 20})
    for s in specs:
        s.overrides["node"] = {"log_level": "WARNING"}
    nodes = start_nodes(specs, timeout=120)
    by_addr = {n.grpc_address: n for n in nodes}
    proxy = ConnectProxy()

    def status(n, timeout=3.0):
        return pb_grpc.AdminServiceStub(n.channel()).ClusterStatus(pb.ClusterStatusRequest(), timeout=timeout)

    def current_leader(exclude=()):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for n in nodes:
                if not n.alive or n.spec.id in exclude:
                    continue
                try:
                    st = status(n)
                except grpc.RpcError:
                    continue
                m = next((x for x in st.members if x.id == st.leader_id), None)
                if m is not None and m.grpc_address in by_addr and st.leader_id not in exclude:
                    ready = all(x.role != "unreachable" for x in st.members)
                    if ready:
                        return by_addr[m.grpc_address]
            time.sleep(0.1)
        raise RuntimeError("no healthy leader within 120 s")

    events: list[list] = []
    load = None
    try:
        leader = current_leader()
        pb_grpc.AdminServiceStub(leader.channel()).CreateTopic(
            pb.CreateTopicRequest(topic=pb.TopicConfig(name=TOPIC, write_queue_nums=4, read_queue_nums=4)),
            timeout=30)
        env = {**os.environ, "grpc_proxy": f"http://127.0.0.1:{proxy.port}",
               "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "proto")])}
        env.pop("no_proxy", None)
        env.pop("no_grpc_proxy", None)
        load = subprocess.Popen([sys.executable, __file__, "--load", "--servers",
                                 ",".join(n.grpc_address for n in nodes), "--producers", str(args.producers),
                                 "--timeout", str(args.timeout)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env=env, text=True, cwd=ROOT)
        reader_lock = threading.Lock()

        def read_events() -> None:
            for line in load.stdout:
                with reader_lock:
                    events.append(json.loads(line))

        threading.Thread(target=read_events, daemon=True).start()

        def acked_since(t: float) -> int:
            with reader_lock:
                return sum(1 for e in events if e[0] >= t and e[2] == "ok")

        def wait_flowing(t: float, count: int = 20, timeout: float = 120) -> None:
            deadline = time.monotonic() + timeout
            while acked_since(t) < count:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"writes did not resume within {timeout} s")
                time.sleep(0.05)

        def longest_outage(start: float, end: float) -> float:
            """The longest stretch of [start, end] in which no write was acknowledged."""
            with reader_lock:
                acks = sorted(e[1] for e in events if e[2] == "ok" and start <= e[1] <= end)
            edges = [start, *acks, end]
            return max(b - a for a, b in zip(edges, edges[1:], strict=False))

        def rolling_restart() -> list[tuple[str, bool, float, float]]:
            """Restart every member in turn; per member (id, was leader, write outage, seconds to exit)."""
            out = []
            for n in sorted(nodes, key=lambda n: n.spec.id, reverse=True):
                was_leader = current_leader() is n
                t_term = time.monotonic()
                n.stop(timeout=60)
                exited = time.monotonic() - t_term
                n.start().wait_ready(120)
                current_leader()
                wait_flowing(time.monotonic(), 20)
                out.append((n.spec.id, was_leader, longest_outage(t_term, time.monotonic()), exited))
            return out

        wait_flowing(time.monotonic(), 50)
        results: dict[str, dict] = {}
        for kind in kinds:
            if kind == "roll":
                phase_start = time.monotonic()
                restarts = []
                for _ in range(args.faults):
                    restarts += rolling_restart()
                    if args.verbose:
                        print("  roll: " + ", ".join(f"{i}{' (leader)' if lead else ''} outage {gap:.2f}s "
                                                     f"exit {ex:.2f}s" for i, lead, gap, ex in restarts[-3:]),
                              flush=True)
                with reader_lock:
                    phase = [e for e in events if e[0] >= phase_start]
                lead = [gap for _, was, gap, _ in restarts if was]
                follow = [gap for _, was, gap, _ in restarts if not was]
                exits = [ex for *_, ex in restarts]
                results[kind] = {
                    "rolling_restarts": args.faults, "members_restarted": len(restarts),
                    "leader_outage_median_s": statistics.median(lead) if lead else None,
                    "leader_outage_max_s": max(lead) if lead else None,
                    "follower_outage_median_s": statistics.median(follow) if follow else None,
                    "follower_outage_max_s": max(follow) if follow else None,
                    "exit_median_s": statistics.median(exits), "exit_max_s": max(exits),
                    "ok": sum(e[2] == "ok" for e in phase), "unknown": sum(e[2] == "unknown" for e in phase),
                    "failed": sum(e[2] == "failed" for e in phase),
                }
                r = results[kind]

                def pair(a, b):
                    return "-" if a is None else f"{a:.2f} s / {b:.2f} s"

                print(f"roll  rolling restarts={args.faults} ({len(restarts)} member restarts)  write outage per "
                      f"member, median / max: leader {pair(r['leader_outage_median_s'], r['leader_outage_max_s'])}"
                      f", follower {pair(r['follower_outage_median_s'], r['follower_outage_max_s'])}; SIGTERM -> "
                      f"exit {pair(r['exit_median_s'], r['exit_max_s'])}   ops ok={r['ok']} "
                      f"unknown={r['unknown']} failed={r['failed']}", flush=True)
                continue
            recoveries: list[float] = []
            all_back: list[float] = []
            phase_start = time.monotonic()
            for _ in range(args.faults):
                leader = current_leader()
                t_fault = time.monotonic()
                if kind == "kill":
                    leader.kill()
                elif kind == "stop":
                    leader.freeze()
                else:
                    proxy.blocked.add(leader.grpc_address)
                # time to the first write sent after the fault that was acknowledged
                deadline = t_fault + 120
                first = None
                while first is None and time.monotonic() < deadline:
                    with reader_lock:
                        oks = [e[1] for e in events if e[0] >= t_fault and e[2] == "ok"]
                    first = min(oks) if oks else None
                    if first is None:
                        time.sleep(0.02)
                recoveries.append((first - t_fault) if first is not None else float("inf"))
                # and until EVERY producer has had a write acknowledged that it sent after the fault
                while time.monotonic() < deadline:
                    with reader_lock:
                        firsts = {}
                        for e in events:
                            if e[0] >= t_fault and e[2] == "ok":
                                firsts[e[3]] = min(firsts.get(e[3], e[1]), e[1])
                    if len(firsts) == args.producers:
                        all_back.append(max(firsts.values()) - t_fault)
                        if args.verbose:
                            slowest = max(firsts, key=firsts.get)
                            with reader_lock:
                                errs = [f"{e[0] - t_fault:+.2f}s {e[2]}: {e[4]}" for e in events
                                        if e[3] == slowest and e[0] >= t_fault and e[2] != "ok"]
                            print(f"  {kind}: producer {slowest} back after {firsts[slowest] - t_fault:.2f}s; "
                                  f"its failures: {errs[:12]}", flush=True)
                        break
                    time.sleep(0.02)
                else:
                    all_back.append(float("inf"))
                left = args.hold - (time.monotonic() - t_fault)
                if kind != "kill" and left > 0:
                    time.sleep(left)
                if kind == "kill":
                    leader.start().wait_ready(120)
                elif kind == "stop":
                    leader.thaw()
                else:
                    proxy.blocked.discard(leader.grpc_address)
                current_leader()
                wait_flowing(time.monotonic(), 20)
            with reader_lock:
                phase = [e for e in events if e[0] >= phase_start]
            results[kind] = {
                "faults": len(recoveries),
                "median_s": statistics.median(recoveries), "max_s": max(recoveries),
                "all_producers_median_s": statistics.median(all_back), "all_producers_max_s": max(all_back),
                "ok": sum(e[2] == "ok" for e in phase), "unknown": sum(e[2] == "unknown" for e in phase),
                "failed": sum(e[2] == "failed" for e in phase),
            }
            r = results[kind]
            print(f"{kind:5s} faults={r['faults']}  fault -> first acked write: median {r['median_s']:.2f} s, "
                  f"max {r['max_s']:.2f} s; every producer again: median {r['all_producers_median_s']:.2f} s, "
                  f"max {r['all_producers_max_s']:.2f} s   ops ok={r['ok']} unknown={r['unknown']} "
                  f"failed={r['failed']}",
                  flush=True)
        terms = {n.spec.id: next(m.term for m in status(n, 10).members if m.id == n.spec.id) for n in nodes}
        print(f"settings: producers={args.producers} sdk_timeout={args.timeout}s hold={args.hold}s "
              f"durability={args.durability} raft={args.raft}; final terms {terms}")
        print(json.dumps(results))
    finally:
        if load is not None:
            try:
                load.stdin.close()
                load.wait(30)
            except Exception:  # noqa: BLE001
                load.kill()
        proxy.close()
        for n in nodes:
            if n.proc is not None and n.proc.poll() is None:
                n.thaw()
        stop_all(nodes, kill=True)


if __name__ == "__main__":
    main()

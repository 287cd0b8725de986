"""Scale-out over Raft groups (issue 37, docs/design/scale-out.md): G = 1, 2 and 3 groups of 3 members on this
box, producers through the SDK (which sends each request to its group's leader, round robin over the groups).

For each case it prints the aggregate msgs/s, p99 per request, and the server CPU per message of each group
(its 3 members) and in total; with ``--pin`` the run is repeated with each group's processes pinned with
``taskset`` to the cores it would own on this box (group i on CPU i mod ncpus; producers unpinned). From the CPU
per message it projects G groups on G x k cores: a group can do at most ``k / (its CPU per message)`` and its
leader, one interpreter, at most ``1 / (the leader's CPU per message)``; G groups that each own their cores do G
times that. A 2-core box cannot show linear scaling itself: every group's processes and the producers share the
same two cores, so the measured aggregate stays flat or drops while the CPU per message tells what each group
would do on its own cores. Never fails on time.

    .venv/bin/python bench/scale_bench.py [--groups 1,2,3] [--modes async,sync] [--batch 1,32]
                                          [--producers 8,64] [--seconds 3] [--pin/--no-pin] [--cores-per-group 1,3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto"), str(REPO / "bench")]

import peer_bench  # noqa: E402

from raftmq.store.thread_name import process_cpu_seconds  # noqa: E402
from raftmq.v1 import raftmq_pb2 as pb  # noqa: E402
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc  # noqa: E402
from tests.replication.cluster_util import wait_leader  # noqa: E402
from tests.support.processes import NodeProcess, group_specs, stop_all  # noqa: E402

TOPIC = peer_bench.TOPIC


def _start(base: Path, groups: int, mode: str, pin: bool) -> list[list[NodeProcess]]:
    specs = group_specs(base, groups=groups, members=3, store=peer_bench.BENCH_STORE,
                        node={"log_level": "WARNING"}, cluster={"durability": mode})
    ncpus = os.cpu_count() or 1
    started: list[list[NodeProcess]] = []
    try:
        for gi, group in enumerate(specs):
            wrap = (lambda argv, c=gi % ncpus: ["taskset", "-c", str(c), *argv]) if pin else None
            started.append([NodeProcess(s).start(wrap=wrap) for s in group])
        for group in started:
            for n in group:
                n.wait_ready(180)
            wait_leader(group, timeout=120)
        deadline = time.monotonic() + 60
        while True:  # created in every group at once (the fan-out of issue 37), once each group has a leader
            try:
                pb_grpc.AdminServiceStub(started[0][0].channel()).CreateTopic(pb.CreateTopicRequest(
                    topic=pb.TopicConfig(name=TOPIC, read_queue_nums=peer_bench.QUEUES,
                                         write_queue_nums=peer_bench.QUEUES)), timeout=30)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    except BaseException:
        stop_all([n for g in started for n in g])
        raise
    return started


def _stored(group: list[NodeProcess]) -> int:
    """Messages in the topic's queues of one group (any live member)."""
    for n in group:
        try:
            queues = pb_grpc.MessagingServiceStub(n.channel()).GetQueueOffsets(
                pb.GetQueueOffsetsRequest(topic=TOPIC), timeout=10).queues
            return sum(q.max_offset for q in queues)
        except Exception:
            continue
    return 0


def _probe(groups: list[list[NodeProcess]]):
    """(time, per group: each member's CPU seconds and the messages stored), at the start and end of a case."""
    def probe() -> tuple[float, list[tuple[list[float], int]]]:
        return time.monotonic(), [([process_cpu_seconds(n.proc.pid) for n in g], _stored(g)) for g in groups]
    return probe


def _case(groups: list[list[NodeProcess]], producers: int, batch: int, args) -> dict:
    """One case; per group its CPU per message gross (``us``, leader ``leader_us``) and net of what its members
    burn idle (``net_us``, ``net_leader_us``: Raft heartbeats and ticks, measured while the producers start),
    and the cores it burns idle (``idle_cores``, its leader's ``idle_leader``)."""
    nodes = [n for g in groups for n in g]
    probe = _probe(groups)
    idle_from = probe()
    r = peer_bench.drive_raftmq(nodes, producers, batch, args, [n.proc.pid for n in nodes], probe=probe)
    (t1, first), (t2, second) = r["probe"]
    t0, before = idle_from
    time.sleep(0.5)  # reput catches up with the last acknowledged messages before they are counted
    second = [(cpu, _stored(g)) for (cpu, _), g in zip(second, groups, strict=True)]
    per_group = []
    for (cpu_idle, _), (cpu0, n0), (cpu1, n1) in zip(before, first, second, strict=True):
        msgs = max(n1 - n0, 1)
        used = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
        idle = [max(0.0, (b - a) / max(t1 - t0, 1e-9)) for a, b in zip(cpu_idle, cpu0, strict=True)]
        net = [max(0.0, u - i * (t2 - t1)) for u, i in zip(used, idle, strict=True)]
        lead = max(range(len(used)), key=lambda i: used[i])
        per_group.append({"msgs": n1 - n0, "us": sum(used) / msgs * 1e6, "leader_us": used[lead] / msgs * 1e6,
                          "net_us": sum(net) / msgs * 1e6, "net_leader_us": net[lead] / msgs * 1e6,
                          "idle_cores": sum(idle), "idle_leader": idle[lead]})
    r["groups"] = per_group
    return r


def _ceiling(group: dict, k: int) -> float:
    """msgs/s one group can do on ``k`` cores of its own: the cores its members do not burn idle over its net
    CPU per message, and its leader's one interpreter over the leader's."""
    return min(max(k - group["idle_cores"], 0.0) * 1e6 / max(group["net_us"], 1e-9),
               max(1.0 - group["idle_leader"], 0.0) * 1e6 / max(group["net_leader_us"], 1e-9))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", default="1,2,3")
    ap.add_argument("--modes", default="async,sync")
    ap.add_argument("--batch", default="1,32")
    ap.add_argument("--producers", default="8,64")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--client-procs", type=int, default=2, help="producer processes")
    ap.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                    help="repeat each run with every group pinned (taskset) to the cores it would own")
    ap.add_argument("--cores-per-group", default="1,3", help="k of the projection (G groups on G x k cores)")
    peer_bench.add_sdk_arguments(ap)
    args = ap.parse_args()
    group_counts = [int(x) for x in args.groups.split(",")]
    modes = args.modes.split(",")
    cases = [(int(p), int(b)) for b in args.batch.split(",") for p in args.producers.split(",")]
    pins = [False, True] if args.pin and shutil.which("taskset") else [False]
    results: dict[tuple, dict] = {}
    with tempfile.TemporaryDirectory(prefix="raftmq-scale-") as d:
        for pin in pins:
            for mode in modes:
                for g in group_counts:
                    groups = _start(Path(d) / f"{'pinned' if pin else 'free'}-{mode}-{g}", g, mode, pin)
                    try:
                        for producers, batch in cases:
                            r = results[(pin, mode, g, producers, batch)] = _case(groups, producers, batch, args)
                            print(f"{'pinned' if pin else 'free  '} {mode:5} G={g} {producers:2} x {batch:2}: "
                                  f"{r['msgs_s']:8.0f} msgs/s", flush=True)
                    finally:
                        stop_all([n for grp in groups for n in grp])
    _report(results, pins, modes, group_counts, cases, [int(k) for k in args.cores_per_group.split(",")], args)
    return 0


def _report(results, pins, modes, group_counts, cases, ks, args) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nraftmq, G groups of 3 members on this box ({os.cpu_count()} CPUs shared by every member and the "
          f"producers; load average {load}), producers through the SDK ({args.sdk}), {args.size} B bodies, "
          f"{args.seconds:g} s per case. srv us/msg: server CPU per message, all members of all groups; per "
          "group: its 3 members (leader's in brackets), and net of what they burn idle (Raft heartbeats and "
          "ticks, measured while the producers start). x1: aggregate msgs/s against G=1 of the same case.")
    header = f"{'run':7}{'mode':6}{'case':>8}{'G':>3}{'msgs/s':>10}{'x1':>6}{'p99 ms':>9}{'srv us/msg':>12}  per group"
    for pin in pins:
        print("\n" + header)
        for mode in modes:
            for producers, batch in cases:
                base = results.get((pin, mode, 1, producers, batch))
                for g in group_counts:
                    r = results[(pin, mode, g, producers, batch)]
                    ratio = f"{r['msgs_s'] / base['msgs_s']:.2f}" if base else "-"
                    groups = "  ".join(f"g{i} {x['us']:.0f} ({x['leader_us']:.0f}) net {x['net_us']:.0f}"
                                       for i, x in enumerate(r["groups"]))
                    print(f"{'pinned' if pin else 'free':7}{mode:6}{f'{producers} x {batch}':>8}{g:>3}"
                          f"{r['msgs_s']:>10.0f}{ratio:>6}{r['p99_ms']:>9.1f}{r['server_us']:>12.0f}  {groups}")
    print("\nProjection: G groups on G x k cores of their own, from the CPU measured (each group at most the "
          "cores it does not burn idle over its net CPU per message, its leader at most the rest of one core). "
          "'vs G x G=1': the projected G-group figure against G times the one-group figure projected the same way "
          "from the G=1 run.")
    print(f"{'run':7}{'mode':6}{'case':>8}{'k':>3}" + "".join(f"{f'G={g}':>12}{'vs G x G=1':>12}" for g in group_counts))
    for pin in pins:
        for mode in modes:
            for producers, batch in cases:
                one = results.get((pin, mode, 1, producers, batch))
                for k in ks:
                    row = f"{'pinned' if pin else 'free':7}{mode:6}{f'{producers} x {batch}':>8}{k:>3}"
                    for g in group_counts:
                        r = results[(pin, mode, g, producers, batch)]
                        projected = sum(_ceiling(x, k) for x in r["groups"])
                        if one:
                            versus = projected / (g * _ceiling(one["groups"][0], k))
                            row += f"{projected:>12.0f}{versus:>12.2f}"
                        else:
                            row += f"{projected:>12.0f}{'-':>12}"
                    print(row)
    print(f"\nThis box has {os.cpu_count()} CPUs: it cannot show linear scaling - with 2 or 3 groups every group's "
          "members and the producers share the same cores, so the measured aggregate is bounded by the box, not "
          "by a leader. The projection is what the measured CPU per message gives each group on cores of its own.")


if __name__ == "__main__":
    sys.exit(main())

"""Power cuts of a 3-member group under load, each member's data directory on its own lossy_fs mount.

Issue 32, found with this technique from the outside: under ``async`` every member cut its flushed commit log
back to nothing (a never-synced side file trusted over the data), and under ``sync`` a member stayed stuck while
it said it was ready. Here every cycle SIGKILLs members in the middle of four producers' writes, drops every
write they never synced (``strict``: a name change needs its directory's fsync; ``any-fsync``: any fsync keeps
them, as ext4 roughly does), restarts them, and checks (docs/design/durability.md):

* ``sync``: every acknowledged message is back at its acknowledged queue and offset, on every member;
* ``async``, all members cut: nothing is lost that a majority had made durable (read back from each member's
  disk right after the cut, before anything restarts: the records its applied index and Raft log vouch for),
  survivors are where they were acknowledged, and the loss window (acknowledgement to cut) is printed;
* the leader alone cut: nothing acknowledged is lost, in either mode;
* no member is ready with a store behind what the group certainly still has;
* the term and vote each member had when it was killed are what its disk kept (no second vote in a term);
* every member catches up and ``raftmq cluster check`` proves the replicas identical.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from pysyncobj import pickle as sopickle

from raftmq.replication import snapshot
from raftmq.replication.pysyncobj_patches import journal_span
from raftmq.store.message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, RecordStatus, decode_record
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.client.test_cli_e2e import _env
from tests.replication.cluster_util import (
    Producers,
    create_topic,
    read_topic,
    wait_applied_equal,
    wait_leader,
)
from tests.support.lossy_fs import ANY_FSYNC, STRICT, cut_together
from tests.support.processes import REPO_ROOT, TINY_STORE, NodeProcess, node_specs, stop_all

TOPIC, QUEUES = "PowerCut", 4
# default flush interval (500 ms): the async window measured here is the one users get
STORE = {**TINY_STORE, "mapped_file_size_commit_log": 1 << 20, "flush_interval_commit_log": 500}
RAFT = {"compaction_min_entries": 300, "compaction_min_time": 5.0, "put_timeout_s": 6.0}
ACKS_BEFORE_CUT = 1500
FRAME = struct.Struct(">QQQ")  # replication.applied_index: Raft index, commit-log start and end
CYCLES = 2  # the second cut hits a store recovered from the first


def vouched_keys(data_dir: Path) -> set[str]:
    """UNIQ_KEYs a member's disk kept *and its Raft state vouches for* (read-only, before it restarts): whole records
    below the end of the last applied frame whose entry its journal (or snapshot) still holds. That is what the
    flush barrier makes durable (docs/design/durability.md); bytes the kernel wrote back beyond it may be there
    too, but no log on this member can prove them, so the group may legitimately have lost them."""
    raft = data_dir / "raft"
    span = journal_span(str(raft / "raft.journal"))
    reach = span.last[0] if span is not None and span.last is not None else 0
    try:  # read, not exists-then-read: a name the cut took can still be in the kernel's dentry cache
        reach = max(reach, snapshot.read_file(str(raft / "raft.dump"))[0].raft_index)
    except FileNotFoundError:
        pass
    try:
        frames = (raft / "applied.idx").read_bytes()
    except FileNotFoundError:
        frames = b""
    end = 0
    for off in range(0, len(frames) - len(frames) % FRAME.size, FRAME.size):
        index, _start, stop = FRAME.unpack_from(frames, off)
        if index <= reach:
            end = stop
    keys: set[str] = set()
    for seg in sorted((data_dir / "commitlog").glob("0*")):
        buf = seg.read_bytes()
        base = int(seg.name)
        pos = 0
        while pos + 8 <= len(buf) and base + pos < end:
            r = decode_record(buf, pos, check_crc=True)
            if r.status != RecordStatus.OK or r.message is None or base + pos + r.size > end:
                break  # the end-of-segment blank record, or the end of what is vouched for
            keys.add(r.message.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""))
            pos += r.size
    return keys


def term_and_vote(data_dir: Path) -> tuple[int, str | None]:
    meta = sopickle.loads((data_dir / "raft" / "raft.journal.meta").read_bytes())
    return meta.get("currentTerm", 0), meta.get("votedForNodeId")


def as_if_rebooted(data_dir: Path) -> None:
    """A real power cut reboots the machine: what was written before it is older than the boot, which tells the
    store that the page cache was lost (abnormal recovery's "machine may have restarted" path, which trusts less
    of what it finds). The box did not reboot here, so the store's marker is dated back to before the boot."""
    with open("/proc/stat", encoding="ascii") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    marker = data_dir / "abort"
    if marker.exists():
        os.utime(marker, (boot - 60, boot - 60))


def positions(node: NodeProcess) -> dict[str, tuple[int, int]]:
    return {key: (q, qo) for q, msgs in read_topic(node, TOPIC, QUEUES).items() for qo, key, _ in msgs}


def applied_offset(node: NodeProcess) -> int:
    """Asked on a channel of its own: the process-wide one to this address may still be in the reconnect backoff
    that the producers' calls to the killed member started."""
    with grpc.insecure_channel(node.grpc_address, options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
        st = pb_grpc.AdminServiceStub(ch).ClusterStatus(pb.ClusterStatusRequest(), timeout=10, wait_for_ready=True)
    return next(m.applied_offset for m in st.members if m.id == node.spec.id)


def restart_checking_readiness(nodes: list[NodeProcess], must_hold: int) -> None:
    """Start ``nodes`` and watch each one's /ready: the moment it says ready, it must already have applied the
    commit log up to ``must_hold`` (what the group certainly still has), never less."""
    for n in nodes:
        n.start()
    pending = list(nodes)
    deadline = time.monotonic() + 180
    while pending:
        assert time.monotonic() < deadline, "not ready in time: " + "; ".join(n.log_tail(5) for n in pending)
        for n in list(pending):
            assert n.alive, f"{n.spec.id} exited: {n.log_tail(20)}"
            try:
                code, body = n.http_get("/ready")
            except OSError:  # not listening yet
                continue
            if code == 200 and f"node={n.spec.id} pid={n.proc.pid}" in body:  # this process, not a port's reuser
                have = applied_offset(n)
                assert have >= must_hold, f"{n.spec.id} ready with its store at {have}, behind {must_hold}"
                pending.remove(n)
        time.sleep(0.05)


def cluster_check(node: NodeProcess) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftmq.client", "cluster", "check", "-s", node.grpc_address],
                          capture_output=True, text=True, timeout=300, env=_env(), cwd=REPO_ROOT)


@pytest.mark.parametrize(("durability", "mode", "cut"), [
    ("sync", STRICT, "all"), ("sync", ANY_FSYNC, "all"), ("async", STRICT, "all"), ("async", ANY_FSYNC, "all"),
    ("sync", STRICT, "leader"), ("async", ANY_FSYNC, "leader"),
])
def test_power_cut_under_load(tmp_path, lossy_mount, durability, mode, cut):
    specs = node_specs(tmp_path, 3, cluster={"durability": durability, "raft": RAFT}, store=STORE)
    mounts = {s.id: lossy_mount(s.data_dir, mode) for s in specs}
    nodes = [NodeProcess(s) for s in specs]
    try:
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_ready(120)
        create_topic(nodes, TOPIC, QUEUES)
        for cycle in range(CYCLES):
            power_cut_cycle(nodes, mounts, durability, mode, cut, f"C{cycle}-")
    finally:
        stop_all(nodes, kill=True)


def power_cut_cycle(nodes: list[NodeProcess], mounts: dict, durability: str, mode: str, cut: str,
                    prefix: str) -> None:
    leader = wait_leader(nodes)
    victims = nodes if cut == "all" else [leader]
    producers = Producers(nodes, TOPIC, n=4, body_size=500, queues=QUEUES, prefix=prefix).start()
    try:
        producers.wait_acked(ACKS_BEFORE_CUT, timeout=300)
        for n in victims:
            n.kill()
        cut_at = time.monotonic()
        votes = {n.spec.id: term_and_vote(n.spec.data_dir) for n in victims}
        reports = cut_together([mounts[n.spec.id] for n in victims])
        if cut == "leader":
            time.sleep(2.0)  # the others elect a leader and go on taking writes
    finally:
        log = producers.stop()
    acked = {key: (q, qo) for key, (q, qo, _) in log.acked.items()}
    durable = {n.spec.id: vouched_keys(n.spec.data_dir) for n in victims}
    for n in victims:
        as_if_rebooted(n.spec.data_dir)
    for n in victims:  # what a member had voted is what its disk kept
        assert term_and_vote(n.spec.data_dir) == votes[n.spec.id], n.spec.id
    if cut == "all":
        on_majority = {k for k in acked if sum(k in d for d in durable.values()) >= 2}
    else:
        on_majority = set(acked)  # two members never lost power: they hold every acknowledged message
    must_hold = max((log.acked[k][2] for k in on_majority), default=0)
    restart_checking_readiness(victims, must_hold)

    wait_leader(nodes)
    wait_applied_equal(nodes, timeout=120)
    r = cluster_check(nodes[0])
    assert r.returncode == 0, (r.stdout, r.stderr)
    for n in nodes:
        after = positions(n)
        moved = {k: (acked[k], after[k]) for k in acked if k in after and after[k] != acked[k]}
        assert not moved, f"{n.spec.id}: acknowledged messages at other offsets: {list(moved.items())[:5]}"
        lost = {k for k in acked if k not in after}
        if durability == "sync" or cut == "leader":
            assert not lost, f"{n.spec.id} lost {len(lost)} of {len(acked)} acknowledged: {sorted(lost)[:5]}"
        else:
            assert not lost & on_majority, f"{n.spec.id} lost messages durable on a majority: " \
                                           f"{sorted(lost & on_majority)[:5]}"
            ages = sorted(cut_at - log.acked_at[k] for k in lost)
            print(f"{durability}/{mode} {prefix}: {len(lost)} of {len(acked)} acknowledged lost at the cut "
                  f"(unsynced bytes dropped: {sum(rep.unsynced_bytes for rep in reports)}); window: "
                  f"{ages[-1] if ages else 0:.3f} s before the cut at most")

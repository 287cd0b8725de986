"""Helpers for the replication suite: find the leader, produce with redirects, read every replica back,
compare store files. Everything talks to real node processes over loopback gRPC (tests/support/processes.py).
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.support.processes import TINY_STORE, NodeProcess

LEADER_KEY = "x-raftmq-leader"
REDIRECT = (("x-raftmq-redirect", "1"),)  # a follower answers with the leader hint instead of forwarding


def messaging(node: NodeProcess) -> pb_grpc.MessagingServiceStub:
    return pb_grpc.MessagingServiceStub(node.channel())


def admin(node: NodeProcess) -> pb_grpc.AdminServiceStub:
    return pb_grpc.AdminServiceStub(node.channel())


def wait_leader(nodes: list[NodeProcess], timeout: float = 60.0, exclude: set[str] = frozenset()) -> NodeProcess:
    """The member every live node names as leader, once it answers ClusterStatus as ready."""
    deadline = time.monotonic() + timeout
    by_id = {n.spec.id: n for n in nodes}
    last = ""
    while time.monotonic() < deadline:
        for n in nodes:
            if not n.alive or n.spec.id in exclude:
                continue
            try:
                st = admin(n).ClusterStatus(pb.ClusterStatusRequest(), timeout=5)
            except grpc.RpcError as e:
                last = f"{n.spec.id}: {e.code().name}"
                continue
            lid = st.leader_id
            if lid and lid in by_id and lid not in exclude and by_id[lid].alive:
                try:
                    st2 = admin(by_id[lid]).ClusterStatus(pb.ClusterStatusRequest(), timeout=5)
                except grpc.RpcError:
                    continue
                me = [m for m in st2.members if m.id == lid]
                if st2.leader_id == lid and me and me[0].role == "leader":
                    return by_id[lid]
            last = f"{n.spec.id} says leader={lid!r}"
        time.sleep(0.2)
    raise TimeoutError(f"no leader within {timeout}s ({last})")


def create_topic(nodes: list[NodeProcess], name: str, queues: int = 4) -> None:
    deadline = time.monotonic() + 60
    while True:
        leader = wait_leader(nodes)
        try:
            admin(leader).CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(
                name=name, read_queue_nums=queues, write_queue_nums=queues)), timeout=15)
            return
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.ALREADY_EXISTS:
                return
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@dataclass
class ProduceLog:
    """What producers were told: acked uniq key -> (queue id, queue offset, physical offset); unknown outcomes."""

    acked: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    acked_at: dict[str, float] = field(default_factory=dict)  # key -> time.monotonic() of its acknowledgement
    unknown: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Producers:
    """``n`` threads, each sending 1-message puts to the leader it currently believes in, following redirects.

    A put whose outcome is unknown (UNKNOWN / DEADLINE_EXCEEDED / connection lost mid-call) is recorded as such and
    NOT retried, so every acked key was acknowledged exactly once and every other key is either unknown or never
    accepted. Keys are UNIQ_KEYs, so a reader can tell which message is which.
    """

    def __init__(self, nodes: list[NodeProcess], topic: str, n: int = 4, body_size: int = 200,
                 queues: int = 4, prefix: str = "P"):
        self.prefix = prefix
        self.nodes = nodes
        self.topic = topic
        self.n = n
        self.body = b"x" * body_size
        self.queues = queues
        self.log = ProduceLog()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.sent = 0

    def start(self) -> Producers:
        for i in range(self.n):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> ProduceLog:
        self._stop.set()
        for t in self._threads:
            t.join(60)
        return self.log

    def wait_acked(self, count: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.log.acked) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(self.log.acked)} of {count} acked; errors: {self.log.errors[-5:]}")
            time.sleep(0.05)

    def _run(self, i: int) -> None:
        by_addr = {n.grpc_address: n for n in self.nodes}
        target = self.nodes[i % len(self.nodes)]
        seq = 0
        while not self._stop.is_set():
            key = f"{self.prefix}{i:02d}-{seq:07d}"
            msg = pb.Message(topic=self.topic, queue_id=seq % self.queues, body=self.body + key.encode(),
                             uniq_key=key, keys=[key])
            while not self._stop.is_set():
                if not target.alive:
                    target = next((n for n in self.nodes if n.alive), target)
                try:
                    r = messaging(target).SendMessage(pb.SendMessageRequest(message=msg), timeout=10)
                    with self.log.lock:
                        self.log.acked[key] = (r.result.queue_id, r.result.queue_offset, r.result.physical_offset)
                        self.log.acked_at[key] = time.monotonic()
                    break
                except ValueError:  # the test killed this node and closed its channel before the call: not sent
                    time.sleep(0.05)
                    continue
                except grpc.RpcError as e:
                    code = e.code()
                    if code == grpc.StatusCode.FAILED_PRECONDITION:
                        hint = dict(e.trailing_metadata() or ()).get(LEADER_KEY)
                        target = by_addr.get(hint) or self._other(target)
                        time.sleep(0.02)
                        continue
                    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED) and \
                            not _maybe_sent(e):
                        target = self._other(target) if code == grpc.StatusCode.UNAVAILABLE else target
                        time.sleep(0.05)
                        continue
                    with self.log.lock:
                        self.log.unknown.add(key)
                        self.log.errors.append(f"{key}: {code.name} {e.details()}")
                    target = self._other(target)
                    break
            seq += 1

    def _other(self, cur: NodeProcess) -> NodeProcess:
        alive = [n for n in self.nodes if n.alive and n is not cur]
        return alive[int(time.monotonic() * 1000) % len(alive)] if alive else cur


def _maybe_sent(e: grpc.RpcError) -> bool:
    """UNAVAILABLE from the server says 'not accepted'; UNAVAILABLE from a dropped connection may hide a write."""
    details = (e.details() or "").lower()
    return any(s in details for s in ("socket closed", "connection reset", "broken pipe", "stream removed",
                                       "goaway", "eof", "endpoint closing"))


def read_queue(node: NodeProcess, topic: str, queue_id: int) -> list[tuple[int, str, int]]:
    """Every message of one queue on ``node`` (its own replica): (queue offset, uniq key, physical offset)."""
    out = []
    offset = 0
    stub = messaging(node)
    while True:
        r = stub.PullMessage(pb.PullMessageRequest(topic=topic, queue_id=queue_id, offset=offset, max_count=256),
                             timeout=15)
        if r.status == pb.FOUND:
            for m in r.messages:
                out.append((m.queue_offset, m.uniq_key, m.physical_offset))
            offset = r.next_offset
            continue
        if r.status == pb.OFFSET_TOO_SMALL:
            offset = r.next_offset
            continue
        return out


def read_topic(node: NodeProcess, topic: str, queues: int) -> dict[int, list[tuple[int, str, int]]]:
    return {q: read_queue(node, topic, q) for q in range(queues)}


def wait_applied_equal(nodes: list[NodeProcess], timeout: float = 60.0) -> int:
    """Wait until every live member reports the same applied commit-log offset and nothing left to dispatch."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        seen = []
        for n in nodes:
            try:
                st = admin(n).ClusterStatus(pb.ClusterStatusRequest(), timeout=5)
            except grpc.RpcError:
                seen = None
                break
            me = [m for m in st.members if m.id == n.spec.id][0]
            seen.append((me.applied_offset, me.dispatch_behind_bytes))
        last = seen
        if seen and len({s[0] for s in seen}) == 1 and all(s[1] == 0 for s in seen):
            return seen[0][0]
        time.sleep(0.2)
    raise TimeoutError(f"replicas did not converge: {last}")


def store_digests(store_dir: Path, index: bool = True) -> dict[str, str]:
    """sha256 of every commit-log and consume-queue file, and (``index``) of the index files' contents in name
    order (index file names are creation timestamps, which differ between replicas; their contents must not)."""
    out: dict[str, str] = {}
    root = Path(store_dir)
    for sub in ("commitlog", "consumequeue"):
        base = root / sub
        for p in sorted(base.rglob("*")) if base.exists() else []:
            if p.is_file():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    idx = root / "index"
    for i, p in enumerate(sorted(idx.iterdir()) if idx.exists() and index else []):
        if p.is_file():
            out[f"index#{i}"] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def index_keys(store_dir: Path) -> set[tuple[int, int]]:
    """(key hash, physical offset) of every IndexFile entry: what a key query can find, duplicates ignored."""
    out: set[tuple[int, int]] = set()
    slots = TINY_STORE["max_hash_slot_num"]
    for p in sorted((Path(store_dir) / "index").iterdir()):
        data = p.read_bytes()
        (count,) = struct.unpack_from(">i", data, 36)
        base = 40 + 4 * slots
        for i in range(1, count):
            h, phy, _, _ = struct.unpack_from(">iqii", data, base + 20 * i)
            out.add((h, phy))
    return out


def dir_size(path: str | os.PathLike) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


def lead_by(nodes: list[NodeProcess], node_id: str, timeout: float = 60.0) -> NodeProcess:
    """Make member ``node_id`` the leader (a leadership transfer when another one leads) and return it."""
    deadline = time.monotonic() + timeout
    while True:
        leader = wait_leader(nodes, timeout=max(1.0, deadline - time.monotonic()))
        if leader.spec.id == node_id:
            return leader
        try:
            admin(leader).TransferLeader(pb.TransferLeaderRequest(to_id=node_id), timeout=10)
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)

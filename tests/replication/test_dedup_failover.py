"""Issue 40 with real processes: the SDK re-sends every unknown outcome with the same UNIQ_KEYs while the leader is
SIGKILLed or SIGSTOPped in the middle of single and batched sends, and every acknowledged message is stored exactly
once (UNIQ_KEYs counted across the whole topic, on every member); a restart in the middle of the window, and a
member rebuilt from its peers then made leader, still recognise a retry; the cap gives its metric and stores a
retry of an evicted id again, as documented (docs/design/deduplication.md)."""

from __future__ import annotations

import collections
import shutil
import threading
import time

import pytest

from raftmq.client import Admin, Producer, errors
from raftmq.v1 import raftmq_pb2 as pb
from tests.replication.cluster_util import (
    lead_by,
    messaging,
    read_topic,
    wait_applied_equal,
    wait_leader,
)
from tests.replication.tcp_proxy import PausableProxy
from tests.support.metrics import samples
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

QUEUES = 4
BATCH = 8


class Load:
    """Producer threads through the SDK (its defaults: an unknown outcome is re-sent with the same UNIQ_KEYs until
    answered or ``retry_timeout``): half send single messages, half batches of ``BATCH``."""

    def __init__(self, servers: list[str], topic: str, threads: int = 4):
        self.servers = servers
        self.topic = topic
        self.acked: collections.Counter[str] = collections.Counter()  # UNIQ_KEY -> acknowledgements
        self.duplicates = 0
        self.unknown: list[str] = []
        self.failed: list[str] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(120)

    @property
    def count(self) -> int:
        return sum(self.acked.values())

    def wait_more(self, n: int, what: str, timeout: float = 180.0) -> None:
        target = self.count + n
        wait_for(lambda: self.count >= target, f"{n} more acknowledgements {what} (failed: {self.failed[-3:]})",
                 timeout=timeout)

    def _run(self, i: int) -> None:
        with Producer(self.servers, timeout=3, retry_timeout=90) as p:
            seq = 0
            while not self._stop.is_set():
                try:
                    if i % 2:
                        results = p.send_batch(self.topic, [f"{i}-{seq}-{k}" for k in range(BATCH)],
                                               queue_id=seq % QUEUES)
                    else:
                        results = [p.send(self.topic, f"{i}-{seq}")]
                except errors.UnknownOutcomeError as e:
                    with self.lock:
                        self.unknown.extend(e.uniq_keys)
                    continue
                except errors.RaftmqError as e:
                    with self.lock:
                        self.failed.append(str(e))
                    time.sleep(0.1)
                    continue
                with self.lock:
                    for r in results:
                        self.acked[r.uniq_key] += 1
                        self.duplicates += r.duplicate
                seq += 1


def stored_uniq_keys(node, topic: str, queues: int = QUEUES) -> collections.Counter[str]:
    return collections.Counter(key for q in read_topic(node, topic, queues).values() for _o, key, _p in q)


def check_exactly_once(nodes, load: Load) -> None:
    """Every acknowledged message once on every member, and no UNIQ_KEY stored twice at all."""
    live = [n for n in nodes if n.alive]
    wait_applied_equal(live, timeout=120)
    for node in live:
        stored = stored_uniq_keys(node, load.topic)
        twice = {k: c for k, c in stored.items() if c > 1}
        assert not twice, f"{node.spec.id}: {len(twice)} UNIQ_KEYs stored more than once, e.g. {list(twice)[:3]}"
        missing = [k for k in load.acked if k not in stored]
        assert not missing, f"{node.spec.id}: {len(missing)} acknowledged messages missing, e.g. {missing[:3]}"
        # an acknowledgement is given to the first send or to a re-send, never to two different stored copies
        assert all(c == 1 for c in load.acked.values()), "a UNIQ_KEY was acknowledged twice"


def _metric(node, name: str) -> float:
    return sum(s.value for s in samples(node) if s.name == name)


def _dup_total(node) -> float:
    return sum(s.value for s in samples(node) if s.name == "raftmq_dedup_duplicates_total")


@pytest.mark.parametrize("fault", ["sigkill", "sigstop"])
def test_leader_faults_under_retrying_sdk_load_store_every_acknowledged_message_once(tmp_path, fault):
    with running_nodes(tmp_path, 3) as nodes:
        everyone = [n.grpc_address for n in nodes]
        with Admin(everyone) as admin:
            admin.create_topic("Once", queues=QUEUES)
        with Load(everyone, "Once") as load:
            for _round in range(2):
                load.wait_more(200, "before the fault")
                leader = wait_leader(nodes)
                if fault == "sigkill":
                    leader.kill()
                    load.wait_more(200, "after the leader was killed")
                    leader.start().wait_ready(120)
                else:
                    leader.freeze()
                    time.sleep(6.0)  # past the election timeout: a new leader takes over meanwhile
                    leader.thaw()
                load.wait_more(100, "after the fault")
        print(f"{fault}: acknowledged {load.count}, duplicates avoided {load.duplicates}, unknown "
              f"{len(load.unknown)}, failed {len(load.failed)}; duplicates answered by leaders "
              f"{sum(_dup_total(n) for n in nodes if n.alive)}, stale batches dropped "
              f"{max(_metric(n, 'raftmq_raft_stale_batches_dropped_total') for n in nodes if n.alive)}")
        assert not load.unknown, f"the SDK gave up on {len(load.unknown)} sends within its retry_timeout"
        check_exactly_once(nodes, load)


def test_client_cuts_mid_call_with_the_sdk_retrying_store_every_message_once(tmp_path):
    """The connection between a producer and the cluster stalls (a paused TCP proxy: the request may have
    arrived, the answer does not) while it sends single messages and batches; its re-sends after each deadline
    are recognised."""
    with running_nodes(tmp_path, 3) as nodes:
        everyone = [n.grpc_address for n in nodes]
        with Admin(everyone) as admin:
            admin.create_topic("Cut", queues=QUEUES)
        entry = nodes[0]   # a member forwards to the leader when it is not the leader itself
        proxy = PausableProxy(int(entry.grpc_address.rsplit(":", 1)[1]))
        try:
            with Load([f"127.0.0.1:{proxy.port}"], "Cut", threads=2) as load:
                for _cut in range(4):
                    load.wait_more(100, "before the cut")
                    proxy.pause()
                    time.sleep(4.0)  # beyond the SDK's 3 s deadline: the calls in flight end unknown
                    proxy.resume()
                load.wait_more(100, "after the last cut")
        finally:
            proxy.close()
        print(f"client cuts: acknowledged {load.count}, duplicates avoided {load.duplicates}, unknown "
              f"{len(load.unknown)}, failed {len(load.failed)}")
        assert not load.unknown, f"the SDK gave up on {len(load.unknown)} sends within its retry_timeout"
        check_exactly_once(nodes, load)


def _send(node, topic: str, uniq: str, body: bytes = b"x") -> pb.SendResult:
    """One unary send to ``node`` (a follower forwards it to the leader)."""
    m = pb.Message(topic=topic, body=body, queue_id=0, uniq_key=uniq)
    return messaging(node).SendMessage(pb.SendMessageRequest(message=m), timeout=30).result


def _place(r: pb.SendResult) -> tuple:
    return r.msg_id, r.queue_id, r.queue_offset, r.physical_offset, r.store_timestamp


def test_a_restarted_member_and_a_member_rebuilt_from_its_peers_then_leader_recognise_a_retry(tmp_path):
    with running_nodes(tmp_path, 3) as nodes:
        with Admin([n.grpc_address for n in nodes]) as admin:
            admin.create_topic("Kept", queues=QUEUES)
        first = {k: _send(nodes[0], "Kept", k) for k in ("0A000001000000000000000000000001",
                                                         "0A000001000000000000000000000002")}
        k1, k2 = first
        # every member restarts in the middle of the window (the window is rebuilt from the commit log)
        for n in nodes:
            n.restart(120)
        wait_leader(nodes)
        again = _send(nodes[1], "Kept", k1)
        assert again.duplicate and _place(again) == _place(first[k1])

        # a member wiped and rebuilt from its peers (start-up copy), then made leader
        victim = next(n for n in nodes if n is not wait_leader(nodes))
        victim.kill()
        shutil.rmtree(victim.spec.data_dir)
        victim.start().wait_ready(180)
        wait_applied_equal(nodes, timeout=120)
        lead_by(nodes, victim.spec.id, timeout=120)
        again = _send(victim, "Kept", k2)
        assert again.duplicate and _place(again) == _place(first[k2])
        assert _dup_total(victim) >= 1
        wait_applied_equal(nodes, timeout=120)
        for n in nodes:
            stored = stored_uniq_keys(n, "Kept")
            assert stored[k1] == 1 and stored[k2] == 1, (n.spec.id, stored)


def test_the_cap_evicts_early_counts_it_and_a_retry_of_an_evicted_id_is_stored_again(tmp_path):
    with running_nodes(tmp_path, 3, node={"dedup_max_entries": 5}) as nodes:
        with Admin([n.grpc_address for n in nodes]) as admin:
            admin.create_topic("Capped", queues=1)
        keys = [f"0A0000010000000000000000000000{i:02X}" for i in range(8)]
        first = [_send(nodes[0], "Capped", k) for k in keys]
        assert not any(r.duplicate for r in first)
        recent = _send(nodes[0], "Capped", keys[-1])
        assert recent.duplicate and _place(recent) == _place(first[-1])     # still within the cap
        evicted = _send(nodes[0], "Capped", keys[0])                        # forgotten early: stored again
        assert not evicted.duplicate and evicted.physical_offset > first[-1].physical_offset
        wait_applied_equal(nodes, timeout=60)
        for n in nodes:
            metrics = {s.name: s.value for s in samples(n) if s.name.startswith("raftmq_dedup_")}
            assert metrics["raftmq_dedup_early_evictions_total"] >= 3, (n.spec.id, metrics)
            assert metrics["raftmq_dedup_window_entries"] <= 5, (n.spec.id, metrics)
            assert stored_uniq_keys(n, "Capped", 1)[keys[0]] == 2      # the documented weakening, visible

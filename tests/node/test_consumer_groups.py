"""The consumer-group registry (membership, expiry, generations) and the queue allocation both sides run."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftmq.client.consumer_group import allocate_averagely as client_allocate
from raftmq.node.consumer_groups import EXPIRY_FACTOR, ConsumerGroupRegistry, allocate_averagely


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("queues", "clients", "expected"), [
    (4, ["a"], {"a": [0, 1, 2, 3]}),
    (4, ["a", "b"], {"a": [0, 1], "b": [2, 3]}),
    (5, ["a", "b"], {"a": [0, 1, 2], "b": [3, 4]}),
    (8, ["c", "a", "b"], {"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7]}),
    (2, ["a", "b", "c"], {"a": [0], "b": [1], "c": []}),
    (0, ["a"], {"a": []}),
])
def test_allocation_matches_rocketmq_averagely(queues, clients, expected):
    for cid, want in expected.items():
        assert allocate_averagely(range(queues), clients, cid) == want
        assert client_allocate(range(queues), clients, cid) == want


@given(st.integers(0, 40), st.sets(st.text("abcdef@0123456789", min_size=1, max_size=6), min_size=1, max_size=12))
def test_allocation_is_disjoint_covers_every_queue_and_agrees_with_the_client(nqueues, clients):
    ids = list(clients)
    seen: list[int] = []
    for cid in ids:
        mine = allocate_averagely(list(range(nqueues)), ids, cid)
        assert mine == client_allocate(list(reversed(range(nqueues))), list(reversed(ids)), cid)
        seen += mine
    assert sorted(seen) == list(range(nqueues))
    assert allocate_averagely(list(range(nqueues)), ids, "not-a-member") == []


def test_members_expire_after_three_intervals_and_generation_moves_on_change():
    clock = FakeClock()
    reg = ConsumerGroupRegistry(clock)
    m = reg.heartbeat("g", "T", "b", 1.0)
    assert (m.client_ids, m.generation) == (["b"], 1)
    m = reg.heartbeat("g", "T", "a", 1.0)
    assert (m.client_ids, m.generation) == (["a", "b"], 2)
    assert reg.heartbeat("g", "T", "a", 1.0).generation == 2, "a repeated heartbeat is no change"
    assert reg.heartbeat("g", "Other", "a", 1.0).client_ids == ["a"], "membership is per topic"

    clock.now += EXPIRY_FACTOR * 1.0 - 0.01
    reg.heartbeat("g", "T", "a", 1.0)
    assert sorted(reg.members("g")) == ["Other", "T"]
    assert [x.client_id for x in reg.members("g")["T"]] == ["a", "b"]
    clock.now += 0.02  # b's last heartbeat is now 3 intervals old
    m = reg.heartbeat("g", "T", "a", 1.0)
    assert (m.client_ids, m.generation) == (["a"], 3)
    assert reg.group_sizes() == {"g": 1}  # "Other" expired too (a's heartbeat there is as old as b's)


def test_unregister_is_immediate_and_idempotent():
    reg = ConsumerGroupRegistry(FakeClock())
    reg.heartbeat("g", "T", "a")
    reg.heartbeat("g", "T", "b")
    m = reg.unregister("g", "T", "a")
    assert (m.client_ids, m.generation) == (["b"], 3)
    assert reg.unregister("g", "T", "a").generation == 3
    assert reg.unregister("g", "T", "b").client_ids == []
    assert reg.members("g") == {} and reg.group_sizes() == {}


def test_default_interval_is_used_for_zero_and_tiny_intervals_are_bounded():
    clock = FakeClock()
    reg = ConsumerGroupRegistry(clock)
    reg.heartbeat("g", "T", "default")  # 0: 5 s -> 15 s expiry
    reg.heartbeat("g", "T", "tiny", 0.000001)  # bounded below
    clock.now += 14.9
    assert [m.client_id for m in reg.members("g")["T"]] == ["default"]
    clock.now += 0.2
    assert reg.members("g") == {}


def test_concurrent_heartbeats_all_register():
    reg = ConsumerGroupRegistry()

    def beat(i: int) -> None:
        for _ in range(50):
            reg.heartbeat("g", "T", f"c{i}", 5.0)

    threads = [threading.Thread(target=beat, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [m.client_id for m in reg.members("g")["T"]] == sorted(f"c{i}" for i in range(8))
    assert reg.generation("g", "T") == 8


def test_a_new_term_forgets_every_member():
    reg = ConsumerGroupRegistry(FakeClock())
    reg.start_term(3)
    reg.heartbeat("g", "T", "a")
    reg.start_term(3)  # same term: still leading since the heartbeat
    assert list(reg.members("g")) == ["T"]
    before = reg.generation("g", "T")
    reg.start_term(5)  # led again after an election: members may have moved meanwhile
    assert reg.members("g") == {} and reg.generation("g", "T") > before
    assert reg.heartbeat("g", "T", "b").client_ids == ["b"]

"""A withheld commit-log tail (``MessageStore.withhold_tail`` / ``adopt_batch`` / ``adopt_commit_log_raw``).

After a power cut a replica's commit log may hold records beyond the last Raft entry it knows it applied.
Replication keeps them but withholds them (consume queues, index and reads stop before them) until replayed
entries prove them byte for byte; a differing entry gets None and the caller cuts. The batches come from
test_deterministic_apply's leader (rolls, blank records, multi-queue batches, IPv6 hosts)."""

from __future__ import annotations

from raftmq.replication.catch_up import next_chunk_offset
from raftmq.store import Message, MessageStore, StoreConfig
from tests.store.store_helpers import read_commit_log_files, wait_dispatched
from tests.store.test_deterministic_apply import GEOMETRY, T0, leader_batches


def stores(tmp_path):
    leader = MessageStore(StoreConfig(root_dir=str(tmp_path / "leader"), **GEOMETRY))
    leader.open()
    replica = MessageStore(StoreConfig(root_dir=str(tmp_path / "replica"), **GEOMETRY))
    replica.open()
    return leader, replica


def queue_heads(st: MessageStore) -> dict[str, int]:
    return {f"{t}-{q}": st.max_offset_in_queue(t, q) for t in ("DetA", "DetB") for q in range(3)}


def test_withheld_records_are_not_served_and_replayed_batches_adopt_them_unchanged(tmp_path):
    leader, st = stores(tmp_path)
    try:
        batches = leader_batches(leader)
        ends = []
        for b in batches:
            st.apply_batch(b)
            ends.append(st.commit_log_max_offset)
        wait_dispatched(st)
        full_heads, before = queue_heads(st), read_commit_log_files(tmp_path / "replica")
        k = 20  # the replica "knows" it applied batches [0, k)
        st.withhold_tail(ends[k - 1])
        assert st.commit_log_max_offset == ends[-1] and st.confirm_offset == ends[k - 1]
        heads = queue_heads(st)
        assert all(heads[q] <= full_heads[q] for q in heads) and heads != full_heads
        assert st.view_message(ends[k - 1]) is None  # not served by physical offset either

        assert st.adopt_batch(batches[k + 1], ends[k - 1]) is None  # not the entry that wrote these bytes
        for i in range(k, len(batches)):
            results = st.adopt_batch(batches[i], ends[i - 1])
            assert results is not None, f"batch {i} not adopted"
            last = results[-1]
            assert last.physical_offset + last.wrote_bytes == ends[i]
            st.confirm_offset = ends[i]
        wait_dispatched(st)
        assert queue_heads(st) == full_heads
        assert read_commit_log_files(tmp_path / "replica") == before  # nothing written
    finally:
        leader.shutdown()
        st.shutdown()


def test_a_batch_that_differs_or_runs_past_the_tail_is_not_adopted(tmp_path):
    leader, st = stores(tmp_path)
    try:
        batches = leader_batches(leader)
        ends = []
        for b in batches[:10]:
            st.apply_batch(b)
            ends.append(st.commit_log_max_offset)
        st.withhold_tail(ends[7])
        # same records at another store time (another leader's batch at this index): differs
        other = leader.encode_batch([Message(topic="DetA", queue_id=0, body=b"x")], store_timestamp=T0,
                                    store_host=("192.168.0.1", 10911))
        assert st.adopt_batch(other, ends[7]) is None
        assert st.adopt_batch(batches[10], ends[9]) is None  # the log ends inside it
        st.truncate_to(ends[7])  # what the state machine does then; the entry is applied normally after it
        assert [(r.physical_offset, r.queue_offset) for r in st.apply_batch(batches[8])][0][0] == ends[7]
    finally:
        leader.shutdown()
        st.shutdown()


def test_a_peers_raw_copy_proves_withheld_bytes_and_counts_their_queue_offsets(tmp_path):
    leader, st = stores(tmp_path)
    try:
        for b in leader_batches(leader):
            leader.apply_batch(b)
            st.apply_batch(b)
        wait_dispatched(st)
        full_heads = queue_heads(st)
        st.withhold_tail(0)
        pos = 0
        while pos < leader.commit_log_max_offset:
            raw = leader.read_commit_log(pos, 4096)
            assert st.adopt_commit_log_raw(pos, raw)
            pos = next_chunk_offset(pos, raw, GEOMETRY["mapped_file_size_commit_log"])
        assert st.queue_offset_table() == leader.queue_offset_table()
        st.confirm_offset = pos
        wait_dispatched(st)
        assert queue_heads(st) == full_heads
    finally:
        leader.shutdown()
        st.shutdown()

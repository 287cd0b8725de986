"""A clean stop waits for dispatch (reput) to catch up, within ``shutdown_dispatch_wait_seconds`` (issue 43: a
SIGTERM right after one message to each of 8,000 topics left reput 244 KB behind, and the next start recovered
as after a crash). Past the wait the stop goes on, and the next start recovers everything."""

from __future__ import annotations

import logging
import os
import time

from raftmq.store import GetStatus, Message, MessageStore, StoreConfig
from raftmq.store.consume_queue import ConsumeQueue

MESSAGES = 400
PAD = b"." * 20_000  # 8 MB: eight 1 MiB segments, so dispatch goes in slices and a stop can come between them
SLOW_UNIT_S = 0.02  # 400 units: 8 s of dispatch, more than the 5 s a stop used to wait


def _body(i: int) -> bytes:
    return b"m%d" % i + PAD


def _cfg(root, **kw) -> StoreConfig:
    return StoreConfig(root_dir=str(root), mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=20 * 1000,
                       max_hash_slot_num=1000, max_index_num=4000, preallocate=False, scrub_rate_bytes_per_s=0, **kw)


def _stop_while_dispatch_is_slow(root, monkeypatch, wait_s: float) -> None:
    real = ConsumeQueue.put_message_position_info

    def slow(self, *args, **kwargs):
        time.sleep(SLOW_UNIT_S)
        return real(self, *args, **kwargs)

    st = MessageStore(_cfg(root, shutdown_dispatch_wait_seconds=wait_s))
    st.open()
    with monkeypatch.context() as m:
        m.setattr(ConsumeQueue, "put_message_position_info", slow)
        st.put_messages([Message(topic=f"t{i % 50:02d}", body=_body(i)) for i in range(MESSAGES)])
        assert st.reput.dispatch_behind_bytes() > 0  # 8 s of dispatch ahead
        st.shutdown()


def _all_there(root) -> MessageStore:
    st = MessageStore(_cfg(root))
    st.open()
    assert st.reput.wait_dispatched(timeout=60)
    for t in range(50):
        r = st.get_messages(f"t{t:02d}", 0, 0, max_count=32)
        assert r.status is GetStatus.FOUND and [m.body for m in r.messages] == [
            _body(i) for i in range(t, MESSAGES, 50)]
    return st


def test_a_clean_stop_waits_for_dispatch_and_leaves_a_clean_store(tmp_path, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="raftmq.store"):
        _stop_while_dispatch_is_slow(tmp_path, monkeypatch, wait_s=300)
    assert not os.path.exists(tmp_path / "abort")
    assert not [r for r in caplog.records if "dispatch not caught up" in r.getMessage()]
    assert (tmp_path / "dispatched.json").exists()
    st = _all_there(tmp_path)
    try:
        assert st.last_exit_ok and st.start_check_records == 0
    finally:
        st.shutdown()


def test_past_the_wait_the_stop_goes_on_and_the_next_start_recovers_everything(tmp_path, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="raftmq.store"):
        _stop_while_dispatch_is_slow(tmp_path, monkeypatch, wait_s=0.5)
    assert os.path.exists(tmp_path / "abort")
    assert [r for r in caplog.records if "dispatch not caught up" in r.getMessage()]
    st = _all_there(tmp_path)
    try:
        assert not st.last_exit_ok
    finally:
        st.shutdown()

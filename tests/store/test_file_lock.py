import subprocess
import sys
import textwrap

import pytest

from raftmq.store import MessageStore, StoreConfig, StoreLockedError
from raftmq.store.file_lock import StoreLock

HOLDER = textwrap.dedent("""
    import sys
    from raftmq.store import MessageStore, StoreConfig
    st = MessageStore(StoreConfig(root_dir=sys.argv[1], mapped_file_size_commit_log=8192,
                                  mapped_file_size_consume_queue=400, max_hash_slot_num=64, max_index_num=256))
    st.open()
    print("open", flush=True)
    sys.stdin.read()
    st.shutdown()
""")


def test_two_processes_cannot_open_one_store(tmp_path):
    root = tmp_path / "s"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "open"
        st = MessageStore(StoreConfig(root_dir=str(root), mapped_file_size_commit_log=8192,
                                      mapped_file_size_consume_queue=400, max_hash_slot_num=64,
                                      max_index_num=256))
        with pytest.raises(StoreLockedError, match="in use by another process"):
            st.open()
        proc.stdin.close()
        assert proc.wait(30) == 0
        st.open()  # free again once the holder shut down
        st.shutdown()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_lock_file_contents_and_release(tmp_path):
    lock = StoreLock(str(tmp_path / "lock"))
    lock.acquire()
    assert (tmp_path / "lock").read_bytes()[:4] == b"lock"
    with pytest.raises(StoreLockedError):
        StoreLock(str(tmp_path / "lock")).acquire()
    lock.release()
    lock.release()
    again = StoreLock(str(tmp_path / "lock"))
    again.acquire()
    again.release()

import os

import pytest

from raftmq.store import mapped_file
from raftmq.store.checkpoint import StoreCheckpoint
from raftmq.store.errors import StoreLoadError
from raftmq.store.mapped_file import MappedFile
from raftmq.store.mapped_file_queue import MappedFileQueue


def test_new_file_is_preallocated_and_appends(tmp_path):
    path = tmp_path / "00000000000000004096"
    mf = MappedFile(str(path), 4096)
    assert os.path.getsize(path) == 4096
    assert mf.file_from_offset == 4096 and mf.wrote_position == 0
    assert mf.append(b"a" * 4000)
    assert not mf.append(b"b" * 97)  # does not fit: nothing written
    assert mf.wrote_position == 4000
    assert mf.append(b"c" * 96) and mf.is_full()
    assert bytes(mf.read(3990, 20)) == b"a" * 10 + b"c" * 10
    mf.close()
    mf.close()


def test_flush_follows_least_pages_rule(tmp_path):
    mf = MappedFile(str(tmp_path / "00000000000000000000"), 65536)
    mf.append(b"x" * 5000)
    assert mf.flush(2) == 0  # only one full page since the last flush
    assert mf.flush(1) == 5000
    mf.append(b"y" * 10)
    assert mf.flush(0) == 5010
    assert mf.flush(0) == 5010
    mf.close()


def test_flush_makes_the_segment_durable_by_syncing_its_own_file(tmp_path, monkeypatch):
    """Durability goes through fdatasync of the segment's file (mmap.flush would hold the GIL for the disk's round
    trip): the right file, once per flush with something new, never after close."""
    synced: list[int] = []
    real = mapped_file._datasync

    def recording(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real(fd)

    monkeypatch.setattr(mapped_file, "_datasync", recording)
    path = tmp_path / "00000000000000000000"
    mf = MappedFile(str(path), 65536)
    ino = os.stat(path).st_ino
    mf.append(b"x" * 100)
    assert mf.flush(0) == 100 and synced == [ino]
    assert mf.flush(0) == 100 and synced == [ino]  # nothing new: no sync
    mf.write_at(10, b"patched")
    mf.sync_to_disk()
    assert synced == [ino, ino]
    ckpt = StoreCheckpoint(str(tmp_path / "checkpoint"))
    ckpt.flush()
    assert synced[-1] == os.stat(tmp_path / "checkpoint").st_ino
    # the name now leads to another file: that one is not synced in place of ours (the mapping is msynced)
    os.rename(path, tmp_path / "moved")
    path.write_bytes(b"other")
    mf.append(b"z")
    assert mf.flush(0) == 101 and len(synced) == 3
    mf.close()
    mf.sync_to_disk()
    assert len(synced) == 3
    with open(tmp_path / "moved", "rb") as f:
        assert f.read(101) == b"x" * 10 + b"patched" + b"x" * 83 + b"z"


def test_existing_file_of_wrong_size_is_rejected_with_its_name(tmp_path):
    d = tmp_path / "commitlog"
    d.mkdir()
    (d / "00000000000000000000").write_bytes(b"\0" * 4096)
    (d / "00000000000000004096").write_bytes(b"\0" * 1000)
    q = MappedFileQueue(str(d), 4096)
    with pytest.raises(StoreLoadError) as e:
        q.load()
    assert "00000000000000004096" in str(e.value) and "1000" in str(e.value) and "4096" in str(e.value)


def test_queue_roll_lookup_and_truncate(tmp_path):
    q = MappedFileQueue(str(tmp_path / "q"), 4096)
    assert q.get_last_mapped_file(need_create=False) is None
    for _ in range(3):
        mf = q.get_last_mapped_file()
        assert mf.append(b"z" * 4096)
    assert [m.file_from_offset for m in q.mapped_files] == [0, 4096, 8192]
    assert q.get_max_offset() == 12288
    assert q.find_mapped_file_by_offset(5000).file_from_offset == 4096
    assert q.find_mapped_file_by_offset(12288) is None
    assert q.find_mapped_file_by_offset(99999, True).file_from_offset == 0
    q.flush_all()
    assert q.flushed_where == 12288
    q.truncate_dirty_files(5000)
    assert [m.file_from_offset for m in q.mapped_files] == [0, 4096]
    assert q.get_max_offset() == 5000 and q.flushed_where == 5000
    assert not os.path.exists(tmp_path / "q" / "00000000000000008192")
    q.close()
    q2 = MappedFileQueue(str(tmp_path / "q"), 4096)
    q2.load()
    assert [m.file_from_offset for m in q2.mapped_files] == [0, 4096]
    assert q2.get_max_offset() == 8192  # loaded segments are full until recovery sets positions
    q2.destroy()
    assert not os.path.exists(tmp_path / "q")


def test_delete_expired_by_time_and_offset(tmp_path):
    q = MappedFileQueue(str(tmp_path / "q"), 40)
    import struct
    for i in range(4):
        mf = q.get_last_mapped_file()
        mf.append(struct.pack(">qiq", i * 100, 10, 0) * 2)
    assert q.delete_expired_file_by_offset(150, 20) == 2  # files whose last unit is < 150: 0 and 100
    assert q.get_min_offset() == 80
    assert q.delete_expired_file_by_time(10**9, 0, 0, clean_immediately=False) == 0
    assert q.delete_expired_file_by_time(10**9, 0, 0, clean_immediately=True) == 1  # never the last
    assert len(q.mapped_files) == 1
    q.destroy()


def test_unfinished_segment_files_are_removed_at_load(tmp_path):
    d = tmp_path / "q"
    d.mkdir()
    (d / ".00000000000000004096.creating").write_bytes(b"\0" * 100)
    (d / "00000000000000000000").write_bytes(b"\0" * 4096)
    (d / "00000000000000004096").write_bytes(b"")  # created, never sized: holds no data
    q = MappedFileQueue(str(d), 4096)
    q.load()
    assert [m.file_from_offset for m in q.mapped_files] == [0]
    assert sorted(os.listdir(d)) == ["00000000000000000000"]
    q.close()


def test_a_segment_holds_one_open_file_and_releases_it(tmp_path):
    """Stores with many small segments ran out of descriptors when each segment held two (ours and mmap's)."""
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    files = [MappedFile(str(tmp_path / f"{i * 4096:020d}"), 4096) for i in range(20)]
    assert open_fds() - before == 20
    files[0].append(b"x" * 100)
    assert files[0].flush(0) == 100
    for mf in files:
        mf.close()
    assert open_fds() == before

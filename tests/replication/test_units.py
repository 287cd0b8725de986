"""Unit tests of the replication building blocks that need no cluster: snapshot format, applied index,
batch framing, settings, and the pysyncobj patches."""

from __future__ import annotations

import mmap
import os
import pickle
import struct
import types
import zlib

import pytest

from raftmq.replication import snapshot
from raftmq.replication.applied_index import AppliedIndex
from raftmq.replication.raft_write_path import RaftSettings
from raftmq.replication.state_machine import CorruptCommandError, frame_batch, unframe_batch


def test_snapshot_roundtrip_and_corruption_is_refused(tmp_path):
    meta = snapshot.SnapshotMeta(41, 123456, 45, {"topics": "{}", "offsets": "{}"})
    internal = ((b"\x00cmd", 45, 3), (b"\x01", 44, 3), {"127.0.0.1:1", "127.0.0.1:2"})
    path = str(tmp_path / "raft.dump")
    snapshot.write_file(path, meta, internal)
    got_meta, got_internal = snapshot.read_file(path)
    assert got_meta == meta and got_internal == internal
    data = bytearray(open(path, "rb").read())
    data[20] ^= 0xFF
    with pytest.raises(snapshot.SnapshotError, match="checksum"):
        snapshot.decode(bytes(data), path)
    with pytest.raises(snapshot.SnapshotError, match="magic"):
        snapshot.decode(b"garbage" * 10, path)


def test_applied_index_survives_reopen_drops_torn_frames_and_cuts_beyond_an_offset(tmp_path):
    path = str(tmp_path / "applied.idx")
    ai = AppliedIndex(path, keep=4)
    assert ai.last == (0, 0)
    for i in range(1, 20):
        ai.append(i, (i - 1) * 100, i * 100)
    ai.close()
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")  # a torn frame from a crash mid-write
    ai = AppliedIndex(path, keep=4)
    assert ai.last == (19, 1900)
    assert ai.end_at_or_before(18) == (18, 1800)
    assert ai.drop_beyond(1750) == (17, 1700)
    ai.close()
    assert AppliedIndex(path).last == (17, 1700)
    assert os.path.getsize(path) % 24 == 0


def test_batch_frame_detects_corruption():
    framed = frame_batch(b"payload-bytes")
    body, keys, term = unframe_batch(framed, 7)
    assert bytes(body) == b"payload-bytes" and keys == [] and term is None
    bad = bytearray(framed)
    bad[-1] ^= 1
    with pytest.raises(CorruptCommandError, match="Raft entry 7"):
        unframe_batch(bytes(bad), 7)


def test_a_batch_command_of_a_newer_version_says_so_instead_of_damage():
    import struct
    import zlib

    newer = struct.pack(">II", 0x52504233, zlib.crc32(b"payload")) + b"payload"
    with pytest.raises(CorruptCommandError, match="newer raftmq version .RPB3.; upgrade this member"):
        unframe_batch(newer, 7)


def test_batch_frame_with_judged_ids_carries_them_and_detects_corruption():
    keys = [(0, b"\x01" * 16), (3, bytes(range(16)))]
    framed = frame_batch(b"payload-bytes", keys, term=12)
    assert framed[:4] == b"RPB2"
    body, got, term = unframe_batch(framed, 7)
    assert bytes(body) == b"payload-bytes" and got == keys and term == 12
    for i in (5, 12, len(framed) - 1):  # in the header, the ids, the store batch
        bad = bytearray(framed)
        bad[i] ^= 1
        with pytest.raises(CorruptCommandError, match="Raft entry 7"):
            unframe_batch(bytes(bad), 7)


def test_settings_reject_unsafe_timeouts():
    # unknown keys and wrong types are refused by the node config (cluster.raft); see tests/node
    with pytest.raises(ValueError, match="leader_fallback_timeout"):
        RaftSettings(leader_fallback_timeout=2.0, raft_min_timeout=1.5)
    with pytest.raises(ValueError, match="durability"):
        RaftSettings(durability="fast")


def test_pysyncobj_patches_keep_binary_commands_small_and_wire_compatible():
    from pysyncobj import pickle as sopickle
    from pysyncobj import tcp_connection

    from raftmq.replication import pysyncobj_patches

    payload = os.urandom(64 * 1024)
    stock = len(pickle.dumps((1, (payload,)), protocol=2))
    pysyncobj_patches.apply()
    patched = sopickle.dumps((1, (payload,)))
    assert len(patched) < stock * 0.75  # protocol 2 inflates binary ~1.5x
    assert sopickle.loads(patched) == (1, (payload,))
    assert sopickle.loads(pickle.dumps((1, (payload,)), protocol=2)) == (1, (payload,))  # reads stock peers
    wire = tcp_connection.zlib.compress(patched, 3)
    assert zlib.decompress(wire) == patched  # stock zlib reads it


def test_patched_journal_writes_ask_no_file_size_and_still_grow_and_reload(tmp_path, monkeypatch):
    """Patch 5: a journal write inside the mapping asks no ``mmap.size()`` (an fstat that releases the GIL);
    entries that outgrow the file still grow it, and a reopened journal reads every entry back."""
    from pysyncobj import journal as pjournal

    from raftmq.replication import pysyncobj_patches

    sized = []

    class CountingMmap(mmap.mmap):
        def size(self) -> int:
            sized.append(1)
            return super().size()

    pysyncobj_patches.apply()
    monkeypatch.setattr(pjournal, "mmap", types.SimpleNamespace(mmap=CountingMmap))
    path = str(tmp_path / "raft.journal")
    j = pjournal.FileJournal(path)
    sized.clear()  # opening asks once
    j.add(b"small", 1, 1)  # fits the initial 1 KiB: written in place
    assert sized == []
    entries = [(b"small", 1, 1)] + [(os.urandom(3000 + i), i, 2) for i in range(2, 40)]  # outgrow it, repeatedly
    for command, idx, term in entries[1:]:
        j.add(command, idx, term)
    j._destroy()
    again = pjournal.FileJournal(path)
    assert [again[i] for i in range(len(again))] == entries
    again._destroy()


def _torn(shape: str, data: bytearray, end: int, last_record: int) -> bytearray:
    """``data``: a journal file whose records end at ``end``, the last one starting at ``last_record``."""
    if shape == "last record never reached the disk":  # header page written, the record's page not
        data[last_record:end] = bytes(end - last_record)
    elif shape == "last record cut short":  # its trailing size is not there
        data[end - 4:end] = b"\xff\xff\xff\xff"
    elif shape == "file shorter than the header says":
        del data[end - 10:]
    elif shape == "stale record of an older journal":  # compaction rewrote the file from the start
        struct.pack_into("<Q", data, last_record + 4, 3)
    return data


@pytest.mark.parametrize("shape", ["last record never reached the disk", "last record cut short",
                                   "file shorter than the header says", "stale record of an older journal"])
def test_a_journal_with_a_torn_tail_opens_without_it_and_takes_new_entries(tmp_path, caplog, shape):
    """Patch 6: stock pysyncobj trusts the header's end offset and failed to open such a journal (struct.error),
    so the member could not start; now the whole records before the tear load, the header is cut back to them
    and new entries follow them."""
    from pysyncobj import journal as pjournal

    from raftmq.replication import pysyncobj_patches

    pysyncobj_patches.apply()
    path = str(tmp_path / "raft.journal")
    j = pjournal.FileJournal(path)
    entries = [(os.urandom(100 + 700 * i), i, 1 + i // 3) for i in range(1, 7)]
    for command, idx, term in entries:
        j.add(command, idx, term)
    j._destroy()
    data = bytearray(open(path, "rb").read())
    end = struct.unpack_from("<I", data, pjournal.LAST_RECORD_OFFSET_OFFSET)[0]
    last_record = end - (8 + 16 + len(entries[-1][0]))
    with open(path, "wb") as f:
        f.write(_torn(shape, data, end, last_record))
    with caplog.at_level("ERROR", logger="raftmq.replication.pysyncobj_patches"):
        again = pjournal.FileJournal(path)
    assert [again[i] for i in range(len(again))] == entries[:-1]
    assert "torn tail of" in caplog.text and "after entry 5 (term 2)" in caplog.text
    again.add(b"new", 6, 3)
    again._destroy()
    reopened = pjournal.FileJournal(path)
    assert [reopened[i] for i in range(len(reopened))] == entries[:-1] + [(b"new", 6, 3)]
    reopened._destroy()


def test_an_intact_journal_is_left_as_it_is(tmp_path):
    from pysyncobj import journal as pjournal

    from raftmq.replication import pysyncobj_patches

    pysyncobj_patches.apply()
    path = str(tmp_path / "raft.journal")
    j = pjournal.FileJournal(path)
    for i in range(1, 30):
        j.add(os.urandom(i * 37), i, 1)
    j._destroy()
    before = open(path, "rb").read()
    assert pysyncobj_patches.drop_torn_tail(path) == 0
    assert open(path, "rb").read() == before
    assert len(pjournal.FileJournal(path)) == 29


def test_peer_host_names_are_re_resolved_after_the_cache_time(monkeypatch):
    """Peers are stable DNS names (a pod keeps its name, not its IP); pysyncobj's resolver must pick up a new IP
    within RaftSettings.dns_cache_time, which RaftWritePath passes as dnsCacheTime."""
    import socket
    import time

    from pysyncobj.dns_resolver import DnsCachingResolver

    answers = iter(["10.0.0.1", "10.0.0.2"])
    current = {"ip": next(answers)}
    monkeypatch.setattr(socket, "getaddrinfo",
                        lambda host, port, *a, **k: [(socket.AF_INET, 1, 6, "", (current["ip"], 0))])
    settings = RaftSettings(dns_cache_time=0.05)
    resolver = DnsCachingResolver(settings.dns_cache_time, 1.0)
    assert resolver.resolve("raftmq-1.raftmq-headless") == "10.0.0.1"
    current["ip"] = next(answers)  # the pod came back with a new IP
    assert resolver.resolve("raftmq-1.raftmq-headless") == "10.0.0.1"  # cached
    time.sleep(0.1)
    assert resolver.resolve("raftmq-1.raftmq-headless") == "10.0.0.2"


def test_the_raft_meta_file_is_rewritten_only_for_term_and_vote_and_always_synced(tmp_path, monkeypatch):
    """Patch 4: a commit-index-only change used to rename an unsynced file over the durable term and vote (a
    power cut could leave it empty: the vote forgotten, two votes in one term). Now only a term or vote change
    writes the file, synced with its directory, and the commit index is a hint carried along."""
    from pysyncobj import journal as pjournal

    from raftmq.replication import pysyncobj_patches

    pysyncobj_patches.apply()
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    path = str(tmp_path / "raft.journal")
    j = pjournal.FileJournal(path)
    j.setCurrentTerm(3, "n1")
    inode = os.stat(path + ".meta").st_ino
    assert len(synced) == 2  # the file, then its directory
    for i in range(5):  # the commit index moves every second on a busy follower
        j.setRaftCommitIndex(100 + i)
        j.onOneSecondTimer()
    assert os.stat(path + ".meta").st_ino == inode and len(synced) == 2  # not rewritten
    j.setCurrentTerm(4, None)
    assert len(synced) == 4
    j._destroy()
    again = pjournal.FileJournal(path)
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (4, None)
    assert again.getRaftCommitIndex() == 104  # carried along with the last term change
    again.setRaftCommitIndex(200)
    again.onOneSecondTimer()  # a commit index alone after a restart: still not written
    assert pjournal.FileJournal(path).getRaftCommitIndex() == 104


def test_compaction_writes_a_new_synced_journal_file_instead_of_rewriting_in_place(tmp_path):
    """Patch 8: stock compaction rewrote the journal from its start in place, so a power cut in the middle could
    mix records of both layouts; now the kept entries go to a new file renamed over the old one."""
    from pysyncobj import journal as pjournal

    from raftmq.replication import pysyncobj_patches

    pysyncobj_patches.apply()
    path = str(tmp_path / "raft.journal")
    j = pjournal.FileJournal(path)
    entries = [(os.urandom(50 + 10 * i), i, 1 + i // 10) for i in range(1, 41)]
    for e in entries:
        j.add(*e)
    inode = os.stat(path).st_ino
    j.deleteEntriesTo(30)  # keep entries 31..40
    assert os.stat(path).st_ino != inode and not os.path.exists(path + ".compacting")
    assert [j[i] for i in range(len(j))] == entries[30:]
    j.add(b"next", 41, 5)  # appends go on in the new file
    j._destroy()
    span = pysyncobj_patches.journal_span(path)
    assert span.first == (31, 4) and span.last == (41, 5) and span.records_end == span.header_end
    again = pjournal.FileJournal(path)
    assert [again[i] for i in range(len(again))] == entries[30:] + [(b"next", 41, 5)]
    again._destroy()


def test_a_snapshot_is_synced_and_its_rename_made_durable_before_pysyncobj_compacts(tmp_path, monkeypatch):
    """Patch 7: pysyncobj renames the dump into place and compacts right after; the file and its directory
    entry are synced first (stock synced neither: a member came back with a compacted journal and no dump)."""
    from pysyncobj import serializer

    from raftmq.replication import pysyncobj_patches

    pysyncobj_patches.apply()
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")),
                                                 real_fsync(fd)))
    src, dst = tmp_path / "raft.dump.tmp", tmp_path / "raft.dump"
    src.write_bytes(b"snapshot")
    serializer.atomicReplace(str(src), str(dst))
    assert dst.read_bytes() == b"snapshot" and not src.exists()
    assert synced == [str(src), str(tmp_path)]  # the file before the rename, the directory after it

"""Unit tests of the replication building blocks that need no cluster: snapshot format, applied index,
batch framing, settings, and the pysyncobj patches."""

from __future__ import annotations

import mmap
import os
import pickle
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
    assert bytes(unframe_batch(framed, 7)) == b"payload-bytes"
    bad = bytearray(framed)
    bad[-1] ^= 1
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

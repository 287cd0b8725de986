"""``raftmq cluster rebuild-member``: a follower whose committed bytes diverged (found by ``cluster check``) sets its
files aside, restarts its own process and copies the group's data from a peer, ending byte-identical (real
3-member cluster). Refused for the leader, an unknown member, a single node, and when the others would not keep a
majority. The data-directory step on its own: what moves, what stays, a crash halfway, a bad or misplaced mark."""

from __future__ import annotations

import json
import os

import pytest

from raftmq.client import Admin, Producer
from raftmq.node import rebuild
from tests.client.test_cluster_check_e2e import BODY, SECRET, converged, flip_body_byte, raftmq
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for


def test_a_diverged_follower_is_rebuilt_from_its_peers_and_ends_identical(tmp_path):
    with running_nodes(tmp_path, 3, cluster={"secret": SECRET}) as nodes:
        servers = [n.grpc_address for n in nodes]
        with Admin(servers) as admin:
            admin.create_topic("Rebuild", queues=2)
        with Producer(servers) as p:
            for i in range(26):  # six 256 KiB segments: segment 0 is outside the start-up recovery scan
                p.send_batch("Rebuild", [BODY + b"%05d" % (i * 50 + k) for k in range(50)], queue_id=i % 2)
        end = converged(servers)
        with Admin(servers) as admin:
            leader_id = admin.cluster_status().leader_id
        leader = next(n for n in nodes if n.spec.id == leader_id)
        victim, other = [n for n in nodes if n.spec.id != leader_id]
        victim.stop()
        flip_body_byte(victim.spec.data_dir, 100_000)  # committed bytes that differ, and the member still starts
        victim.start().wait_ready(90)
        r = raftmq("cluster", "check", "-s", servers[0], "--chunk", "64K")
        assert r.returncode == 9 and "DIFFERS" in r.stdout, (r.stdout, r.stderr)

        # refused: the leader, a member that does not exist, a member whose loss would cost the majority
        r = raftmq("cluster", "rebuild-member", leader_id, "-s", servers[0])
        assert r.returncode == 1 and "leads the group" in r.stderr and "transfer-leader" in r.stderr, r.stderr
        r = raftmq("cluster", "rebuild-member", "n9", "-s", servers[0])
        assert r.returncode == 4 and "'n9' is not a member" in r.stderr, r.stderr
        other.stop()
        wait_for(lambda: not next(m for m in Admin(leader.grpc_address).cluster_status().members
                                  if m.id == other.spec.id).healthy, f"{other.spec.id} seen down", 30)
        r = raftmq("cluster", "rebuild-member", victim.spec.id, "-s", leader.grpc_address)
        assert r.returncode == 1 and "not a majority" in r.stderr and f"Bring {other.spec.id} back" in r.stderr, \
            r.stderr
        r = raftmq("cluster", "rebuild-member", other.spec.id, "-s", leader.grpc_address)
        assert r.returncode == 5 and "cannot be reached" in r.stderr and "moving its data directory away" in r.stderr, \
            r.stderr
        assert not list(victim.spec.data_dir.glob("set-aside-*")), "a refused request marks nothing"
        other.start().wait_ready(90)
        r = raftmq("cluster", "rebuild-member", "--help")
        assert r.returncode == 0 and "--discard" in r.stdout

        pid = victim.proc.pid
        r = raftmq("cluster", "rebuild-member", victim.spec.id, "-s", servers[0], "--wait-timeout", "240")
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert f"{victim.spec.id} is back: healthy, ready, lag 0" in r.stdout, r.stdout
        assert victim.alive and victim.proc.pid == pid, "the member restarted its own process"
        [kept] = list(victim.spec.data_dir.glob("set-aside-*"))
        assert str(kept.name) in r.stdout and (kept / "commitlog").is_dir() and (kept / "raft").is_dir()
        assert not (victim.spec.data_dir / rebuild.MARKER).exists()
        assert converged(servers) == end
        r = raftmq("cluster", "check", "-s", servers[0], "--chunk", "64K")
        assert r.returncode == 0, (r.stdout, r.stderr)
        seg0 = f"commitlog/{0:020d}"
        assert (victim.spec.data_dir / seg0).read_bytes() == (leader.spec.data_dir / seg0).read_bytes()
        assert (kept / seg0).read_bytes() != (leader.spec.data_dir / seg0).read_bytes(), "the old files are kept"
        log = victim.spec.log_path.read_text()
        assert '"audit": "rebuild_member"' in log and "set aside in" in log


def test_a_member_killed_right_after_accepting_a_rebuild_still_rebuilds_at_its_next_start(tmp_path):
    """The mark is on disk before the answer: a crash before the member restarts itself changes nothing."""
    with running_nodes(tmp_path, 3) as nodes:
        servers = [n.grpc_address for n in nodes]
        with Admin(servers) as admin:
            admin.create_topic("RebuildKill", queues=1)
        with Producer(servers) as p:
            acked = p.send_batch("RebuildKill", [BODY] * 40)
        end = converged(servers)
        with Admin(servers) as admin:
            leader_id = admin.cluster_status().leader_id
            victim = next(n for n in nodes if n.spec.id != leader_id)
            admin.rebuild_member(victim.spec.id)
        victim.kill()  # at once: before (or while) it stops and starts itself again
        victim.start().wait_ready(120)
        [kept] = list(victim.spec.data_dir.glob("set-aside-*"))
        assert (kept / "commitlog").is_dir() and not (victim.spec.data_dir / rebuild.MARKER).exists()
        assert converged(servers) == end
        r = raftmq("cluster", "check", "-s", servers[0], secret=None)
        assert r.returncode == 0, (r.stdout, r.stderr)
        with Admin(victim.grpc_address) as admin:
            assert admin.queue_offsets("RebuildKill")[0].max_offset == len(acked)


def test_a_single_node_has_nothing_to_rebuild_from(tmp_path):
    with running_nodes(tmp_path, 1) as [node]:
        r = raftmq("cluster", "rebuild-member", node.spec.id, "-s", node.grpc_address, secret=None)
        assert r.returncode == 1 and "single-node" in r.stderr, r.stderr
        assert not (node.spec.data_dir / rebuild.MARKER).exists()


def _store_like(d) -> None:
    for sub in ("commitlog", "consumequeue", "raft", "lost+found", "set-aside-20260101T000000Z"):
        (d / sub).mkdir(parents=True)
    (d / "commitlog" / "00000000000000000000").write_bytes(b"x" * 10)
    (d / "checkpoint").write_bytes(b"c")


def test_set_aside_moves_everything_but_earlier_copies_and_the_filesystems_own_directory(tmp_path):
    _store_like(tmp_path)
    assert rebuild.set_aside(str(tmp_path), replicated=True) is None, "no mark: nothing moves"
    into = rebuild.request(str(tmp_path), by="alice")
    assert json.loads((tmp_path / rebuild.MARKER).read_text())["requested_by"] == "alice"
    assert rebuild.set_aside(str(tmp_path), replicated=True) == into
    assert sorted(os.listdir(tmp_path)) == sorted(["lost+found", "set-aside-20260101T000000Z",
                                                   os.path.basename(into)])
    assert sorted(os.listdir(into)) == ["checkpoint", "commitlog", "consumequeue", "raft"]
    assert (tmp_path / os.path.basename(into) / "commitlog" / "00000000000000000000").read_bytes() == b"x" * 10


def test_discard_deletes_the_old_files_once_they_all_moved(tmp_path):
    _store_like(tmp_path)
    into = rebuild.request(str(tmp_path), by="", discard=True)
    assert rebuild.set_aside(str(tmp_path), replicated=True) == into
    assert sorted(os.listdir(tmp_path)) == ["lost+found", "set-aside-20260101T000000Z"]


def test_a_start_after_a_crash_halfway_finishes_the_move_into_the_same_directory(tmp_path):
    _store_like(tmp_path)
    into = rebuild.request(str(tmp_path), by="")
    os.makedirs(into)
    os.rename(tmp_path / "commitlog", os.path.join(into, "commitlog"))  # the first start moved one, then died
    assert rebuild.set_aside(str(tmp_path), replicated=True) == into
    assert sorted(os.listdir(into)) == ["checkpoint", "commitlog", "consumequeue", "raft"]
    assert not (tmp_path / rebuild.MARKER).exists()


def test_a_mark_on_a_single_node_or_an_unreadable_mark_stops_the_start_and_moves_nothing(tmp_path):
    _store_like(tmp_path)
    rebuild.request(str(tmp_path), by="")
    with pytest.raises(rebuild.RebuildError, match="has none .* its data would be lost. Remove the file"):
        rebuild.set_aside(str(tmp_path), replicated=False)
    assert (tmp_path / "commitlog").is_dir()
    (tmp_path / rebuild.MARKER).write_text("{not json")
    with pytest.raises(rebuild.RebuildError, match="is unreadable .* remove it"):
        rebuild.set_aside(str(tmp_path), replicated=True)
    assert (tmp_path / "commitlog").is_dir()

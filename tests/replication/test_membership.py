"""Growing, shrinking and replacing members of a running group under write load (issue 39), with real node
processes: 3 -> 5 -> 3 members (the leader removing itself on the way), the replacement of a dead member by one of
a new name, the refusals and ``--dry-run``, and a removed member coming back with its old configuration. Each
ends with every acknowledged message read back, at most one leader per term, and ``raftmq cluster check``."""

from __future__ import annotations

import time

import pytest

from raftmq.client import Admin
from tests.replication.cluster_util import Producers, create_topic, lead_by
from tests.replication.membership_util import Group, raftmq, ready_text
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
TOPIC = "Grow"


@pytest.fixture
def make_group(tmp_path):
    made: list[Group] = []

    def make(total: int, seed: int = 3, **kw) -> Group:
        g = Group(tmp_path, total, seed, **kw)
        made.append(g)
        return g

    yield make
    for g in made:
        g.stop()


def test_three_to_five_to_three_under_write_load(make_group):
    g = make_group(5)
    g.start()
    create_topic(g.live(), TOPIC)
    producers = Producers(list(g.nodes.values()), TOPIC, n=3).start()
    producers.wait_acked(200)

    g.start("n3", "n4", wait=False)  # started before they are added: not members yet, so not ready
    wait_for(lambda: "not a member of the group yet" in ready_text(g["n3"]), what="n3 waiting to be added",
             timeout=60)
    r = raftmq("cluster", "add-member", "n3", "--address", g["n3"].grpc_address, "-s", g["n0"].grpc_address)
    assert r.returncode == 0, r.stderr
    assert "n3 is a voter" in r.stdout
    with g.admin() as admin:
        admin.add_member("n4", g["n4"].spec.raft_address, g["n4"].grpc_address)
    g.wait_configuration({"n0", "n1", "n2", "n3", "n4"})
    producers.wait_acked(len(producers.log.acked) + 200)

    r = raftmq("cluster", "remove-member", "n4", "-s", g["n1"].grpc_address)
    assert r.returncode == 0, r.stderr
    lead_by(g.live(), "n3")  # the last removal removes the leader: it hands leadership away first
    with g.admin() as admin:
        done = admin.remove_member("n3")
    assert done.voters == ["n0", "n1", "n2"]
    g.wait_configuration({"n0", "n1", "n2"})
    producers.wait_acked(len(producers.log.acked) + 200)
    log = producers.stop()

    for gone in ("n3", "n4"):  # they stop taking part and say why; their data stays
        wait_for(lambda gone=gone: "removed from the group" in ready_text(g[gone]),
                 what=f"{gone} reporting its removal", timeout=60)
    g["n3"].stop()
    g["n4"].stop()
    g["n0"].restart(120)  # its configuration comes from the log, whatever its cluster.members says
    g.wait_configuration({"n0", "n1", "n2"})
    g.assert_nothing_lost(log, TOPIC)
    g.assert_one_leader_per_term()
    check = g.cluster_check()
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_dead_member_replaced_by_one_of_a_new_name_under_write_load(make_group):
    g = make_group(4)
    g.start()
    create_topic(g.live(), TOPIC)
    if g.leader().spec.id == "n2":
        lead_by(g.live(), "n0")
    producers = Producers(list(g.nodes.values()), TOPIC, n=3).start()
    producers.wait_acked(200)
    g["n2"].kill()  # its machine is gone
    g.start("n3", wait=False)
    started = time.monotonic()
    r = raftmq("cluster", "replace-member", "n2", "n3", "--raft", g["n3"].spec.raft_address, "--grpc",
               g["n3"].grpc_address, "-s", g["n0"].grpc_address)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "n3 is a voter; n2 was removed" in r.stdout
    print(f"replace-member took {time.monotonic() - started:.1f}s")
    g.wait_configuration({"n0", "n1", "n3"})
    producers.wait_acked(len(producers.log.acked) + 200)
    log = producers.stop()
    g.assert_nothing_lost(log, TOPIC)
    g.assert_one_leader_per_term()
    check = g.cluster_check()
    assert check.returncode == 0, check.stdout + check.stderr


def test_refusals_dry_runs_and_bad_input(make_group):
    g = make_group(4)
    g.start()
    lead_by(g.live(), "n0")
    g["n2"].stop()
    s = ["-s", g["n0"].grpc_address]

    r = raftmq("cluster", "remove-member", "n1", *s)  # n0 and n2 would be left, n2 is down
    assert r.returncode == 1
    assert "refused" in r.stderr and "down or behind: n2" in r.stderr
    r = raftmq("cluster", "remove-member", "n2", "--dry-run", *s)
    assert r.returncode == 0 and r.stdout.startswith("would do: voter n2 is removed"), r.stdout + r.stderr
    r = raftmq("cluster", "add-member", "n3", "--raft", g["n3"].spec.raft_address, "--grpc", g["n3"].grpc_address,
               "--dry-run", "--json", *s)
    assert r.returncode == 0 and '"dry_run": true' in r.stdout, r.stdout + r.stderr
    with Admin([g["n0"].grpc_address]) as admin:  # dry runs changed nothing
        rows = admin.cluster_status().members
    assert sorted(m.id for m in rows) == ["n0", "n1", "n2"] and {m.membership for m in rows} == {"voter"}

    bad = [
        (["add-member", "n0", "--raft", "127.0.0.1:1", "--grpc", "127.0.0.1:2"], 1, "n0 is already a voter"),
        (["add-member", "n9", "--raft", g["n1"].spec.raft_address, "--grpc", "127.0.0.1:2"], 1,
         "is already used by voter n1"),
        (["add-member", "bad/id", "--raft", "127.0.0.1:1", "--grpc", "127.0.0.1:2"], 4, "must be 1-63"),
        (["add-member", "n9", "--raft", "127.0.0.1:1", "--grpc", "127.0.0.1:1"], 4, "different ports"),
        (["add-member", "n9", "--raft", "nohost", "--grpc", "127.0.0.1:2"], 4, "bad server address"),
        (["add-member", "n9", "--address", "127.0.0.1:1"], 5, "does not answer"),
        (["add-member", "n9"], 4, "give the address of n9"),
        (["remove-member", "nope"], 1, "'nope' is not a member"),
    ]
    for args, code, text in bad:
        r = raftmq("cluster", *args, *s)
        assert (r.returncode, text in r.stderr) == (code, True), (args, r.returncode, r.stderr)

    r = raftmq("cluster", "remove-member", "n2", *s)  # the dead member itself may go: n0, n1 stay healthy
    assert r.returncode == 0, r.stderr
    g.wait_configuration({"n0", "n1"})
    r = raftmq("cluster", "remove-member", "n1", *s)  # n0 alone is the majority of a group of one
    assert r.returncode == 0, r.stderr
    r = raftmq("cluster", "remove-member", "n0", *s)
    assert r.returncode == 1 and "only voter" in r.stderr


def test_a_removed_member_back_with_its_old_configuration_does_not_disrupt_the_group(make_group):
    g = make_group(3)
    g.start()
    create_topic(g.live(), TOPIC)
    lead_by(g.live(), "n0")
    g["n2"].stop()  # it keeps its journal: it still believes it is a voter of n0, n1, n2
    with g.admin() as admin:
        admin.remove_member("n2")
    g.wait_configuration({"n0", "n1"})
    with Admin([g["n0"].grpc_address]) as admin:
        term = admin.cluster_status().members[0].term
    producers = Producers([g["n0"], g["n1"]], TOPIC, n=2).start()
    g["n2"].start()
    wait_for(lambda: "removed from the group" in ready_text(g["n2"]), what="n2 reporting its removal",
             timeout=90)
    producers.wait_acked(len(producers.log.acked) + 100)
    time.sleep(2 * 3.0)  # two election timeouts more: it never makes anyone raise the term
    log = producers.stop()
    with Admin([g["n0"].grpc_address]) as admin:
        status = admin.cluster_status()
    assert status.leader_id == "n0" and {m.id: m.term for m in status.members}["n0"] == term
    assert not [t for t, who in g.leaders_by_term().items() if "n2" in who and t > term]
    assert "removed from the group" in ready_text(g["n2"])
    g.assert_nothing_lost(log, TOPIC)
    g.assert_one_leader_per_term()

"""Preferred leaders (issue 38, docs/design/leader-balance.md): a deterministic rule over the groups' member
lists and the machines they run on; a pinned `preferred_leader`; the settings that steer it."""

from __future__ import annotations

import hashlib
import json

import pytest

from raftmq.node.config import ConfigError, GroupSpec, Member, load_config
from raftmq.node.groups import GroupDirectory
from raftmq.node.preferred_leaders import preferred_leaders


def _group(name: str, *members: tuple[str, str], pin: str = "") -> GroupSpec:
    """members: (id, machine) - the machine as the host part of its Raft address."""
    return GroupSpec(name, "10.0.0.1:10911", (), tuple(Member(i, f"{h}:9001", f"{h}:9101") for i, h in members), pin)


def test_leaders_spread_over_machines_even_when_member_lists_are_ordered_differently():
    # g1 lists its members in another machine order: rotating alone would put g1's leader on machine A with g0's
    groups = [_group("g0", ("a0", "A"), ("a1", "B"), ("a2", "C")),
              _group("g1", ("b0", "B"), ("b1", "A"), ("b2", "C")),
              _group("g2", ("c0", "A"), ("c1", "B"), ("c2", "C"))]
    chosen = preferred_leaders(groups)
    machine = {m.id: m.machine for g in groups for m in g.members}
    assert sorted(machine[chosen[g.name]] for g in groups) == ["A", "B", "C"], chosen
    assert chosen == preferred_leaders(groups)  # deterministic


def test_without_machines_groups_take_their_members_in_turn():
    # every member on its own pod name (Kubernetes): group i prefers its member i mod n
    groups = [_group(f"g{i}", *((f"g{i}-{j}", f"raftmq-g{i}-{j}.raftmq-g{i}") for j in range(3))) for i in range(4)]
    assert preferred_leaders(groups) == {"g0": "g0-0", "g1": "g1-1", "g2": "g2-2", "g3": "g3-0"}


def test_a_pinned_leader_is_kept_and_the_others_avoid_its_machine():
    groups = [_group("g0", ("a0", "A"), ("a1", "B")), _group("g1", ("b0", "A"), ("b1", "B"), pin="b0")]
    assert preferred_leaders(groups) == {"g0": "a1", "g1": "b0"}


def test_more_groups_than_machines_share_them_evenly():
    groups = [_group(f"g{i}", ("x" + str(i), "A"), ("y" + str(i), "B")) for i in range(4)]
    machine = {m.id: m.machine for g in groups for m in g.members}
    chosen = preferred_leaders(groups)
    assert sorted(machine[c] for c in chosen.values()) == ["A", "A", "B", "B"]


def test_one_group_prefers_its_first_member():
    assert preferred_leaders([_group("c1", ("n0", "h0"), ("n1", "h1"), ("n2", "h2"))]) == {"c1": "n0"}


GROUPS = """
node: {id: a0, data_dir: /tmp/unused}
cluster:
  group: g0
  groups:
    - name: g0
      store_host: 10.0.0.1:10911
      members:
        - {id: a0, raft: '127.0.0.1:9001', grpc: '127.0.0.1:9101', host: m0}
        - {id: a1, raft: '127.0.0.1:9002', grpc: '127.0.0.1:9102', host: m1}
    - name: g1
      store_host: 10.0.0.2:10911
      members:
        - {id: b0, raft: '127.0.0.1:9003', grpc: '127.0.0.1:9103', host: m0}
        - {id: b1, raft: '127.0.0.1:9004', grpc: '127.0.0.1:9104', host: m1}
"""


def _load(tmp_path, text: str):
    p = tmp_path / "raftmq.yaml"
    p.write_text(text)
    return load_config(p, environ={})


def test_a_members_host_names_its_machine(tmp_path):
    cfg = _load(tmp_path, GROUPS)
    assert [m.machine for m in cfg.groups[1].members] == ["m0", "m1"]
    assert preferred_leaders(cfg.groups) == {"g0": "a0", "g1": "b1"}  # one leader on each machine
    # without hosts every member is on 127.0.0.1: one machine
    bare = _load(tmp_path, GROUPS.replace(", host: m0", "").replace(", host: m1", ""))
    assert {m.machine for g in bare.groups for m in g.members} == {"127.0.0.1"}


def test_a_pinned_preferred_leader_is_configured_per_group(tmp_path):
    cfg = _load(tmp_path, GROUPS.replace("    - name: g1\n", "    - name: g1\n      preferred_leader: b0\n"))
    assert cfg.groups[1].preferred_leader == "b0"
    assert preferred_leaders(cfg.groups) == {"g0": "a1", "g1": "b0"}


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.replace("    - name: g1\n", "    - name: g1\n      preferred_leader: a0\n"),
     "cluster.groups[1] (g1).preferred_leader: 'a0' is not one of its members ['b0', 'b1']"),
    (lambda t: t.replace("host: m0}", "hots: m0}"), "optionally host"),
    (lambda t: t.replace("cluster:\n", "cluster:\n  auto_balance_after_s: -1\n"), "cluster.auto_balance_after_s"),
])
def test_bad_balance_settings_are_refused_naming_them(tmp_path, edit, expected):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, edit(GROUPS))
    assert any(expected in p for p in e.value.problems), e.value.problems


def test_a_list_without_hosts_or_pins_keeps_the_digest_members_compare(tmp_path):
    """Members of different versions compare list digests (docs/design/scale-out.md): a list that uses neither
    new key must keep the digest it had before them, or a rolling upgrade marks groups unavailable."""
    bare = _load(tmp_path, GROUPS.replace(", host: m0", "").replace(", host: m1", ""))
    before = hashlib.sha256(json.dumps([[g.name, g.store_host, [[m.id, m.raft, m.grpc] for m in g.members]]
                                        for g in bare.groups]).encode()).hexdigest()[:16]
    assert GroupDirectory(bare, forwarder=None).digest == before
    assert GroupDirectory(_load(tmp_path, GROUPS), forwarder=None).digest != before  # hosts are part of the list


def test_a_group_learned_by_discovery_keeps_the_preferred_leader_it_named_itself():
    # DNS discovery (node/group_discovery.py) knows another group's members by client address only
    learned = GroupSpec("g1", "10.0.0.2:10911", ("svc-g1:8081",), (Member("", "", "svc-g1:8081"),), "g1-1")
    assert preferred_leaders([_group("g0", ("a0", "A"), ("a1", "B")), learned]) == {"g0": "a0", "g1": "g1-1"}
    unnamed = GroupSpec("g1", "10.0.0.2:10911", ("svc-g1:8081",), (Member("", "", "svc-g1:8081"),))
    assert preferred_leaders([unnamed]) == {}  # it named none: none is made up for it

"""cluster.groups: a cluster of several Raft groups (issue 37, docs/design/scale-out.md#configuration-how-a-member-knows-the-other-groups)."""

from __future__ import annotations

import pytest

from raftmq.node.config import ConfigError, load_config

TWO_GROUPS = """
node: {id: b1, data_dir: /tmp/unused}
cluster:
  name: prod
  group: g1
  groups:
    - name: g0
      store_host: 10.0.0.1:10911
      members:
        - {id: a0, raft: 'h0:9001', grpc: 'h0:9101'}
        - {id: a1, raft: 'h1:9001', grpc: 'h1:9101'}
    - name: g1
      store_host: 10.0.0.2:10911
      endpoints: ['svc-g1:8081']
      members:
        - {id: b0, raft: 'h0:9002', grpc: 'h0:9102'}
        - {id: b1, raft: 'h1:9002', grpc: 'h1:9102'}
"""


def _load(tmp_path, text: str, **kw):
    p = tmp_path / "raftmq.yaml"
    p.write_text(text)
    return load_config(p, environ={}, **kw)


def test_own_group_gives_the_raft_members_and_store_host(tmp_path):
    cfg = _load(tmp_path, TWO_GROUPS)
    assert cfg.group_name == "g1"
    assert [m.id for m in cfg.members] == ["b0", "b1"]
    assert cfg.store_host == ("10.0.0.2", 10911)
    assert cfg.store_config().store_host == "10.0.0.2:10911"
    assert cfg.store_config().cluster_name == "prod"  # CLUSTER stays the cluster's name
    assert [g.name for g in cfg.groups] == ["g0", "g1"]
    assert cfg.groups[0].client_addresses() == ["h0:9101", "h1:9101"]
    assert cfg.groups[1].client_addresses() == ["svc-g1:8081"]


def test_one_group_is_todays_configuration(tmp_path):
    cfg = _load(tmp_path, "node: {id: n0}\ncluster:\n  name: c1\n  members: [{id: n0, raft: 'h:1', grpc: 'h:2'}]\n")
    assert cfg.group_name == "c1"  # what RocketMQ 5 clients already see as the broker name
    assert [(g.name, [m.id for m in g.members]) for g in cfg.groups] == [("c1", ["n0"])]
    assert cfg.store_host == ("127.0.0.1", 10911)


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.replace("group: g1", "group: g9"), "cluster.group: 'g9' is not one of"),
    (lambda t: t.replace("id: b1, data_dir", "id: a1, data_dir"), "is a member of group g0, not of its own group"),
    (lambda t: t.replace("10.0.0.2:10911", "10.0.0.1:10911"), "is group g0's too"),
    (lambda t: t.replace("{id: b0,", "{id: a0,"), "member id 'a0' is already in group g0"),
    (lambda t: t.replace("raft: 'h0:9002'", "raft: 'h0:9001'"), "already a member's of group g0"),
    (lambda t: t.replace("name: g1", "name: 'g 1'"), "must be 1-63 letters"),
    (lambda t: t.replace("store_host: 10.0.0.1:10911", "store_host: host0:10911"), "must be an IP literal"),
    (lambda t: t.replace("  group: g1\n", "  group: g1\n  members: [{id: b1, raft: 'x:1', grpc: 'x:2'}]\n"),
     "set one of them"),
])
def test_bad_groups_are_refused_naming_the_group(tmp_path, edit, expected):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, edit(TWO_GROUPS))
    assert any(expected in p for p in e.value.problems), e.value.problems


def test_group_without_groups_is_refused(tmp_path):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "cluster: {group: g1}\n")
    assert any("cluster.groups is empty" in p for p in e.value.problems)


def test_make_run_writes_a_valid_configuration_for_two_groups(tmp_path):
    from raftmq.node.local_cluster import write_configs

    paths = write_configs(tmp_path, 3, 18000, groups=2)
    cfgs = [load_config(p, environ={}) for p in paths]
    assert [c.group_name for c in cfgs] == ["g0"] * 3 + ["g1"] * 3
    assert [m.id for m in cfgs[4].members] == ["n3", "n4", "n5"]
    assert len({c.store_host for c in cfgs}) == 2
    (tmp_path / "one").mkdir()
    one = write_configs(tmp_path / "one", 3, 18000)  # the default stays today's one group
    assert [m.id for m in load_config(one[0], environ={}).members] == ["n0", "n1", "n2"]

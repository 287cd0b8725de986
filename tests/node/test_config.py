"""Config loading: file, RAFTMQ_* environment and --set flags, and `config validate` / `config sample`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from raftmq.node.config import ConfigError, load_config
from raftmq.node.config_docs import sample_yaml


def _write(tmp_path, text: str):
    p = tmp_path / "raftmq.yaml"
    p.write_text(text)
    return p


def test_defaults_without_file():
    cfg = load_config(None, environ={})
    assert cfg.node.id == "n0"
    assert cfg.node.grpc_listen == "0.0.0.0:8081"
    assert cfg.node.http_listen == "0.0.0.0:8080"
    assert cfg.cluster.members == []
    assert cfg.store_config().root_dir == "./data/n0"


def test_precedence_file_then_env_then_flags(tmp_path):
    path = _write(tmp_path, "node:\n  id: from-file\n  log_level: debug\nstore:\n  max_message_size: 1000\n")
    env = {"RAFTMQ_NODE_ID": "from-env", "RAFTMQ_STORE_MAX_MESSAGE_SIZE": "2000",
           "RAFTMQ_CLUSTER_MEMBERS": '[{id: from-flag, raft: "h:8091", grpc: "h:8081"}]',
           "RAFTMQ_SERVER": "ignored:1", "OTHER": "x"}
    cfg = load_config(path, environ=env, assignments=["node.id=from-flag"])
    assert cfg.node.id == "from-flag"
    assert cfg.node.log_level == "DEBUG"
    assert cfg.store["max_message_size"] == 2000
    assert cfg.members[0].grpc == "h:8081"
    sc = cfg.store_config()
    assert sc.max_message_size == 2000
    assert sc.store_host == cfg.cluster.store_host and sc.cluster_name == cfg.cluster.name


def test_every_problem_is_reported(tmp_path):
    path = _write(tmp_path, """
node:
  id: "bad id"
  grpc_listen: 127.0.0.1:99999
  lgo_level: INFO
cluster:
  store_host: somehost:10911
  durability: maybe
store:
  flush_dsk_type: SYNC
  root_dir: /x
bogus: 1
""")
    with pytest.raises(ConfigError) as e:
        load_config(path, environ={})
    text = "\n".join(e.value.problems)
    for expected in ("unknown section 'bogus'", "did you mean 'log_level'", "did you mean 'flush_disk_type'",
                     "set that instead", "node.id", "outside 1..65535", "must be an IP literal", "cluster.durability"):
        assert expected in text
    assert len(e.value.problems) == 8


def test_store_values_are_type_checked_and_validated(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(None, environ={"RAFTMQ_STORE_MAPPED_FILE_SIZE_COMMIT_LOG": "many"})
    assert "must be an integer" in e.value.problems[0]
    with pytest.raises(ConfigError) as e:
        load_config(None, environ={}, assignments=["store.mapped_file_size_commit_log=100"])
    assert "mapped_file_size_commit_log" in e.value.problems[0]


def test_unquoted_booleans_for_role_label():
    assert load_config(None, environ={"RAFTMQ_KUBERNETES_ROLE_LABEL": "false"}).kubernetes.role_label == "false"
    assert load_config(None, environ={}, assignments=["kubernetes.role_label=true"]).kubernetes.role_label == "true"
    with pytest.raises(ConfigError):
        load_config(None, environ={}, assignments=["kubernetes.role_label=sometimes"])


def test_problems_found_across_keys_name_where_the_key_was_set(tmp_path):
    """issue 34: checks of cluster.* values (and the others made after reading every source) did not say which
    file (or the environment, or --set) the bad value came from; the per-key ones did."""
    path = _write(tmp_path, """
node:
  id: n0
cluster:
  durability: maybe
  members:
    - {id: n0, raft: "127.0.0.1:1", grpc: "127.0.0.1:2"}
    - {id: n1, raft: "127.0.0.1:3"}
  raft:
    raft_min_timeout: 3.5
""")
    with pytest.raises(ConfigError) as e:
        load_config(path, environ={})
    assert f"{path}: cluster.durability: 'maybe' is not one of async, sync" in e.value.problems
    assert any(p.startswith(f"{path}: cluster.members[1]: must be a mapping") for p in e.value.problems), \
        e.value.problems
    with pytest.raises(ConfigError) as e:
        load_config(path, environ={"RAFTMQ_CLUSTER_DURABILITY": "async"},
                    assignments=["cluster.members=[]", "cluster.raft.raft_max_timeout=3"])
    assert e.value.problems == [f"--set, {path}: cluster.raft: need leader_fallback_timeout < raft_min_timeout < "
                                "raft_max_timeout"], e.value.problems
    with pytest.raises(ConfigError) as e:
        load_config(None, environ={"RAFTMQ_CLUSTER_NAME": "bad name"})
    assert e.value.problems[0].startswith("environment: cluster.name: 'bad name' must be")


def test_members_must_include_this_node():
    with pytest.raises(ConfigError) as e:
        load_config(None, environ={}, assignments=['cluster.members=[{id: a, raft: "h:1", grpc: "h:2"}]'])
    assert "not among the members" in e.value.problems[0]


def test_bad_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_write(tmp_path, "node: [unclosed\n"), environ={})
    assert "not valid YAML" in e.value.problems[0]
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "nope.yaml", environ={})
    assert "cannot read" in e.value.problems[0]


def test_sample_is_valid(tmp_path):
    cfg = load_config(_write(tmp_path, sample_yaml()), environ={})
    assert cfg.node.id == "n0"


def _cli(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftmq.node", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_cli_validate_exit_codes(tmp_path):
    good = _write(tmp_path, "node:\n  id: n1\n")
    r = _cli("config", "validate", str(good))
    assert r.returncode == 0, r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("node:\n  id: 'x y'\ncluster:\n  durability: maybe\n")
    r = _cli("config", "validate", str(bad))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("config error: ") for line in lines)
    r = _cli("config", "sample")
    assert r.returncode == 0 and "grpc_listen" in r.stdout


def test_node_refuses_to_start_with_a_bad_config(tmp_path):
    r = _cli("node", "--set", "node.grpc_listen=nowhere")
    assert r.returncode == 2
    assert "node.grpc_listen" in r.stderr


def test_make_run_configs_are_valid_for_one_and_three_nodes(tmp_path):
    from raftmq.node.local_cluster import write_configs

    for n in (1, 3):
        (tmp_path / str(n)).mkdir()
        paths = write_configs(tmp_path / str(n), n)
        cfgs = [load_config(p, environ={}) for p in paths]
        assert [c.node.id for c in cfgs] == [f"n{i}" for i in range(n)]
        ports = [c.grpc_listen.port for c in cfgs] + [c.http_listen.port for c in cfgs]
        assert len(set(ports)) == 2 * n and cfgs[0].grpc_listen.port == 8081
        assert all(len(c.members) == (n if n > 1 else 0) for c in cfgs)

"""Config: the cluster.raft section (Raft tuning) and text keys taken verbatim from the environment / --set."""

from __future__ import annotations

import pytest
import yaml

from raftmq.node.config import ConfigError, load_config
from raftmq.node.config_docs import sample_yaml
from raftmq.replication import RaftSettings


def _write(tmp_path, text: str):
    p = tmp_path / "raftmq.yaml"
    p.write_text(text)
    return p


# ---------------------------------------------------------------- cluster.raft
def test_raft_defaults_and_durability_from_cluster():
    cfg = load_config(None, environ={"RAFTMQ_CLUSTER_DURABILITY": "sync"})
    assert cfg.cluster.raft == {}
    assert cfg.raft_settings() == RaftSettings(durability="sync")


def test_raft_section_from_file_env_and_set_merge_per_key(tmp_path):
    path = _write(tmp_path, "cluster:\n  raft:\n    compaction_min_entries: 300\n    linger_s: 0.01\n"
                            "    raft_min_timeout: 2\n    raft_max_timeout: 4\n    connection_timeout: 5\n")
    env = {"RAFTMQ_CLUSTER_RAFT_LINGER_S": "0.005", "RAFTMQ_CLUSTER_RAFT_PUT_TIMEOUT_S": "6",
           # cluster's own raft_* keys keep their meaning
           "RAFTMQ_CLUSTER_RAFT_ADDRESS": "h0:8091"}
    cfg = load_config(path, environ=env, assignments=["cluster.raft.max_inflight_batches=8"])
    s = cfg.raft_settings()
    assert (s.compaction_min_entries, s.linger_s, s.put_timeout_s, s.max_inflight_batches) == (300, 0.005, 6.0, 8)
    assert (s.raft_min_timeout, s.raft_max_timeout, s.connection_timeout) == (2.0, 4.0, 5.0)
    assert isinstance(s.raft_min_timeout, float)
    assert s.append_entries_period == RaftSettings().append_entries_period  # untouched keys keep defaults
    assert cfg.cluster.raft_address == "h0:8091"
    # a whole mapping from the environment works too
    cfg = load_config(None, environ={"RAFTMQ_CLUSTER_RAFT": "{compaction_min_time: 30}"})
    assert cfg.raft_settings().compaction_min_time == 30.0


@pytest.mark.parametrize("text, expected", [
    ("cluster:\n  raft:\n    lingr_s: 0.01\n", "unknown key cluster.raft.lingr_s (did you mean 'linger_s'?)"),
    ("cluster:\n  raft:\n    durability: sync\n", "cluster.raft.durability (set cluster.durability instead)"),
    ("cluster:\n  raft:\n    max_inflight_batches: many\n", "cluster.raft.max_inflight_batches: must be an integer"),
    ("cluster:\n  raft: 3\n", "cluster.raft must be a mapping"),
    ("cluster:\n  raft:\n    leader_fallback_timeout: 2.0\n", "cluster.raft: need leader_fallback_timeout"),
])
def test_raft_section_errors_say_what_to_fix(tmp_path, text, expected):
    with pytest.raises(ConfigError) as e:
        load_config(_write(tmp_path, text), environ={})
    assert any(expected in p for p in e.value.problems), e.value.problems


def test_the_old_tuning_variable_is_refused_with_the_replacement():
    with pytest.raises(ConfigError, match="RAFTMQ_CLUSTER_RAFT_"):
        load_config(None, environ={"RAFTMQ_RAFT_TUNING": '{"linger_s": 0.01}'})


def test_sample_lists_every_raft_setting_and_loads_back(tmp_path):
    text = sample_yaml()
    doc = yaml.safe_load(text)
    expected = {k: v for k, v in vars(RaftSettings()).items() if k != "durability"}
    assert doc["cluster"]["raft"] == expected
    assert load_config(_write(tmp_path, text), environ={}).raft_settings() == RaftSettings()


# ---------------------------------------------------------------- text keys verbatim
@pytest.mark.parametrize("secret", ["0123", "yes", "1e3", "null", "~", "[a]", "0x1F", "007", "on", " spaced "])
def test_secret_from_env_and_set_is_verbatim(secret):
    assert load_config(None, environ={"RAFTMQ_CLUSTER_SECRET": secret}).cluster.secret == secret
    assert load_config(None, environ={}, assignments=[f"cluster.secret={secret}"]).cluster.secret == secret


def test_other_text_keys_from_env_are_verbatim_and_typed_ones_still_parse():
    env = {"RAFTMQ_NODE_ID": "0123", "RAFTMQ_CLUSTER_NAME": "1e3", "RAFTMQ_NODE_LOG_LEVEL": "info",
           "RAFTMQ_KUBERNETES_ROLE_LABEL": "false", "RAFTMQ_STORE_FLUSH_DISK_TYPE": "SYNC",
           "RAFTMQ_NODE_AUTO_CREATE_TOPICS": "yes", "RAFTMQ_STORE_MAX_MESSAGE_SIZE": "2000"}
    cfg = load_config(None, environ=env)
    assert (cfg.node.id, cfg.cluster.name) == ("0123", "1e3")
    assert cfg.kubernetes.role_label == "false" and cfg.store["flush_disk_type"] == "SYNC"
    assert cfg.node.auto_create_topics is True and cfg.store["max_message_size"] == 2000


def test_text_keys_in_the_file_keep_numbers_as_written(tmp_path):
    path = _write(tmp_path, "node:\n  id: 0123\ncluster:\n  name: 1e3\n  secret: 0123\n"
                            "  members: [{id: 0123, raft: 'h0:8091', grpc: 'h0:8081'}, {id: 7, raft: 'h1:8091', "
                            "grpc: 'h1:8081'}]\nstore:\n  max_message_size: 0x1000\n")
    cfg = load_config(path, environ={})
    assert (cfg.node.id, cfg.cluster.name, cfg.cluster.secret) == ("0123", "1e3", "0123")
    assert [m.id for m in cfg.members] == ["0123", "7"]
    assert cfg.store["max_message_size"] == 4096 and type(cfg.store["max_message_size"]) is int
    # the same from the environment (members parsed as YAML, their ids still text as written)
    cfg = load_config(None, environ={"RAFTMQ_NODE_ID": "0123",
                                     "RAFTMQ_CLUSTER_MEMBERS": "[{id: 0123, raft: 'h0:8091', grpc: 'h0:8081'}]"})
    assert [m.id for m in cfg.members] == ["0123"]


def test_a_boolean_for_a_text_key_in_the_file_says_to_quote_it(tmp_path):
    with pytest.raises(ConfigError, match="quote it"):
        load_config(_write(tmp_path, "cluster:\n  secret: yes\n"), environ={})

"""`raftmq config validate` as a careless user meets it: every problem at once, each naming the file, exit 2 for
any of them (binary files included); `config sample` explains every key."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml

from raftmq.node.config import ConfigError, load_config
from raftmq.node.config_docs import sample_yaml
from raftmq.store.errors import StoreLoadError
from raftmq.store.topic_config import TopicConfigTable
from tests.support.processes import REPO_ROOT


def _validate(path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "proto")])
    return subprocess.run([sys.executable, "-m", "raftmq.node", "config", "validate", str(path)], capture_output=True,
                          text=True, env=env, cwd=REPO_ROOT, timeout=60)


def test_binary_file_is_exit_2_naming_the_file(tmp_path):
    path = tmp_path / "raftmq.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    r = _validate(path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"config error: {path}: ") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_every_store_problem_is_reported_with_the_file(tmp_path):
    path = tmp_path / "raftmq.yaml"
    path.write_text(yaml.safe_dump({"store": {
        "flush_interval_commit_log": -100, "flush_disk_type": "FAST", "max_message_size": "big",
        "mapped_file_size_commit_log": 12, "reput_interval_ms": 0, "nonsense_key": 1,
        "disk_max_used_space_ratio": 1.5}}))
    r = _validate(path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 7, r.stderr
    assert all(line.startswith(f"config error: {path}: ") for line in lines), r.stderr
    for expected in ("store.flush_interval_commit_log: must be > 0, got -100", "store.flush_disk_type",
                     "store.max_message_size: must be an integer", "store.mapped_file_size_commit_log",
                     "store.reput_interval_ms: must be > 0", "unknown key store.nonsense_key",
                     "store.disk_max_used_space_ratio: must be a fraction"):
        assert expected in r.stderr


@pytest.mark.parametrize("key,value", [("flush_interval_consume_queue", 0), ("clean_resource_interval", -1),
                                       ("sync_flush_timeout", 0), ("flush_commit_log_least_pages", -4)])
def test_zero_or_negative_store_intervals_are_refused(key, value):
    with pytest.raises(ConfigError) as e:
        load_config(None, environ={}, assignments=[f"store.{key}={value}"])
    assert f"store.{key}: must be" in e.value.problems[0]


def test_every_bad_raft_setting_is_reported():
    with pytest.raises(ConfigError) as e:
        load_config(None, environ={}, assignments=["cluster.raft.linger_s=-1", "cluster.raft.raft_min_timeout=-5",
                                                   "cluster.raft.append_entries_period=0"])
    assert len(e.value.problems) == 3 and all("cluster.raft." in p for p in e.value.problems)


def test_sample_has_a_comment_for_every_key(tmp_path):
    text = sample_yaml()
    lines = text.splitlines()
    keys = [i for i, line in enumerate(lines) if re.match(r"^\s+[a-z_0-9]+:", line)]
    assert len(keys) > 100
    uncommented = [lines[i] for i in keys if not lines[i - 1].lstrip().startswith("# ")]
    assert uncommented == []  # each key right under its documentation
    path = tmp_path / "sample.yaml"
    path.write_text(text)
    assert load_config(path, environ={}).node.id == "n0"
    assert set(yaml.safe_load(text)["store"]) >= {"flush_interval_commit_log", "preallocate", "max_message_size"}


def test_garbage_topics_json_names_the_file(tmp_path):
    (tmp_path / "topics.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00garbage\xff")
    with pytest.raises(StoreLoadError) as e:
        TopicConfigTable(str(tmp_path)).load()
    assert str(tmp_path / "topics.json") in str(e.value) and "not UTF-8" in str(e.value)


def test_a_bad_allowed_network_is_exit_2_naming_the_key(tmp_path):
    path = tmp_path / "raftmq.yaml"
    path.write_text(yaml.safe_dump({"security": {"allowed_client_networks": ["10.0.0.0/8", "10.0.0.300/32"],
                                                 "allowed_member_networks": ["fd00::1/8"]}}))
    r = _validate(path)
    assert r.returncode == 2, r.stderr
    assert "security.allowed_client_networks[1]: '10.0.0.300/32' is not a network" in r.stderr
    assert "security.allowed_member_networks[0]: 'fd00::1/8' has bits set beyond its prefix length" in r.stderr

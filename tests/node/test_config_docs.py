"""One source for every setting (issue 42): each key carries its documentation, and the sample, the reference page
and the chart's comments are generated from it and current."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import yaml

from raftmq.node import config_docs
from raftmq.node.config import (
    ConfigError,
    env_overrides,
    load_config,
    set_overrides,
    setting_fields,
)
from raftmq.node.config_docs import sample_yaml
from raftmq.store.setting import doc_of, setting
from tests.support.processes import REPO_ROOT

SETTINGS = config_docs.settings()


def test_every_key_carries_its_documentation():
    assert len(SETTINGS) > 100
    assert config_docs.undocumented() == []
    assert all(len(s.doc) > 15 and s.doc.endswith((".", ")")) for s in SETTINGS), \
        [s.path for s in SETTINGS if not s.doc.endswith((".", ")"))]


def test_a_field_without_documentation_is_found(monkeypatch):
    @dataclasses.dataclass
    class Section:
        documented: int = setting("Something documented.", 1)
        bare: int = 2

    fields = {f.name: f for f in dataclasses.fields(Section)}
    assert doc_of(fields["bare"]) == "" and doc_of(fields["documented"]) == "Something documented."
    monkeypatch.setattr(config_docs, "setting_fields",
                        lambda: [("node.documented", fields["documented"]), ("node.bare", fields["bare"])])
    assert config_docs.undocumented() == ["node.bare"]
    assert config_docs.main(["--check", "--root", str(REPO_ROOT)]) == 1


def test_every_key_of_the_loader_is_documented_exactly_once():
    """The documented keys are exactly the keys the loader accepts: a key the loader takes but the docs skip (or
    the other way round) fails here."""
    paths = [path for path, _ in setting_fields()]
    assert len(paths) == len(set(paths))
    accepted = set()
    for section, values in load_config(None, environ={}).to_dict().items():
        if section == "store":
            continue
        for key in values:
            accepted.add(f"{section}.{key}")
    from raftmq.node.config import _raft_fields, _store_fields

    accepted |= {f"cluster.raft.{k}" for k in _raft_fields()}
    accepted |= {f"store.{k}" for k in _store_fields() if k not in ("root_dir", "store_host", "cluster_name")}
    assert set(paths) == accepted


@pytest.mark.parametrize("s", SETTINGS, ids=lambda s: s.path)
def test_the_listed_variable_and_flag_set_the_key(s):
    """The environment variable and the --set path printed beside each key reach that key."""
    where = s.path.split(".", 1)
    expected = {where[0]: {where[1]: "x"}}
    text = "x"
    assert env_overrides({s.env: text}) == expected
    problems: list[str] = []
    assert set_overrides([s.set_flag.removeprefix("--set ").replace("VALUE", text)], problems) == expected
    assert problems == []


@pytest.mark.parametrize("s", [s for s in SETTINGS if s.choices], ids=lambda s: s.path)
def test_a_key_with_choices_takes_each_of_them_and_nothing_else(s):
    for choice in s.choices:
        extra = ["cluster.members=[{id: n0, raft: 'h:1', grpc: 'h:2'}]"] if s.path == "cluster.durability" else []
        load_config(None, environ={}, assignments=[f"{s.path}={choice}", *extra])
    with pytest.raises(ConfigError, match=s.path.replace(".", r"\.")):
        load_config(None, environ={}, assignments=[f"{s.path}=no-such-choice"])


def test_the_sample_documents_every_key_and_loads_back(tmp_path):
    text = sample_yaml()
    comments = " ".join(" ".join(line.split()[1:]) for line in text.splitlines() if line.lstrip().startswith("#"))
    for s in SETTINGS:
        assert " ".join(s.doc.replace("`", "").split()) in comments, s.path
    doc = yaml.safe_load(text)
    for s in SETTINGS:
        node = doc
        for part in s.path.split("."):
            node = node[part]
        if s.path != "cluster.raft":
            assert node == s.default, s.path
    path = tmp_path / "sample.yaml"
    path.write_text(text)
    loaded, defaults = load_config(path, environ={}), load_config(None, environ={})
    assert loaded.store_config() == defaults.store_config() and loaded.raft_settings() == defaults.raft_settings()
    for section in ("node", "kubernetes", "security"):
        assert getattr(loaded, section) == getattr(defaults, section)


def test_the_configuration_page_and_the_chart_comments_are_current():
    assert config_docs.stale_files(REPO_ROOT) == []


def test_a_stale_page_is_found(tmp_path):
    for rel in (config_docs.CONFIG_PAGE, config_docs.HELM_VALUES):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((REPO_ROOT / rel).read_text())
    page = tmp_path / config_docs.CONFIG_PAGE
    page.write_text(page.read_text().replace("Unique member id", "Unique id"))
    assert config_docs.stale_files(tmp_path) == [str(config_docs.CONFIG_PAGE)]
    r = subprocess.run([sys.executable, "-m", "raftmq.node.config_docs", "--check", "--root", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "configuration.md is stale" in r.stderr
    subprocess.run([sys.executable, "-m", "raftmq.node.config_docs", "--write", "--root", str(tmp_path)],
                   check=True, timeout=60)
    assert config_docs.stale_files(tmp_path) == []


def test_every_key_has_its_own_entry_on_the_page():
    page = (REPO_ROOT / config_docs.CONFIG_PAGE).read_text()
    for s in SETTINGS:
        if s.path != "cluster.raft":
            assert f"### `{s.path}`" in page and f"`{s.env}`" in page, s.path

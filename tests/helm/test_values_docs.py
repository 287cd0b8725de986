"""The chart's values that set a node setting one to one are checked against that setting (issue 42): same default,
a schema that takes what the node takes, the setting's own documentation as the value's comment, and a rendered
chart that really passes the value to that key."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from raftmq.node import config_docs
from raftmq.node.config import load_config
from tests.helm.chart import CHART_DIR, objects, one
from tests.helm.test_chart import FULL, _pod_env

HELM = config_docs.helm_settings()
VALUES = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
SCHEMA = json.loads((CHART_DIR / "values.schema.json").read_text())
_JSON_TYPES = {bool: {"boolean"}, int: {"integer", "number"}, float: {"number", "integer"}, str: {"string"},
               list: {"array"}, dict: {"object"}}

# A value other than the default for each, and what the chart needs around it to pass it on at all.
OTHER = {
    "cluster.name": "OtherCluster", "cluster.storeHost": "10.0.0.7:10911", "cluster.durability": "sync",
    "cluster.raft": {"linger_s": 0.005}, "node.autoCreateTopics": True, "node.logLevel": "DEBUG",
    "node.shutdownGraceSeconds": 25, "tls.http": False, "tls.raft": True, "auth.enabled": True,
    "auth.aclDefault": "allow", "auth.openHttpPaths": ["/metrics", "/health", "/ready", "/ui/login"],
    "auth.maxClockSkewSeconds": 60, "auth.consoleSessionHours": 2, "allowedNetworks.clients": ["10.1.0.0/16"],
    "allowedNetworks.members": ["10.244.0.0/16"], "allowedNetworks.trustedHttpProxies": ["10.2.0.0/16"],
}
NEEDS = {
    "tls": {"tls": {"enabled": True, "existingSecret": "raftmq-tls"}},
    "auth": {"auth": {"enabled": True, "existingSecret": "raftmq-admin"},
             "cluster": {"auth": {"existingSecret": "raftmq-raft"}}},
}


def _at(tree: dict, dotted: str):
    for part in dotted.split("."):
        tree = tree[part]
    return tree


def _schema_at(dotted: str) -> dict:
    node = SCHEMA
    for part in dotted.split("."):
        node = node["properties"][part]
    return node


def _nested(dotted: str, value) -> dict:
    out: dict = {}
    node = out
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def test_every_value_named_by_a_setting_exists_and_every_one_is_tested():
    assert len(HELM) >= 15
    assert set(OTHER) == set(HELM)
    for path in HELM:
        _at(VALUES, path)


@pytest.mark.parametrize("path", sorted(HELM))
def test_the_chart_default_is_the_node_default(path):
    assert _at(VALUES, path) == HELM[path].default


@pytest.mark.parametrize("path", sorted(HELM))
def test_the_schema_takes_what_the_node_takes(path):
    s = HELM[path]
    sub = _schema_at(path)
    jsonschema.validate(s.default, sub)
    jsonschema.validate(OTHER[path], sub)
    if "type" in sub:
        types = {sub["type"]} if isinstance(sub["type"], str) else set(sub["type"])
        assert types & _JSON_TYPES[type(s.default)], (path, types)
    if s.choices:
        assert sub.get("enum") == list(s.choices), f"{path}: the schema's enum differs from {s.path}'s choices"


def test_each_value_carries_the_documentation_of_its_key():
    text = (CHART_DIR / "values.yaml").read_text()
    assert config_docs.render_values(text) == text
    for path, s in HELM.items():
        assert f"[node setting {s.path}]" in text, path


@pytest.mark.parametrize("path", sorted(HELM))
def test_the_rendered_chart_passes_the_value_to_its_key(path, tmp_path):
    s = HELM[path]
    values = _nested(path, OTHER[path])
    for prefix, needs in NEEDS.items():
        if path.startswith(prefix + "."):
            values = _merge(needs, values)
    objs = objects(values)
    cm = one(objs, "ConfigMap", FULL)
    cfg_file = tmp_path / "raftmq.yaml"
    cfg_file.write_text(cm["data"]["raftmq.yaml"])
    cfg = load_config(cfg_file, environ=_pod_env(objs, f"{FULL}-0"))
    section, key = s.path.split(".", 1)
    got = getattr(getattr(cfg, section), key)
    want = OTHER[path]
    if path == "allowedNetworks.clients":  # the chart adds the pod's own loopback (its preStop hook's CLI)
        assert set(want) <= set(got) and set(got) - set(want) == {"127.0.0.1/32", "::1/128"}
    else:
        assert got == want, f"{path}={want!r} reached {s.path} as {got!r}"

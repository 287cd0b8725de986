"""The chart with several Raft groups (issue 38, `groups`, docs/operations/kubernetes.md#many-groups): one
StatefulSet, headless Service, leader Service and PDB per group, one client Service over all of them, and group 0
rendered exactly as a one-group release so `helm upgrade` from groups: 1 to 2 changes none of its objects.

The refusal of a lower `groups` reads the live release (`lookup`), so it is tested against a control plane:
tests/k8s/test_helm_release.py."""

from __future__ import annotations

import pytest
import yaml

from raftmq.node.config import load_config
from tests.helm.chart import NAMESPACE, RELEASE, objects, one, render
from tests.helm.test_chart import FULL, all_of, label_selector_matches, selects

DOMAIN = f"{NAMESPACE}.svc.cluster.local"


def _by_kind(objs, kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def _pod_labels(sts: dict) -> dict:
    return sts["spec"]["template"]["metadata"]["labels"]


def _node_config(cm: dict, tmp_path, pod: str, headless: str):
    """The node configuration a pod of this ConfigMap runs with (its environment as the StatefulSet sets it)."""
    path = tmp_path / f"{cm['metadata']['name']}.yaml"
    path.write_text(cm["data"]["raftmq.yaml"])
    env = {"RAFTMQ_NODE_ID": pod, "RAFTMQ_NODE_ADVERTISED_ADDRESS": f"{pod}.{headless}.{DOMAIN}:8081",
           "RAFTMQ_CLUSTER_RAFT_ADDRESS": f"{pod}.{headless}.{DOMAIN}:8091"}
    return load_config(path, environ=env)


def test_one_statefulset_headless_leader_service_and_pdb_per_group():
    objs = objects({"groups": 3})
    assert list(_by_kind(objs, "StatefulSet")) == [FULL, f"{FULL}-g1", f"{FULL}-g2"]
    assert list(_by_kind(objs, "ConfigMap")) == [FULL, f"{FULL}-g1", f"{FULL}-g2"]
    assert list(_by_kind(objs, "PodDisruptionBudget")) == [FULL, f"{FULL}-g1", f"{FULL}-g2"]
    services = _by_kind(objs, "Service")
    for name in (f"{FULL}-headless", f"{FULL}-g1-headless", f"{FULL}-g2-headless", f"{FULL}-leader",
                 f"{FULL}-g1-leader", f"{FULL}-g2-leader", FULL, f"{FULL}-g0-headless"):
        assert name in services, name
    for k, sts in enumerate(_by_kind(objs, "StatefulSet").values()):
        headless = f"{FULL}-headless" if k == 0 else f"{FULL}-g{k}-headless"
        assert sts["spec"]["serviceName"] == headless
        cm = sts["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
        assert cm == sts["metadata"]["name"]
        env = {e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["RAFTMQ_NODE_ADVERTISED_ADDRESS"] == f"$(POD_NAME).{headless}.{DOMAIN}:8081"
    for pdb in _by_kind(objs, "PodDisruptionBudget").values():
        assert pdb["spec"]["maxUnavailable"] == 1


def test_no_group_selects_another_groups_pods_and_the_client_service_selects_them_all():
    objs = objects({"groups": 3})
    groups = list(_by_kind(objs, "StatefulSet").values())
    services = _by_kind(objs, "Service")
    for k, sts in enumerate(groups):
        suffix = "" if k == 0 else f"-g{k}"
        own = sts["spec"]["selector"]["matchLabels"]
        pdb = one(objs, "PodDisruptionBudget", f"{FULL}{suffix}")["spec"]["selector"]["matchLabels"]
        leader = dict(services[f"{FULL}{suffix}-leader"]["spec"]["selector"])
        assert leader.pop("raftmq.io/role") == "leader"
        headless = services[f"{FULL}{suffix}-headless"]["spec"]["selector"]
        discovery = services[f"{FULL}-g{k}-headless"]
        assert discovery["spec"]["clusterIP"] == "None" and discovery["spec"]["publishNotReadyAddresses"]
        (anti,) = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]
        for selector in (own, pdb, leader, headless, discovery["spec"]["selector"],
                         anti["labelSelector"]["matchLabels"]):
            assert [selects(selector, _pod_labels(g)) for g in groups] == [i == k for i in range(len(groups))]
    client = services[FULL]["spec"]["selector"]
    assert all(selects(client, _pod_labels(g)) for g in groups)
    np = one(objects({"groups": 3, "networkPolicy": {"enabled": True}}), "NetworkPolicy")
    assert all(label_selector_matches(np["spec"]["podSelector"], _pod_labels(g)) for g in groups)


def test_groups_spread_over_the_nodes():
    for sts in _by_kind(objects({"groups": 2}), "StatefulSet").values():
        spread = sts["spec"]["template"]["spec"]["topologySpreadConstraints"]
        nodes = next(c for c in spread if c["topologyKey"] == "kubernetes.io/hostname")
        assert nodes["whenUnsatisfiable"] == "ScheduleAnyway"
        assert nodes["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": "raftmq",
                                                         "app.kubernetes.io/instance": RELEASE}


def test_group_zero_is_the_one_group_release_unchanged():
    """`helm upgrade` from groups: 1 to 2 (or 3) must not change group 0's StatefulSet (so no pod rolls), its
    ConfigMap (what its running members read), its PDB or its Services."""
    one_group = objects({"groups": 1})
    for n in (2, 3):
        more = objects({"groups": n})
        for kind in ("StatefulSet", "ConfigMap", "PodDisruptionBudget"):
            assert _by_kind(more, kind)[FULL] == _by_kind(one_group, kind)[FULL], kind
        for name in (f"{FULL}-headless", f"{FULL}-leader", f"{FULL}-g0-headless"):
            assert _by_kind(more, "Service")[name] == _by_kind(one_group, "Service")[name], name


def test_each_group_has_its_own_config_and_every_member_discovers_the_others(tmp_path):
    objs = objects({"groups": 3})
    pattern = f"{FULL}-g{{index}}-headless.{DOMAIN}:8081"
    services = _by_kind(objs, "Service")
    names, hosts = [], []
    for k, cm in enumerate(_by_kind(objs, "ConfigMap").values()):
        sts = f"{FULL}" if k == 0 else f"{FULL}-g{k}"
        headless = f"{sts}-headless"
        cfg = _node_config(cm, tmp_path, f"{sts}-1", headless)
        assert cfg.cluster.group_discovery == pattern
        # the pattern's name for index k is a Service over exactly this group's pods
        assert f"{FULL}-g{k}-headless" in services
        assert [m.id for m in cfg.members] == [f"{sts}-{i}" for i in range(3)]
        assert all(m.grpc.endswith(f".{headless}.{DOMAIN}:8081") for m in cfg.members)
        names.append(cfg.group_name)
        hosts.append(cfg.store_host_text)
    assert names == ["DefaultCluster", "DefaultCluster-g1", "DefaultCluster-g2"]
    assert hosts == ["127.0.0.1:10911", "127.0.0.1:10912", "127.0.0.1:10913"]


def test_the_role_lets_every_groups_pods_label_themselves():
    role = one(objects({"groups": 2}), "Role")
    pods, statefulsets = role["rules"]
    assert pods["resourceNames"] == [f"{FULL}-{i}" for i in range(3)] + [f"{FULL}-g1-{i}" for i in range(3)]
    assert statefulsets["resourceNames"] == [FULL, f"{FULL}-g1"]


def test_the_certificate_names_every_group():
    cert = one(objects({"groups": 2, "tls": {"enabled": True, "certManager": {
        "enabled": True, "issuerRef": {"name": "ca"}}}}), "Certificate")
    names = cert["spec"]["dnsNames"]
    for name in (f"{FULL}-g0-headless.{DOMAIN}", f"{FULL}-g1-headless.{DOMAIN}",
                 f"*.{FULL}-g1-headless.{DOMAIN}", f"{FULL}-g1-leader.{DOMAIN}"):
        assert name in names, name


@pytest.mark.parametrize("values, expected", [
    ({"groups": 2, "fullnameOverride": "m" * 50}, "longer than 52 characters"),
    ({"groups": 2, "cluster": {"name": "-prod"}}, "cluster.name \"-prod\" names the groups"),
    ({"groups": 2, "groupsDrained": [1]}, "groupsDrained lists group 1, but groups: 2 keeps it"),
])
def test_group_values_the_templates_refuse(values, expected):
    with pytest.raises(Exception) as e:
        render(values)
    assert expected in str(e.value)


def test_values_yaml_documents_groups():
    from tests.helm.chart import CHART_DIR

    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert values["groups"] == 1 and values["groupsDrained"] == []
    assert all_of(objects(), "StatefulSet")[0]["metadata"]["name"] == FULL


def test_notes_name_every_groups_members_and_leader():
    from tests.helm.chart import notes

    text = notes({"groups": 2})
    assert "2 Raft groups of 3 Raft members" in text
    assert f"group DefaultCluster-g1: members {FULL}-g1-<0..2>.{FULL}-g1-headless.{DOMAIN}:8081" in text
    assert f"leader {FULL}-g1-leader" in text
    assert "Raft groups" not in notes({"groups": 1})

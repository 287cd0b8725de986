"""helm/raftmq rendered by the real Helm engine: lint, Kubernetes schemas, values.schema.json, object checks."""

from __future__ import annotations

import copy
import re

import helm_python as helm
import kubernetes_validate.utils as kv
import pytest
import yaml

from tests.helm.chart import (
    CHART_DIR,
    K8S_MIN_VERSION,
    K8S_VERSION,
    NAMESPACE,
    RELEASE,
    all_of,
    lint,
    notes,
    objects,
    one,
    render,
)

FULL = f"{RELEASE}-raftmq"
HEADLESS = f"{FULL}-headless"
DOMAIN = f"{HEADLESS}.{NAMESPACE}.svc.cluster.local"

# Value sets rendered, linted and schema-validated; each must be accepted.
VALUE_SETS = {
    "defaults": None,
    "five-sync-monitored": {
        "replicas": 5,
        "cluster": {"durability": "sync", "name": "Prod", "storeHost": "10.1.2.3:10911",
                    "auth": {"existingSecret": "raftmq-raft", "secretKey": "password"},
                    "raft": {"raft_min_timeout": 2.0, "raft_max_timeout": 3.5, "compaction_min_entries": 5000}},
        "image": {"repository": "registry.example.com/raftmq", "digest": "sha256:" + "a" * 64},
        "store": {"mapped_file_size_commit_log": 268435456, "flush_disk_type": "SYNC"},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
                    "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
                    "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "raftmq"}}},
        "networkPolicy": {"enabled": True,
                          "clients": [{"namespaceSelector": {"matchLabels": {"team": "orders"}}}],
                          "metrics": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]},
        "podAntiAffinity": "soft",
        "persistence": {"size": "500Gi", "storageClassName": "fast-ssd"},
        "imagePullSecrets": [{"name": "regcred"}],
        "priorityClassName": "messaging",
    },
    "single-dev": {"replicas": 1, "allowSingleReplica": True, "persistence": {"size": "1Gi"},
                   "store": {"mapped_file_size_commit_log": 134217728, "max_hash_slot_num": 500000,
                             "max_index_num": 2000000}},
    "admission-policy": {"rbac": {"admissionPolicy": {"enabled": True}}},
    "minimal-features": {
        "roleLabel": {"enabled": False}, "leaderService": {"enabled": False},
        "podDisruptionBudget": {"enabled": False}, "preStop": {"enabled": False},
        "podAntiAffinity": "none", "zoneSpread": {"enabled": False}, "tests": {"enabled": False},
        "serviceAccount": {"create": False},
    },
    "three-groups": {"groups": 3, "networkPolicy": {"enabled": True},
                     "metrics": {"serviceMonitor": {"enabled": True}}},
    "custom-placement": {
        "fullnameOverride": "mq",
        "node": {"listenHost": "[::]", "logLevel": "DEBUG"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["mq"]}]}]}}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "DoNotSchedule",
                                       "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": RELEASE}}}],
        "nodeSelector": {"pool": "mq"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "mq", "effect": "NoSchedule"}],
        "service": {"type": "LoadBalancer", "annotations": {"x": "y"}},
        "membership": {"auto": False},
    },
}


def _with(path: str, value):
    """{"a": {"b": value}} from "a.b"."""
    out: dict = {}
    cur = out
    keys = path.split(".")
    for k in keys[:-1]:
        cur = cur.setdefault(k, {})
    cur[keys[-1]] = value
    return out


# Values the chart must refuse, with a fragment of the reason Helm gives.
BAD_VALUES = {
    "even-4": ({"replicas": 4}, "/replicas"),
    "even-2": ({"replicas": 2}, "/replicas"),
    "one-without-override": ({"replicas": 1}, "allowSingleReplica"),
    "zero": ({"replicas": 0}, "/replicas"),
    "replicas-string": ({"replicas": "3"}, "/replicas"),
    "size-missing": (_with("persistence.size", None), "size"),
    "size-empty": (_with("persistence.size", ""), "/persistence/size"),
    "size-garbage": (_with("persistence.size", "twenty gigs"), "/persistence/size"),
    "durability": (_with("cluster.durability", "fast"), "/cluster/durability"),
    "durability-case": (_with("cluster.durability", "SYNC"), "/cluster/durability"),
    "typo-top-level": ({"replica": 3}, "replica"),
    "anti-affinity": ({"podAntiAffinity": "sometimes"}, "/podAntiAffinity"),
    "store-host-dns": (_with("cluster.storeHost", "broker.example.com:10911"), "/cluster/storeHost"),
    "log-level": (_with("node.logLevel", "verbose"), "/node/logLevel"),
    "pdb-two": (_with("podDisruptionBudget.maxUnavailable", 2), "maxUnavailable"),
    "port": (_with("ports.raft", 70000), "/ports/raft"),
    "grace-too-short": ({"terminationGracePeriodSeconds": 1}, "terminationGracePeriodSeconds"),
    "probe-typo": (_with("probes.readiness.periodSecond", 5), "periodSecond"),
    "digest": (_with("image.digest", "latest"), "/image/digest"),
    "raft-durability": (_with("cluster.raft", {"durability": "sync"}), "/cluster/raft"),
    "raft-nested": (_with("cluster.raft", {"raft_min_timeout": {"seconds": 2}}), "/cluster/raft"),
    "groups-zero": ({"groups": 0}, "/groups"),
    "groups-string": ({"groups": "2"}, "/groups"),
    "groups-fraction": ({"groups": 1.5}, "/groups"),
    "groups-drained-zero": ({"groupsDrained": [0]}, "/groupsDrained"),
}

# Refused by a template `fail` (needs the other values to decide).
@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def value_set(request):
    return request.param, VALUE_SETS[request.param]


@pytest.fixture(scope="module")
def default_objects():
    return objects()


def sts(objs):
    """Group 0's StatefulSet (the only one unless ``groups`` > 1: tests/helm/test_chart_groups.py)."""
    return next(o for o in objs if o["kind"] == "StatefulSet")


def container(objs):
    return sts(objs)["spec"]["template"]["spec"]["containers"][0]


def pod_labels(objs):
    return sts(objs)["spec"]["template"]["metadata"]["labels"]


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def label_selector_matches(selector: dict, labels: dict) -> bool:
    """A LabelSelector (matchLabels, and matchExpressions with In) against a pod's labels."""
    return selects(selector.get("matchLabels", {}), labels) and all(
        e["operator"] == "In" and labels.get(e["key"]) in e["values"] for e in selector.get("matchExpressions", []))


# ---------------------------------------------------------------- lint and schemas


@pytest.mark.parametrize("kube", [K8S_MIN_VERSION, K8S_VERSION])
def test_lint_strict_is_clean(value_set, kube):
    name, values = value_set
    report = lint(values, kube_version=kube)
    assert report["errors"] == []
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == [], problems


def test_chart_declares_the_oldest_kubernetes_it_is_validated_against():
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={K8S_MIN_VERSION}.0-0"


# Value sets that need a newer Kubernetes than the chart's minimum (ValidatingAdmissionPolicy v1: 1.30).
NEEDS_NEWER = {"admission-policy": "1.30"}


@pytest.mark.parametrize("kube", [K8S_MIN_VERSION, K8S_VERSION])
def test_every_manifest_validates_against_the_kubernetes_schemas(value_set, kube):
    name, values = value_set
    kube = max(kube, NEEDS_NEWER.get(name, kube), key=lambda v: tuple(map(int, v.split("."))))
    objs = objects(values)
    assert objs
    checked = 0
    for obj in objs:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # CRDs of the Prometheus operator: checked in test_service_monitor/test_prometheus_rule
        kv.validate(obj, kube, strict=True)
        checked += 1
    assert checked >= 4


def test_schema_validation_can_fail():
    """The validator itself is live: a broken StatefulSet is rejected."""
    broken = copy.deepcopy(sts(objects()))
    broken["spec"]["replicas"] = "three"
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, K8S_VERSION, strict=True)
    broken = copy.deepcopy(sts(objects()))
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["pathh"] = "/x"
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, K8S_VERSION, strict=True)


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_values_schema_rejects_bad_values(case):
    values, fragment = BAD_VALUES[case]
    with pytest.raises(helm.HelmValuesError) as err:
        render(values)
    assert fragment in str(err.value)
    report = lint(values)
    assert report["errors"], f"helm lint --strict accepted {values}"


def test_a_scale_changes_the_membership_by_itself_and_rolls_no_pod():
    """membership.auto: new pods ask to join, the leader retires pods beyond replicas (docs/design/membership.md);
    the member list in the config is only the seed, so a scale must not restart the running members."""
    three, five = objects(), objects({"replicas": 5})
    for objs in (three, five):
        config = yaml.safe_load(one(objs, "ConfigMap")["data"]["raftmq.yaml"])
        assert config["cluster"]["auto_join"] is True and config["kubernetes"]["membership"] == "auto"
    annotations = [sts(o)["spec"]["template"]["metadata"]["annotations"]["checksum/config"] for o in (three, five)]
    assert annotations[0] == annotations[1]
    manual = yaml.safe_load(one(objects({"membership": {"auto": False}}), "ConfigMap")["data"]["raftmq.yaml"])
    assert manual["cluster"]["auto_join"] is False and manual["kubernetes"]["membership"] == "false"


# ---------------------------------------------------------------- StatefulSet


def test_statefulset_shape(default_objects):
    s = sts(default_objects)
    spec = s["spec"]
    assert spec["replicas"] == 3
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["serviceName"] == HEADLESS
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    mounts = {m["name"]: m for m in container(default_objects)["volumeMounts"]}
    assert mounts["data"]["mountPath"] == "/data"
    assert "checksum/config" in spec["template"]["metadata"]["annotations"]
    assert container(default_objects)["resources"]["requests"]["memory"]


def test_config_checksum_follows_the_config():
    a = sts(objects())["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    b = sts(objects({"cluster": {"durability": "sync"}}))["spec"]["template"]["metadata"]["annotations"]
    assert a != b["checksum/config"]


def test_selector_matches_template_labels_and_never_uses_the_role(value_set):
    _, values = value_set
    objs = objects(values)
    s = sts(objs)
    selector = s["spec"]["selector"]["matchLabels"]
    assert selects(selector, pod_labels(objs))
    assert "raftmq.io/role" not in selector and "raftmq.io/role" not in pod_labels(objs)


def test_probes_are_present_and_mean_different_things(default_objects):
    c = container(default_objects)
    startup, liveness, readiness = c["startupProbe"], c["livenessProbe"], c["readinessProbe"]
    assert liveness["httpGet"]["path"] == "/health"  # process alive; never looks at peers
    assert readiness["httpGet"]["path"] == "/ready"  # serving clients
    assert startup["httpGet"]["path"] == "/health"
    assert {p["httpGet"]["port"] for p in (startup, liveness, readiness)} == {"http"}
    assert liveness != readiness and startup != liveness
    # Startup tolerates a long recovery (at least 30 minutes) before liveness may restart the pod.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800
    assert liveness["periodSeconds"] * liveness["failureThreshold"] < 1800


def test_pod_and_container_security(default_objects):
    pod = sts(default_objects)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(default_objects)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
    assert sc["runAsNonRoot"] is True
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    mounts = {m["mountPath"]: m["name"] for m in container(default_objects)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert mounts["/etc/raftmq"] == "config"


def test_hard_anti_affinity_and_zone_spread_by_default(default_objects):
    pod = sts(default_objects)["spec"]["template"]["spec"]
    labels = pod_labels(default_objects)
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert selects(term["labelSelector"]["matchLabels"], labels)
    assert term["labelSelector"]["matchLabels"] == sts(default_objects)["spec"]["selector"]["matchLabels"]
    spread, nodes = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert selects(spread["labelSelector"]["matchLabels"], labels)
    # issue 38: every group's members spread over the nodes, preferred only
    assert (nodes["topologyKey"], nodes["whenUnsatisfiable"]) == ("kubernetes.io/hostname", "ScheduleAnyway")
    assert nodes["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": "raftmq",
                                                     "app.kubernetes.io/instance": RELEASE}


def test_soft_and_custom_affinity():
    soft = sts(objects({"podAntiAffinity": "soft"}))["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in soft
    assert soft["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 100
    custom = VALUE_SETS["custom-placement"]
    pod = sts(objects(custom))["spec"]["template"]["spec"]
    assert pod["affinity"] == custom["affinity"]
    assert pod["topologySpreadConstraints"] == custom["topologySpreadConstraints"]
    none = sts(objects({"podAntiAffinity": "none"}))["spec"]["template"]["spec"]
    assert "affinity" not in none


def test_termination_grace_covers_the_pre_stop_transfer_and_shutdown(default_objects):
    pod = sts(default_objects)["spec"]["template"]["spec"]
    command = container(default_objects)["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["python", "/etc/raftmq/pre-stop.py"]
    hook_timeout = float(command[command.index("--timeout") + 1])
    config = yaml.safe_load(one(default_objects, "ConfigMap")["data"]["raftmq.yaml"])
    assert pod["terminationGracePeriodSeconds"] > hook_timeout + config["node"]["shutdown_grace_seconds"]
    assert one(default_objects, "ConfigMap")["data"]["pre-stop.py"].startswith('"""preStop hook')


# ---------------------------------------------------------------- Services, PDB, identity


def test_services_select_the_broker_pods(value_set):
    _, values = value_set
    objs = objects(values)
    every_group = [g["spec"]["template"]["metadata"]["labels"] for g in all_of(objs, "StatefulSet")]
    ports = {p["name"] for p in container(objs)["ports"]}
    services = {s["metadata"]["name"]: s for s in all_of(objs, "Service")}
    for svc in services.values():
        selector = dict(svc["spec"]["selector"])
        role = selector.pop("raftmq.io/role", None)
        assert any(selects(selector, labels) for labels in every_group), svc["metadata"]["name"]
        if role is not None:
            assert role == "leader" and svc["metadata"]["name"].endswith("-leader")
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in ports


def test_headless_peer_service_publishes_unready_members(default_objects):
    svc = one(default_objects, "Service", HEADLESS)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert {p["name"] for p in svc["spec"]["ports"]} == {"grpc", "http", "raft"}
    client = one(default_objects, "Service", FULL)
    assert client["spec"].get("publishNotReadyAddresses") is not True
    assert {p["port"] for p in client["spec"]["ports"]} == {8081}


def test_leader_service_selects_only_the_leader(default_objects):
    svc = one(default_objects, "Service", f"{FULL}-leader")
    assert svc["spec"]["selector"]["raftmq.io/role"] == "leader"
    leader_pod = {**pod_labels(default_objects), "raftmq.io/role": "leader"}
    follower_pod = {**pod_labels(default_objects), "raftmq.io/role": "follower"}
    assert selects(svc["spec"]["selector"], leader_pod)
    assert not selects(svc["spec"]["selector"], follower_pod)
    assert not selects(svc["spec"]["selector"], pod_labels(default_objects))


def test_pdb_keeps_a_quorum(default_objects):
    pdb = one(default_objects, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == sts(default_objects)["spec"]["selector"]["matchLabels"]
    assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels(default_objects))


@pytest.mark.parametrize("replicas", [1, 3, 5, 7])
def test_members_follow_replicas_and_use_stable_dns_names(replicas):
    values = {"replicas": replicas, "allowSingleReplica": replicas == 1}
    objs = objects(values)
    config = yaml.safe_load(one(objs, "ConfigMap")["data"]["raftmq.yaml"])
    members = config["cluster"]["members"]
    pods = [f"{FULL}-{i}" for i in range(replicas)]
    assert [m["id"] for m in members] == pods
    for m in members:
        assert m["raft"] == f"{m['id']}.{DOMAIN}:8091"
        assert m["grpc"] == f"{m['id']}.{DOMAIN}:8081"
    assert sts(objs)["spec"]["replicas"] == replicas
    assert config["node"]["data_dir"].startswith("/data/")


def _pod_env(objs, pod_name: str) -> dict[str, str]:
    """The container's env as the kubelet resolves it for one pod ($(VAR) references expanded)."""
    env: dict[str, str] = {}
    for e in container(objs)["env"]:
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], e["value"])
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[e["name"]] = pod_name
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[e["name"]] = NAMESPACE
        elif "secretKeyRef" in e.get("valueFrom", {}):
            env[e["name"]] = "s3cret-from-secret"
    return env


@pytest.mark.parametrize("name", ["defaults", "five-sync-monitored", "custom-placement"])
def test_each_pod_gets_a_config_the_node_accepts(name, tmp_path):
    """The rendered YAML plus each pod's RAFTMQ_* env goes through the node's own config loader."""
    from raftmq.node.config import load_config

    values = VALUE_SETS[name]
    objs = objects(values)
    full = (values or {}).get("fullnameOverride") or FULL
    cm = one(objs, "ConfigMap", full)
    path = tmp_path / "raftmq.yaml"
    path.write_text(cm["data"]["raftmq.yaml"])
    config = yaml.safe_load(cm["data"]["raftmq.yaml"])
    for i in range(sts(objs)["spec"]["replicas"]):
        pod = f"{full}-{i}"
        env = _pod_env(objs, pod)
        cfg = load_config(path, environ=env)
        me = next(m for m in cfg.members if m.id == cfg.node.id)
        assert cfg.node.id == pod
        assert cfg.cluster.raft_address == me.raft
        assert cfg.advertised_address == me.grpc
        assert cfg.kubernetes.role_label == "auto"
        assert len(cfg.members) == len(config["cluster"]["members"])
        if "auth" in (values or {}).get("cluster", {}):
            assert cfg.cluster.secret == "s3cret-from-secret"
        for key, value in (values or {}).get("cluster", {}).get("raft", {}).items():
            assert getattr(cfg.raft_settings(), key) == value


# ---------------------------------------------------------------- RBAC


def test_rbac_is_minimal(default_objects):
    role = one(default_objects, "Role")
    assert role["rules"] == [{
        "apiGroups": [""], "resources": ["pods"], "verbs": ["patch"],
        "resourceNames": [f"{FULL}-{i}" for i in range(3)],
    }, {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get"], "resourceNames": [FULL]}]
    binding = one(default_objects, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    sa = one(default_objects, "ServiceAccount")
    pod = sts(default_objects)["spec"]["template"]["spec"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": NAMESPACE}]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True
    assert sa["automountServiceAccountToken"] is False
    assert not all_of(default_objects, "ClusterRole") and not all_of(default_objects, "ClusterRoleBinding")


def test_role_names_follow_replicas():
    role = one(objects({"replicas": 5}), "Role")
    assert role["rules"][0]["resourceNames"] == [f"{FULL}-{i}" for i in range(5)]


def test_only_the_statefulset_is_read_without_role_labels():
    objs = objects({"roleLabel": {"enabled": False}})
    assert one(objs, "Role")["rules"] == [
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get"], "resourceNames": [FULL]}]
    assert sts(objs)["spec"]["template"]["spec"]["automountServiceAccountToken"] is True


def test_no_api_access_without_role_labels_and_automatic_membership():
    objs = objects({"roleLabel": {"enabled": False}, "membership": {"auto": False}})
    assert not all_of(objs, "Role") and not all_of(objs, "RoleBinding")
    assert sts(objs)["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    config = yaml.safe_load(one(objs, "ConfigMap")["data"]["raftmq.yaml"])
    assert config["kubernetes"]["role_label"] == "false"


def test_downward_api_env_for_the_role_labeler(default_objects):
    env = {e["name"]: e for e in container(default_objects)["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


# ---------------------------------------------------------------- optional objects


def test_optional_objects_are_off_by_default(default_objects):
    kinds = {o["kind"] for o in default_objects}
    assert {"ServiceMonitor", "PrometheusRule", "Certificate"}.isdisjoint(kinds)
    assert "NetworkPolicy" in kinds  # on by default (issue 14): the Raft port only among members


def test_service_monitor_scrapes_every_member_through_the_peer_service():
    objs = objects(VALUE_SETS["five-sync-monitored"])
    sm = one(objs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prom"
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == "http" and endpoint["path"] == "/metrics"
    matched = [s for s in all_of(objs, "Service") if selects(sm["spec"]["selector"]["matchLabels"],
                                                             s["metadata"]["labels"])]
    assert [s["metadata"]["name"] for s in matched] == [HEADLESS]
    assert "http" in {p["name"] for p in matched[0]["spec"]["ports"]}
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]


def test_prometheus_rule_covers_raft_and_storage():
    rule = one(objects(VALUE_SETS["five-sync-monitored"]), "PrometheusRule")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    exprs = " ".join(r["expr"] for r in alerts.values())
    for metric in ("raftmq_raft_has_leader", "raftmq_raft_leader_changes_total", "raftmq_raft_term",
                   "rocketmq_storage_dispatch_behind_bytes", "raftmq_store_disk_used_ratio",
                   "kubelet_volume_stats_used_bytes"):
        assert metric in exprs, metric
    for alert in alerts.values():
        assert "{{" not in alert["expr"]  # Helm rendered everything; only annotations keep Prometheus templates
        assert f'namespace="{NAMESPACE}"' in alert["expr"]
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
    assert alerts["RaftmqNoLeader"]["labels"]["severity"] == "critical"
    assert "< 3" in alerts["RaftmqMembersDown"]["expr"]  # quorum of 5
    assert "{{ $labels.pod }}" in alerts["RaftmqDispatchBehind"]["annotations"]["description"]


def test_network_policy_keeps_raft_among_members():
    objs = objects(VALUE_SETS["five-sync-monitored"])
    np = one(objs, "NetworkPolicy")
    labels = pod_labels(objs)
    assert label_selector_matches(np["spec"]["podSelector"], labels)
    raft_rules = [r for r in np["spec"]["ingress"] if any(p["port"] == "raft" for p in r["ports"])]
    assert len(raft_rules) == 1
    (peer,) = raft_rules[0]["from"]
    assert peer == {"podSelector": np["spec"]["podSelector"]}  # the brokers of every group, and nothing else
    assert not label_selector_matches(peer["podSelector"], one(objs, "Pod")["metadata"]["labels"])
    grpc_rules = [r for r in np["spec"]["ingress"] if r["ports"] == [{"port": "grpc", "protocol": "TCP"}]]
    (client_rule,) = grpc_rules
    assert {"podSelector": {"matchLabels": {f"{FULL}-client": "true"}}} in client_rule["from"]
    test_pod = one(objs, "Pod")
    assert test_pod["metadata"]["labels"][f"{FULL}-client"] == "true"


# ---------------------------------------------------------------- helm test, NOTES


def test_helm_test_writes_through_the_quorum_and_reads_from_every_member(default_objects):
    pod = one(default_objects, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    c = pod["spec"]["containers"][0]
    assert c["image"] == container(default_objects)["image"]
    script = c["args"][0]
    assert "raftmq produce" in script and "raftmq query" in script
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["SERVER"] == f"{FULL}.{NAMESPACE}.svc.cluster.local:8081"
    assert env["MEMBERS"].split() == [f"{FULL}-{i}.{DOMAIN}:8081" for i in range(3)]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["restartPolicy"] == "Never"


def test_notes_say_how_to_produce_and_consume():
    text = notes()
    assert "kubectl -n mq run raftmq-client" in text
    assert "raftmq produce orders" in text and "raftmq consume my-group orders" in text
    assert f"port-forward svc/{FULL}-leader 8081:8081" in text
    assert "helm test rel" in text
    assert "WARNING" in notes({"replicas": 1, "allowSingleReplica": True})


def test_packaged_chart_renders_the_same(tmp_path):
    """`helm package` honours .helmignore: the archive must still carry the hook and schema, not the e2e script."""
    archive = helm.package(str(CHART_DIR), destination=str(tmp_path))
    with helm.Chart.load(archive) as chart:
        names = {f["name"] for f in chart.files}
        assert "files/pre-stop.py" in names and "README.md" in names
        assert not any(n.startswith("ci/") for n in names)
        assert chart.schema is not None
        packaged = chart.render(None, name=RELEASE, namespace=NAMESPACE, is_install=True)
        with pytest.raises(helm.HelmValuesError):
            chart.render({"replicas": 2}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    with helm.Chart.load(CHART_DIR) as chart:
        assert chart.render(None, name=RELEASE, namespace=NAMESPACE, is_install=True) == packaged


def test_admission_policy_binds_the_labelers_identity_to_its_own_pod_and_label():
    objs = objects(VALUE_SETS["admission-policy"])
    policy = one(objs, "ValidatingAdmissionPolicy")
    binding = one(objs, "ValidatingAdmissionPolicyBinding")
    sa = one(objs, "ServiceAccount")["metadata"]["name"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    (cond,) = policy["spec"]["matchConditions"]
    assert cond["expression"] == f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:{sa}"'
    checks = " ".join(v["expression"] for v in policy["spec"]["validations"])
    assert "authentication.kubernetes.io/pod-name" in checks and "raftmq.io/role" in checks
    assert "object.spec == oldObject.spec" in checks
    for selector in (policy["spec"]["matchConstraints"]["namespaceSelector"],
                     binding["spec"]["matchResources"]["namespaceSelector"]):
        assert selector == {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
    assert not all_of(objects(), "ValidatingAdmissionPolicy")
    no_labels = {"rbac": {"admissionPolicy": {"enabled": True}}, "roleLabel": {"enabled": False}}
    assert not all_of(objects(no_labels), "ValidatingAdmissionPolicy")

"""`helm install / upgrade` of a many-group release against a real API server with real controllers (issue 38,
docs/operations/kubernetes.md#many-groups): a 2-group install, an upgrade from groups: 1 to 2 that leaves group
0's pods untouched (same uid, same spec, no new controller revision), and a downgrade refused until the removed
group is listed as drained. kwok marks the pods Running and Ready; the containers do not run."""

from __future__ import annotations

import helm_python as helm
import pytest
from kubernetes import client as k8s

from tests.helm.chart import CHART_DIR
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e
RELEASE = "mg"
FULL = f"{RELEASE}-raftmq"
BASE = {"persistence": {"size": "4Gi"}}


def _values(groups: int, **more) -> dict:
    return {**BASE, "groups": groups, **more}


def _pods(c, ns: str, component: str) -> dict[str, k8s.V1Pod]:
    pods = k8s.CoreV1Api(c).list_namespaced_pod(
        ns, label_selector=f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}").items
    return {p.metadata.name: p for p in pods}


def _slice_pods(c, ns: str, service: str) -> set[str]:
    slices = k8s.DiscoveryV1Api(c).list_namespaced_endpoint_slice(
        ns, label_selector=f"kubernetes.io/service-name={service}").items
    return {e.target_ref.name for s in slices for e in (s.endpoints or []) if e.target_ref is not None}


def _ready(c, ns: str, sts: str) -> bool:
    return (k8s.AppsV1Api(c).read_namespaced_stateful_set(sts, ns).status.ready_replicas or 0) == 3


@pytest.fixture(scope="module")
def ns(control_plane):
    namespace = "helm-groups"
    yield namespace
    with helm.Config(kubeconfig_path=str(control_plane.kubeconfig), namespace=namespace) as cfg:
        try:
            cfg.uninstall(RELEASE, wait="watcher", timeout=180)
        except Exception:  # the test failed before installing
            pass


def test_one_to_two_groups_adds_a_group_and_leaves_group_zero_untouched_and_a_downgrade_is_refused(
        control_plane, ns):
    c = control_plane.api_client()
    apps = k8s.AppsV1Api(c)
    with helm.Config(kubeconfig_path=str(control_plane.kubeconfig), namespace=ns) as cfg:
        rel = cfg.install(str(CHART_DIR), RELEASE, _values(1), namespace=ns, create_namespace=True,
                          wait="watcher", timeout=240)
        assert rel["status"] == "deployed", rel
        wait_for(lambda: _ready(c, ns, FULL), timeout=120, what="group 0 ready")
        group0 = {n: (p.metadata.uid, p.spec.to_dict()) for n, p in _pods(c, ns, "broker").items()}
        assert sorted(group0) == [f"{FULL}-{i}" for i in range(3)]
        revision = apps.read_namespaced_stateful_set(FULL, ns).status.update_revision

        rel = cfg.upgrade(str(CHART_DIR), RELEASE, _values(2), namespace=ns, wait="watcher", timeout=300)
        assert rel["status"] == "deployed", rel
        wait_for(lambda: _ready(c, ns, f"{FULL}-g1"), timeout=120, what="group 1 ready")

        # group 0: the same pods (uid), the same spec, no new controller revision
        after = {n: (p.metadata.uid, p.spec.to_dict()) for n, p in _pods(c, ns, "broker").items()}
        assert after == group0
        sts0 = apps.read_namespaced_stateful_set(FULL, ns)
        assert sts0.status.update_revision == revision and sts0.status.current_revision == revision
        # group 1: its own StatefulSet, PVCs, Services and PDB
        group1 = _pods(c, ns, "broker-g1")
        assert sorted(group1) == [f"{FULL}-g1-{i}" for i in range(3)]
        claims = {p.metadata.name for p in k8s.CoreV1Api(c).list_namespaced_persistent_volume_claim(ns).items}
        assert claims == {f"data-{FULL}-{i}" for i in range(3)} | {f"data-{FULL}-g1-{i}" for i in range(3)}
        assert k8s.PolicyV1Api(c).read_namespaced_pod_disruption_budget(f"{FULL}-g1", ns).spec.max_unavailable == 1
        # a group's members on different nodes; 6 members over 3 nodes: two on each
        nodes1 = [p.spec.node_name for p in group1.values()]
        assert len(set(nodes1)) == 3, nodes1
        every = [p.spec.node_name for p in list(_pods(c, ns, "broker").values()) + list(group1.values())]
        assert sorted(every.count(n) for n in set(every)) == [2, 2, 2], every
        # one client Service over every group; per group its headless (discovery) Service
        wait_for(lambda: _slice_pods(c, ns, FULL) == set(group0) | set(group1), timeout=60, interval=0.5,
                 what="the client Service's slices hold both groups' members")
        wait_for(lambda: _slice_pods(c, ns, f"{FULL}-g1-headless") == set(group1), timeout=60, interval=0.5,
                 what="group 1's headless Service holds its members")
        wait_for(lambda: _slice_pods(c, ns, f"{FULL}-g0-headless") == set(group0), timeout=60, interval=0.5,
                 what="group 0's discovery Service holds its members")

        # going down is refused, naming the group and how to confirm; nothing changes
        with pytest.raises(Exception) as refused:
            cfg.upgrade(str(CHART_DIR), RELEASE, _values(1), namespace=ns, wait="watcher", timeout=120)
        assert "removes group(s) DefaultCluster-g1" in str(refused.value), refused.value
        assert "groupsDrained={1}" in str(refused.value)
        assert sorted(_pods(c, ns, "broker-g1")) == sorted(group1)

        # drained and confirmed: group 1 goes, group 0 stays as it was
        rel = cfg.upgrade(str(CHART_DIR), RELEASE, _values(1, groupsDrained=[1]), namespace=ns, wait="watcher",
                          timeout=300)
        assert rel["status"] == "deployed", rel
        wait_for(lambda: not _pods(c, ns, "broker-g1"), timeout=120, what="group 1's pods deleted")
        assert {n: (p.metadata.uid, p.spec.to_dict()) for n, p in _pods(c, ns, "broker").items()} == group0

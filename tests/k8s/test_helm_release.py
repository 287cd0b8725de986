"""`helm install / upgrade / test / uninstall` of the chart against a real API server, with real controllers.

The server validates every object (schemas, admission, RBAC), the StatefulSet controller creates the pods, the
PV controller binds their claims, the EndpointSlice controller fills the Services, the garbage collector
removes what the release owned. Only the containers do not run (kwok marks the pods Running and Ready).
"""

from __future__ import annotations

import helm_python as helm
import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tests.helm.chart import CHART_DIR
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e
RELEASE = "mq"
INSTANCE = {"app.kubernetes.io/instance": RELEASE}


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


@pytest.fixture(scope="module")
def release(control_plane):
    """A 3-member release in namespace `helm-e2e` with the admission policy on (uninstalled by the last test)."""
    ns = "helm-e2e"
    with helm.Config(kubeconfig_path=str(control_plane.kubeconfig), namespace=ns) as cfg:
        rel = cfg.install(str(CHART_DIR), RELEASE, {"rbac": {"admissionPolicy": {"enabled": True}},
                                                     "persistence": {"size": "4Gi"}},
                          namespace=ns, create_namespace=True, wait="watcher", timeout=240)
    assert rel["status"] == "deployed", rel
    return ns


def _core(plane) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(plane.api_client())


def test_install_creates_ready_members_with_bound_volumes(control_plane, release):
    c = control_plane.api_client()
    sts = k8s.AppsV1Api(c).read_namespaced_stateful_set(f"{RELEASE}-raftmq", release)
    assert sts.status.ready_replicas == 3
    pvcs = k8s.CoreV1Api(c).list_namespaced_persistent_volume_claim(release).items
    assert sorted(p.metadata.name for p in pvcs) == [f"data-{RELEASE}-raftmq-{i}" for i in range(3)]
    assert all(p.status.phase == "Bound" for p in pvcs)
    pdb = k8s.PolicyV1Api(c).read_namespaced_pod_disruption_budget(f"{RELEASE}-raftmq", release)
    wait_for(lambda: k8s.PolicyV1Api(c).read_namespaced_pod_disruption_budget(
        f"{RELEASE}-raftmq", release).status.current_healthy == 3, timeout=60, what="PDB sees 3 healthy")
    assert pdb.spec.max_unavailable == 1 or pdb.spec.min_available in (2, "2")
    # the client Service's EndpointSlices come to hold every ready member (the EndpointSlice controller
    # catches up with pod readiness on its own schedule, so this is awaited, not read once)
    members = {f"{RELEASE}-raftmq-{i}" for i in range(3)}

    def ready_endpoints() -> set[str]:
        slices = k8s.DiscoveryV1Api(c).list_namespaced_endpoint_slice(
            release, label_selector=f"kubernetes.io/service-name={RELEASE}-raftmq").items
        return {e.target_ref.name for s in slices for e in (s.endpoints or []) if e.conditions.ready}

    wait_for(lambda: ready_endpoints() == members, timeout=60, interval=0.5,
             what="every member ready in the Service's slices")


def test_upgrade_rolls_the_pods_when_the_config_changes(control_plane, release):
    c = control_plane.api_client()
    before = {p.metadata.name: p.metadata.uid for p in k8s.CoreV1Api(c).list_namespaced_pod(
        release, label_selector=_selector(INSTANCE)).items}
    with helm.Config(kubeconfig_path=str(control_plane.kubeconfig), namespace=release) as cfg:
        rel = cfg.upgrade(str(CHART_DIR), RELEASE, {"rbac": {"admissionPolicy": {"enabled": True}},
                                                     "persistence": {"size": "4Gi"}, "node": {"logLevel": "DEBUG"}},
                          namespace=release, wait="watcher", timeout=300)
    assert rel["revision"] == 2 and rel["status"] == "deployed"

    def rolled() -> bool:
        pods = k8s.CoreV1Api(c).list_namespaced_pod(release, label_selector=_selector(INSTANCE)).items
        members = {p.metadata.name: p.metadata.uid for p in pods if p.metadata.name in before}
        return len(members) == 3 and all(before[n] != uid for n, uid in members.items())

    wait_for(rolled, timeout=180, what="every member pod replaced by the upgrade")


def test_pod_bound_token_may_label_only_its_own_pod_and_only_the_role(control_plane, release, tmp_path):
    env = control_plane.pod_environment(release, f"{RELEASE}-raftmq-0", f"{RELEASE}-raftmq", tmp_path / "sa")
    conf = k8s.Configuration()
    conf.host = control_plane.server
    conf.ssl_ca_cert = str(tmp_path / "sa" / "ca.crt")
    conf.api_key = {"authorization": "Bearer " + (tmp_path / "sa" / "token").read_text()}
    assert env["POD_NAME"] == f"{RELEASE}-raftmq-0"
    member = k8s.CoreV1Api(k8s.ApiClient(conf))

    member.patch_namespaced_pod(f"{RELEASE}-raftmq-0", release, {"metadata": {"labels": {"raftmq.io/role": "follower"}}})
    for pod, patch, why in [
        (f"{RELEASE}-raftmq-1", {"metadata": {"labels": {"raftmq.io/role": "leader"}}}, "only label its own pod"),
        (f"{RELEASE}-raftmq-0", {"metadata": {"labels": {"app": "x"}}}, "only change the raftmq.io/role label"),
        (f"{RELEASE}-raftmq-0", {"metadata": {"annotations": {"a": "b"}}}, "spec, annotations or finalizers"),
    ]:
        with pytest.raises(ApiException) as err:
            member.patch_namespaced_pod(pod, release, patch)
        assert err.value.status in (403, 422) and why in err.value.body, err.value.body
    for forbidden in (lambda: member.list_namespaced_secret(release), lambda: member.list_namespaced_pod(release),
                      lambda: member.delete_namespaced_pod(f"{RELEASE}-raftmq-1", release)):
        with pytest.raises(ApiException) as err:
            forbidden()
        assert err.value.status == 403


def test_helm_test_runs_and_uninstall_leaves_nothing_behind(control_plane, release):
    c = control_plane.api_client()
    with helm.Config(kubeconfig_path=str(control_plane.kubeconfig), namespace=release) as cfg:
        cfg.test(RELEASE, timeout=180)  # raises HelmReleaseError unless the test pod succeeded
        # a passing test pod is deleted at once (hook-succeeded), not left for uninstall to miss
        wait_for(lambda: not [p for p in k8s.CoreV1Api(c).list_namespaced_pod(release).items
                              if (p.metadata.annotations or {}).get("helm.sh/hook") == "test"],
                 timeout=60, what="the passed helm test pod deleted")
        cfg.uninstall(RELEASE, wait="watcher", timeout=180)

    def gone() -> bool:
        core = k8s.CoreV1Api(c)
        left = [p.metadata.name for p in core.list_namespaced_pod(release).items]
        left += [s.metadata.name for s in core.list_namespaced_service(release).items]
        left += [m.metadata.name for m in core.list_namespaced_config_map(release).items
                 if m.metadata.name != "kube-root-ca.crt"]
        left += [s.metadata.name for s in k8s.AppsV1Api(c).list_namespaced_stateful_set(release).items]
        return not left

    wait_for(gone, timeout=120, what="every object of the release (the helm test pod too) deleted")

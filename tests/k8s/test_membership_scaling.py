"""`replicas` 3 -> 5 -> 3 changes the Raft membership by itself (issue 39), under write load.

The release runs on the real control plane (its StatefulSet controller creates and deletes the pods, RBAC checks
every call; kwok plays the containers); a local raftmq process plays each pod, with that pod's identity and a token
bound to it, and the chart's configuration for membership (`cluster.auto_join`, `kubernetes.membership`). A scale-up
creates two pods: their processes ask the leader to add them, copy the group's data as learners and are promoted.
A scale-down deletes them: the preStop hook of one takes itself out of the group (run as the kubelet would), and the
leader retires the other because the StatefulSet's replicas say so. No acknowledged write is lost, no term has two
leaders, the replicas end byte-identical.
"""

from __future__ import annotations

import subprocess
import sys

import helm_python as helm
import pytest
from kubernetes import client as k8s

from tests.helm.chart import CHART_DIR
from tests.k8s.control_plane import in_pod_argv
from tests.replication.cluster_util import Producers, create_topic
from tests.replication.membership_util import Group, member_entry, ready_text
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
NS = "scaling"
RELEASE = "sc"
FULL = f"{RELEASE}-raftmq"
PODS = [f"{FULL}-{i}" for i in range(5)]
TOPIC = "Scaling"
HOOK = CHART_DIR / "files" / "pre-stop.py"
FINALIZER = "raftmq.test/pre-stop-running"
# three fake nodes for five pods: the chart's hard anti-affinity (one member per node) would leave two pending
VALUES = {"persistence": {"size": "4Gi"}, "roleLabel": {"enabled": False}, "podAntiAffinity": "soft"}


def _upgrade(plane, replicas: int, wait: str = "watcher") -> None:
    with helm.Config(kubeconfig_path=str(plane.kubeconfig), namespace=NS) as cfg:
        cfg.upgrade(str(CHART_DIR), RELEASE, {**VALUES, "replicas": replicas}, namespace=NS, wait=wait,
                    timeout=300)


def _pods(plane, terminating: bool = False) -> set[str]:
    """The member pods that exist (``terminating``: also those being deleted)."""
    return set(_uids(plane, terminating))


def _uids(plane, terminating: bool = False) -> dict[str, str]:
    return {p.metadata.name: p.metadata.uid for p in k8s.CoreV1Api(plane.api_client()).list_namespaced_pod(NS).items
            if p.metadata.name in PODS and (terminating or p.metadata.deletion_timestamp is None)}


def _terminating(plane, pod: str) -> bool:
    items = k8s.CoreV1Api(plane.api_client()).list_namespaced_pod(NS, field_selector=f"metadata.name={pod}").items
    return bool(items) and items[0].metadata.deletion_timestamp is not None


@pytest.fixture(scope="module")
def group(control_plane, tmp_path_factory):
    with helm.Config(kubeconfig_path=str(control_plane.kubeconfig), namespace=NS) as cfg:
        cfg.install(str(CHART_DIR), RELEASE, {**VALUES, "replicas": 3}, namespace=NS, create_namespace=True,
                    wait="watcher", timeout=240)
    base = tmp_path_factory.mktemp("scaling")
    g = Group(base, 5, 3, ids=PODS, cluster={"auto_join": True}, kubernetes={"role_label": "false",
                                                                            "membership": "true"})
    for i, pod in enumerate(PODS):  # what the chart renders for 5 replicas: the seed list names every pod
        node = g[pod]
        if i >= 3:
            node.spec.members = [member_entry(g[p]) for p in PODS]
        node.sa_dir = base / f"sa-{i}"
    try:
        yield g
    finally:
        g.stop()
        with helm.Config(kubeconfig_path=str(control_plane.kubeconfig), namespace=NS) as cfg:
            cfg.uninstall(RELEASE, wait="watcher", timeout=120)


def _start_pod(plane, g: Group, pod: str) -> None:
    node = g[pod]
    env = plane.pod_environment(NS, pod, FULL, node.sa_dir)
    node.start(env=env, wrap=lambda argv: in_pod_argv(argv, node.sa_dir))
    node.pod_env = env


def test_replicas_three_to_five_to_three_changes_the_group_by_itself(control_plane, group):
    g = group
    seed_pods = _uids(control_plane)
    for pod in PODS[:3]:
        _start_pod(control_plane, g, pod)
    for pod in PODS[:3]:
        g[pod].wait_ready(120)
    create_topic(g.live(), TOPIC)
    producers = Producers(list(g.nodes.values()), TOPIC, n=3).start()
    producers.wait_acked(300)

    _upgrade(control_plane, 5)
    wait_for(lambda: _pods(control_plane) == set(PODS), what="the StatefulSet creating two pods", timeout=120)
    for pod in PODS[3:]:
        _start_pod(control_plane, g, pod)  # nobody runs add-member: they ask to join
    g.wait_configuration(set(PODS), timeout=300)
    producers.wait_acked(len(producers.log.acked) + 300)
    # the config's member list is only the seed: a scale must not roll the running members
    assert {n: u for n, u in _uids(control_plane).items() if n in seed_pods} == seed_pods

    # The kubelet runs a pod's preStop hook while the pod terminates, and its bound token is valid until the pod
    # object is gone. kwok removes a deleted pod at once: a finalizer keeps the last one terminating meanwhile.
    core = k8s.CoreV1Api(control_plane.api_client())
    core.patch_namespaced_pod(PODS[4], NS, {"metadata": {"finalizers": [FINALIZER]}})
    _upgrade(control_plane, 3, wait="hookOnly")
    wait_for(lambda: PODS[3] not in _pods(control_plane, terminating=True) and
             _terminating(control_plane, PODS[4]), what="the scale-down deleting two pods", timeout=120)
    # the other pod went without its hook (as when the hook times out): its process dies with it
    g[PODS[3]].kill()
    hook = subprocess.run(in_pod_argv([sys.executable, str(HOOK), "--server", g[PODS[4]].grpc_address,
                                       "--timeout", "60"], g[PODS[4]].sa_dir),
                          env={**g[PODS[4]].pod_env, "RAFTMQ_NODE_ID": PODS[4],
                               "PATH": f"{sys.executable.rsplit('/', 1)[0]}:/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert hook.returncode == 0 and "removing it from the Raft group" in hook.stderr, hook.stderr
    core.patch_namespaced_pod(PODS[4], NS, {"metadata": {"finalizers": None}})
    wait_for(lambda: _pods(control_plane, terminating=True) == set(PODS[:3]), what="the two pods gone",
             timeout=120)
    assert _uids(control_plane) == seed_pods
    g.wait_configuration(set(PODS[:3]), timeout=300)  # the leader retires the other one
    for pod in PODS[3:]:
        wait_for(lambda pod=pod: "removed" in ready_text(g[pod]) or "refused" in ready_text(g[pod]) or
                 not g[pod].alive, what=f"{pod} out of the group", timeout=120)
        g[pod].kill()
    producers.wait_acked(len(producers.log.acked) + 300)
    log = producers.stop()
    g.assert_nothing_lost(log, TOPIC)
    g.assert_one_leader_per_term()
    check = g.cluster_check()
    assert check.returncode == 0, check.stdout + check.stderr
    audit = "".join(g[p].spec.log_path.read_text() for p in PODS)
    assert audit.count('"audit": "member_promote"') == 2 and audit.count('"audit": "member_remove"') == 2

"""The leader Service follows the Raft leader: three real raftmq processes play the release's three pods.

Each process has its pod's identity (POD_NAME, the API server, a token bound to that pod at the standard path)
and labels its pod with its Raft role through the real API server, RBAC and the chart's admission policy; the
real EndpointSlice controller then decides which pod the leader Service selects. Across a SIGKILL (the container
restarts in the same pod, keeping the pod's labels) and a SIGTERM of the leader, the Service must end up
selecting exactly the new leader, and a restarted member must never claim the leader label when it is not.
"""

from __future__ import annotations

import helm_python as helm
import pytest
from kubernetes import client as k8s

from raftmq.client import Admin
from tests.helm.chart import CHART_DIR
from tests.k8s.control_plane import in_pod_argv
from tests.support.processes import NodeProcess, node_specs, stop_all
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e
NS = "roles"
RELEASE = "rl"
PODS = [f"{RELEASE}-raftmq-{i}" for i in range(3)]
ROLE = "raftmq.io/role"


@pytest.fixture(scope="module")
def members(control_plane, tmp_path_factory):
    """The release's pods (kwok) and, for each, a local raftmq process with that pod's identity."""
    with helm.Config(kubeconfig_path=str(control_plane.kubeconfig), namespace=NS) as cfg:
        cfg.install(str(CHART_DIR), RELEASE, {"rbac": {"admissionPolicy": {"enabled": True}}},
                    namespace=NS, create_namespace=True, wait="watcher", timeout=240)
    base = tmp_path_factory.mktemp("roles")
    specs = node_specs(base, 3, kubernetes={"role_label": "true"})
    nodes = []
    try:
        for i, spec in enumerate(specs):
            sa = base / f"sa-{i}"
            env = control_plane.pod_environment(NS, PODS[i], f"{RELEASE}-raftmq", sa)
            node = NodeProcess(spec)
            node.pod_env = env
            node.wrap = lambda argv, _sa=sa: in_pod_argv(argv, _sa)
            nodes.append(node.start(env=env, wrap=node.wrap))
        for n in nodes:
            n.wait_ready(90)
        yield nodes
    finally:
        stop_all(nodes, kill=True)
        with helm.Config(kubeconfig_path=str(control_plane.kubeconfig), namespace=NS) as cfg:
            cfg.uninstall(RELEASE, wait="watcher", timeout=120)


def _core(plane) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(plane.api_client())


def label(plane, pod: str) -> str | None:
    return (_core(plane).read_namespaced_pod(pod, NS).metadata.labels or {}).get(ROLE)


def selected_by_leader_service(plane) -> set[str]:
    slices = k8s.DiscoveryV1Api(plane.api_client()).list_namespaced_endpoint_slice(
        NS, label_selector=f"kubernetes.io/service-name={RELEASE}-raftmq-leader").items
    return {e.target_ref.name for s in slices for e in (s.endpoints or []) if e.conditions.ready}


def raft_leader(nodes: list[NodeProcess], alive: list[int]) -> int | None:
    """Index of the member the live members agree leads, or None."""
    ids = set()
    for i in alive:
        with Admin([nodes[i].grpc_address], timeout=5) as admin:
            ids.add(admin.cluster_status().leader_id)
    if len(ids) != 1 or None in ids or "" in ids:
        return None
    (leader_id,) = ids
    return next(i for i, n in enumerate(nodes) if n.spec.id == leader_id)


def leader_service_follows(plane, nodes, alive) -> int:
    """Wait until the live members agree on a leader and the leader Service selects exactly its pod."""
    def settled():
        i = raft_leader(nodes, alive)
        return (i,) if i is not None and selected_by_leader_service(plane) == {PODS[i]} else None
    return wait_for(settled, timeout=90, what="the leader Service selecting exactly the Raft leader")[0]


def new_leader(nodes, alive) -> int:
    def agreed():
        i = raft_leader(nodes, alive)
        return (i,) if i is not None else None
    return wait_for(agreed, timeout=90, what="a leader the live members agree on")[0]


def test_leader_service_selects_exactly_the_leader_across_sigkill_and_sigterm(control_plane, members):
    nodes = members
    alive = [0, 1, 2]
    first = leader_service_follows(control_plane, nodes, alive)
    assert {label(control_plane, p) for i, p in enumerate(PODS) if i != first} <= {"follower", "unknown"}

    # SIGKILL: the pod stays, with its labels; the container restarts in it (as the kubelet does).
    nodes[first].kill()
    alive.remove(first)
    second = new_leader(nodes, alive)
    wait_for(lambda: label(control_plane, PODS[second]) == "leader", timeout=60, what="the new leader's label")
    nodes[first].start(env=nodes[first].pod_env, wrap=nodes[first].wrap)
    nodes[first].wait_ready(90)
    # The moment it serves, the restarted member has already dropped the stale leader label.
    assert label(control_plane, PODS[first]) != "leader"
    alive = [0, 1, 2]
    current = leader_service_follows(control_plane, nodes, alive)  # whoever leads now, and only that pod

    # SIGTERM: a graceful stop hands leadership away and unlabels the pod before the process exits.
    assert nodes[current].stop() == 0
    alive.remove(current)
    third = new_leader(nodes, alive)
    assert third != current
    assert label(control_plane, PODS[current]) != "leader"
    # the Service ends up on exactly the leader of the two left (a loaded box may move leadership once more)
    assert leader_service_follows(control_plane, nodes, alive) in alive

"""A real, throw-away Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (fake nodes whose pods become Running/Ready with IPs), from ``make k8s-tools``.

Everything the chart creates is validated and acted on by the real API server and controllers (StatefulSet,
PVC binding, EndpointSlices, PDB status, garbage collection, RBAC, admission policies); only the containers do
not run. Tests stand in for a pod's process with a local raftmq process that has the pod's identity
(``pod_environment``): its name, namespace, the API server address and a pod-bound service-account token.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.k8s.pki import make_pki
from tests.support.processes import HOST, free_ports

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "helm" / "raftmq" / "ci" / "k8s-tools" / "build.sh"
FAKE_NODE = "kwok.x-k8s.io/node"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

# kwok completes `helm test` pods (its own pod-complete stage only completes pods of Jobs).
HELM_TEST_COMPLETE = """
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: helm-test-pod-complete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.annotations["helm.sh/hook"]'
      operator: 'In'
      values: ['test']
  next:
    statusTemplate: |
      {{ $now := Now }}
      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ $now | Quote }}
            reason: Completed
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Succeeded
"""


def tools_bin_dir() -> Path | None:
    """The cached tools' bin directory, or None when ``make k8s-tools`` has not built them."""
    r = subprocess.run([str(BUILD_SCRIPT), "--path"], capture_output=True, text=True)
    return Path(r.stdout.strip()) if r.returncode == 0 else None


class LoggedProcesses:
    """Named child processes in their own sessions, each logging to ``<work>/<name>.log``."""

    def __init__(self, work: Path):
        self.work = work
        self.procs: dict[str, subprocess.Popen] = {}

    def spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.work / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.work,
                                            start_new_session=True)

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.work / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode}:\n{self.log_tail(name)}")


class ControlPlane(LoggedProcesses):
    """Start with ``start()``, stop with ``stop()``; ``kubeconfig`` and ``api_client()`` reach it as admin.

    ``nodes`` kwok fake nodes run the pods (0: no kwok; real nodes join by themselves). The API server listens on
    ``address`` (loopback by default; a real node's pods need an address they can route to, which the server then
    also advertises as the ``kubernetes`` Service's endpoint)."""

    def __init__(self, bin_dir: Path, work: Path, nodes: int = 3, address: str = HOST):
        super().__init__(work)
        self.bin = bin_dir
        self.nodes = [f"kwok-node-{i}" for i in range(nodes)]
        self.kubeconfig = work / "admin.kubeconfig"
        self.api_port = 0
        self.address = address

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 180.0) -> ControlPlane:
        pki = make_pki(self.work / "pki", server_ips=() if self.address == HOST else (self.address,))
        self.pki = pki
        etcd_client, etcd_peer, api, cm, sched = free_ports(5)
        self.api_port = api
        self._spawn("etcd", [
            "--name", "raftmq-test", "--data-dir", str(self.work / "etcd"),
            "--listen-client-urls", f"http://{HOST}:{etcd_client}", "--advertise-client-urls", f"http://{HOST}:{etcd_client}",
            "--listen-peer-urls", f"http://{HOST}:{etcd_peer}", "--initial-advertise-peer-urls", f"http://{HOST}:{etcd_peer}",
            "--initial-cluster", f"raftmq-test=http://{HOST}:{etcd_peer}", "--unsafe-no-fsync",
            "--log-level", "warn",
        ])
        self._spawn("kube-apiserver", [
            "--etcd-servers", f"http://{HOST}:{etcd_client}",
            "--bind-address", self.address, "--advertise-address", self.address, "--secure-port", str(api),
            "--cert-dir", str(self.work / "apiserver-certs"),
            "--tls-cert-file", str(pki["apiserver.crt"]), "--tls-private-key-file", str(pki["apiserver.key"]),
            "--client-ca-file", str(pki["ca.crt"]),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(pki["sa.pub"]),
            "--service-account-signing-key-file", str(pki["sa.key"]),
            "--service-cluster-ip-range", "10.96.0.0/16",
            "--authorization-mode", "RBAC",
            # Endpoints may not hold loopback addresses: on loopback nobody needs the kubernetes Service's endpoints.
            "--endpoint-reconciler-type", "none" if self.address == HOST else "lease",
            # `kubectl exec/logs` through a real node's kubelet (which trusts this CA's client certificates)
            "--kubelet-preferred-address-types", "InternalIP",
            "--kubelet-client-certificate", str(pki["admin.crt"]), "--kubelet-client-key", str(pki["admin.key"]),
        ])
        self._write_kubeconfig()
        self._wait_api(timeout)
        self._spawn("kube-controller-manager", [
            "--kubeconfig", str(self.kubeconfig), "--leader-elect=false",
            "--bind-address", HOST, "--secure-port", str(cm),
            "--service-account-private-key-file", str(pki["sa.key"]), "--root-ca-file", str(pki["ca.crt"]),
            "--use-service-account-credentials",
            "--cluster-signing-cert-file", str(pki["ca.crt"]), "--cluster-signing-key-file", str(pki["ca.key"]),
        ])
        self._spawn("kube-scheduler", [
            "--kubeconfig", str(self.kubeconfig), "--leader-elect=false",
            "--bind-address", HOST, "--secure-port", str(sched),
        ])
        self._create_storage()
        if self.nodes:
            self._start_kwok()
        return self

    def _start_kwok(self) -> None:
        stages = self.work / "kwok-stages.yaml"
        stage_dir = self.bin.parent / "kwok-stages"
        docs = [p.read_text() for p in sorted(stage_dir.glob("*.yaml"))] + [HELM_TEST_COMPLETE]
        stages.write_text("\n---\n".join(d.strip() for d in docs) + "\n")
        self._spawn("kwok", [
            "--kubeconfig", str(self.kubeconfig), "--config", str(stages),
            "--manage-nodes-with-annotation-selector", f"{FAKE_NODE}=fake",
            "--cidr", "10.244.0.1/16", "--node-ip", "10.1.0.1", "--server-address", f"{HOST}:0",
            # node leases, renewed as a kubelet does (kwokctl sets this too): without them the nodes' only
            # heartbeat is the stage's every-10-minutes status, the node controller finds them not Ready every
            # ~50 s and marks every pod not Ready for good (kwok's pod-ready stage only readies Pending pods),
            # and a Service then selects nobody (a test waiting on the leader Service timed out in CI)
            "--node-lease-duration-seconds", "40",
        ])
        self._create_fake_nodes()

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            p = self.procs[name]
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop_program(self, program: str) -> None:
        terminate(self.procs.get(program))

    def _spawn(self, program: str, args: list[str]) -> None:
        self.spawn(program, [str(self.bin / program), *args])

    # ------------------------------------------------------------------ access
    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.api_port}"

    def _write_kubeconfig(self) -> None:
        def b64(name: str) -> str:
            return base64.b64encode(self.pki[name].read_bytes()).decode()

        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "raftmq-test",
            "clusters": [{"name": "raftmq-test", "cluster": {"server": self.server,
                                                            "certificate-authority-data": b64("ca.crt")}}],
            "users": [{"name": "admin", "user": {"client-certificate-data": b64("admin.crt"),
                                                 "client-key-data": b64("admin.key")}}],
            "contexts": [{"name": "raftmq-test", "context": {"cluster": "raftmq-test", "user": "admin"}}],
        }))

    def api_client(self) -> k8s.ApiClient:
        return k8s_config.new_client_from_config(str(self.kubeconfig))

    def _wait_api(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                with self.api_client() as c:
                    # the default namespace exists once the API server's own bootstrap ran
                    k8s.CoreV1Api(c).read_namespace("default")
                return
            except Exception as exc:  # not up yet
                last = exc
                time.sleep(0.5)
        raise TimeoutError(f"kube-apiserver not ready after {timeout}s: {last}\n{self.log_tail('kube-apiserver')}")

    def _create_fake_nodes(self) -> None:
        with self.api_client() as c:
            core = k8s.CoreV1Api(c)
            for i, name in enumerate(self.nodes):
                core.create_node({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "annotations": {FAKE_NODE: "fake"},
                                 "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                            "type": "kwok", "topology.kubernetes.io/zone": f"zone-{i}"}},
                    "spec": {},
                    "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                               "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}},
                })
        self.wait_nodes_ready(self.nodes, why=lambda: self.log_tail("kwok"))

    def _create_storage(self) -> None:
        """A default StorageClass without a provisioner and hostPath volumes its claims bind to (made writable
        by any uid: the chart runs as 10001, and hostPath volumes get no fsGroup)."""
        volumes = self.work / "volumes"
        with self.api_client() as c:
            core = k8s.CoreV1Api(c)
            k8s.StorageV1Api(c).create_storage_class({
                "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": "local", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate",
            })
            for i in range(16):  # the session's releases: 3 (helm), 3 (role labels), 5 (scaling), spares
                (volumes / f"pv-{i}").mkdir(parents=True, exist_ok=True)
                (volumes / f"pv-{i}").chmod(0o777)
                core.create_persistent_volume({
                    "apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": f"pv-{i}"},
                    "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadWriteOnce"],
                             "storageClassName": "local", "persistentVolumeReclaimPolicy": "Delete",
                             "hostPath": {"path": str(volumes / f"pv-{i}")}},
                })

    def wait_nodes_ready(self, names: list[str], timeout: float = 120.0, why: Callable[[], str] = str) -> None:
        """Wait until every named node is Ready; a timeout shows ``why()`` (the log of what runs them)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            with self.api_client() as c:
                ready = {n.metadata.name for n in k8s.CoreV1Api(c).list_node().items
                         if any(cond.type == "Ready" and cond.status == "True" for cond in (n.status.conditions or []))}
            if ready >= set(names):
                return
            time.sleep(0.5)
        raise TimeoutError(f"nodes {names} not Ready after {timeout}s:\n{why()}")

    # ------------------------------------------------------------------ pods played by local processes
    def pod_environment(self, namespace: str, pod: str, service_account: str, directory: Path) -> dict[str, str]:
        """Env for a local process standing in for ``pod``: the downward-API variables, the API server address
        and a token bound to the pod (written under ``directory`` with the CA; ``in_pod_argv`` mounts it at the
        standard path)."""
        with self.api_client() as c:
            token = k8s.CoreV1Api(c).create_namespaced_service_account_token(service_account, namespace, {
                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600,
                         "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod}},
            }).status.token
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(token)
        shutil.copy(self.pki["ca.crt"], directory / "ca.crt")
        (directory / "namespace").write_text(namespace)
        return {"POD_NAME": pod, "POD_NAMESPACE": namespace, "KUBERNETES_SERVICE_HOST": HOST,
                "KUBERNETES_SERVICE_PORT": str(self.api_port), "RAFTMQ_TEST_SA_DIR": str(directory)}


def terminate(p: subprocess.Popen | None, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; nothing for a process that already ended."""
    if p is None or p.poll() is not None:
        return
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def in_pod_argv(argv: list[str], sa_dir: Path) -> list[str]:
    """``argv`` in a private mount namespace where ``sa_dir`` is the pod's service-account directory (a tmpfs
    over /run inside that namespace only; the host's /run is untouched)."""
    script = (f'mount -t tmpfs none /run && mkdir -p {SA_DIR} && mount --bind "$0" {SA_DIR} && exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, str(sa_dir), *argv]


def missing_prerequisite(message: str) -> None:
    """Skip the test, except in CI, where a missing prerequisite is an error (this tier must never skip silently
    there)."""
    if os.environ.get("CI"):
        raise RuntimeError(message + " (.ci/run's `make test` does this before the tests)")
    import pytest

    pytest.skip(message)


def require_tools() -> Path:
    """The tools' bin dir (see ``missing_prerequisite`` when they are not built)."""
    bin_dir = tools_bin_dir()
    if bin_dir is None:
        missing_prerequisite("Kubernetes test tools not built: run `make k8s-tools` (cold build ~15-40 min)")
    return bin_dir

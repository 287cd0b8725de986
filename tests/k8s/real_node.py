"""A real Kubernetes node on this machine, for ``make k8s-e2e-local``: containerd + runc + a CNI bridge, the
kubelet, kube-proxy and CoreDNS, all in a network namespace of their own, joined to a ``ControlPlane`` that
listens on the host end of a veth pair into that namespace.

    host netns                          node netns ``raftmq-k8s``
    API server 10.250.0.254 ── veth ── bridge rk8s0 10.250.0.1 (node IP: kubelet, kube-proxy, CoreDNS :53)
                                        bridge cni0 10.244.0.1/24 ── pods

Pods reach the API server through the ``kubernetes`` Service (kube-proxy's iptables rules inside the
namespace), resolve names through CoreDNS on the node IP, and run images imported into containerd from a
``docker save`` tar (no registry is reachable from these machines). Settings that work around this machine
(cgroup v1, no CAP_SYS_RESOURCE, no registry) say so where they are made.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import yaml
from kubernetes import client as k8s

from tests.k8s.control_plane import ControlPlane, LoggedProcesses, terminate

NETNS = "raftmq-k8s"
NODE_NAME = "raftmq-node-0"
NODE_IP = "10.250.0.1"
HOST_IP = "10.250.0.254"
POD_CIDR = "10.244.0.0/24"
CNI_BIN = "/usr/lib/cni"  # Debian's containernetworking-plugins
RUN_DIR = Path("/run/raftmq-k8s")  # short: unix socket paths must stay under 108 bytes
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def in_netns(argv: list[str]) -> list[str]:
    """``argv`` run in the node's network namespace. nsenter, not `ip netns exec`: the latter remounts /sys and
    hides the cgroup mounts the kubelet and runc need."""
    return ["nsenter", f"--net=/run/netns/{NETNS}", "--", *argv]


class RealNode(LoggedProcesses):
    """``start()`` after the control plane started; ``stop()`` removes every process, mount and the namespace."""

    def __init__(self, plane: ControlPlane, tools_bin: Path, work: Path, images_tar: Path):
        super().__init__(work)
        self.plane = plane
        self.bin = tools_bin
        self.images_tar = images_tar

    # ------------------------------------------------------------------ network
    @staticmethod
    def create_network() -> None:
        """The namespace, its bridge holding the node IP (the kernel here has no dummy interfaces) and a veth
        to the host; the host routes the pod range through it."""
        RealNode.delete_network()
        _sh("ip", "netns", "add", NETNS)
        _sh("ip", "link", "add", "rk8s-h", "type", "veth", "peer", "name", "rk8s-n")
        _sh("ip", "link", "set", "rk8s-n", "netns", NETNS)
        _sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", "rk8s-h")
        _sh("ip", "link", "set", "rk8s-h", "up")
        ns = ["ip", "netns", "exec", NETNS]
        for cmd in (["ip", "link", "set", "lo", "up"],
                    ["ip", "link", "add", "rk8s0", "type", "bridge"],
                    ["ip", "addr", "add", f"{NODE_IP}/24", "dev", "rk8s0"],
                    ["ip", "link", "set", "rk8s0", "up"],
                    ["ip", "link", "set", "rk8s-n", "master", "rk8s0", "up"],
                    ["ip", "route", "add", "default", "via", HOST_IP],
                    ["sysctl", "-qw", "net.ipv4.ip_forward=1"]):
            _sh(*ns, *cmd)
        _sh("ip", "route", "add", POD_CIDR, "via", NODE_IP)

    @staticmethod
    def delete_network() -> None:
        _sh("ip", "route", "del", POD_CIDR, check=False)
        _sh("ip", "link", "del", "rk8s-h", check=False)
        _sh("ip", "netns", "del", NETNS, check=False)

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 180.0) -> RealNode:
        self._start_containerd()
        self._import_images()
        self._start_coredns()
        self._start_kube_proxy()
        self._start_kubelet()
        self.plane.wait_nodes_ready([NODE_NAME], timeout, why=lambda: self.log_tail("kubelet"))
        return self

    def stop(self) -> None:
        """Pods first, through the kubelet (it tears down their sandboxes and network namespaces), with the
        controllers stopped so nothing recreates them; whatever is left is killed through containerd. Then the
        node's processes, the kubelet's mounts and the namespace."""
        if self.procs.get("kubelet") and self.procs["kubelet"].poll() is None:
            self.plane.stop_program("kube-controller-manager")
            self._delete_pods()
        for name in ("kubelet", "kube-proxy", "coredns"):
            terminate(self.procs.get(name), 20)
        if self.procs.get("containerd") and self.procs["containerd"].poll() is None:
            tasks = self._ctr("tasks", "ls", "-q").stdout.split()
            for task in tasks:
                self._ctr("tasks", "kill", "-a", "-s", "SIGKILL", task)
            for task in tasks:  # a shim exits once its task is deleted
                for _ in range(20):
                    if self._ctr("tasks", "delete", task).returncode == 0 or task not in self._ctr(
                            "tasks", "ls", "-q").stdout.split():
                        break
                    time.sleep(0.5)
        terminate(self.procs.get("containerd"), 20)
        unmount_under(self.work, RUN_DIR)  # the kubelet's volume mounts (tokens are tmpfs mounts under its root)
        shutil.rmtree(RUN_DIR, ignore_errors=True)
        self.delete_network()

    def _delete_pods(self, timeout: float = 90.0) -> None:
        try:
            with self.plane.api_client() as c:
                core = k8s.CoreV1Api(c)
                for pod in core.list_pod_for_all_namespaces().items:
                    core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        except Exception as exc:  # the API is gone: containerd's fallback below still cleans up
            print(f"real node: could not delete pods through the API: {exc}", flush=True)
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._ctr("tasks", "ls", "-q").stdout.split():
            time.sleep(1)

    def _spawn(self, name: str, argv: list[str]) -> None:
        self.spawn(name, in_netns(argv))

    # ------------------------------------------------------------------ containerd
    def _start_containerd(self) -> None:
        cni = self.work / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-raftmq.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "raftmq-k8s",
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(cni / "ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }, indent=2))
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        config = self.work / "containerd.toml"
        config.write_text(f"""version = 2
root = "{self.work / 'containerd'}"
state = "{RUN_DIR / 'containerd-state'}"
[grpc]
  address = "{RUN_DIR / 'containerd' / 'containerd.sock'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  # no CAP_SYS_RESOURCE in this sandbox: runc cannot set a sandbox's oom_score_adj below the parent's
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni / 'net.d'}"
""")
        self._spawn("containerd", ["containerd", "--config", str(config)])
        self._wait(lambda: (RUN_DIR / "containerd" / "containerd.sock").exists(), "containerd", 60)

    @staticmethod
    def _ctr(*args: str) -> subprocess.CompletedProcess:
        return _sh("ctr", "--address", str(RUN_DIR / "containerd" / "containerd.sock"), "-n", "k8s.io", *args,
                   check=False)

    def _import_images(self) -> None:
        r = self._ctr("images", "import", str(self.images_tar))
        if r.returncode != 0:
            raise RuntimeError(f"ctr images import {self.images_tar} failed: {r.stderr.strip()}")

    # ------------------------------------------------------------------ node services
    def _start_coredns(self) -> None:
        corefile = self.work / "Corefile"
        corefile.write_text(f""".:53 {{
    bind {NODE_IP}
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {self.plane.kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
""")
        self._spawn("coredns", [str(self.bin / "coredns"), "-conf", str(corefile)])

    def _start_kube_proxy(self) -> None:
        config = self.work / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.plane.kubeconfig)},
            "hostnameOverride": NODE_NAME, "bindAddress": NODE_IP,
            "healthzBindAddress": f"{NODE_IP}:10256", "metricsBindAddress": "127.0.0.1:10249",
            "mode": "iptables", "clusterCIDR": POD_CIDR,
            # pods on one bridge: a Service hop back to the same bridge needs SNAT (no br_netfilter needed)
            "iptables": {"masqueradeAll": True},
            # leave the (read-only here) conntrack sysctls alone
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }))
        self._spawn("kube-proxy", [str(self.bin / "kube-proxy"), "--config", str(config)])

    def _start_kubelet(self) -> None:
        resolv = self.work / "resolv.conf"
        resolv.write_text(f"nameserver {NODE_IP}\n")
        config = self.work / "kubelet.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # this machine has cgroup v1 only; containerd 1.6 has no RuntimeConfig RPC, so say the driver here
            "failCgroupV1": False, "cgroupDriver": "cgroupfs",
            "containerRuntimeEndpoint": f"unix://{RUN_DIR / 'containerd' / 'containerd.sock'}",
            "address": NODE_IP, "readOnlyPort": 0,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.plane.pki["ca.crt"])}},
            "authorization": {"mode": "AlwaysAllow"},
            "clusterDNS": [NODE_IP], "clusterDomain": "cluster.local", "resolvConf": str(resolv),
            # images come from no registry: never let image GC delete them (it did at 90% disk)
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "failSwapOn": False, "serializeImagePulls": False, "maxPods": 30,
        }))
        self._spawn("kubelet", [
            str(self.bin / "kubelet"), "--config", str(config), "--kubeconfig", str(self.plane.kubeconfig),
            "--root-dir", str(self.work / "kubelet"), "--cert-dir", str(self.work / "kubelet-pki"),
            "--hostname-override", NODE_NAME, "--node-ip", NODE_IP,
        ])

    def _wait(self, ready, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if ready():
                return
            time.sleep(0.5)
        raise TimeoutError(f"{name} not up after {timeout}s:\n{self.log_tail(name)}")


def unmount_under(*directories: Path) -> None:
    """Detach every mount below these directories, deepest first."""
    prefixes = tuple(str(d) for d in directories)
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
              if line.split()[1].startswith(prefixes)]
    for mount in sorted(mounts, key=len, reverse=True):
        _sh("umount", "-l", mount, check=False)


def clean_work(work: Path) -> None:
    """Remove a previous run's directory (its mounts first)."""
    if work.exists():
        unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)

"""The chart with TLS and authentication on (issue 14): rendered, linted, validated, each pod's config accepted by
the node's loader, and the `helm test` script run against a real node with TLS, mutual TLS and auth."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import helm_python as helm
import kubernetes_validate.utils as kv
import pytest

from tests.helm.chart import K8S_MIN_VERSION, K8S_VERSION, NAMESPACE, lint, objects, one, render
from tests.helm.test_chart import DOMAIN, FULL, _pod_env, container, label_selector_matches, sts
from tests.support.certs import CertificateAuthority
from tests.support.processes import NodeProcess, node_specs

BIN = str(Path(sys.executable).parent)
CLUSTER_SECRET = {"auth": {"existingSecret": "raftmq-raft", "secretKey": "password"}}
SECURE = {
    "existing-secret-auth": {
        "tls": {"enabled": True, "existingSecret": "raftmq-tls"},
        "auth": {"enabled": True, "existingSecret": "raftmq-admin"},
        "cluster": CLUSTER_SECRET,
    },
    "cert-manager-mutual": {
        "tls": {"enabled": True, "mutual": True,
                "certManager": {"enabled": True, "issuerRef": {"name": "ca-issuer", "kind": "ClusterIssuer"}}},
        "auth": {"enabled": True, "existingSecret": "raftmq-admin", "aclDefault": "deny",
                 "openHttpPaths": ["/health", "/ready"]},
        "cluster": CLUSTER_SECRET,
    },
}


@pytest.fixture(scope="module", params=sorted(SECURE))
def secure(request):
    return request.param, SECURE[request.param]


@pytest.mark.parametrize("kube", [K8S_MIN_VERSION, K8S_VERSION])
def test_secure_value_sets_lint_and_validate(secure, kube):
    _, values = secure
    report = lint(values, kube_version=kube)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
    for obj in objects(values):
        if obj["apiVersion"].startswith("cert-manager.io/"):
            continue  # a CRD: checked in test_cert_manager_certificate_names_every_member
        kv.validate(obj, kube, strict=True)


@pytest.mark.parametrize("values,fragment", [
    ({"tls": {"enabled": True}}, "tls"),
    ({"tls": {"enabled": True, "certManager": {"enabled": True}}}, "tls"),
    ({"auth": {"enabled": True, "existingSecret": "a"}}, "cluster"),
    ({"auth": {"enabled": True}, "cluster": CLUSTER_SECRET}, "auth"),
    ({"auth": {"enabled": False, "aclDefault": "maybe"}}, "aclDefault"),
    ({"auth": {"openHttpPaths": ["/metrics", "/health"]}}, "openHttpPaths"),  # /ready: probes cannot sign
])
def test_incomplete_security_values_are_refused(values, fragment):
    with pytest.raises(helm.HelmValuesError) as err:
        render(values)
    assert fragment in str(err.value)


def test_each_secure_pod_gets_a_config_the_node_accepts(secure, tmp_path):
    from raftmq.node.config import load_config

    name, values = secure
    objs = objects(values)
    path = tmp_path / "raftmq.yaml"
    path.write_text(one(objs, "ConfigMap")["data"]["raftmq.yaml"])
    env = _pod_env(objs, f"{FULL}-1")
    cfg = load_config(path, environ=env)
    s = cfg.security
    assert (s.tls_cert_file, s.tls_key_file, s.tls_ca_file) == ("/etc/raftmq/tls/tls.crt", "/etc/raftmq/tls/tls.key",
                                                                "/etc/raftmq/tls/ca.crt")
    assert s.tls_client_ca_file == ("/etc/raftmq/tls/ca.crt" if values["tls"].get("mutual") else "")
    assert s.auth_enabled and s.auth_admin_secret_key == "s3cret-from-secret"
    assert s.open_http_paths == values["auth"].get("openHttpPaths", ["/metrics", "/health", "/ready"])
    assert env["RAFTMQ_TLS_SERVER_NAME"] == f"{FULL}-1.{DOMAIN}"  # the preStop CLI checks the member's own name
    assert env["RAFTMQ_ACCESS_KEY"] and env["RAFTMQ_SECRET_KEY"]


def test_probes_use_https_and_the_secret_is_mounted_as_a_directory(secure):
    _, values = secure
    objs = objects(values)
    c = container(objs)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["scheme"] == "HTTPS"
        assert c[probe]["httpGet"]["path"] in values["auth"].get("openHttpPaths", ["/health", "/ready"])
    mount = next(m for m in c["volumeMounts"] if m["name"] == "tls")
    assert mount["mountPath"] == "/etc/raftmq/tls" and "subPath" not in mount  # subPath mounts never update
    vol = next(v for v in sts(objs)["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
    expected = "raftmq-tls" if values["tls"].get("existingSecret") else f"{FULL}-tls"
    assert vol["secret"]["secretName"] == expected


def test_cert_manager_certificate_names_every_member():
    objs = objects(SECURE["cert-manager-mutual"])
    cert = one(objs, "Certificate")
    spec = cert["spec"]
    assert spec["secretName"] == f"{FULL}-tls"
    assert f"*.{DOMAIN}" in spec["dnsNames"]  # members call <pod>.<headless> on their gRPC port
    assert f"{FULL}.{NAMESPACE}.svc.cluster.local" in spec["dnsNames"]
    assert "127.0.0.1" in spec["ipAddresses"]
    assert {"server auth", "client auth"} <= set(spec["usages"])  # members present it to each other (mTLS)
    assert spec["issuerRef"] == {"name": "ca-issuer", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert "Certificate" not in {o["kind"] for o in objects(SECURE["existing-secret-auth"])}


def test_network_policy_is_on_by_default_and_keeps_raft_among_members():
    objs = objects()
    np = one(objs, "NetworkPolicy")
    raft = [r for r in np["spec"]["ingress"] if any(p["port"] == "raft" for p in r["ports"])]
    assert len(raft) == 1
    (peer,) = raft[0]["from"]
    assert peer == {"podSelector": np["spec"]["podSelector"]}  # the brokers of every group (issue 38)
    assert label_selector_matches(peer["podSelector"], sts(objs)["spec"]["template"]["metadata"]["labels"])
    assert not label_selector_matches(peer["podSelector"], one(objs, "Pod")["metadata"]["labels"])


def _resolve(env_list: list[dict], files: dict[str, str], secrets: dict[str, str]) -> dict[str, str]:
    out = {}
    for e in env_list:
        if "value" in e:
            out[e["name"]] = files.get(e["value"], e["value"])
        else:
            out[e["name"]] = secrets[e["valueFrom"]["secretKeyRef"]["key"]]
    return out


def test_helm_test_script_passes_with_mutual_tls_and_auth(tmp_path):
    values = SECURE["cert-manager-mutual"]
    pod = one(objects(values), "Pod")
    c = pod["spec"]["containers"][0]
    assert {"name": "tls", "mountPath": "/etc/raftmq/tls", "readOnly": True} in c["volumeMounts"]
    ca = CertificateAuthority(tmp_path)
    pem = ca.issue("member")  # plays the chart's Secret: tls.crt / tls.key / ca.crt
    files = {"/etc/raftmq/tls/ca.crt": str(ca.cert_file), "/etc/raftmq/tls/tls.crt": str(pem.cert),
             "/etc/raftmq/tls/tls.key": str(pem.key)}
    secrets = {"access-key": "admin", "secret-key": "admin-secret-123"}
    [spec] = node_specs(tmp_path, 1, security={
        "tls_cert_file": str(pem.cert), "tls_key_file": str(pem.key), "tls_client_ca_file": str(ca.cert_file),
        "tls_http": False, "auth_enabled": True, "auth_admin_access_key": "admin",
        "auth_admin_secret_key": "admin-secret-123"})
    node = NodeProcess(spec).start()
    try:
        node.wait_ready()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAFTMQ_")},
               **_resolve(c["env"], files, secrets)}
        env.update(SERVER=node.grpc_address, MEMBERS=node.grpc_address, ATTEMPTS="10",
                   PATH=BIN + os.pathsep + os.environ.get("PATH", ""), HOME=os.environ.get("HOME", "/tmp"))
        done = subprocess.run(["/bin/sh", "-c", c["args"][0]], capture_output=True, text=True, env=env, timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"ok: {node.grpc_address} has helm-test-" in done.stdout
        # and without the credentials the same script is refused
        env.pop("RAFTMQ_SECRET_KEY")
        env.pop("RAFTMQ_ACCESS_KEY")
        refused = subprocess.run(["/bin/sh", "-c", c["args"][0]], capture_output=True, text=True, env=env,
                                 timeout=240)
        assert refused.returncode != 0 and "requires signed requests" in refused.stderr
    finally:
        node.stop()


def test_allowed_networks_reach_the_node_and_a_bad_one_stops_it(tmp_path):
    """allowedNetworks.clients / members / trustedHttpProxies become security.allowed_*_networks and
    trusted_http_proxies; the node validates them."""
    from raftmq.node.config import ConfigError, load_config

    values = {"allowedNetworks": {"clients": ["10.0.0.0/8", "fd00::/8"], "members": ["10.244.0.0/16"],
                                  "trustedHttpProxies": ["10.96.0.0/12"]}}
    objs = objects(values)
    for kube in (K8S_MIN_VERSION, K8S_VERSION):
        for obj in objs:
            kv.validate(obj, kube, strict=True)
    path = tmp_path / "raftmq.yaml"
    path.write_text(one(objs, "ConfigMap")["data"]["raftmq.yaml"])
    cfg = load_config(path, environ=_pod_env(objs, f"{FULL}-0"))
    assert cfg.security.allowed_client_networks == ["10.0.0.0/8", "fd00::/8", "127.0.0.1/32", "::1/128"]
    assert cfg.security.allowed_member_networks == ["10.244.0.0/16"]
    assert cfg.security.trusted_http_proxies == ["10.96.0.0/12"]
    assert "RAFTMQ_SECURITY_ALLOWED_CLIENT_NETWORKS" not in _pod_env(objects(), f"{FULL}-0")
    bad = objects({"allowedNetworks": {"clients": ["10.0.0.1/8"]}})
    with pytest.raises(ConfigError, match=r"allowed_client_networks\[0\]: '10.0.0.1/8' has bits set"):
        load_config(path, environ=_pod_env(bad, f"{FULL}-0"))
    bad = objects({"allowedNetworks": {"trustedHttpProxies": ["ingress"]}})
    with pytest.raises(ConfigError, match=r"trusted_http_proxies\[0\]: 'ingress' is not a network"):
        load_config(path, environ=_pod_env(bad, f"{FULL}-0"))
    with pytest.raises(helm.HelmValuesError):
        render({"allowedNetworks": {"clients": "10.0.0.0/8"}})


def test_admin_secret_rotation_passes_the_previous_secret_from_the_same_secret(tmp_path):
    from raftmq.node.config import load_config

    values = {"auth": {"enabled": True, "existingSecret": "raftmq-admin", "previousSecretKeyKey": "previous-key"},
              "cluster": CLUSTER_SECRET}
    objs = objects(values)
    env = {e["name"]: e for e in container(objs)["env"]}
    ref = env["RAFTMQ_SECURITY_AUTH_ADMIN_PREVIOUS_SECRET_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "raftmq-admin", "key": "previous-key"}
    path = tmp_path / "raftmq.yaml"
    path.write_text(one(objs, "ConfigMap")["data"]["raftmq.yaml"])
    assert load_config(path, environ=_pod_env(objs, f"{FULL}-0")).security.auth_admin_previous_secret_key
    no_rotation = objects({"auth": {"enabled": True, "existingSecret": "raftmq-admin"}, "cluster": CLUSTER_SECRET})
    assert "RAFTMQ_SECURITY_AUTH_ADMIN_PREVIOUS_SECRET_KEY" not in {e["name"] for e in container(no_rotation)["env"]}


def test_tls_raft_reaches_the_node_with_the_members_ca(tmp_path):
    from raftmq.node.config import load_config

    values = {"tls": {"enabled": True, "existingSecret": "raftmq-tls", "raft": True}}
    objs = objects(values)
    for kube in (K8S_MIN_VERSION, K8S_VERSION):
        for obj in objs:
            kv.validate(obj, kube, strict=True)
    path = tmp_path / "raftmq.yaml"
    path.write_text(one(objs, "ConfigMap")["data"]["raftmq.yaml"])
    s = load_config(path, environ=_pod_env(objs, f"{FULL}-2")).security
    assert s.tls_raft and s.tls_ca_file == "/etc/raftmq/tls/ca.crt"
    assert not load_config(path, environ=_pod_env(objects({"tls": {"enabled": True, "existingSecret": "x"}}),
                                                  f"{FULL}-2")).security.tls_raft
    with pytest.raises(helm.HelmValuesError):
        render({"tls": {"enabled": True, "existingSecret": "x", "raft": "yes"}})

"""The security section of the node configuration: environment keys as the chart sets them, and every
inconsistent combination refused with a line that says what to set."""

from __future__ import annotations

import pytest

from raftmq.node.config import ConfigError, load_config


def test_environment_sets_the_security_section_verbatim():
    cfg = load_config(environ={"RAFTMQ_SECURITY_TLS_CERT_FILE": "/t/tls.crt", "RAFTMQ_SECURITY_TLS_KEY_FILE": "/t/k",
                               "RAFTMQ_SECURITY_AUTH_ENABLED": "true", "RAFTMQ_SECURITY_AUTH_ADMIN_ACCESS_KEY": "admin",
                               "RAFTMQ_SECURITY_AUTH_ADMIN_SECRET_KEY": "0123",
                               "RAFTMQ_SECURITY_OPEN_HTTP_PATHS": '["/health"]'})
    s = cfg.security
    assert (s.tls_cert_file, s.auth_enabled, s.auth_admin_secret_key, s.open_http_paths) == (
        "/t/tls.crt", True, "0123", ["/health"])
    assert cfg.tls_files().cert_file == "/t/tls.crt" and not cfg.tls_files().mutual
    assert load_config(environ={}).tls_files() is None


@pytest.mark.parametrize("env,message", [
    ({"RAFTMQ_SECURITY_TLS_CERT_FILE": "/c"}, "set both (TLS on) or neither"),
    ({"RAFTMQ_SECURITY_TLS_CLIENT_CA_FILE": "/ca"}, "need TLS on"),
    ({"RAFTMQ_SECURITY_AUTH_ENABLED": "true"}, "set security.auth_admin_access_key and auth_admin_secret_key"),
    ({"RAFTMQ_SECURITY_AUTH_ADMIN_ACCESS_KEY": "a"}, "set both or neither"),
    ({"RAFTMQ_SECURITY_ACL_DEFAULT": "maybe"}, "is not one of deny, allow"),
    ({"RAFTMQ_SECURITY_AUTH_MAX_CLOCK_SKEW_SECONDS": "0"}, "must be > 0"),
    ({"RAFTMQ_SECURITY_CONSOLE_SESSION_HOURS": "0"}, "console_session_hours: must be > 0 and at most 720"),
    ({"RAFTMQ_SECURITY_OPEN_HTTP_PATHS": "[metrics]"}, "must be a list of paths"),
    ({"RAFTMQ_SECURITY_AUTH_ENABLED": "true", "RAFTMQ_SECURITY_AUTH_ADMIN_ACCESS_KEY": "a",
      "RAFTMQ_SECURITY_AUTH_ADMIN_SECRET_KEY": "s", "RAFTMQ_NODE_ID": "n0",
      "RAFTMQ_CLUSTER_MEMBERS": '[{id: n0, raft: "h:1", grpc: "h:2"}]'}, "a cluster needs cluster.secret too"),
    ({"RAFTMQ_SECURITY_TLS_CERTFILE": "/c"}, "did you mean 'tls_cert_file'"),
    ({"RAFTMQ_SECURITY_AUTH_ADMIN_PREVIOUS_SECRET_KEY": "old"}, "set security.auth_admin_secret_key (the new"),
])
def test_inconsistent_security_settings_are_refused(env, message):
    with pytest.raises(ConfigError) as err:
        load_config(environ=env)
    assert any(message in p for p in err.value.problems), err.value.problems


@pytest.mark.parametrize("env,message", [
    ({"RAFTMQ_SECURITY_ALLOWED_CLIENT_NETWORKS": "[10.0.0.0/8, 10.1.2.3/8]"},
     "security.allowed_client_networks[1]: '10.1.2.3/8' has bits set beyond its prefix length (did you mean "
     "10.0.0.0/8?)"),
    ({"RAFTMQ_SECURITY_ALLOWED_MEMBER_NETWORKS": "[fd00::/8, office]"},
     "security.allowed_member_networks[1]: 'office' is not a network"),
    ({"RAFTMQ_SECURITY_ALLOWED_CLIENT_NETWORKS": "10.0.0.0/8"}, "security.allowed_client_networks: must be a list"),
    ({"RAFTMQ_SECURITY_ALLOWED_CLIENT_NETWORKS": "[10.0.0.0/8, ::1]"}, "quote entries that start with ':'"),
])
def test_bad_allowed_networks_are_refused_naming_the_key(env, message):
    with pytest.raises(ConfigError) as err:
        load_config(environ=env)
    assert any(message in p for p in err.value.problems), err.value.problems


def test_allowed_networks_from_the_environment_ipv4_and_ipv6():
    cfg = load_config(environ={"RAFTMQ_SECURITY_ALLOWED_CLIENT_NETWORKS": "[10.0.0.0/8, 'fd00::/8', 192.168.1.7]",
                               "RAFTMQ_SECURITY_ALLOWED_MEMBER_NETWORKS": "[10.42.0.0/16]"})
    from raftmq.node.networks import NetworkPolicy, NetworkRefused

    policy = NetworkPolicy(cfg.security.allowed_client_networks, cfg.security.allowed_member_networks)
    policy.check_client("10.9.8.7", "gRPC")
    policy.check_client("fd00::1", "gRPC")
    policy.check_client("::ffff:192.168.1.7", "HTTP")  # an IPv4 client on an IPv6 socket
    policy.check_member("10.42.3.4", "Raft port")
    with pytest.raises(NetworkRefused, match="client address 192.168.1.8 may not use this member's gRPC port"):
        policy.check_client("192.168.1.8", "gRPC")
    with pytest.raises(NetworkRefused, match=r"add its network \(e.g. 10.43.0.1/32\) to "
                                             "security.allowed_member_networks"):
        policy.check_member("10.43.0.1", "Raft port")

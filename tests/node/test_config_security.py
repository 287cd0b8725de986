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
    ({"RAFTMQ_SECURITY_OPEN_HTTP_PATHS": "[metrics]"}, "must be a list of paths"),
    ({"RAFTMQ_SECURITY_AUTH_ENABLED": "true", "RAFTMQ_SECURITY_AUTH_ADMIN_ACCESS_KEY": "a",
      "RAFTMQ_SECURITY_AUTH_ADMIN_SECRET_KEY": "s", "RAFTMQ_NODE_ID": "n0",
      "RAFTMQ_CLUSTER_MEMBERS": '[{id: n0, raft: "h:1", grpc: "h:2"}]'}, "a cluster needs cluster.secret too"),
    ({"RAFTMQ_SECURITY_TLS_CERTFILE": "/c"}, "did you mean 'tls_cert_file'"),
])
def test_inconsistent_security_settings_are_refused(env, message):
    with pytest.raises(ConfigError) as err:
        load_config(environ=env)
    assert any(message in p for p in err.value.problems), err.value.problems

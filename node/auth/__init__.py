"""Authentication (RocketMQ 5 signed requests) and authorization (per-user rules) for the client API.

One module per concern:

* ``signing``: parse and check the signature headers (the scheme itself is raftmq/signing.py, shared with the
  SDK). A date-time further than ``security.auth_max_clock_skew_seconds`` from the node's clock is refused, so a
  captured header stops working.
* ``sealed_secrets``: user secrets encrypted at rest and across the Raft log, and their key rotation.
* ``rules``: which RPC needs what (the ``ACCESS`` table: ONE place) and the allow/deny decision.
* ``authenticator``: users (bootstrap admin + replicated table) checked against the above, for gRPC and HTTP.
* ``interceptor``: the gRPC server interceptor that runs every call through the authenticator.
* ``audit``: the ``raftmq.audit`` log lines and the refusal counters.

The names below are what the rest of the node uses.
"""

from raftmq.node.auth.audit import REFUSAL_PORTS, REFUSALS, audit, refusal_listeners
from raftmq.node.auth.authenticator import Authenticator
from raftmq.node.auth.interceptor import AuthInterceptor, authorize_item, current_principal
from raftmq.node.auth.rules import (
    ACCESS,
    EXEMPT_PREFIXES,
    MIN_SECRET_LENGTH,
    AccessDenied,
    Principal,
    check_rule,
)
from raftmq.node.auth.sealed_secrets import SecretBox
from raftmq.node.auth.signing import ACCESS_KEY_PATTERN, AuthError

__all__ = [
    "ACCESS", "ACCESS_KEY_PATTERN", "EXEMPT_PREFIXES", "MIN_SECRET_LENGTH", "REFUSALS", "REFUSAL_PORTS", "AccessDenied",
    "AuthError", "AuthInterceptor", "Authenticator", "Principal", "SecretBox", "audit", "authorize_item", "check_rule",
    "current_principal", "refusal_listeners",
]

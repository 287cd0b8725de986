"""The audit trail: one JSON line per security decision worth keeping (refusals, console actions), on the
``raftmq.audit`` logger; refusals are also counted on /metrics through ``refusal_listeners``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

audit_log = logging.getLogger("raftmq.audit")

REFUSALS = ("unauthenticated", "denied", "refused_network")  # the audit events that refuse a request
REFUSAL_PORTS = ("grpc", "http", "raft")  # where a refusal happens (its audit line's "port")
# called as fn(event, port) for each refusal, whatever the log level (the node counts them on /metrics)
refusal_listeners: list[Callable[[str, str], None]] = []


def audit(event: str, **fields: Any) -> None:
    """One structured (JSON) line on the ``raftmq.audit`` logger; a refusal also goes to ``refusal_listeners``."""
    audit_log.warning("%s", json.dumps({"audit": event, **fields}, sort_keys=True))
    if event in REFUSALS:
        port = fields.get("port") or ("http" if str(fields.get("method", "")).startswith("HTTP") else "grpc")
        for fn in refusal_listeners:
            fn(event, port)

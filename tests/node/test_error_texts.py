"""Error texts a user reads name CLI commands and flags, not gRPC methods or request fields: every message the
node's handlers and the CLI's errors build is checked statically (the texts are f-strings spread over modules)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from raftmq.v1 import raftmq_pb2 as pb
from tests.support.processes import REPO_ROOT

ERROR_CALLS = {"invalid", "not_found", "unavailable", "RpcError", "UsageError", "RaftmqError", "InvalidArgumentError",
               "NotFoundError", "UnavailableError", "V2Error"}  # V2Error: the RocketMQ 5 adapter's refusals
# request fields as a user never types them; the CLI's flags and the SDK's keyword arguments are named instead
FIELD_WORDING = re.compile(r"\b(leave queue_id unset|set queue_id on|to_id \{|msg_id is empty|also set topic|"
                           r"max_num \{)")


def _rpc_names() -> set[str]:
    names = set()
    for service in pb.DESCRIPTOR.services_by_name.values():
        names.add(service.name)
        names.update(m.name for m in service.methods)
        names.update(m.input_type.name for m in service.methods)
    return names


def _texts(path: Path):
    """(line, text) of the string parts of every error built in ``path``."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if name not in ERROR_CALLS:
            continue
        parts = []
        for arg in node.args:
            for sub in ast.walk(arg):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    parts.append(sub.value)
        if parts:
            yield node.lineno, "".join(parts)


def test_user_facing_errors_do_not_name_rpc_methods_or_request_fields():
    rpc = _rpc_names()
    word = re.compile(r"\b(" + "|".join(sorted(rpc, key=len, reverse=True)) + r")\b")
    offenders = []
    for folder in ("node", "client", "node/rocketmq5"):
        for path in sorted((REPO_ROOT / folder).glob("*.py")):
            for line, text in _texts(path):
                if word.search(text) or FIELD_WORDING.search(text):
                    offenders.append(f"{path.relative_to(REPO_ROOT)}:{line}: {text}")
    assert offenders == []

"""AclTable: the replicated users and access rules (issue 14), applied like topics on every member.

Why here and not in ``node``: it is replicated state; every member applies the same commands in the same order
(docs/architecture.md#contracts, 1) and ships the table in snapshots and catch-up metadata. Deciding what a request may do is the
node's job (node.auth); this is only the data. Secrets arrive already encrypted by the leader (node.auth), so
the table, the Raft journal and snapshots never hold a usable secret.

Commands (JSON): ``{"op": "user_put", "user": ak, "secret": token, "admin": bool[, "networks": [cidr]]}``
(without networks an existing user keeps its own), ``{"op": "user_networks", "user": ak, "networks": [cidr]}``
(the source networks the user may sign from; empty: anywhere), ``{"op": "user_reseal", "user": ak, "secret":
new token, "old": token}`` (after a key rotation; refused when the user changed meanwhile), ``{"op":
"user_delete", "user": ak}``, ``{"op": "rule_add", "user": ak, "rule": {"effect", "actions", "resources"}}``,
``{"op": "rule_remove", "user": ak, "index": i}``, ``{"op": "user_set", "user": ak, "record": {"secret", "admin",
"rules", "networks"}}`` (the settings reconcile pass: a user as another group of the cluster has it). Any of them
may carry ``"mark": ms`` (a cluster of several Raft groups): remembered as when this group last changed or
deleted the user in a cluster-wide change, for that pass (docs/design/scale-out.md#settings-in-every-group). A
refused command (unknown user, bad index) returns the reason,
the same on every member.

Ended web-console sessions (issue 34: a log-out is server-side) travel as their own command kind
(``console_logout``, see ``end_session``): session id -> the end of its lifetime (epoch s), kept until then.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from raftmq.store.json_file import write_safely
from raftmq.store.topic_config import MARK_KEEP_MS

FILE_NAME = "acl.json"


class AclTable:
    def __init__(self, path: str | None):
        """``path``: where the table is kept (None: in memory only, for stores without a directory)."""
        self.path = path
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, Any]] = {}
        self._ended_sessions: dict[str, int] = {}  # console session id -> when it would have expired (epoch s)
        self._marks: dict[str, dict[str, Any]] = {}  # user -> {"deleted": bool, "at": ms} (a cluster of groups)
        self._dirty = False
        self.version = 0  # bumped on every change: readers cache their decisions per version
        if path is not None and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            self._users = data.get("users", {})
            self._ended_sessions = {str(k): int(v) for k, v in data.get("ended_sessions", {}).items()}
            self._marks = data.get("marks", {})

    def end_session(self, cmd: dict[str, Any]) -> None:
        """``{"session": id, "until": s, "now": s}`` (``now``: the leader's clock): the console session ``id`` is
        refused from now on; ended sessions whose lifetime is over are forgotten (deterministically, by ``now``)."""
        now = int(cmd["now"])
        with self._lock:
            self._ended_sessions = {sid: until for sid, until in self._ended_sessions.items() if until > now}
            if int(cmd["until"]) > now:
                self._ended_sessions[str(cmd["session"])] = int(cmd["until"])
            self._dirty = True

    def session_ended(self, session: str) -> bool:
        return session in self._ended_sessions

    def snapshot_ended_sessions(self) -> dict[str, int]:
        with self._lock:
            return dict(self._ended_sessions)

    def restore_ended_sessions(self, ended: dict[str, int]) -> None:
        with self._lock:
            self._ended_sessions = {str(k): int(v) for k, v in ended.items()}
            self._dirty = True
        self.persist()

    def apply(self, cmd: dict[str, Any]) -> str | None:
        """Apply one command; the reason when it is refused (nothing changed), else None."""
        op, user = cmd.get("op"), str(cmd.get("user", ""))
        with self._lock:
            if op == "user_put":
                old = self._users.get(user, {})
                networks = cmd["networks"] if cmd.get("networks") else old.get("networks", [])
                self._users[user] = {"secret": str(cmd["secret"]), "admin": bool(cmd.get("admin", False)),
                                     "rules": old.get("rules", []), "networks": [str(n) for n in networks]}
            elif op == "user_set":  # a whole record, as another group of the cluster has it
                rec = cmd["record"]
                self._users[user] = {"secret": str(rec["secret"]), "admin": bool(rec.get("admin", False)),
                                     "rules": [dict(r) for r in rec.get("rules", [])],
                                     "networks": [str(n) for n in rec.get("networks", [])]}
            elif op == "user_reseal":  # the same secret re-encrypted under a rotated key (node.acl_rotation)
                if user not in self._users or self._users[user]["secret"] != cmd.get("old"):
                    return f"user {user!r} changed since its secret was re-encrypted; the next round redoes it"
                self._users[user]["secret"] = str(cmd["secret"])
            elif op == "user_networks":
                if user not in self._users:
                    return f"no user with access key {user!r}; add it first (raftmq acl user add {user})"
                self._users[user]["networks"] = [str(n) for n in cmd.get("networks", [])]
            elif op == "user_delete":
                if self._users.pop(user, None) is None:
                    return f"no user with access key {user!r}"
            elif op == "rule_add":
                if user not in self._users:
                    return f"no user with access key {user!r}; add it first (raftmq acl user add {user})"
                self._users[user]["rules"].append(dict(cmd["rule"]))
            elif op == "rule_remove":
                if user not in self._users:
                    return f"no user with access key {user!r}"
                rules = self._users[user]["rules"]
                index = int(cmd.get("index", -1))
                if not 0 <= index < len(rules):
                    return f"user {user!r} has {len(rules)} rule(s); there is no rule {index}"
                rules.pop(index)
            else:
                return f"unknown ACL operation {op!r}"
            if "mark" in cmd:
                at = int(cmd["mark"])
                self._marks[user] = {"deleted": op == "user_delete", "at": at}
                self._marks = {u: m for u, m in self._marks.items() if at - int(m["at"]) <= MARK_KEEP_MS}
            self._dirty = True
            self.version += 1
            return None

    def marks(self) -> dict[str, tuple[bool, int]]:
        """user -> (deleted, at ms): when this group last changed or deleted it in a cluster-wide change."""
        with self._lock:
            return {u: (bool(m["deleted"]), int(m["at"])) for u, m in self._marks.items()}

    def snapshot_marks(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return json.loads(json.dumps(self._marks))

    def restore_marks(self, marks: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            self._marks = json.loads(json.dumps(marks))
            self._dirty = True
        self.persist()

    def persist(self, only_if_dirty: bool = True) -> None:
        with self._lock:
            if (only_if_dirty and not self._dirty) or self.path is None:
                return
            data = {"users": self._users, "ended_sessions": self._ended_sessions}
            if self._marks:  # only in a cluster of several groups
                data["marks"] = self._marks
            text = json.dumps(data, indent=1, sort_keys=True)
            self._dirty = False
        write_safely(self.path, text)
        os.chmod(self.path, 0o600)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """A deep copy of the users (secrets still encrypted)."""
        with self._lock:
            return json.loads(json.dumps(self._users))

    def snapshot_user(self, user: str) -> dict[str, Any] | None:
        """One user's record (copied), or None."""
        with self._lock:
            rec = self._users.get(user)
            return None if rec is None else {"secret": rec["secret"], "admin": rec.get("admin", False),
                                             "rules": [dict(r) for r in rec.get("rules", [])],
                                             "networks": list(rec.get("networks", []))}

    def restore(self, users: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            self._users = json.loads(json.dumps(users))
            self._dirty = True
            self.version += 1
        self.persist()

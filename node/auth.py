"""Authentication (RocketMQ 5 signed requests) and authorization (per-user rules) for the client API.

Signature (what the official RocketMQ 5 clients send, and raftmq's SDK too): gRPC metadata
``x-mq-date-time: 20261121T064906Z`` and ``authorization: MQv2-HMAC-SHA1 Credential=<access key>,
SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1(secret key, date-time)>``. A date-time further than
``security.auth_max_clock_skew_seconds`` from the node's clock is refused, so a captured header stops working.

Rules (replication.acl_table, replicated): per user, ``allow``/``deny`` of actions PUB, SUB, ADMIN on resources
``topic:NAME``, ``group:NAME`` (trailing ``*`` = prefix) and ``cluster``. A matching deny wins; no match falls to
``security.acl_default`` (deny). Admin users (and the bootstrap admin from the config) may do everything.

Which RPC needs what is the ``ACCESS`` table below: ONE place. A new RPC is registered by adding its full method
name with the (action, resource kind, request field) it needs; an RPC missing from the table needs ADMIN on
``cluster`` (fail closed) and logs a warning once, so a forgotten entry is safe and visible.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import datetime as dt
import hashlib
import hmac
import json
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from raftmq.node.errors import RpcError
from raftmq.node.networks import NetworkList, NetworkRefused, peer_ip, user_network_refusal

log = logging.getLogger(__name__)
audit_log = logging.getLogger("raftmq.audit")

AUTHORIZATION_KEY = "authorization"
DATE_TIME_KEY = "x-mq-date-time"
ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
ACTIONS = ("PUB", "SUB", "ADMIN")
EFFECTS = ("allow", "deny")
RESOURCE_KINDS = ("topic", "group")
CLUSTER = "cluster"
ACCESS_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{3,64}$")
MIN_SECRET_LENGTH = 8

# RPC full method -> what it needs: (action, resource kind, field path in the request). The kind "cluster" has no
# field. "messages[].topic" means every element's topic. An empty group field needs nothing (e.g. a pull without
# a group); an empty topic field means every topic ("topic:*"). () = any authenticated user.
Requirement = tuple[str, str, str]
ACCESS: dict[str, tuple[Requirement, ...]] = {
    "/raftmq.v1.MessagingService/SendMessage": (("PUB", "topic", "message.topic"),),
    "/raftmq.v1.MessagingService/SendBatch": (("PUB", "topic", "messages[].topic"),),
    "/raftmq.v1.MessagingService/PullMessage": (("SUB", "topic", "topic"), ("SUB", "group", "consumer_group")),
    "/raftmq.v1.MessagingService/QueryMessageByKey": (("SUB", "topic", "topic"),),
    "/raftmq.v1.MessagingService/ViewMessage": (("SUB", "topic", "topic"),),
    "/raftmq.v1.MessagingService/GetQueueOffsets": (("SUB", "topic", "topic"),),
    "/raftmq.v1.MessagingService/SearchOffset": (("SUB", "topic", "topic"),),
    "/raftmq.v1.MessagingService/CommitOffset": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/FetchOffset": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/ConsumerHeartbeat": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/UnregisterConsumer": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    # issue 17: each request of the stream is checked (every message's topic)
    "/raftmq.v1.MessagingService/SendStream": (("PUB", "topic", "sends[].messages[].topic"),),
    "/raftmq.v1.MessagingService/PullStream": (("SUB", "topic", "topic"), ("SUB", "group", "consumer_group")),
    # issue 12: pop consumption; a reset of a group's offsets is an admin action (as in RocketMQ)
    "/raftmq.v1.MessagingService/ReceiveMessage": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/AckMessage": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/ChangeInvisibleDuration": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/ForwardToDeadLetterQueue": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/SendMessageBack": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/ResetGroupOffsets": (("ADMIN", "group", "group"),),
    "/raftmq.v1.AdminService/CreateTopic": (("ADMIN", "topic", "topic.name"),),
    "/raftmq.v1.AdminService/UpdateTopic": (("ADMIN", "topic", "topic.name"),),
    "/raftmq.v1.AdminService/DeleteTopic": (("ADMIN", "topic", "name"),),
    "/raftmq.v1.AdminService/ListTopics": (),
    "/raftmq.v1.AdminService/ClusterStatus": (),
    "/raftmq.v1.AdminService/TransferLeader": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AdminService/RebuildMember": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AdminService/AddMember": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AdminService/RemoveMember": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AdminService/DescribeConsumerGroup": (("SUB", "group", "group"),),
    "/raftmq.v1.AdminService/UpdateConsumerGroup": (("ADMIN", "group", "group"),),
    "/raftmq.v1.TransactionService/SendHalfMessage": (("PUB", "topic", "message.topic"),),
    "/raftmq.v1.TransactionService/EndTransaction": (("PUB", "group", "producer_group"),),
    "/raftmq.v1.TransactionService/CheckTransactions": (("PUB", "group", "register_group"),
                                                         ("PUB", "group", "check_answer.producer_group")),
    "/raftmq.v1.AclService/PutAclUser": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AclService/DeleteAclUser": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AclService/ListAclUsers": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AclService/AddAclRule": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AclService/RemoveAclRule": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AclService/SetAclUserNetworks": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AclService/EndConsoleSession": (("ADMIN", CLUSTER, ""),),  # the console calls it as a member
    # issue 13: RocketMQ 5 clients (apache.rocketmq.v2). Sends and transactions publish to the topic; consumers
    # subscribe with their group; route, telemetry, heartbeat and goodbye only identify the client (any signed
    # user: they reveal no messages); a DLQ forward or offset change is the group's own consumption state.
    "/apache.rocketmq.v2.MessagingService/QueryRoute": (),
    "/apache.rocketmq.v2.MessagingService/Heartbeat": (),
    "/apache.rocketmq.v2.MessagingService/Telemetry": (),
    "/apache.rocketmq.v2.MessagingService/NotifyClientTermination": (),
    "/apache.rocketmq.v2.MessagingService/SendMessage": (("PUB", "topic", "messages[].topic.name"),),
    "/apache.rocketmq.v2.MessagingService/EndTransaction": (("PUB", "topic", "topic.name"),),
    "/apache.rocketmq.v2.MessagingService/RecallMessage": (("PUB", "topic", "topic.name"),),
    "/apache.rocketmq.v2.MessagingService/QueryAssignment": (("SUB", "topic", "topic.name"),
                                                             ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/ReceiveMessage": (("SUB", "topic", "message_queue.topic.name"),
                                                            ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/AckMessage": (("SUB", "topic", "topic.name"), ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/ChangeInvisibleDuration": (("SUB", "topic", "topic.name"),
                                                                     ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/ForwardMessageToDeadLetterQueue": (("SUB", "topic", "topic.name"),
                                                                             ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/PullMessage": (("SUB", "topic", "message_queue.topic.name"),
                                                         ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/UpdateOffset": (("SUB", "topic", "message_queue.topic.name"),
                                                          ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/GetOffset": (("SUB", "topic", "message_queue.topic.name"),
                                                       ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/QueryOffset": (("SUB", "topic", "message_queue.topic.name"),),
    "/apache.rocketmq.v2.MessagingService/SyncLiteSubscription": (("SUB", "topic", "topic.name"),
                                                                  ("SUB", "group", "group.name")),
}
# Authenticated by other means: the member-to-member ReplicaService checks cluster.secret itself.
EXEMPT_PREFIXES = ("/raftmq.v1.ReplicaService/",)
_UNLISTED: tuple[Requirement, ...] = (("ADMIN", CLUSTER, ""),)
_ANYWHERE = NetworkList()


class AuthError(Exception):
    """UNAUTHENTICATED: the message says what is wrong with the credentials (never the secret).

    ``about_user``: the verdict rests on this member's copy of the users (an unknown key, a secret that does not
    match), which may lag a change just acknowledged elsewhere; worth asking again after catching up."""

    def __init__(self, message: str, about_user: bool = False):
        super().__init__(message)
        self.about_user = about_user


class AccessDenied(Exception):
    """PERMISSION_DENIED naming user, action and resource, and what would change the answer: the deny rule that
    matched (an allow cannot beat it), or a narrower request, or an allow rule to add."""

    def __init__(self, user: str, action: str, resource: str, *, deny: tuple[int, dict] | None = None):
        if deny is not None:
            index, rule = deny
            why = (f"its rule {index} denies it ({rule.get('effect')} {','.join(rule.get('actions', ()))} on "
                   f"{', '.join(rule.get('resources', ()))}), and a deny wins over any allow; an admin can remove "
                   f"it: raftmq acl policy remove {user} {index}")
        elif resource == "topic:*":
            why = ("the request names no topic, so it needs the right on every topic; name the topic (`raftmq view "
                   "MSGID --topic TOPIC`, SDK: view_message(msg_id, topic=...)), or an admin can grant every topic: "
                   f"raftmq acl policy add {user} --allow {action} --resource 'topic:*'")
        else:
            why = (f"no rule allows it; an admin can grant it: raftmq acl policy add {user} --allow {action} "
                   f"--resource {resource}")
        super().__init__(f"user {user!r} may not {action} on {resource} ({why})")
        self.user, self.action, self.resource = user, action, resource


@dataclass(frozen=True)
class Principal:
    access_key: str
    admin: bool


current_principal: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("raftmq_principal",
                                                                                     default=None)


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


# ---------------------------------------------------------------------- signature


@dataclass(frozen=True)
class Authorization:
    access_key: str
    signed_headers: tuple[str, ...]
    signature: str  # lower-case hex


_HEX40 = re.compile(r"^[0-9a-fA-F]{40}$")


def parse_authorization(value: Any) -> Authorization:
    """Parse an ``authorization`` value; AuthError (never another exception) for anything malformed.

    Accepts the variants the official clients send: ``Credential=ak`` or ``Credential=ak//Rocketmq``, hex in
    either case."""
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            raise AuthError("authorization header is not ASCII text") from None
    if not isinstance(value, str):
        raise AuthError("authorization header is missing")
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise AuthError(f"authorization header: unsupported scheme (expected '{ALGORITHM} Credential=<access key>, "
                        f"SignedHeaders={DATE_TIME_KEY}, Signature=<hex>')")
    parts: dict[str, str] = {}
    for item in rest.split(","):
        key, eq, val = item.strip().partition("=")
        if not eq:
            raise AuthError(f"authorization header: expected key=value items, got {item.strip()[:40]!r}")
        parts[key.strip()] = val.strip()
    missing = [k for k in ("Credential", "SignedHeaders", "Signature") if not parts.get(k)]
    if missing:
        raise AuthError(f"authorization header: missing {', '.join(missing)}")
    access_key = parts["Credential"].split("/", 1)[0]
    if not ACCESS_KEY_PATTERN.match(access_key):
        raise AuthError("authorization header: the Credential is not a valid access key")
    headers = tuple(h.strip().lower() for h in parts["SignedHeaders"].split(";"))
    if DATE_TIME_KEY not in headers:
        raise AuthError(f"authorization header: SignedHeaders must include {DATE_TIME_KEY}")
    if not _HEX40.match(parts["Signature"]):
        raise AuthError("authorization header: Signature must be 40 hex digits (HMAC-SHA1)")
    return Authorization(access_key, headers, parts["Signature"].lower())


def parse_date_time(value: Any) -> dt.datetime:
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str) or len(value) != 16:
        raise AuthError(f"{DATE_TIME_KEY} is missing or not of the form 20261121T064906Z (UTC)")
    try:
        return dt.datetime.strptime(value, DATE_TIME_FORMAT).replace(tzinfo=dt.UTC)
    except ValueError:
        raise AuthError(f"{DATE_TIME_KEY} {value[:20]!r} is not of the form 20261121T064906Z (UTC)") from None


def expected_signature(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


# ---------------------------------------------------------------------- secrets at rest


def _derive_key(key_material: str) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"raftmq-acl-v1", info=b"user secrets").derive(
        key_material.encode())


def key_id(key: bytes) -> str:
    """A short public fingerprint of a derived key (members compare them; it reveals nothing of the key)."""
    return hmac.new(key, b"raftmq-acl-key-id", hashlib.sha256).hexdigest()[:16]


class SecretBox:
    """Encrypts user secrets before they are replicated (Fernet, key derived from the bootstrap admin secret,
    which every member has from the same Kubernetes Secret). The Raft log, snapshots and acl.json hold tokens.

    Rotation: with ``previous`` (security.auth_admin_previous_secret_key) tokens sealed under the old key still
    open, and ``reseal`` re-encrypts one under the current key (node.acl_rotation proposes that, replicated).
    While a rotation is in progress (``previous`` set) new secrets are sealed under the PREVIOUS key: members not
    restarted yet know only that one; the re-encryption moves them to the new key with the rest."""

    def __init__(self, key_material: str, previous: str = ""):
        from cryptography.fernet import Fernet, MultiFernet

        current = _derive_key(key_material)
        keys = [current] + ([_derive_key(previous)] if previous and previous != key_material else [])
        self._current = Fernet(base64.urlsafe_b64encode(current))
        self._all = MultiFernet([Fernet(base64.urlsafe_b64encode(k)) for k in keys])
        self._sealing = Fernet(base64.urlsafe_b64encode(keys[-1]))  # the previous key during a rotation
        self.current_key_id = key_id(current)
        self.key_ids = [key_id(k) for k in keys]
        self._current_tokens: dict[str, bool] = {}

    def seal(self, secret: str) -> str:
        """A new secret's token: readable by every member, rotated or not."""
        return self._sealing.encrypt(secret.encode()).decode()

    def open(self, token: str) -> str:
        from cryptography.fernet import InvalidToken

        try:
            return self._all.decrypt(token.encode()).decode()
        except InvalidToken:
            raise AuthError("this user's stored secret cannot be decrypted on this member: "
                            "security.auth_admin_secret_key was changed; put the old value in "
                            "security.auth_admin_previous_secret_key on every member until the stored secrets are "
                            "re-encrypted (or re-add the user)") from None

    def is_current(self, token: str) -> bool:
        """Whether ``token`` is sealed under the current key (cached: tokens never change)."""
        from cryptography.fernet import InvalidToken

        hit = self._current_tokens.get(token)
        if hit is None:
            try:
                self._current.decrypt(token.encode())
                hit = True
            except InvalidToken:
                hit = False
            if len(self._current_tokens) > 10000:
                self._current_tokens.clear()
            self._current_tokens[token] = hit
        return hit

    def reseal(self, token: str) -> str:
        """``token`` re-encrypted under the current key; AuthError when no key of this member opens it."""
        return self._current.encrypt(self.open(token).encode()).decode()


# ---------------------------------------------------------------------- rules


def parse_resource(text: str) -> tuple[str, str]:
    """``topic:orders`` -> ("topic", "orders"); ``cluster`` -> ("cluster", ""). ValueError when malformed."""
    text = text.strip()
    if text == CLUSTER:
        return CLUSTER, ""
    kind, sep, name = text.partition(":")
    if not sep or kind not in RESOURCE_KINDS or not name or "*" in name[:-1]:
        raise ValueError(f"bad resource {text!r}: use topic:NAME, group:NAME (a trailing * for a prefix, e.g. "
                         "topic:orders-*) or cluster")
    return kind, name


def check_rule(rule: dict) -> dict:
    """A validated, normalised rule; ValueError naming what to fix."""
    effect = str(rule.get("effect", "")).lower()
    if effect not in EFFECTS:
        raise ValueError(f"rule effect {rule.get('effect')!r} must be allow or deny")
    actions = [str(a).upper() for a in rule.get("actions", [])]
    if not actions or any(a not in ACTIONS for a in actions):
        raise ValueError(f"rule actions {rule.get('actions')!r} must be one or more of {', '.join(ACTIONS)}")
    resources = [str(r).strip() for r in rule.get("resources", [])]
    if not resources:
        raise ValueError("a rule needs at least one resource (topic:NAME, group:NAME or cluster)")
    for r in resources:
        parse_resource(r)
    return {"effect": effect, "actions": actions, "resources": resources}


def _matches(pattern: str, kind: str, name: str) -> bool:
    pkind, pname = parse_resource(pattern)
    if pkind != kind:
        return False
    if kind == CLUSTER:
        return True
    if pname.endswith("*"):
        return name.startswith(pname[:-1])
    return pname == name


def matching_deny(rules: Sequence[dict], action: str, kind: str, name: str) -> tuple[int, dict] | None:
    """(index, rule) of the first deny rule that matches (the one ``decide`` refused on), else None."""
    for i, rule in enumerate(rules):
        if rule.get("effect") == "deny" and action in rule.get("actions", ()) and \
                any(_matches(p, kind, name) for p in rule.get("resources", ())):
            return i, rule
    return None


def decide(rules: Sequence[dict], action: str, kind: str, name: str, default: str) -> bool:
    """True when ``rules`` allow ``action`` on the resource: a matching deny wins, then an allow, else default."""
    allowed = None
    for rule in rules:
        if action not in rule.get("actions", ()):
            continue
        if any(_matches(p, kind, name) for p in rule.get("resources", ())):
            if rule.get("effect") == "deny":
                return False
            allowed = True
    return bool(allowed) if allowed is not None else default == "allow"


def _values(request: Any, path: str) -> list[str]:
    """Field values at ``path`` ("a.b", "items[].x") of a protobuf message."""
    objs = [request]
    for part in path.split("."):
        many = part.endswith("[]")
        name = part[:-2] if many else part
        nxt = []
        for o in objs:
            v = getattr(o, name, None)
            if v is None:
                continue
            nxt.extend(v if many else [v])
        objs = nxt
    return [str(o) for o in objs]


# Streams whose handler authorizes each item itself (``authorize_item``) and answers a refusal in that item's
# outcome: aborting the stream instead would leave every other send in flight on it with an unknown outcome.
AUTHORIZED_BY_HANDLER = frozenset({"/raftmq.v1.MessagingService/SendStream"})


def authorize_item(auth: Authenticator | None, method: str, request: Any, peer: str) -> None:
    """For AUTHORIZED_BY_HANDLER streams: PERMISSION_DENIED (audited) unless the caller may make ``request``."""
    if auth is None:
        return
    principal = current_principal.get()
    if principal is None:  # the interceptor authenticated the stream: a principal is always set then
        raise RpcError(grpc.StatusCode.UNAUTHENTICATED, "unauthenticated: no credentials were checked")
    try:
        auth.authorize(principal, method, request)
    except AccessDenied as e:
        audit("denied", user=e.user, action=e.action, resource=e.resource, method=method, peer=peer)
        raise RpcError(grpc.StatusCode.PERMISSION_DENIED, str(e)) from None


def required_access(method: str, request: Any) -> list[tuple[str, str, str]]:
    """(action, kind, name) triples a call needs; see ``ACCESS``."""
    reqs = ACCESS.get(method)
    if reqs is None:
        reqs = _UNLISTED
    out: list[tuple[str, str, str]] = []
    for action, kind, path in reqs:
        if kind == CLUSTER:
            out.append((action, CLUSTER, ""))
            continue
        values = _values(request, path) if request is not None else []
        for v in dict.fromkeys(values):
            if v:
                out.append((action, kind, v))
            elif kind == "topic":
                out.append((action, kind, "*"))
    return out


def resource_text(kind: str, name: str) -> str:
    return CLUSTER if kind == CLUSTER else f"{kind}:{name}"


# ---------------------------------------------------------------------- the authenticator


class Authenticator:
    """Verifies signatures against the users (bootstrap admin + replicated table) and decides access.

    ``acl_table()`` returns the applied replication.acl_table.AclTable (or None before the store is open)."""

    def __init__(self, security: Any, acl_table: Callable[[], Any], clock: Callable[[], dt.datetime] | None = None,
                 catch_up: Callable[[], Awaitable[bool]] | None = None):
        """``catch_up()``: wait until this member has applied what the leader had committed (True when it did);
        a refusal that rests on the replicated users or rules is decided again after it, so a user or rule just
        added through another member is honoured here too (followers learn of commits a few ms late)."""
        self.settings = security
        self._acl_table = acl_table
        self._catch_up = catch_up
        self._catch_up_task: asyncio.Future | None = None
        self._catch_up_runs = 0  # catch-ups started so far (which one a refusal may join)
        self._clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.box = SecretBox(security.auth_admin_secret_key, security.auth_admin_previous_secret_key)
        self._lock = threading.Lock()
        self._verified: dict[tuple[Any, Any], tuple[Principal, dt.datetime]] = {}  # headers -> who, signed when
        self._secrets: dict[str, str] = {}  # token -> secret
        self._unlisted_warned: set[str] = set()
        self._version = -1  # of the AclTable the caches below were filled from
        self._users: dict[str, tuple[str, bool, list[dict], NetworkList]] = {}
        self._decisions: dict[tuple[str, str, str, str], bool] = {}

    # -- users
    def _user(self, access_key: str) -> tuple[str, bool, list[dict], NetworkList] | None:
        """(secret, admin, rules, networks) of a user, cached until the replicated table changes (its version)."""
        s = self.settings
        if access_key == s.auth_admin_access_key:
            return s.auth_admin_secret_key, True, [], _ANYWHERE
        table = self._acl_table()
        if table is None:
            return None
        self._sync_version(table.version)
        hit = self._users.get(access_key)
        if hit is not None:
            return hit
        record = table.snapshot_user(access_key)
        if record is None:
            return None
        token = record["secret"]
        secret = self._secrets.get(token)
        if secret is None:
            secret = self.box.open(token)
            with self._lock:
                self._secrets[token] = secret
        user = (secret, bool(record.get("admin")), record.get("rules", []), NetworkList(record.get("networks", [])))
        self._users[access_key] = user
        return user

    def _sync_version(self, version: int) -> None:
        if version != self._version:
            with self._lock:
                self._version = version
                self._users = {}
                self._decisions = {}
                self._verified = {}

    def users(self) -> list[dict]:
        """Every user without secrets, the bootstrap admin first."""
        out = [{"access_key": self.settings.auth_admin_access_key, "admin": True, "rules": [], "bootstrap": True}]
        table = self._acl_table()
        for ak, rec in sorted((table.snapshot() if table is not None else {}).items()):
            out.append({"access_key": ak, "admin": bool(rec.get("admin")), "rules": rec.get("rules", []),
                        "networks": rec.get("networks", []), "bootstrap": False})
        return out

    async def caught_up(self) -> bool:
        """Before refusing on this member's copy of the ACL: catch up with the leader once (True when it did).

        Refusals at the same time share one catch-up (a flood of bad credentials asks the leader once per round),
        but never one that was already running when this refusal was decided: it may have read the leader's
        commit index before the change this caller saw acknowledged."""
        if self._catch_up is None:
            return False
        running = self._catch_up_task is not None and not self._catch_up_task.done()
        too_early = self._catch_up_runs if running else self._catch_up_runs - 1
        while True:
            task = self._catch_up_task
            if task is None or task.done():
                self._catch_up_runs += 1
                task = self._catch_up_task = asyncio.ensure_future(self._catch_up())
            run = self._catch_up_runs
            try:
                caught = await asyncio.shield(task)
            except Exception:  # noqa: BLE001 - the leader could not be asked: refuse on what this member knows
                log.debug("catching up with the leader before a refusal failed", exc_info=True)
                caught = False
            if run > too_early:
                return caught

    # -- authentication
    def authenticate(self, metadata: Iterable[tuple[str, Any]] | None) -> Principal:
        """The caller, from the signature headers; AuthError for anything wrong."""
        auth_value = date_value = None
        for key, value in metadata or ():
            if key == AUTHORIZATION_KEY:
                auth_value = value
            elif key == DATE_TIME_KEY:
                date_value = value
        table = self._acl_table()
        if table is not None:
            self._sync_version(table.version)  # a user change anywhere in the cluster drops every cached verdict
        hit = self._verified.get((auth_value, date_value)) if isinstance(auth_value, str) else None
        if hit is not None:  # the same headers verified before (a client signs once per second): only the window
            principal, when = hit
            if abs((self._clock() - when).total_seconds()) <= self.settings.auth_max_clock_skew_seconds:
                return principal
        if auth_value is None:
            raise AuthError("this node requires signed requests and none was sent: give an access key and secret "
                            "key (raftmq --access-key, $RAFTMQ_ACCESS_KEY / $RAFTMQ_SECRET_KEY, or "
                            "ClientSecurity(access_key=..., secret_key=...))")
        auth = parse_authorization(auth_value)
        when = parse_date_time(date_value)
        date_text = when.strftime(DATE_TIME_FORMAT)
        now = self._clock()
        skew = abs((now - when).total_seconds())
        limit = self.settings.auth_max_clock_skew_seconds
        if skew > limit:
            raise AuthError(f"signature dated {date_text} is {skew:.0f} s from this node's clock (allowed ±{limit:.0f} "
                            "s): a replayed request, or the client's clock is off")
        user = self._user(auth.access_key)
        if user is None:
            raise AuthError(f"unknown access key {auth.access_key!r}", about_user=True)
        secret, admin, _, _ = user
        if not self._signed_by(auth, secret, date_text):
            raise AuthError(f"signature does not match for access key {auth.access_key!r} (wrong secret key?)",
                            about_user=auth.access_key != self.settings.auth_admin_access_key)  # not replicated
        principal = Principal(auth.access_key, admin)
        with self._lock:
            if len(self._verified) > 10000:
                self._verified.clear()
            self._verified[(auth_value, date_value)] = (principal, when)
        return principal

    def check_secret(self, access_key: str, secret_key: str) -> Principal:
        """The user whose secret key is ``secret_key`` (a console login); AuthError otherwise."""
        user = self._user(access_key)
        if user is None:
            raise AuthError(f"unknown access key {access_key!r}", about_user=True)
        if not any(hmac.compare_digest(s.encode(), secret_key.encode())
                   for s in self._accepted_secrets(access_key, user[0])):
            raise AuthError(f"the secret key does not match access key {access_key!r}",
                            about_user=access_key != self.settings.auth_admin_access_key)
        return Principal(access_key, user[1])

    def secret_fingerprint(self, access_key: str, key: bytes) -> str | None:
        """An HMAC of the user's current secret under ``key``, or None for an unknown user: a console session
        names it, so changing the secret or deleting the user ends the user's sessions."""
        user = self._user(access_key)
        if user is None:
            return None
        return hmac.new(key, user[0].encode(), hashlib.sha256).hexdigest()[:32]

    def _signed_by(self, auth: Authorization, secret: str, date_text: str) -> bool:
        """The signature matches a secret the user may sign with (``_accepted_secrets``)."""
        return any(hmac.compare_digest(expected_signature(s, date_text), auth.signature)
                   for s in self._accepted_secrets(auth.access_key, secret))

    def _accepted_secrets(self, access_key: str, secret: str) -> tuple[str, ...]:
        """The user's secret, and during a rotation the bootstrap admin's previous one too."""
        s = self.settings
        if access_key == s.auth_admin_access_key and s.auth_admin_previous_secret_key:
            return secret, s.auth_admin_previous_secret_key
        return (secret,)

    def forget(self, access_key: str) -> None:
        """Drop cached verifications of a user (deleted, or its secret changed)."""
        with self._lock:
            self._verified = {k: v for k, v in self._verified.items() if v[0].access_key != access_key}

    # -- authorization
    def authorize(self, principal: Principal, method: str, request: Any) -> None:
        """Raise AccessDenied unless ``principal`` may make this call."""
        if method not in ACCESS and method not in self._unlisted_warned:
            self._unlisted_warned.add(method)
            log.warning("RPC %s is not in node.auth.ACCESS: only admins may call it; register it there", method)
        needs = required_access(method, request)
        user = self._user(principal.access_key)
        if user is None:  # deleted since the signature was verified
            raise AccessDenied(principal.access_key, needs[0][0] if needs else "call", method)
        for action, kind, name in needs:
            if not self._allows(principal.access_key, user, action, kind, name):
                raise AccessDenied(principal.access_key, action, resource_text(kind, name),
                                   deny=matching_deny(user[2], action, kind, name))

    def denial(self, access_key: str, action: str, kind: str, name: str) -> AccessDenied:
        """The refusal ``authorize`` gives this user for the action (naming a deny rule that matched)."""
        user = self._user(access_key)
        deny = matching_deny(user[2], action, kind, name) if user is not None else None
        return AccessDenied(access_key or "anonymous", action, resource_text(kind, name), deny=deny)

    def allows(self, access_key: str, action: str, kind: str, name: str) -> bool:
        """Whether the user may ``action`` on the resource (False for an unknown user): the same decision as an
        RPC's (the web console filters what it shows with it)."""
        user = self._user(access_key)
        return user is not None and self._allows(access_key, user, action, kind, name)

    def _allows(self, access_key: str, user: tuple, action: str, kind: str, name: str) -> bool:
        _, admin, rules, _ = user
        if admin:
            return True
        key = (access_key, action, kind, name)
        allowed = self._decisions.get(key)
        if allowed is None:
            allowed = decide(rules, action, kind, name, self.settings.acl_default)
            if len(self._decisions) > 100_000:
                self._decisions = {}
            self._decisions[key] = allowed
        return allowed

    def has_networks(self, principal: Principal) -> bool:
        """Whether the user's signatures are limited to some networks."""
        user = self._user(principal.access_key)
        return user is not None and bool(user[3])

    def check_network(self, principal: Principal, address: str) -> None:
        """NetworkRefused unless the user may sign from ``address`` (its replicated networks; none: anywhere)."""
        user = self._user(principal.access_key)
        if user is not None and not user[3].allows(address):
            raise NetworkRefused(user_network_refusal(principal.access_key, user[3], address))

    # -- HTTP
    def check_http(self, path: str, headers: Any, address: str = "",
                   catch_up: Callable[[], bool] | None = None) -> tuple[int, str] | None:
        """None, or (HTTP status, reason) for a signed HTTP request; ``catch_up()`` (blocking, as ``caught_up``)
        is tried once before refusing on this member's copy of the users."""
        refused = self._http_refusal(path, headers, address)
        if refused is not None and refused[4] and catch_up is not None and catch_up():
            refused = self._http_refusal(path, headers, address)
        if refused is None:
            return None
        status, reason, event, fields, _ = refused
        audit(event, **fields)
        return status, reason

    def _http_refusal(self, path: str, headers: Any, address: str) -> tuple[int, str, str, dict, bool] | None:
        """(status, reason, audit event, its fields, rests on the replicated users?) or None."""
        try:
            principal = self.authenticate([(k.lower(), v) for k, v in headers.items()])
        except AuthError as e:
            return 401, f"unauthenticated: {e}", "unauthenticated", {"method": f"HTTP GET {path}", "peer": address,
                                                                    "reason": str(e)}, e.about_user
        try:
            self.check_network(principal, address)
        except NetworkRefused as e:
            return 403, f"forbidden: {e}", "refused_network", {"user": principal.access_key,
                                                               "method": f"HTTP GET {path}", "peer": address,
                                                               "port": "http", "reason": str(e)}, True
        return None


# ---------------------------------------------------------------------- the gRPC interceptor


def _peer(context: Any) -> str:
    try:
        return str(context.peer())
    except Exception:  # noqa: BLE001 - only for the audit line
        return "?"


# The caller of the RPC being handled, set by the interceptor: it runs in the same task as the handler, so the
# wrapped handlers (built once per method) read it instead of closing over it (no objects built per call).
_call_auth: contextvars.ContextVar[tuple[Principal | None, str | None]] = contextvars.ContextVar(
    "raftmq_call_auth", default=(None, "no credentials were checked"))


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates every call (UNAUTHENTICATED) and checks each request message against the rules
    (PERMISSION_DENIED), before the handler runs. Streaming requests are checked message by message."""

    def __init__(self, authenticator: Authenticator, client_address: Callable[[Any], str] | None = None):
        """``client_address(context)``: the real client's IP (a trusted relay's forwarded-for), for users'
        allowed networks."""
        self.auth = authenticator
        self._client_address = client_address or (lambda context: peer_ip(context.peer()))
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(EXEMPT_PREFIXES):
            return handler
        _call_auth.set(await self._authenticate(method, handler_call_details.invocation_metadata))
        cached = self._wrapped.get(method)
        if cached is None or cached[0] is not handler:
            cached = self._wrapped[method] = (handler, _wrap(handler, method, self.auth, self._client_address))
        return cached[1]

    def _verdict(self, method: str, metadata: Any) -> tuple[Principal | None, AuthError | None]:
        try:
            return self.auth.authenticate(metadata), None
        except AuthError as e:
            return None, e
        except Exception as e:  # noqa: BLE001 - a bug in parsing must still answer UNAUTHENTICATED
            log.exception("authentication of %s failed unexpectedly", method)
            return None, AuthError(f"malformed credentials ({type(e).__name__})")

    async def _authenticate(self, method: str, metadata: Any) -> tuple[Principal | None, str | None]:
        """(caller, None) or (None, why not). A verdict on this member's copy of the users is taken again after
        catching up with the leader (a user just added through another member)."""
        principal, error = self._verdict(method, metadata)
        if error is not None and error.about_user and await self.auth.caught_up():
            principal, error = self._verdict(method, metadata)
        return principal, None if error is None else str(error)

V2_SERVICE_PREFIX = "/apache.rocketmq.v2.MessagingService/"


def _v2_refusal(method: str) -> Callable[[bool, str], Any] | None:
    """RocketMQ 5 clients read refusals from the answer's Status (gRPC status OK), as from RocketMQ's proxy:
    for a v2 method, (authenticated?, message) -> the answer carrying UNAUTHORIZED / FORBIDDEN."""
    if not method.startswith(V2_SERVICE_PREFIX):
        return None
    from raftmq.rocketmq.v2 import definition_pb2 as v2
    from raftmq.rocketmq.v2 import service_pb2 as v2s

    name = method[len(V2_SERVICE_PREFIX):]
    service = v2s.DESCRIPTOR.services_by_name["MessagingService"]
    response_cls = getattr(v2s, service.methods_by_name[name].output_type.name)

    def refusal(authenticated: bool, message: str) -> Any:
        return response_cls(status=v2.Status(code=v2.FORBIDDEN if authenticated else v2.UNAUTHORIZED,
                                             message=message))

    return refusal


def _wrap(handler: grpc.RpcMethodHandler, method: str, auth: Authenticator,
          client_address: Callable[[Any], str]) -> grpc.RpcMethodHandler:
    v2_refusal = _v2_refusal(method)

    def refusal(principal: Principal, request: Any, context: Any) -> tuple[str, dict, str] | None:
        """(audit event, its fields, message) when the user's networks or rules refuse the call, else None."""
        if auth.has_networks(principal):
            address = client_address(context)
            try:
                auth.check_network(principal, address)
            except NetworkRefused as e:
                return "refused_network", {"user": principal.access_key, "method": method, "peer": address,
                                           "port": "grpc", "reason": str(e)}, str(e)
        try:
            auth.authorize(principal, method, request)
        except AccessDenied as e:
            return "denied", {"user": e.user, "action": e.action, "resource": e.resource, "method": method,
                              "peer": _peer(context)}, str(e)
        return None

    async def check(request: Any, context: Any) -> Any:
        """None when the call may go on; else the refusal answer (RocketMQ 5 methods) or abort."""
        principal, failure = _call_auth.get()
        if principal is None:
            audit("unauthenticated", method=method, peer=_peer(context), reason=failure)
            if v2_refusal is not None:
                return v2_refusal(False, f"unauthenticated: {failure}")
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"unauthenticated: {failure}")
        try:
            refused = refusal(principal, request, context)
            if refused is not None and await auth.caught_up():  # a rule or network just changed elsewhere?
                refused = refusal(principal, request, context)
        except RpcError as e:  # a relay claim without the cluster secret
            await context.abort(e.code, e.message)
        if refused is not None:
            event, fields, message = refused
            audit(event, **fields)
            if v2_refusal is not None:
                return v2_refusal(True, message)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, message)
        current_principal.set(principal)
        return None

    async def checked_stream(requests, context):
        async for req in requests:
            refused = await check(req, context)
            if refused is not None:  # a RocketMQ 5 client's stream: it reads the refusal, then reconnects
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, refused.status.message)
            yield req

    if handler.unary_unary:
        inner = handler.unary_unary

        async def unary_unary(request, context):
            refused = await check(request, context)
            if refused is not None:
                return refused
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, handler.request_deserializer,
                                                   handler.response_serializer)
    if handler.unary_stream:
        inner_us = handler.unary_stream

        async def unary_stream(request, context):
            refused = await check(request, context)
            if refused is not None:
                yield refused
                return
            async for resp in _as_async_iter(inner_us(request, context)):
                yield resp

        return grpc.unary_stream_rpc_method_handler(unary_stream, handler.request_deserializer,
                                                    handler.response_serializer)
    if handler.stream_unary:
        inner_su = handler.stream_unary

        async def stream_unary(requests, context):
            refused = await check(None, context)  # credentials and network, before any request is read
            if refused is not None:
                return refused
            return await inner_su(checked_stream(requests, context), context)

        return grpc.stream_unary_rpc_method_handler(stream_unary, handler.request_deserializer,
                                                    handler.response_serializer)
    inner_ss = handler.stream_stream
    by_handler = method in AUTHORIZED_BY_HANDLER

    async def stream_stream(requests, context):
        refused = await check(None, context)  # credentials and network, before any request is read
        if refused is not None:  # RocketMQ 5's Telemetry: the refusal as the stream's one command
            yield refused
            return
        stream = requests if by_handler else checked_stream(requests, context)
        async for resp in _as_async_iter(inner_ss(stream, context)):
            yield resp

    return grpc.stream_stream_rpc_method_handler(stream_stream, handler.request_deserializer,
                                                 handler.response_serializer)


async def _as_async_iter(result):
    """A streaming handler may be an async generator or a coroutine returning an iterable."""
    if hasattr(result, "__aiter__"):
        async for item in result:
            yield item
    else:
        got = await result
        if got is not None:
            for item in got:
                yield item

"""The Authenticator: verifies a signature against the users (the bootstrap admin and the replicated table) and
decides access with their rules, for gRPC calls (through node/auth/interceptor.py) and HTTP requests."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from raftmq.node.auth.audit import audit
from raftmq.node.auth.rules import (
    ACCESS,
    AccessDenied,
    Principal,
    decide,
    matching_deny,
    required_access,
    resource_text,
)
from raftmq.node.auth.sealed_secrets import SecretBox
from raftmq.node.auth.signing import AuthError, Authorization, parse_authorization, parse_date_time
from raftmq.node.networks import NetworkList, NetworkRefused, user_network_refusal
from raftmq.signing import AUTHORIZATION_KEY, DATE_TIME_FORMAT, DATE_TIME_KEY, sign

log = logging.getLogger(__name__)
_ANYWHERE = NetworkList()


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
        return any(hmac.compare_digest(sign(s, date_text), auth.signature)
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

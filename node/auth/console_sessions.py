"""Console login: a signed session cookie instead of a signature per request, for browsers on a cluster with
authentication on.

Why a cookie: a browser cannot sign each request with MQv2-HMAC-SHA1 headers as the SDK does. A user gives
access key and secret key once on ``/ui/login``; the node answers with a cookie that every member accepts (its
HMAC key is derived from ``security.auth_admin_secret_key``, which every member has from the same Secret).

What the cookie holds: the access key, an expiry, a random session id and an HMAC of the user's current secret
(never the secret). Each request re-checks the user against the replicated users, so deleting the user or changing
its secret ends its sessions at once, on every member. Logging out ends the session on the server too (issue 34):
its id is replicated as ended (``AclService.EndConsoleSession``) and refused by every member until it would have
expired, so a copied cookie stops working. What a page shows follows the user's rules as they are now (the console
decides with the same ACL as the gRPC API). The cookie is ``HttpOnly`` (no script reads it), ``SameSite=Strict``
(no other site can send it, so no cross-site request forgery), ``Path=/ui``, and ``Secure`` when the HTTP port
speaks TLS. Failed logins are counted per client address (``FailedLogins``) so secrets cannot be guessed fast.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from raftmq.node.auth.authenticator import Authenticator
from raftmq.node.auth.rules import Principal
from raftmq.node.auth.signing import AuthError
from raftmq.node.networks import NetworkRefused

COOKIE = "raftmq_console"
LOGIN_PATH = "/ui/login"
LOGOUT_PATH = "/ui/logout"
MAX_FAILED_LOGINS = 10  # per source address on one member, within FAILED_LOGIN_WINDOW_S
FAILED_LOGIN_WINDOW_S = 300.0
MAX_TRACKED_ADDRESSES = 10_000


class LoginRefused(Exception):
    """A login that cannot succeed as asked: ``code`` is the HTTP status (401 credentials, 403 a
    network the user may not come from, 429 too many failures)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def _session_key(key_material: str) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"raftmq-console-v1", info=b"console sessions").derive(
        key_material.encode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def safe_next(target: str) -> str:
    """Where to go after logging in: a console page of this node, never another site (no open redirect)."""
    path = target.split("?", 1)[0]
    if (path == "/ui" or path.startswith("/ui/")) and path not in (LOGIN_PATH, LOGOUT_PATH) and "\\" not in target:
        return target
    return "/ui/cluster"


def login_url(target: str) -> str:
    """The login page that leads back to ``target`` afterwards."""
    return f"{LOGIN_PATH}?{urlencode({'next': safe_next(target)})}"


def cookie_value(headers: Any) -> str:
    """This console's session cookie from a request's ``Cookie`` header ("" when there is none)."""
    raw = headers.get("Cookie") or headers.get("cookie") or ""
    for part in raw.split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return value
    return ""


class FailedLogins:
    """Failed logins per source address over the last window: past the limit that address waits, so a secret
    cannot be guessed at the speed of the HTTP port (each member counts its own)."""

    def __init__(self, clock: Callable[[], float], limit: int = MAX_FAILED_LOGINS,
                 window_s: float = FAILED_LOGIN_WINDOW_S):
        self._clock = clock
        self.limit = limit
        self.window_s = window_s
        self._lock = threading.Lock()
        self._failures: dict[str, collections.deque[float]] = {}

    def check(self, address: str) -> None:
        """LoginRefused (429) while ``address`` has used up its failures."""
        with self._lock:
            times = self._recent(address)
            if len(times) < self.limit:
                return
            wait = times[0] + self.window_s - self._clock()
        raise LoginRefused(f"too many failed logins from {address} ({self.limit} in {self.window_s / 60:g} min): "
                           f"try again in {max(1, round(wait))} s", 429)

    def record(self, address: str) -> None:
        with self._lock:
            if len(self._failures) >= MAX_TRACKED_ADDRESSES:  # bounded memory: expired ones first, then oldest
                expired = [a for a in self._failures if not self._recent(a)]
                for a in expired or list(self._failures)[:len(self._failures) // 2]:
                    del self._failures[a]
            self._failures.setdefault(address, collections.deque()).append(self._clock())

    def forget(self, address: str) -> None:
        with self._lock:
            self._failures.pop(address, None)

    def _recent(self, address: str) -> collections.deque[float]:
        """Lock held: the address's failures within the window (older ones dropped)."""
        times = self._failures.get(address) or collections.deque()
        horizon = self._clock() - self.window_s
        while times and times[0] <= horizon:
            times.popleft()
        return times


class ConsoleSessions:
    """Issues and checks console session cookies; ``auth`` is the node's Authenticator."""

    def __init__(self, security: Any, auth: Authenticator, clock: Callable[[], float] = time.time,
                 ended: Callable[[str], bool] = lambda session: False):
        """``ended(session id)``: whether that session was logged out (the replicated ACL table knows)."""
        self.lifetime_s = int(security.console_session_hours * 3600)
        keys = [_session_key(security.auth_admin_secret_key)]
        previous = security.auth_admin_previous_secret_key
        if previous and previous != security.auth_admin_secret_key:
            keys.append(_session_key(previous))
        # during a rotation sign with the key every member still has (the previous one), accept either
        self._signing_key = keys[-1]
        self._keys = keys
        self._auth = auth
        self._clock = clock
        self._ended = ended
        self.failed_logins = FailedLogins(clock)

    def login(self, access_key: str, secret_key: str, address: str,
              catch_up: Callable[[], bool] | None = None) -> str:
        """A new session cookie's value for the user whose secret key is ``secret_key``; LoginRefused otherwise.
        ``catch_up()`` (blocking) is tried once before refusing on this member's copy of the users."""
        if not access_key or not secret_key:
            raise LoginRefused("give both the access key and the secret key", 401)
        self.failed_logins.check(address)
        try:
            try:
                principal = self._auth.check_secret(access_key, secret_key)
            except AuthError as e:
                if not (e.about_user and catch_up is not None and catch_up()):
                    raise
                principal = self._auth.check_secret(access_key, secret_key)  # a user added a moment ago elsewhere
        except AuthError as e:
            self.failed_logins.record(address)
            raise LoginRefused(str(e), 401) from None
        self.failed_logins.forget(address)
        try:
            self._auth.check_network(principal, address)
        except NetworkRefused as e:
            raise LoginRefused(str(e), 403) from None
        found = self._auth.secret_fingerprint(access_key, self._signing_key)
        if found is None:  # deleted since check_secret found it
            raise LoginRefused(f"unknown access key {access_key!r}", 401)
        payload = _b64(json.dumps({"u": access_key, "exp": int(self._clock()) + self.lifetime_s, "f": found,
                                   "s": secrets.token_hex(16)}, separators=(",", ":")).encode())
        return f"{payload}.{self._mac(self._signing_key, payload)}"

    def user(self, value: str, address: str) -> str | None:
        """The access key of a valid session cookie's user; None when it is absent, damaged, forged, expired,
        logged out, or its user was deleted or changed its secret. NetworkRefused when the user may not come from
        ``address`` (its replicated networks)."""
        session = self.session(value)
        if session is None:
            return None
        access_key = session[0]
        self._auth.check_network(Principal(access_key, True), address)
        return access_key

    def session(self, value: str, *, even_ended: bool = False) -> tuple[str, str, int] | None:
        """(access key, session id, expiry in epoch s) of a valid session cookie value, else None (as ``user``,
        without the network check; ``even_ended``: also when it was logged out)."""
        payload, _, mac = value.partition(".")
        if not payload or not mac:
            return None
        key = next((k for k in self._keys if hmac.compare_digest(self._mac(k, payload), mac)), None)
        if key is None:
            return None
        try:
            session = json.loads(_unb64(payload))
            access_key, expires, fingerprint = str(session["u"]), int(session["exp"]), str(session["f"])
            sid = str(session["s"])  # a cookie from before server-side log-outs has none: log in again
        except (ValueError, KeyError, TypeError):
            return None
        if expires <= self._clock() or (self._ended(sid) and not even_ended):
            return None
        found = self._auth.secret_fingerprint(access_key, key)
        if found is None or not hmac.compare_digest(found, fingerprint):
            return None
        return access_key, sid, expires

    def set_cookie(self, value: str, secure: bool) -> str:
        """The ``Set-Cookie`` header of a new session."""
        return (f"{COOKIE}={value}; Path=/ui; Max-Age={self.lifetime_s}; HttpOnly; SameSite=Strict"
                + ("; Secure" if secure else ""))

    @staticmethod
    def clear_cookie(secure: bool) -> str:
        """The ``Set-Cookie`` header that ends a session in the browser."""
        return f"{COOKIE}=; Path=/ui; Max-Age=0; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")

    @staticmethod
    def _mac(key: bytes, payload: str) -> str:
        return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()

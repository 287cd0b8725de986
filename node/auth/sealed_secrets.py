"""User secrets at rest: sealed before they are replicated (Fernet, key derived from the bootstrap admin secret), so
the Raft log, snapshots and acl.json hold tokens, never secrets; key rotation reseals them (node/acl_rotation.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac

from raftmq.node.auth.signing import AuthError


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

"""Checking a signed request (raftmq/signing.py has the scheme, shared with the SDK that signs): parse the
``authorization`` and ``x-mq-date-time`` headers, compute the expected signature. A malformed header is an
``AuthError`` with a message that says what is wrong, never another exception."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from raftmq.signing import ALGORITHM, DATE_TIME_FORMAT, DATE_TIME_KEY

ACCESS_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{3,64}$")


class AuthError(Exception):
    """UNAUTHENTICATED: the message says what is wrong with the credentials (never the secret).

    ``about_user``: the verdict rests on this member's copy of the users (an unknown key, a secret that does not
    match), which may lag a change just acknowledged elsewhere; worth asking again after catching up."""

    def __init__(self, message: str, about_user: bool = False):
        super().__init__(message)
        self.about_user = about_user


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

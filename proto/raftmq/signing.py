"""RocketMQ 5 request signing: what the SDK (client/security.py) signs and the node (node/auth/signing.py) checks.

One definition for both sides, in the package root that client and node may both import: every call carries
``x-mq-date-time: 20261121T064906Z`` (UTC) and ``authorization: MQv2-HMAC-SHA1 Credential=<access key>,
SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1(secret key, that date-time)>``, as the official
RocketMQ 5 clients send it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac

AUTHORIZATION_KEY = "authorization"
DATE_TIME_KEY = "x-mq-date-time"
ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"


def sign(secret_key: str, date_time: str) -> str:
    """The hex HMAC-SHA1 of the date-time under the secret key (what RocketMQ 5 clients send)."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def authorization_value(access_key: str, signature: str) -> str:
    return f"{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME_KEY}, Signature={signature}"


def signed_headers(access_key: str, secret_key: str, now: dt.datetime | None = None) -> list[tuple[str, str]]:
    """The two headers of one signed request (gRPC metadata or HTTP headers)."""
    when = (now or dt.datetime.now(dt.UTC)).strftime(DATE_TIME_FORMAT)
    return [(DATE_TIME_KEY, when), (AUTHORIZATION_KEY, authorization_value(access_key, sign(secret_key, when)))]

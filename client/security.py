"""How a client proves who it is: TLS settings for its channels and RocketMQ 5 style request signing.

Signing follows the official RocketMQ 5 clients (raftmq/signing.py, shared with the node that verifies it): every
call carries ``x-mq-date-time`` and ``authorization`` headers. The server refuses a date-time too far from its
clock, which bounds how long a captured signature can be replayed.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from raftmq.client.errors import InvalidArgumentError
from raftmq.signing import (  # noqa: F401  (signed_headers: the SDK's name for signing a request by hand)
    AUTHORIZATION_KEY,
    DATE_TIME_FORMAT,
    DATE_TIME_KEY,
    authorization_value,
    sign,
    signed_headers,
)

TLS_ENV = "RAFTMQ_TLS"
CA_ENV = "RAFTMQ_TLS_CA"
CERT_ENV = "RAFTMQ_TLS_CERT"
KEY_ENV = "RAFTMQ_TLS_KEY"
SERVER_NAME_ENV = "RAFTMQ_TLS_SERVER_NAME"
ACCESS_KEY_ENV = "RAFTMQ_ACCESS_KEY"
SECRET_KEY_ENV = "RAFTMQ_SECRET_KEY"


def _read_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InvalidArgumentError(f"cannot read the TLS {what} {path!r}: {e.strerror or e}") from None


@dataclass(frozen=True)
class ClientSecurity:
    """TLS and credentials of a client. Empty: plaintext and unsigned (a server without security)."""

    tls: bool = False
    ca_file: str = ""        # CA that signed the servers' certificates (default: the system roots)
    cert_file: str = ""      # client certificate, for servers that require mutual TLS
    key_file: str = ""
    server_name: str = ""    # expected name in the server certificate when it differs from the address
    access_key: str = ""
    secret_key: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise InvalidArgumentError("a client certificate needs its key: give both --cert and --key (--tls-key)")
        if bool(self.access_key) != bool(self.secret_key):
            raise InvalidArgumentError("credentials need both an access key and a secret key "
                                       f"(--access-key/--secret-key or ${ACCESS_KEY_ENV}/${SECRET_KEY_ENV})")

    @property
    def uses_tls(self) -> bool:
        return self.tls or bool(self.ca_file or self.cert_file)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> ClientSecurity:
        """Settings from ``RAFTMQ_TLS`` (1/true), ``RAFTMQ_TLS_CA``, ``RAFTMQ_TLS_CERT``, ``RAFTMQ_TLS_KEY``,
        ``RAFTMQ_TLS_SERVER_NAME``, ``RAFTMQ_ACCESS_KEY``, ``RAFTMQ_SECRET_KEY``; non-empty overrides win."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {
            "tls": env.get(TLS_ENV, "").strip().lower() in ("1", "true", "yes", "on"),
            "ca_file": env.get(CA_ENV, ""), "cert_file": env.get(CERT_ENV, ""), "key_file": env.get(KEY_ENV, ""),
            "server_name": env.get(SERVER_NAME_ENV, ""), "access_key": env.get(ACCESS_KEY_ENV, ""),
            "secret_key": env.get(SECRET_KEY_ENV, ""),
        }
        values.update({k: v for k, v in overrides.items() if v})
        return cls(**values)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        root = _read_file(self.ca_file, "CA file") if self.ca_file else None
        key = _read_file(self.key_file, "key") if self.key_file else None
        chain = _read_file(self.cert_file, "certificate") if self.cert_file else None
        return grpc.ssl_channel_credentials(root_certificates=root, private_key=key, certificate_chain=chain)

    def _tls_options(self, options: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        return list(options) + ([("grpc.ssl_target_name_override", self.server_name)] if self.server_name else [])

    def channel(self, address: str, options: list[tuple[str, Any]]) -> grpc.Channel:
        """A channel to ``address``: TLS when configured, every call signed when credentials are set."""
        if self.uses_tls:
            channel = grpc.secure_channel(address, self.channel_credentials(), options=self._tls_options(options))
        else:
            channel = grpc.insecure_channel(address, options=options)
        if self.access_key:
            channel = grpc.intercept_channel(channel, _Signer(self.access_key, self.secret_key))
        return channel

    def aio_channel(self, address: str, options: list[tuple[str, Any]]) -> grpc.aio.Channel:
        """An asyncio channel to ``address`` (TLS when configured); sign its calls with ``call_metadata()``."""
        if self.uses_tls:
            return grpc.aio.secure_channel(address, self.channel_credentials(), options=self._tls_options(options))
        return grpc.aio.insecure_channel(address, options=options)

    def call_metadata(self) -> list[tuple[str, str]]:
        """The signature headers for a call starting now (none without credentials)."""
        return signed_headers(self.access_key, self.secret_key) if self.access_key else []

    def __repr__(self) -> str:  # never print the secret
        return (f"ClientSecurity(tls={self.uses_tls}, ca_file={self.ca_file!r}, cert_file={self.cert_file!r}, "
                f"access_key={self.access_key!r})")


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, base: grpc.ClientCallDetails, metadata: list[tuple[str, str]]):
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class _Signer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
              grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the signature headers to every call; one HMAC per second, not per call."""

    def __init__(self, access_key: str, secret_key: str):
        self._ak, self._sk = access_key, secret_key
        self._lock = threading.Lock()
        self._cached: tuple[str, list[tuple[str, str]]] = ("", [])

    def _headers(self) -> list[tuple[str, str]]:
        now = dt.datetime.now(dt.UTC).strftime(DATE_TIME_FORMAT)
        with self._lock:
            if self._cached[0] != now:
                self._cached = (now, [(DATE_TIME_KEY, now),
                                      (AUTHORIZATION_KEY, authorization_value(self._ak, sign(self._sk, now)))])
            return self._cached[1]

    def _details(self, details: grpc.ClientCallDetails) -> _CallDetails:
        return _CallDetails(details, list(details.metadata or ()) + self._headers())

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)


def diagnose_connection(address: str, security: ClientSecurity, timeout: float = 2.0) -> str | None:
    """Why a connection to ``address`` failed, when TLS is the reason; None when it is not (or unknown).

    gRPC reports every failed handshake as a bare "Socket closed" or "failed to connect", so on failure the
    client repeats the handshake with Python's ssl module, which names the cause (expired certificate, unknown
    CA, name mismatch, server speaking plaintext or TLS)."""
    import socket
    import ssl

    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        raw = socket.create_connection((host, int(port)), timeout=timeout)
    except (OSError, ValueError):
        return None  # not a TLS problem: refused / unreachable
    with raw:
        raw.settimeout(timeout)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if security.uses_tls:
            try:
                if security.ca_file:
                    ctx.load_verify_locations(security.ca_file)
                else:
                    ctx.load_default_certs()
                if security.cert_file:
                    ctx.load_cert_chain(security.cert_file, security.key_file)
            except (OSError, ssl.SSLError) as e:
                return f"cannot load the client TLS files: {e}"
        else:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        try:
            with ctx.wrap_socket(raw, server_hostname=security.server_name or host) as tls:
                if not security.uses_tls:
                    return ("the server requires TLS; connect with --tls (and --ca FILE for a private CA), or set "
                            "RAFTMQ_TLS=1")
                # TLS 1.3: a server that refuses our client certificate (or its absence) does so after the
                # handshake, by closing at once; a gRPC server that accepted us sends its HTTP/2 settings.
                try:
                    first = tls.recv(1)
                except ssl.SSLError as e:
                    return _tls_failure(e)
                except OSError:
                    return None
                if first:
                    return None
                if not security.cert_file:
                    return "TLS: the server requires a client certificate (mutual TLS); give --cert and --key"
                return ("TLS: the server rejected the client certificate (not signed by its client CA, expired, or "
                        "not for client use)")
        except ssl.SSLCertVerificationError as e:
            return (f"TLS: the server certificate is not trusted: {e.verify_message} (check --ca, the server's "
                    "certificate dates and names, or --tls-server-name)")
        except ssl.SSLError as e:
            if not security.uses_tls:
                return None
            if "WRONG_VERSION_NUMBER" in str(e) or "record layer failure" in str(e).lower():
                return "TLS handshake failed: the server speaks plaintext; drop --tls/--ca (or enable TLS there)"
            return _tls_failure(e)
        except OSError as e:
            if security.uses_tls:
                return f"TLS handshake failed: {e} (does the server speak TLS?)"
            return None


def _tls_failure(e: Exception) -> str:
    text = str(e)
    if "CERTIFICATE_REQUIRED" in text or "HANDSHAKE_FAILURE" in text:
        return "TLS: the server requires a client certificate (mutual TLS); give --cert and --key"
    if "UNKNOWN_CA" in text or "BAD_CERTIFICATE" in text or "CERTIFICATE_UNKNOWN" in text:
        return "TLS: the server rejected the client certificate (not signed by its client CA)"
    if "CERTIFICATE_EXPIRED" in text:
        return "TLS: the server rejected the client certificate: it has expired"
    return f"TLS handshake failed: {getattr(e, 'reason', None) or text}"

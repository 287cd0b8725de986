"""TLS for the node's gRPC and HTTP ports, with certificates re-read when their files change.

Why re-read instead of load once: cert-manager (or any rotation) replaces the mounted files in place; a node that
kept the old certificate would serve an expired one until restarted. gRPC asks ``fetch()`` before each new
handshake (its dynamic server credentials), HTTP wraps each accepted socket with the newest ``ssl.SSLContext``;
both cost one ``stat()`` per connection, not per request. Established connections keep their session.

The same files make the node's client side: the channels it opens to other members (replica service, status
fan-out, forwarding) trust ``ca_file`` and present the node's own certificate when the peer asks for one (mTLS).
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from dataclasses import dataclass

import grpc

log = logging.getLogger(__name__)


class TlsConfigError(RuntimeError):
    """A certificate, key or CA file cannot be used; the message names the file and what to fix."""


@dataclass(frozen=True)
class TlsFiles:
    cert_file: str
    key_file: str
    client_ca_file: str = ""  # set: clients must present a certificate signed by this CA (mutual TLS)
    ca_file: str = ""         # what this node trusts when dialling members; default client_ca_file, else the system
    server_name: str = ""     # name expected in members' certificates, when it differs from their address

    @property
    def mutual(self) -> bool:
        return bool(self.client_ca_file)

    @property
    def trust_file(self) -> str:
        return self.ca_file or self.client_ca_file


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TlsConfigError(f"cannot read the TLS {what} {path!r}: {e.strerror or e}") from None
    if b"-----BEGIN" not in data:
        raise TlsConfigError(f"TLS {what} {path!r} is not PEM (expected a '-----BEGIN ...' block)")
    return data


def _check_pair(cert_file: str, key_file: str, ca_file: str) -> None:
    """Load the files into an OpenSSL context so a wrong key or garbage file is named at start, not at the first
    handshake (where gRPC would only log an opaque error)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except (ssl.SSLError, OSError) as e:
        raise TlsConfigError(f"TLS certificate {cert_file!r} and key {key_file!r} do not load: {e}; they must be a "
                             "PEM certificate (chain) and its matching private key") from None
    if ca_file:
        try:
            ctx.load_verify_locations(ca_file)
        except (ssl.SSLError, OSError) as e:
            raise TlsConfigError(f"TLS CA file {ca_file!r} does not load: {e}") from None


class CertificateFiles:
    """The current contents of the certificate, key and client-CA files; ``changed()`` notices a rotation."""

    def __init__(self, files: TlsFiles):
        self.files = files
        self._lock = threading.Lock()
        self._stamp: tuple = ()
        self.cert = self.key = self.client_ca = b""
        self.generation = 0
        self.reload(initial=True)

    def _stat(self) -> tuple:
        out = []
        for p in (self.files.cert_file, self.files.key_file, self.files.client_ca_file):
            if p:
                try:
                    st = os.stat(p)
                except OSError:
                    return ()  # mid-rotation (a symlink swap): keep the old files for now
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(out)

    def reload(self, initial: bool = False) -> bool:
        """Re-read the files when they changed; True when new contents were loaded. A rotation that leaves a
        broken pair keeps the previous one (and logs why) instead of taking the port down."""
        stamp = self._stat()
        if not stamp or stamp == self._stamp:
            return False
        f = self.files
        try:
            cert, key = _read(f.cert_file, "certificate"), _read(f.key_file, "private key")
            ca = _read(f.client_ca_file, "client CA") if f.client_ca_file else b""
            _check_pair(f.cert_file, f.key_file, f.client_ca_file)
        except TlsConfigError as e:
            if initial:
                raise
            log.error("TLS files changed but cannot be used, still serving the previous certificate: %s", e)
            self._stamp = stamp
            return False
        _warn_if_not_valid_now(f.cert_file, cert)
        with self._lock:
            self.cert, self.key, self.client_ca, self._stamp = cert, key, ca, stamp
            self.generation += 1
        if not initial:
            log.info("TLS certificate reloaded from %s (rotation #%d)", f.cert_file, self.generation - 1)
        return True


def _warn_if_not_valid_now(path: str, pem: bytes) -> None:
    """Serving an expired (or not yet valid) certificate works, but every client refuses it: say so here, where
    the operator looks, instead of only in each client's error."""
    import datetime as dt

    from cryptography import x509

    try:
        leaf = x509.load_pem_x509_certificate(pem)
    except ValueError:
        return  # the pair loaded in OpenSSL already; an exotic PEM is not worth refusing here
    now = dt.datetime.now(dt.UTC)
    if leaf.not_valid_after_utc < now:
        log.error("TLS certificate %s expired at %s: clients will refuse every connection; renew it (the node "
                  "picks up the new file without a restart)", path, leaf.not_valid_after_utc.isoformat())
    elif leaf.not_valid_before_utc > now:
        log.error("TLS certificate %s is not valid before %s (clock skew?): clients will refuse it", path,
                  leaf.not_valid_before_utc.isoformat())


class GrpcServerTls:
    """gRPC dynamic server credentials over ``CertificateFiles``."""

    def __init__(self, certs: CertificateFiles):
        self.certs = certs

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        c = self.certs
        return grpc.ssl_server_certificate_configuration([(c.key, c.cert)], root_certificates=c.client_ca or None)

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        try:
            return self._configuration() if self.certs.reload() else None
        except Exception:  # noqa: BLE001 - called from gRPC's C core: never raise into it
            log.exception("TLS certificate reload failed; keeping the previous certificate")
            return None

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(self._configuration(), self._fetch,
                                                   require_client_authentication=self.certs.files.mutual)


class HttpServerTls:
    """An ``ssl.SSLContext`` for the HTTP port, rebuilt when the files change. Client certificates are required
    only with ``client_auth`` (and a client CA): kubelet probes cannot present one."""

    def __init__(self, certs: CertificateFiles, client_auth: bool = False):
        self.certs = certs
        self.client_auth = client_auth
        self._ctx = self._build()
        self._generation = certs.generation

    def _build(self) -> ssl.SSLContext:
        f = self.certs.files
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(f.cert_file, f.key_file)
        if f.client_ca_file and self.client_auth:
            ctx.load_verify_locations(f.client_ca_file)
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def context(self) -> ssl.SSLContext:
        """The context for the next connection (reloaded after a rotation)."""
        self.certs.reload()
        if self.certs.generation != self._generation:
            try:
                self._ctx = self._build()
            except (ssl.SSLError, OSError) as e:
                log.error("HTTP TLS context not rebuilt after a certificate change: %s", e)
            self._generation = self.certs.generation
        return self._ctx


def member_channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """Credentials for this node's own calls to other members: trust ``ca_file`` (or the client CA, else the
    system roots) and present this node's certificate, so mutual TLS between members works too.

    Read at each call, so a channel opened after a rotation uses the new files."""
    root = _read(files.trust_file, "CA") if files.trust_file else None
    return grpc.ssl_channel_credentials(root_certificates=root, private_key=_read(files.key_file, "private key"),
                                        certificate_chain=_read(files.cert_file, "certificate"))


def member_channel_options(files: TlsFiles) -> list[tuple[str, str]]:
    return [("grpc.ssl_target_name_override", files.server_name)] if files.server_name else []


class RaftTlsContexts:
    """``ssl.SSLContext``s for the Raft port (mutual TLS between members, replication.raft_tls): both sides
    present this member's certificate and require the other's, signed by the members' CA (``tls_ca_file``, else
    the client CA). Rebuilt after a rotation, so the next Raft connection uses the new certificate."""

    def __init__(self, certs: CertificateFiles):
        if not certs.files.trust_file:
            raise TlsConfigError("security.tls_raft needs the members' CA: set security.tls_ca_file (or "
                                 "tls_client_ca_file)")
        self.certs = certs
        self._generation = -1
        self._server: ssl.SSLContext | None = None
        self._client: ssl.SSLContext | None = None
        self._refresh()

    def _build(self, server: bool) -> ssl.SSLContext:
        f = self.certs.files
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(f.cert_file, f.key_file)
        ctx.load_verify_locations(f.trust_file)
        ctx.verify_mode = ssl.CERT_REQUIRED  # the client side also checks the member's name (check_hostname)
        return ctx

    def _refresh(self) -> None:
        self.certs.reload()
        if self.certs.generation == self._generation:
            return
        try:
            self._server, self._client = self._build(True), self._build(False)
        except (ssl.SSLError, OSError) as e:
            if self._server is None:
                raise TlsConfigError(f"Raft TLS contexts do not load: {e}") from None
            log.error("Raft TLS contexts not rebuilt after a certificate change: %s", e)
        self._generation = self.certs.generation

    def server_context(self) -> ssl.SSLContext:
        self._refresh()
        assert self._server is not None
        return self._server

    def client_context(self) -> ssl.SSLContext:
        self._refresh()
        assert self._client is not None
        return self._client

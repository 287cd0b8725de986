"""Mutual TLS on the Raft port: pysyncobj's TCP connections, encrypted with ``ssl`` memory BIOs (issue 14).

Why memory BIOs and not an ``SSLSocket``: pysyncobj drives its sockets from one poller on the tick thread, non-
blocking, with its own read and write buffers. An ``SSLSocket`` would need every ``recv``/``send`` of it changed to
handle ``SSLWantRead``/``SSLWantWrite`` (a write that must wait for READ readiness, a read that must wait for
WRITE), and it cannot wrap a socket whose connect is still in progress. With an ``ssl.SSLObject`` over two
``MemoryBIO``s the socket stays pysyncobj's plain non-blocking socket: bytes read from it are fed to the TLS
object, plaintext comes out into pysyncobj's read buffer; plaintext frames go in and the ciphertext is appended to
pysyncobj's write buffer, which its own send path (and raftmq's write-readiness patch) flushes. The handshake is
just more bytes in both directions: the client's hello is queued when the connect starts and leaves with the first
flush; frames written before the handshake finishes wait in a small plaintext queue.

Both sides verify: the accepting member requires a client certificate signed by the cluster CA, the connecting
member checks the accepting member's certificate against the same CA and its name (its Raft host, or
``security.tls_server_name``). A handshake failure drops the connection and is logged once per peer and reason.
``cluster.secret`` still applies inside (pysyncobj's own encryption and its random-key exchange).
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass

import pysyncobj.pickle as _pickle
import pysyncobj.tcp_connection as _tcp
from pysyncobj.monotonic import monotonic as _monotonic
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import TcpConnection

log = logging.getLogger(__name__)

_READ_CHUNK = 1 << 20
_LENGTH = struct.Struct("i")


@dataclass(frozen=True)
class RaftTls:
    """Where the contexts come from (called for every new connection, so a rotated certificate is used by the
    next connection): ``server_context()`` for accepted connections (client certificates required),
    ``client_context()`` for the connections this member opens; ``server_name``: the name to expect in the
    other members' certificates instead of their Raft host ("" = the host)."""

    server_context: Callable[[], ssl.SSLContext]
    client_context: Callable[[], ssl.SSLContext]
    server_name: str = ""


class TlsTcpConnection(TcpConnection):
    """A pysyncobj TcpConnection whose bytes on the wire are TLS. Made from a plain one by ``start_server`` (an
    accepted connection) or ``make_client`` (an outgoing connection, before it connects)."""

    _tls_config: RaftTls
    _tls_obj: ssl.SSLObject | None
    _tls_in: ssl.MemoryBIO
    _tls_out: ssl.MemoryBIO
    _tls_ready: bool
    _tls_pending: bytearray
    _tls_peer: str

    # ------------------------------------------------------------------ set-up
    @classmethod
    def start_server(cls, conn: TcpConnection, config: RaftTls, peer: str) -> None:
        conn.__class__ = cls
        assert isinstance(conn, TlsTcpConnection)
        conn._tls_config = config
        conn._tls_begin(config.server_context(), server_side=True, hostname=None, peer=peer)

    @classmethod
    def make_client(cls, conn: TcpConnection, config: RaftTls) -> None:
        conn.__class__ = cls
        assert isinstance(conn, TlsTcpConnection)
        conn._tls_config = config
        conn._tls_obj = None

    def _tls_begin(self, ctx: ssl.SSLContext, *, server_side: bool, hostname: str | None, peer: str) -> None:
        self._tls_in, self._tls_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls_obj = ctx.wrap_bio(self._tls_in, self._tls_out, server_side=server_side, server_hostname=hostname)
        self._tls_ready = False
        self._tls_pending = bytearray()
        self._tls_peer = peer
        if not server_side:
            self._tls_handshake()  # the client hello: queued, sent by the first flush once connected

    def connect(self, host, port):  # noqa: D102 - pysyncobj's API
        ok = TcpConnection.connect(self, host, port)
        if ok:
            name = self._tls_config.server_name or host
            try:
                ctx = self._tls_config.client_context()
            except (ssl.SSLError, OSError) as e:
                log.error("Raft TLS: cannot build the client context: %s", e)
                self.disconnect()
                return False
            self._tls_begin(ctx, server_side=False, hostname=name, peer=f"{host}:{port}")
        return ok

    def disconnect(self):  # noqa: D102 - pysyncobj's API; a reconnect starts a new TLS session
        self._tls_obj = None
        self._tls_ready = False
        self._tls_pending = bytearray()
        TcpConnection.disconnect(self)

    # ------------------------------------------------------------------ write side
    def send(self, message):  # noqa: D102 - pysyncobj's API (its framing, then TLS)
        if self.sendRandKey:
            message = (self.sendRandKey, message)
        data = _tcp.zlib.compress(_pickle.dumps(message), 3)
        if self.encryptor:
            data = self.encryptor.encrypt_at_time(data, int(_monotonic()))
        frame = _LENGTH.pack(len(data)) + data
        if self._tls_obj is None:
            return  # not connected (pysyncobj's plain send would buffer for a socket that is not there either)
        if not self._tls_ready:
            self._tls_pending += frame
            return
        try:
            self._tls_obj.write(frame)
        except ssl.SSLError as e:
            self._tls_fail(e)
            return
        self._tls_flush()

    def _tls_flush(self) -> None:
        """Move ciphertext to pysyncobj's write buffer and send what the socket takes now; WRITE readiness for
        the rest."""
        out = self._tls_out.read()
        if out:
            self._TcpConnection__writeBuffer += out
        if not self._TcpConnection__writeBuffer:
            return
        self._TcpConnection__trySendBuffer()
        fileno = self._TcpConnection__fileno
        if self._TcpConnection__writeBuffer and fileno is not None:
            self._TcpConnection__poller.subscribe(
                fileno, self._TcpConnection__processConnection,
                POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.WRITE | POLL_EVENT_TYPE.ERROR)

    # ------------------------------------------------------------------ read side
    def _TcpConnection__processRead(self):  # noqa: N802 - overrides pysyncobj's private reader
        sock = self._TcpConnection__socket
        try:
            incoming = sock.recv(self._TcpConnection__recvBufferSize)
        except OSError as e:
            if e.errno not in (socket.errno.EAGAIN, socket.errno.EWOULDBLOCK):
                self.disconnect()
            return False
        if not incoming or sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            if self._tls_obj is not None and not self._tls_ready:
                self._tls_fail("the peer closed the connection during the handshake (it does not trust this "
                               "member's certificate?)")
                return False
            self.disconnect()
            return False
        if self._tls_obj is None:
            self.disconnect()
            return False
        self._tls_in.write(incoming)
        if not self._tls_ready and not self._tls_handshake():
            return self.state != _tcp.CONNECTION_STATE.DISCONNECTED
        plain = bytearray()
        while True:
            try:
                chunk = self._tls_obj.read(_READ_CHUNK)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.disconnect()
                return False
            except ssl.SSLError as e:
                self._tls_fail(e)
                return False
            if not chunk:
                break
            plain += chunk
        if plain:
            self._TcpConnection__readBuffer += bytes(plain)
        self._tls_flush()  # e.g. TLS 1.3 session tickets, key updates
        return self.state != _tcp.CONNECTION_STATE.DISCONNECTED

    def _tls_handshake(self) -> bool:
        """Advance the handshake; True once it is complete (then queued frames are sent)."""
        try:
            self._tls_obj.do_handshake()
        except ssl.SSLWantReadError:
            self._tls_queue_out()
            return False
        except (ssl.SSLError, ssl.CertificateError) as e:
            self._tls_fail(e)
            return False
        self._tls_ready = True
        if self._tls_pending:
            try:
                self._tls_obj.write(bytes(self._tls_pending))
            except ssl.SSLError as e:
                self._tls_fail(e)
                return False
            self._tls_pending = bytearray()
        self._tls_flush()
        return True

    def _tls_queue_out(self) -> None:
        out = self._tls_out.read()
        if out:
            self._TcpConnection__writeBuffer += out
            if self.state == _tcp.CONNECTION_STATE.CONNECTED:
                self._tls_flush()

    def _tls_fail(self, e: Exception | str) -> None:
        """Drop the connection; log the reason once per peer host (peers retry every few seconds)."""
        reason = e if isinstance(e, str) else (getattr(e, "verify_message", None) or getattr(e, "reason", None)
                                               or str(e))
        key = (self._tls_peer.rpartition(":")[0], str(reason))
        if key not in _logged:
            _logged.add(key)
            log.warning("Raft TLS with %s failed: %s (a plaintext peer, a certificate from another CA, or a name "
                        "the certificate does not carry? check security.tls_* on every member)", self._tls_peer,
                        reason)
        self.disconnect()


_logged: set[tuple[str, str]] = set()

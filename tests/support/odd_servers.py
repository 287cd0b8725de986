"""Real servers on loopback that are not raftmq: what a mistyped ``--server`` reaches.

``Http2NotFound`` speaks just enough HTTP/2 (RFC 9113) to answer every request with ``:status 404``, as a web
server or ingress without the gRPC route does; ``SilentTcp`` accepts connections and never writes, as the Raft
port (pysyncobj) does to a gRPC client.
"""

from __future__ import annotations

import socket
import struct
import threading

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_SETTINGS, _HEADERS, _PING = 4, 1, 6
_ACK, _END_STREAM, _END_HEADERS = 0x1, 0x1, 0x4
_STATUS_404 = bytes([0x80 | 13])  # HPACK static table entry 13: ":status: 404"


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


class _Listener:
    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen()
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._sock.close()
        for c in self._conns:
            c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SilentTcp(_Listener):
    def _serve(self, conn: socket.socket) -> None:
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass


class Http2NotFound(_Listener):
    def _serve(self, conn: socket.socket) -> None:
        buf = b""

        def need(n: int) -> bool:
            nonlocal buf
            while len(buf) < n:
                data = conn.recv(65536)
                if not data:
                    return False
                buf += data
            return True

        try:
            if not need(len(_PREFACE)) or not buf.startswith(_PREFACE):
                return
            buf = buf[len(_PREFACE):]
            conn.sendall(_frame(_SETTINGS, 0, 0))
            while need(9):
                length, kind, flags = int.from_bytes(buf[:3], "big"), buf[3], buf[4]
                stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                if not need(9 + length):
                    return
                payload, buf = buf[9:9 + length], buf[9 + length:]
                if kind == _SETTINGS and not flags & _ACK:
                    conn.sendall(_frame(_SETTINGS, _ACK, 0))
                elif kind == _HEADERS:
                    conn.sendall(_frame(_HEADERS, _END_HEADERS | _END_STREAM, stream, _STATUS_404))
                elif kind == _PING and not flags & _ACK:
                    conn.sendall(_frame(_PING, _ACK, 0, payload))
        except OSError:
            pass
        finally:
            conn.close()

"""A loopback TCP proxy the test can pause: connections stay open, bytes stop flowing until resume().

Used to cut one path (e.g. a member's gRPC port) while another (its Raft port) keeps working."""

from __future__ import annotations

import select
import socket
import threading


class PausableProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1", listen_port: int = 0):
        self.target = (host, target_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, listen_port))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self._closed = False
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def pause(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self._closed = True
        self.flowing.set()
        for s in [self.listener, *self._socks]:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            self._socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while not self._closed:
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for s in ready:
                    self.flowing.wait()
                    data = s.recv(65536)
                    if not data:
                        return
                    peers[s].sendall(data)
        except OSError:
            return
        finally:
            a.close()
            b.close()

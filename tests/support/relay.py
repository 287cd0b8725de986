"""A TCP relay whose outgoing connections come from a chosen loopback source address (127.0.0.0/8 has them all),
so one test machine can play clients from several networks against a node's allow-lists."""

from __future__ import annotations

import socket
import threading

HOST = "127.0.0.1"


class SourceRelay:
    """Listens on ``127.0.0.1:<port>`` and relays each connection to ``target`` (host, port), connecting from
    ``source_ip``. ``address`` is what a client dials. Close with ``close()`` (or use as a context manager)."""

    def __init__(self, target: tuple[str, int], source_ip: str):
        self.target = target
        self.source_ip = source_ip
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((HOST, 0))
        self._listener.listen(16)
        self.address = f"{HOST}:{self._listener.getsockname()[1]}"
        self._closed = False
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5, source_address=(self.source_ip, 0))
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for s in self._socks:
            s.close()

    def __enter__(self) -> SourceRelay:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""A peer that came back under a new IP (a restarted pod) is reached although its old IP silently drops the
connect: the Raft transport gives up an unanswered connect after ``connectionTimeout`` and dials again, resolving
the name anew. pysyncobj alone waited for the kernel to give up (about two minutes), which left a Kubernetes
rolling restart without a leader for a minute (seen on a real node, `make k8s-e2e-local`).

Real sockets on loopback: the "old IP" is a listener on 127.0.0.2 whose accept queue is full, so the kernel drops
further SYNs exactly as for a vanished address; the "new IP" is a listener on 127.0.0.3 on the same port.
"""

from __future__ import annotations

import socket

from pysyncobj import SyncObjConf
from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.tcp_connection import CONNECTION_STATE

from raftmq.replication.raft_log import ReplicatedLog
from tests.support.processes import free_ports
from tests.support.waiting import wait_for


def _silent_listener(port: int) -> list[socket.socket]:
    """A listener on 127.0.0.2:port that answers no further connect: its accept queue is full."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.2", port))
    listener.listen(0)
    held = [listener]
    for _ in range(3):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.2", port))
        held.append(c)
    return held


def test_a_peer_that_moved_to_a_new_address_is_reached(monkeypatch):
    port, own_port = free_ports(2)
    held = _silent_listener(port)
    new_home = socket.socket()
    new_home.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    new_home.bind(("127.0.0.3", port))
    new_home.listen(8)
    new_home.settimeout(0.2)

    where = {"peer.raftmq.test": ["127.0.0.2"], "zz-self.raftmq.test": ["127.0.0.1"]}
    resolver = globalDnsResolver()
    monkeypatch.setattr(resolver, "_DnsCachingResolver__doResolve", lambda host: list(where.get(host, [host])))
    # this member dials the peer (pysyncobj: the member with the greater address connects)
    conf = SyncObjConf(bindAddress=f"127.0.0.1:{own_port}", autoTick=True, raftMinTimeout=0.4, raftMaxTimeout=0.8,
                       connectionTimeout=1.0, connectionRetryTime=0.5, dnsCacheTime=0.2, dnsFailCacheTime=0.2)
    log = ReplicatedLog(f"zz-self.raftmq.test:{own_port}", [f"peer.raftmq.test:{port}"], conf, machine=None)
    accepted: list[socket.socket] = []
    try:
        def dialled_old_address() -> bool:
            conns = log._SyncObj__transport._connections
            return any(c.state == CONNECTION_STATE.CONNECTING for c in conns.values())

        wait_for(dialled_old_address, timeout=30, what="the member dials the peer's old address")
        where["peer.raftmq.test"] = ["127.0.0.3"]  # the pod came back elsewhere

        def reached_new_address() -> bool:
            try:
                accepted.append(new_home.accept()[0])
                return True
            except TimeoutError:
                return False

        # bounded far below the kernel's own give-up time for the stuck connect (~127 s with 6 SYN retries)
        wait_for(reached_new_address, timeout=45, what="a connection at the peer's new address")
    finally:
        log.destroy()
        for s in held + accepted + [new_home]:
            s.close()

"""The cluster's groups learned from DNS at run time (``cluster.group_discovery``, docs/design/scale-out.md#discovery).

Why: adding a group must not restart the groups that run. On Kubernetes each group is a StatefulSet with a
headless Service named by one pattern (``raftmq-g{index}-headless...``); the chart adds a group by adding both,
and group 0's pods keep their spec. Every few seconds a member resolves the names of index 0, 1, ... up to the
first that does not exist, asks each group found who it is (``QueryRoute`` with ``local``: its name, store host
and client endpoints, from the group itself) and hands the list to the group directory (node/groups.py), so
routes, relays, ``cluster status`` and the reconcile pass include a new group within one refresh.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING

from raftmq.node.config import GroupSpec, HostPort, Member, parse_host_port
from raftmq.node.errors import RpcError
from raftmq.node.forwarding import NotSent
from raftmq.node.groups import InternalCall
from raftmq.signing import signed_headers
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)

REFRESH_S = 5.0  # between two rounds of resolving and asking
MAX_GROUPS = 64  # indexes tried per round, at most
CALL_TIMEOUT_S = 5.0
_NO_SUCH_NAME = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


def read_hosts(path: str) -> dict[str, list[str]]:
    """A hosts file (``address name...`` per line, ``#`` comments): name -> its addresses, in file order."""
    table: dict[str, list[str]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split("#", 1)[0].split()
            for name in fields[1:]:
                table.setdefault(name.lower(), []).append(fields[0])
    return table


async def resolve(host: str, hosts: dict[str, list[str]]) -> list[str] | None:
    """The addresses of ``host``: the hosts table's, else DNS (the system resolver, as every other connection).
    None when the name does not exist; OSError when resolving failed for now (a DNS server out of reach)."""
    listed = hosts.get(host.lower())
    if listed:
        return list(listed)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        if e.errno in _NO_SUCH_NAME:
            return None
        raise
    return list(dict.fromkeys(info[4][0] for info in infos))


class GroupDiscovery:
    """The refresh loop: resolve, ask, hand the groups found to the directory."""

    def __init__(self, node: BrokerCore):
        self.node = node
        self.pattern = node.config.cluster.group_discovery
        self.hosts_file = node.config.cluster.group_discovery_hosts
        self._known: dict[int, GroupSpec] = {}  # index -> the group last found there (kept while it does not answer)

    def _context(self) -> InternalCall:
        s = self.node.config.security
        signed = signed_headers(s.auth_admin_access_key, s.auth_admin_secret_key) if s.auth_enabled else None
        return InternalCall(CALL_TIMEOUT_S, signed)

    async def run(self) -> None:
        while not self.node.stopping:
            try:
                found = await self.discover()
            except Exception:  # a round that failed must not end discovery
                log.exception("group discovery: round failed")
                found = None
            if found is not None:
                added, removed = self.node.groups.learn(found)
                for name in added:
                    spec = self.node.groups.specs[name]
                    log.info("group discovery: group %s joined the cluster (store host %s, endpoints %s)", name,
                             spec.store_host, ", ".join(spec.client_addresses()))
                for name in removed:
                    log.warning("group discovery: group %s is gone (its name %s no longer resolves)", name,
                                self.pattern)
            await asyncio.sleep(REFRESH_S)

    async def discover(self) -> list[GroupSpec] | None:
        """The groups, by index, up to the first name that does not exist; None when resolving failed for now
        (the directory keeps what it knows)."""
        try:
            hosts = read_hosts(self.hosts_file) if self.hosts_file else {}
        except OSError as e:
            log.warning("group discovery: cannot read %s (%s); groups unchanged", self.hosts_file, e)
            return None
        found: list[GroupSpec] = []
        for index in range(MAX_GROUPS):
            hp = parse_host_port(self.pattern.format(index=index))
            try:
                addresses = await resolve(hp.host, hosts)
            except OSError as e:
                log.warning("group discovery: cannot resolve %s now (%s); groups unchanged", hp.host, e)
                return None
            if addresses is None:
                for gone in [i for i in self._known if i >= index]:
                    del self._known[gone]
                break
            # a name from DNS is called by its name (TLS checks the certificate against it), a hosts-file one by
            # its addresses
            listed = hp.host.lower() in hosts
            spec = (await self._ask([str(HostPort(a, hp.port)) for a in addresses] if listed else [str(hp)])
                    or self._known.get(index))
            if spec is None:
                log.info("group discovery: no member at %s (%s) answers yet", hp, ", ".join(addresses))
                continue
            clash = next((g for g in found if g.name == spec.name or g.store_host == spec.store_host), None)
            if clash is not None:
                log.warning("group discovery: group %s at %s has the name or store host of group %s: left out",
                            spec.name, hp, clash.name)
                continue
            self._known[index] = spec
            found.append(spec)
        return found

    async def _ask(self, addresses: list[str]) -> GroupSpec | None:
        """The group the members at ``addresses`` belong to, as it describes itself; None when none answers."""
        for address in addresses:
            try:
                answer = await self.node.forwarder.relay(address, "QueryRoute", pb.QueryRouteRequest(local=True),
                                                         self._context())
            except (NotSent, RpcError) as e:
                log.debug("group discovery: %s does not answer: %s", address, e)
                continue
            if answer.cluster_name != self.node.config.cluster.name:
                log.warning("group discovery: %s is a member of cluster %r, not %r: left out", address,
                            answer.cluster_name, self.node.config.cluster.name)
                return None
            own = next((g for g in answer.groups if g.name == answer.group), None)
            if own is None:
                continue
            endpoints = tuple(own.endpoints) or (address,)
            # its members are known here by client address only: the group's own word names its preferred leader
            return GroupSpec(own.name, own.store_host, endpoints, tuple(Member("", "", e) for e in endpoints),
                             preferred_leader=own.preferred_leader)
        return None

"""The broker's configuration: one YAML file, ``RAFTMQ_<SECTION>_<KEY>`` environment overrides, ``--set`` flags.

Why one loader for all three: Helm renders the YAML and overrides a few keys per pod through the environment,
operators override on the command line; all three must be checked the same way, and every problem reported at
once, one line each, so ``raftmq config validate`` and a failing start say everything that needs fixing.
Precedence: built-in defaults < file < environment < ``--set``.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from raftmq.store.setting import choices_of, setting

ENV_PREFIX = "RAFTMQ_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DURABILITY_MODES = ("async", "sync")
_NODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def member_id_problem(member_id: str) -> str:
    """What is wrong with a member id ("" when nothing): the rule of node.id."""
    if _NODE_ID.match(member_id):
        return ""
    return f"{member_id!r} must be 1-63 letters, digits, '_', '.', '-' (starting with a letter or digit)"


class ConfigError(Exception):
    """The configuration has problems; ``problems`` holds one line per problem."""

    def __init__(self, problems: Sequence[str]):
        super().__init__("; ".join(problems))
        self.problems = list(problems)


class _YamlInt(int):
    """An int read from YAML that remembers how it was written: a text key given an unquoted ``0123`` keeps
    ``"0123"``, not ``"83"`` (YAML 1.1 octal)."""

    yaml_text: str

    def __new__(cls, value: int, text: str) -> _YamlInt:
        obj = super().__new__(cls, value)
        obj.yaml_text = text
        return obj


class _YamlFloat(float):
    """A float read from YAML that remembers how it was written (``1e3`` stays ``"1e3"`` for a text key)."""

    yaml_text: str

    def __new__(cls, value: float, text: str) -> _YamlFloat:
        obj = super().__new__(cls, value)
        obj.yaml_text = text
        return obj


class _ConfigLoader(yaml.SafeLoader):
    """SafeLoader whose numbers keep their source text (see ``_text``)."""


_ConfigLoader.add_constructor(
    "tag:yaml.org,2002:int", lambda loader, node: _YamlInt(loader.construct_yaml_int(node), node.value))
_ConfigLoader.add_constructor(
    "tag:yaml.org,2002:float", lambda loader, node: _YamlFloat(loader.construct_yaml_float(node), node.value))


def _text(value: Any) -> str:
    """A value meant as text: numbers as they were written in the YAML, anything else via str()."""
    return getattr(value, "yaml_text", None) or str(value)


def _plain(value: Any) -> Any:
    """Drop the source text again where a value is kept as a number (or inside a list / mapping)."""
    if isinstance(value, _YamlInt):
        return int(value)
    if isinstance(value, _YamlFloat):
        return float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Member:
    """One voting member of the replication group."""

    id: str
    raft: str
    grpc: str
    host: str = ""  # the machine / Kubernetes node it runs on, when configured (docs/design/leader-balance.md)

    @property
    def machine(self) -> str:
        """Where it runs, for spreading leaders: its ``host``, else the host part of its Raft address."""
        return self.host or parse_host_port(self.raft).host


@dataclass(frozen=True)
class GroupSpec:
    """One Raft group of the cluster (docs/design/scale-out.md): its name (its RocketMQ broker name), the
    STOREHOST of its records, the addresses clients use for it and its members."""

    name: str
    store_host: str
    endpoints: tuple[str, ...]  # client-facing gRPC addresses; empty: its members' grpc addresses
    members: tuple[Member, ...]
    preferred_leader: str = ""  # a member id pinned as its preferred leader; empty: the rule picks one

    def client_addresses(self) -> list[str]:
        """Where a client reaches this group: its ``endpoints``, else its members' gRPC addresses."""
        return list(self.endpoints) or [m.grpc for m in self.members]


@dataclass
class NodeSection:
    """This member's process: identity, ports, logging, shutdown, consumption defaults."""

    id: str = setting("Unique member id (1-63 letters, digits, `_`, `.`, `-`); in a cluster, one of "
                      "`cluster.members[].id`. The chart uses the pod name.", "n0")
    data_dir: str = setting("The store directory (`commitlog/`, `consumequeue/`, `index/`, `config/`, `raft/`, "
                            "...).", "./data/n0")
    grpc_listen: str = setting("`host:port` of the gRPC port (raftmq's MessagingService and AdminService, the "
                               "replica service, RocketMQ 5's protocol).", "0.0.0.0:8081")
    http_listen: str = setting("`host:port` of the HTTP port (`/metrics`, `/health`, `/ready`, the web console "
                               "`/ui`); must differ from `grpc_listen`.", "0.0.0.0:8080")
    advertised_address: str = setting(
        "`host:port` clients are told to use for this member (leader hints, RocketMQ 5 routes); empty: the "
        "`grpc_listen` host, or 127.0.0.1 when that is a wildcard.", "")
    auto_create_topics: bool = setting(
        "Create an unknown topic (4 queues, the message type of the send) on its first send, and for a RocketMQ "
        "5 client's route request.", False, helm="node.autoCreateTopics")
    log_level: str = setting("Least severity logged (case does not matter).", "INFO", helm="node.logLevel",
                             choices=LOG_LEVELS)
    log_format: str = setting(
        "`text`, or `json`: one object per line with `ts`, `level`, `logger`, `member`, `term`, `msg` and, inside "
        "a gRPC call, `request_id` (the caller's `x-request-id` metadata, or one made up and sent back with an "
        "error).", "text", choices=("text", "json"))
    shutdown_grace_seconds: float = setting(
        "On SIGTERM, seconds in-flight requests may take to finish (after a leader handed off leadership) "
        "before the node flushes and exits.", 10.0, helm="node.shutdownGraceSeconds")
    ready_without_leader_seconds: float = setting(
        "A member that had a leader stays ready (`/ready` 200) this many seconds without one, so an election "
        "does not take every member out of the Services at once.", 15.0)
    max_delivery_attempts: int = setting(
        "Pop consumption: deliveries of a message (the first included) before it moves to `%DLQ%<group>` (1..1000); "
        "the default of a group without settings of its own.", 16)
    retry_backoff: str = setting(
        "Pop consumption: a nacked message is visible again after the N-th delay of this list for its N-th attempt "
        "(the last one repeats); units s, m, h, d.", "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    pop_max_inflight_per_queue: int = setting(
        "Pop consumption: unacked messages per group and queue (>= 1); a full queue hands out nothing new until "
        "acks make room.", 1024)
    group_policies: dict = setting(
        "Defaults per consumer group, `{group: {max_delivery_attempts: N, retry_backoff: '1s 5s', fifo: true}}`, "
        "for groups without settings of their own (`raftmq group update` sets those at runtime).",
        default_factory=dict)
    rocketmq5_max_delay_seconds: float = setting(
        "RocketMQ 5 clients: the latest delivery time of a DELAY message, in seconds from now (RocketMQ's proxy "
        "allows 86400).", 86400.0)
    rocketmq5_auto_renew_seconds: float = setting(
        "RocketMQ 5 PushConsumers: seconds a received message stays invisible between two renewals by the "
        "leader, which renews it until it is acked or nacked, for at most 3 h (1..43200).", 30.0)
    dedup_window_seconds: int = setting(
        "De-duplication: a send whose UNIQ_KEY was stored in the same topic this many seconds before or less is "
        "not stored again; the retry gets the original's result (docs/design/deduplication.md). A topic's "
        "`dedup.window.seconds` attribute (`raftmq topic update --dedup-window`) overrides it; 0: off for topics "
        "without their own (0..86400).", 120)
    dedup_max_entries: int = setting(
        "De-duplication: ids each member remembers at most (about 140 B each, 133 MiB per million); beyond, the "
        "oldest are forgotten before their window ended (metric `raftmq_dedup_early_evictions_total`). 0 turns "
        "de-duplication off on this node, for every topic.", 1_000_000)


@dataclass
class ClusterSection:
    """The replication group: identity written into records, durability, members, Raft."""

    name: str = setting("CLUSTER property of every record (1-127 letters, digits, `_`, `-`, `%`, `|`); RocketMQ 5 "
                        "clients see it as the broker name.", "DefaultCluster", helm="cluster.name")
    store_host: str = setting(
        "STOREHOST written into every record and msgId, an IP literal and port; the same on every member, so a "
        "msgId stays valid after a failover. It need not be reachable.", "127.0.0.1:10911", helm="cluster.storeHost")
    durability: str = setting(
        "`async`: a write is acknowledged once a majority holds it in memory and its journal in the page cache; "
        "`sync`: once a majority has it on disk (docs/design/replication.md).", "async", helm="cluster.durability",
        choices=DURABILITY_MODES)
    raft_listen: str = setting("`host:port` the Raft port listens on.", "0.0.0.0:8091")
    raft_address: str = setting(
        "Checked (`host:port`) but not used: peers dial the `raft` address of this member's entry in "
        "`cluster.members`. The chart sets it to the pod's stable name.", "")
    members: list = setting(
        "The seed of the replication group, this member included: `[{id: n0, raft: 'h0:8091', grpc: "
        "'h0:8081'}, ...]` (optionally with the `host` each runs on, docs/design/leader-balance.md); empty: a "
        "single node without Raft (a one-member list is a group of one that can grow). "
        "Read only until the group has recorded its membership: afterwards members are added and removed with "
        "`raftmq cluster add-member` / `remove-member` (docs/design/membership.md), and a new member lists the "
        "group's members and itself here.", default_factory=list)
    auto_join: bool = setting(
        "A member the group does not list asks the leader to add it as a learner (it becomes a voter once caught "
        "up), and the leader accepts such requests. The chart turns it on so `replicas` changes the group.",
        False)
    secret: str = setting(
        "Password of the Raft port (pysyncobj's encryption) and of member-to-member calls (replica service, "
        "forwarding); required with authentication in a cluster. Taken verbatim from the environment and "
        "`--set`.", "")
    group: str = setting(
        "With `cluster.groups`: the name of this member's own group (one of `cluster.groups[].name`). Empty "
        "with `cluster.members` (a one-group cluster, whose group is named `cluster.name`).", "")
    groups: list = setting(
        "A cluster of several Raft groups (docs/design/scale-out.md): `[{name: g0, store_host: '10.0.0.1:10911', "
        "endpoints: ['svc-g0:8081'], members: [{id, raft, grpc}, ...]}, ...]`, the same list on every member of "
        "every group. Each group is a replicated group as `cluster.members` describes one, with its own "
        "`store_host` (unique: it is in every msgId) and optional client-facing `endpoints` (default: its "
        "members' grpc addresses). Exclusive with `cluster.members`; empty: one group. A member may name the "
        "`host` (machine or Kubernetes node) it runs on, and a group may pin its `preferred_leader` (a member "
        "id); both only steer which member should lead (docs/design/leader-balance.md).", default_factory=list)
    group_discovery: str = setting(
        "Learn the cluster's groups at run time from DNS (docs/design/scale-out.md#discovery): `host:port` "
        "with `{index}`, the name of group 0, 1, 2, ...'s headless Service and its gRPC port, e.g. "
        "`raftmq-g{index}-headless.ns.svc.cluster.local:8081` (the chart sets it). Every few seconds a member "
        "resolves index 0, 1, ... up to the first name that does not exist, asks each group found for its name, "
        "store host and endpoints, and routes to it: a group added later is learned without a restart. Groups "
        "are ordered by index. Empty: the groups are `cluster.groups` (or the one group of `cluster.members`).",
        "")
    group_discovery_hosts: str = setting(
        "With `cluster.group_discovery`: a hosts file (`/etc/hosts` format: `address name...`) looked up before "
        "DNS and re-read on every refresh, for groups without DNS names (machines outside Kubernetes, tests). "
        "Empty: DNS only.", "")
    topic_reconcile_interval_s: float = setting(
        "With `cluster.groups`: seconds between two reconcile passes, in which each group's leader brings its own "
        "group's topics, access users and consumer-group settings to the latest cluster-wide change another group "
        "made (a group that missed a create, update or delete while it was down).", 30.0)
    auto_balance_leaders: bool = setting(
        "A group's leader hands leadership to the group's preferred leader (docs/design/leader-balance.md) once "
        "that member has been healthy, ready and caught up for `cluster.auto_balance_after_s`: leaders move back "
        "where they belong after a failover, without `raftmq cluster balance-leaders`. Off: leaders stay where "
        "elections put them.", False)
    auto_balance_after_s: float = setting(
        "With `cluster.auto_balance_leaders`: seconds the preferred leader must have been healthy, ready and "
        "caught up (lag 0) before leadership is handed to it; a member that just came back is not given the lead "
        "at once.", 30.0)
    forward_to_leader: bool = setting(
        "A member that is not the leader relays write and admin calls to the leader (authenticated with "
        "`secret`); off: it only answers with a redirect to the leader.", True)
    raft: dict = setting(
        "Raft and group-commit tuning: the `cluster.raft.*` keys (replication.RaftSettings).",
        default_factory=dict, helm="cluster.raft")


@dataclass
class KubernetesSection:
    """What the node does in a pod."""

    role_label: str = setting(
        "Keep the pod's `raftmq.io/role` label in step with the Raft role (the leader Service selects on it): "
        "`auto`: when running in a pod.", "auto", choices=("auto", "true", "false"))
    membership: str = setting(
        "Follow the StatefulSet's `replicas` (issue 39): as leader, remove members whose pod ordinal is at or "
        "beyond it, one at a time, and refuse join requests from them; `auto`: when running in a pod "
        "(needs `get` on the StatefulSet).", "auto", choices=("auto", "true", "false"))
    role_label_clear_timeout_s: float = setting(
        "At start the pod's role label is set to `unknown` before the node joins Raft or serves; seconds to "
        "wait for the API server before starting anyway (and saying so in the log).", 30.0)


@dataclass
class SecuritySection:
    """TLS on the client ports, authentication (signed requests), access control and network allow-lists."""

    tls_cert_file: str = setting(
        "PEM certificate (chain) for gRPC and HTTP; with `tls_key_file`, TLS is on. Re-read when the file changes "
        "(cert-manager rotation).", "")
    tls_key_file: str = setting("The certificate's private key (PEM), re-read when it changes.", "")
    tls_client_ca_file: str = setting(
        "Mutual TLS: clients must present a certificate signed by this CA.", "")
    tls_ca_file: str = setting(
        "CA this member trusts when it calls other members (default: `tls_client_ca_file`).", "")
    tls_server_name: str = setting(
        "Name the members' certificates carry, when it is not their address.", "")
    tls_http: bool = setting("Serve the HTTP port with TLS too when TLS is on.", True, helm="tls.http")
    tls_http_client_auth: bool = setting(
        "The HTTP port requires client certificates too (kubelet probes cannot send one).", False)
    tls_raft: bool = setting(
        "The Raft port speaks mutual TLS with the same certificate and CA; a wire change: switch it for every "
        "member at once.", False, helm="tls.raft")
    auth_enabled: bool = setting(
        "Requests must be signed (MQv2-HMAC-SHA1, as RocketMQ 5 clients sign) and pass the access rules.", False,
        helm="auth.enabled")
    auth_admin_access_key: str = setting(
        "Access key of the bootstrap admin (every right; from the configuration, not replicated).", "")
    auth_admin_secret_key: str = setting(
        "Secret key of the bootstrap admin; also the key material stored user secrets are encrypted with. Taken "
        "verbatim, never logged.", "")
    auth_admin_previous_secret_key: str = setting(
        "During a rotation, the admin secret before the change: still accepted for the admin and for decrypting "
        "stored secrets, until the leader re-encrypted them under the new one.", "")
    auth_max_clock_skew_seconds: float = setting(
        "A signature dated further than this from the member's clock is refused (the replay window; > 0).", 300.0,
        helm="auth.maxClockSkewSeconds")
    acl_default: str = setting("Decision when no rule of a user matches.", "deny", helm="auth.aclDefault",
                               choices=("deny", "allow"))
    open_http_paths: list = setting(
        "HTTP paths served without a signature (probes and scrapes); every other path needs one.",
        default_factory=lambda: ["/metrics", "/health", "/ready"], helm="auth.openHttpPaths")
    console_session_hours: float = setting(
        "Hours a web-console login lasts (authentication on; at most 720).", 8.0, helm="auth.consoleSessionHours")
    allowed_client_networks: list = setting(
        "Networks (CIDRs or addresses, IPv4 or IPv6) that may use the gRPC and HTTP ports; the open HTTP paths "
        "stay open. Empty: any address.", default_factory=list, helm="allowedNetworks.clients")
    trusted_http_proxies: list = setting(
        "HTTP proxies (an ingress) whose `X-Forwarded-For` names the real client, for the allow-lists, audit "
        "lines and the console's failed-login count. Empty: the connection's address is the client.",
        default_factory=list, helm="allowedNetworks.trustedHttpProxies")
    allowed_member_networks: list = setting(
        "Networks of the members: the only ones the Raft port and the replica service accept. Empty: any "
        "address.", default_factory=list, helm="allowedNetworks.members")


@dataclass
class NodeConfig:
    """The validated configuration of one broker process."""

    node: NodeSection = field(default_factory=NodeSection)
    cluster: ClusterSection = field(default_factory=ClusterSection)
    store: dict[str, Any] = field(default_factory=dict)  # StoreConfig overrides by field name
    kubernetes: KubernetesSection = field(default_factory=KubernetesSection)
    security: SecuritySection = field(default_factory=SecuritySection)

    @property
    def grpc_listen(self) -> HostPort:
        return parse_host_port(self.node.grpc_listen)

    @property
    def http_listen(self) -> HostPort:
        return parse_host_port(self.node.http_listen)

    @property
    def store_host_text(self) -> str:
        """STOREHOST of this member's records: its group's ``store_host`` in a cluster of groups, else
        ``cluster.store_host``."""
        own = self.own_group_entry()
        return _text(own["store_host"]) if own is not None else self.cluster.store_host

    @property
    def store_host(self) -> tuple[str, int]:
        hp = parse_host_port(self.store_host_text)
        return hp.host, hp.port

    @property
    def group_name(self) -> str:
        """The name of this member's group (its RocketMQ broker name): ``cluster.group``, or ``cluster.name``
        in a one-group cluster."""
        return self.cluster.group if self.cluster.groups else self.cluster.name

    def own_group_entry(self) -> dict | None:
        for g in self.cluster.groups if isinstance(self.cluster.groups, list) else ():
            if isinstance(g, Mapping) and _text(g.get("name", "")) == self.cluster.group:
                return g
        return None

    @property
    def groups(self) -> list[GroupSpec]:
        """Every group of the cluster in configuration order; a one-group cluster is one group named
        ``cluster.name`` with ``cluster.members``."""
        if not self.cluster.groups:
            return [GroupSpec(self.cluster.name, self.cluster.store_host, (), tuple(self.members))]
        return [GroupSpec(_text(g["name"]), _text(g["store_host"]), tuple(_text(e) for e in g.get("endpoints", ())),
                          tuple(_member(m) for m in g["members"]), _text(g.get("preferred_leader", "")))
                for g in self.cluster.groups]

    @property
    def advertised_address(self) -> str:
        """host:port clients should use for this node; the listen host when it is a concrete address."""
        if self.node.advertised_address:
            return self.node.advertised_address
        hp = self.grpc_listen
        host = "127.0.0.1" if hp.host in ("0.0.0.0", "::", "") else hp.host
        return str(HostPort(host, hp.port))

    @property
    def members(self) -> list[Member]:
        """The members of this member's own Raft group (``cluster.members``, or its entry of ``cluster.groups``)."""
        own = self.own_group_entry()
        entries = own["members"] if own is not None else self.cluster.members
        return [_member(m) for m in entries]

    def raft_settings(self):
        """The ``replication.RaftSettings`` for this node: ``cluster.raft`` overrides, ``cluster.durability``."""
        from raftmq.replication.raft_write_path import RaftSettings

        return RaftSettings(durability=self.cluster.durability, **self.cluster.raft)

    def store_config(self):
        """The ``store.StoreConfig`` for this node: ``node.data_dir`` is the store root."""
        from raftmq.store import StoreConfig

        return StoreConfig(
            root_dir=self.node.data_dir, store_host=self.store_host_text, cluster_name=self.cluster.name, **self.store
        )

    def volume_problem(self) -> str:
        """Is the volume of node.data_dir too small for the store sizes (and what to set)? "" when it is not, or
        when its size cannot be known here (``raftmq config validate`` refuses it; a starting node logs it)."""
        from raftmq.store.config import volume_problem
        from raftmq.store.disk_health import volume_bytes

        size = volume_bytes(self.node.data_dir)
        return volume_problem(self.store_config(), size, self.node.data_dir) if size > 0 else ""

    def tls_files(self):
        """``node.tls.TlsFiles`` when TLS is on (security.tls_cert_file + tls_key_file), else None."""
        s = self.security
        if not s.tls_cert_file:
            return None
        from raftmq.node.tls import TlsFiles

        return TlsFiles(s.tls_cert_file, s.tls_key_file, s.tls_client_ca_file, s.tls_ca_file, s.tls_server_name)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_SECTIONS: dict[str, type] = {"node": NodeSection, "cluster": ClusterSection, "kubernetes": KubernetesSection,
                              "security": SecuritySection}
_ALL_SECTIONS = ("node", "cluster", "store", "kubernetes", "security")
# StoreConfig fields the node fills in from its own sections, so each setting has exactly one home.
_STORE_FIELDS_FROM_NODE = {"root_dir": "node.data_dir", "store_host": "cluster.store_host", "cluster_name": "cluster.name"}


def _raft_fields() -> dict[str, Any]:
    """RaftSettings field name -> default; ``durability`` is cluster.durability, so it has no second home here."""
    from raftmq.replication.raft_write_path import RaftSettings

    return {f.name: f.default for f in dataclasses.fields(RaftSettings) if f.name != "durability"}


def _string_keys(section: str) -> set[str]:
    """Keys whose value is text: environment and ``--set`` values for them are taken verbatim, not as YAML, so
    a secret ``0123``, ``yes`` or ``1e3`` (or an id / address that looks like a number) keeps its exact text."""
    if section == "store":
        return {k for k, v in _store_fields().items() if isinstance(v, str)}
    cls = _SECTIONS.get(section)
    if cls is None:
        return set()
    return {f.name for f in dataclasses.fields(cls) if isinstance(f.default, str)}


def _store_fields() -> dict[str, Any]:
    """StoreConfig field name -> default value (its type is the type a YAML value must have)."""
    from raftmq.store import StoreConfig

    out = {}
    for f in dataclasses.fields(StoreConfig):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            out[f.name] = f.default_factory()  # type: ignore[misc]
        else:
            out[f.name] = None
    return out


def parse_host_port(text: str) -> HostPort:
    """Parse ``host:port`` or ``[v6]:port``; raises ValueError with what is wrong."""
    text = str(text).strip()
    m = re.fullmatch(r"\[([^\]]+)\]:(\d+)", text) or re.fullmatch(r"([^:\[\]]*):(\d+)", text)
    if not m:
        raise ValueError(f"{text!r} is not host:port (IPv6 as [addr]:port)")
    port = int(m.group(2))
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} in {text!r} is outside 1..65535")
    host = m.group(1)
    if not host:
        raise ValueError(f"{text!r} has no host")
    return HostPort(host, port)


def _suggest(key: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _type_name(t: type) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list"}.get(
        t, t.__name__
    )


def _coerce(where: str, value: Any, default: Any, problems: list[str]) -> Any:
    """Check ``value`` against the type of ``default``; YAML scalars that are clearly meant are converted."""
    if default is None:
        return _plain(value)
    want = type(default)
    if want is bool:
        if isinstance(value, bool):
            return value
    elif want is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return int(value)
    elif want is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif want is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return _text(value)  # as written: an unquoted 0123 stays "0123"
        if isinstance(value, bool):
            problems.append(f"{where}: must be a string, got {value!r}; quote it (unquoted yes/no/on/off/true/false "
                            "are booleans in YAML)")
            return default
    elif isinstance(value, want):
        return value if want is list else _plain(value)
    if want is list and isinstance(value, str) and value.lstrip().startswith("["):
        problems.append(f"{where}: must be {_type_name(want)}, got {value!r}, which is not valid YAML (quote entries "
                        "that start with ':', e.g. ['::1/128', 'fd00::/8'])")
        return default
    problems.append(f"{where}: must be {_type_name(want)}, got {value!r}")
    return default


def _parse_scalar(text: str) -> Any:
    """Environment and ``--set`` values are YAML, so lists and numbers work; plain text stays text."""
    try:
        return yaml.load(text, Loader=_ConfigLoader) if text.strip() else ""  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError:
        return text


def _parse_value(section: str, key: str, text: str) -> Any:
    return text if key in _string_keys(section) else _parse_scalar(text)


def env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``RAFTMQ_NODE_ID=n1`` -> ``{"node": {"id": "n1"}}``; variables of unknown sections are reported.

    ``RAFTMQ_CLUSTER_RAFT_<FIELD>`` sets ``cluster.raft.<field>`` (cluster's own raft_listen / raft_address win)."""
    out: dict[str, dict[str, Any]] = {}
    for name, text in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        section = next((s for s in _ALL_SECTIONS if rest.startswith(s + "_")), None)
        if section is None:
            continue  # RAFTMQ_* variables of other tools (e.g. the CLI's target address) are not ours
        key = rest[len(section) + 1 :]
        if section == "cluster" and key.startswith("raft_") and key not in _string_keys("cluster") \
                and key[len("raft_"):] in _raft_fields():
            key = "raft." + key[len("raft_"):]
        out.setdefault(section, {})[key] = _parse_value(section, key, text)
    return out


def set_overrides(assignments: Sequence[str], problems: list[str]) -> dict[str, dict[str, Any]]:
    """``--set node.id=n1`` flags -> nested dict."""
    out: dict[str, dict[str, Any]] = {}
    for item in assignments:
        key, sep, text = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not name:
            problems.append(f"--set {item!r}: expected section.key=value, e.g. node.id=n1")
            continue
        out.setdefault(section, {})[name] = _parse_value(section, name, text)
    return out


def _merge(base: dict[str, Any], layer: Mapping[str, Any], origin: str, problems: list[str]) -> None:
    for section, values in layer.items():
        if section not in _ALL_SECTIONS:
            problems.append(f"{origin}: unknown section {section!r}{_suggest(str(section), _ALL_SECTIONS)}")
            continue
        if values is None:
            continue
        if not isinstance(values, Mapping):
            problems.append(f"{origin}: section {section!r} must be a mapping of key: value")
            continue
        for key, value in values.items():
            if section == "cluster" and key == "raft" and isinstance(value, Mapping):
                for k, v in value.items():  # one entry per field, so a file, env and --set each change a few
                    base.setdefault(section, {})[f"raft.{k}"] = (v, origin)
            elif section == "cluster" and key == "raft" and value is None:
                continue
            else:
                base.setdefault(section, {})[str(key)] = (value, origin)


def load_config(
    path: str | os.PathLike | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    assignments: Sequence[str] = (),
) -> NodeConfig:
    """Read, merge and validate; raises ConfigError listing every problem."""
    problems: list[str] = []
    raw: dict[str, Any] = {}
    if path is not None:
        origin = str(path)
        try:
            with open(path, encoding="utf-8") as f:
                doc = yaml.load(f, Loader=_ConfigLoader)  # noqa: S506 (a SafeLoader)
        except OSError as e:
            raise ConfigError([f"{origin}: cannot read: {e.strerror or e}"]) from None
        except UnicodeDecodeError as e:
            raise ConfigError([f"{origin}: not a YAML text file (not UTF-8: byte 0x{e.object[e.start]:02x} at "
                               f"position {e.start}); give the node's YAML configuration"]) from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
            raise ConfigError([f"{origin}: not valid YAML{at}: {getattr(e, 'problem', e)}"]) from None
        if doc is None:
            doc = {}
        if not isinstance(doc, Mapping):
            raise ConfigError([f"{origin}: the top level must be a mapping with sections {', '.join(_ALL_SECTIONS)}"])
        _merge(raw, doc, origin, problems)
    env = os.environ if environ is None else environ
    if "RAFTMQ_RAFT_TUNING" in env:
        problems.append("environment: RAFTMQ_RAFT_TUNING is no longer read; put those settings under cluster.raft "
                        "in the config file or set RAFTMQ_CLUSTER_RAFT_<KEY> (e.g. RAFTMQ_CLUSTER_RAFT_LINGER_S=0.005)")
    _merge(raw, env_overrides(env), "environment", problems)
    _merge(raw, set_overrides(assignments, problems), "--set", problems)
    cfg = _build(raw, problems)
    if problems:
        raise ConfigError(problems)
    return cfg


def _build(raw: dict[str, dict[str, tuple[Any, str]]], problems: list[str]) -> NodeConfig:
    cfg = NodeConfig()
    for section, cls in _SECTIONS.items():
        obj = getattr(cfg, section)
        names = [f.name for f in dataclasses.fields(cls)]
        for key, (value, origin) in raw.get(section, {}).items():
            where = f"{section}.{key}"
            if section == "cluster" and key.startswith("raft."):
                _build_raft(cfg, key[len("raft."):], value, origin, problems)
                continue
            if section == "cluster" and key == "raft":
                problems.append(f"{origin}: cluster.raft must be a mapping of Raft settings, got {value!r}")
                continue
            if key not in names:
                problems.append(f"{origin}: unknown key {where}{_suggest(key, names)}")
                continue
            if where == "kubernetes.role_label" and isinstance(value, bool):
                value = "true" if value else "false"  # YAML reads an unquoted true/false as a boolean
            setattr(obj, key, _coerce(f"{origin}: {where}", value, getattr(obj, key), problems))
    _build_store(cfg, raw.get("store", {}), problems)
    checked = len(problems)
    _check(cfg, problems)
    problems[checked:] = [_with_origin(p, raw) for p in problems[checked:]]
    return cfg


_CHECKED_KEY = re.compile(r"^(node|cluster|store|security|kubernetes)\.(\w+)")


def _with_origin(problem: str, raw: dict[str, dict[str, tuple[Any, str]]]) -> str:
    """A problem found across keys (``cluster.durability: ...``) prefixed with where the key was set (the file,
    the environment or --set), as the per-key problems are (issue 34: config errors must name the file)."""
    m = _CHECKED_KEY.match(problem)
    if m is None:
        return problem
    section, key = m.groups()
    entries = raw.get(section, {})
    origins = [entries[key][1]] if key in entries else sorted({o for k, (_, o) in entries.items()
                                                                if k.startswith(key + ".")})
    return f"{', '.join(origins)}: {problem}" if origins else problem


def _build_raft(cfg: NodeConfig, key: str, value: Any, origin: str, problems: list[str]) -> None:
    fields = _raft_fields()
    if key not in fields:
        hint = " (set cluster.durability instead)" if key == "durability" else _suggest(key, list(fields))
        problems.append(f"{origin}: unknown key cluster.raft.{key}{hint}")
        return
    n = len(problems)
    coerced = _coerce(f"{origin}: cluster.raft.{key}", value, fields[key], problems)
    if len(problems) > n:
        return
    cfg.cluster.raft[key] = coerced
    if isinstance(coerced, int | float) and not isinstance(coerced, bool):
        if key in _RAFT_ZERO_OK and coerced < 0:
            problems.append(f"{origin}: cluster.raft.{key}: must be >= 0, got {coerced}")
        elif key not in _RAFT_ZERO_OK and coerced <= 0:
            problems.append(f"{origin}: cluster.raft.{key}: must be > 0, got {coerced}")


# Raft settings that may be 0 (no linger, unlimited rate); every other period, timeout, size and count is > 0.
_RAFT_ZERO_OK = {"linger_s", "offsets_linger_s", "catch_up_bytes_per_s", "anti_entropy_bytes_per_s"}


# Ranges of store settings beyond their type. Periodic work needs a period > 0 (a zero or negative interval is a
# busy loop or a crash at the first tick); counts and pauses may be 0; ratios are fractions of the disk.
_STORE_POSITIVE = {
    "flush_interval_commit_log", "flush_commit_log_thorough_interval", "sync_flush_timeout",
    "flush_interval_consume_queue", "flush_consume_queue_thorough_interval", "clean_resource_interval",
    "destroy_mapped_file_interval_forcibly", "reput_interval_ms", "max_transfer_bytes_on_message_in_memory",
    "max_transfer_count_on_message_in_memory",
}
_STORE_RATIOS = {"disk_max_used_space_ratio", "disk_space_warning_level_ratio", "disk_space_clean_forcibly_ratio"}


def _store_range_problem(key: str, value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if key in _STORE_RATIOS:
        return None if 0.0 < value <= 1.0 else f"must be a fraction in (0, 1], got {value}"
    if key in _STORE_POSITIVE:
        return None if value > 0 else f"must be > 0, got {value}"
    return None if value >= 0 else f"must be >= 0, got {value}"


def _build_store(cfg: NodeConfig, raw: dict[str, tuple[Any, str]], problems: list[str]) -> None:
    """Every problem of the ``store`` section at once: type, range and the store's own checks per key, then
    the checks across keys."""
    from raftmq.store import StoreConfig, StoreError

    fields = _store_fields()
    before = len(problems)
    for key, (value, origin) in raw.items():
        where = f"store.{key}"
        if key in _STORE_FIELDS_FROM_NODE:
            problems.append(f"{origin}: {where} comes from {_STORE_FIELDS_FROM_NODE[key]}; set that instead")
            continue
        if key not in fields:
            problems.append(f"{origin}: unknown key {where}{_suggest(key, list(fields))}")
            continue
        n = len(problems)
        coerced = _coerce(f"{origin}: {where}", value, fields[key], problems)
        if len(problems) > n:
            continue
        cfg.store[key] = coerced
        wrong = _store_range_problem(key, coerced)
        if wrong is None:
            try:
                StoreConfig(**{key: coerced})  # the store's own check of this key alone
            except (StoreError, TypeError, ValueError) as e:
                wrong = str(e).removeprefix(f"{key} ")
        if wrong is not None:
            problems.append(f"{origin}: {where}: {wrong}")
    if len(problems) == before:
        try:
            cfg.store_config()
        except (StoreError, TypeError, ValueError) as e:
            origins = sorted({origin for _, origin in raw.values()})
            problems.append(f"{', '.join(origins) or 'store'}: store: {e}")


def _check_address(where: str, value: str, problems: list[str], *, allow_empty: bool = False) -> None:
    if allow_empty and not value:
        return
    try:
        parse_host_port(value)
    except ValueError as e:
        problems.append(f"{where}: {e}")


def _check(cfg: NodeConfig, problems: list[str]) -> None:
    n, c = cfg.node, cfg.cluster
    if not _NODE_ID.match(n.id):
        problems.append(f"node.id: {n.id!r} must be 1-63 letters, digits, '_', '.', '-' (starting with a letter or digit)")
    if not n.data_dir:
        problems.append("node.data_dir: must name the directory that holds the store")
    _check_address("node.grpc_listen", n.grpc_listen, problems)
    _check_address("node.http_listen", n.http_listen, problems)
    _check_address("node.advertised_address", n.advertised_address, problems, allow_empty=True)
    if not problems and n.grpc_listen == n.http_listen:
        problems.append("node.http_listen: must differ from node.grpc_listen")
    n.log_level = n.log_level.upper()
    _check_choices(cfg, problems)
    if n.shutdown_grace_seconds < 0:
        problems.append("node.shutdown_grace_seconds: must be >= 0")
    if n.ready_without_leader_seconds < 0:
        problems.append("node.ready_without_leader_seconds: must be >= 0")
    if not 1 <= n.rocketmq5_auto_renew_seconds <= 43200:
        problems.append("node.rocketmq5_auto_renew_seconds: must be 1..43200 (seconds a PushConsumer's message stays "
                        "invisible between renewals)")
    if not c.topic_reconcile_interval_s > 0:
        problems.append("cluster.topic_reconcile_interval_s: must be > 0 (seconds between reconcile passes)")
    if not c.auto_balance_after_s >= 0:
        problems.append("cluster.auto_balance_after_s: must be >= 0 (seconds the preferred leader must have been "
                        "healthy and caught up)")
    if not 0 <= n.dedup_window_seconds <= 86400:
        problems.append("node.dedup_window_seconds: must be 0..86400 (seconds; 0 turns de-duplication off)")
    if n.dedup_max_entries < 0:
        problems.append("node.dedup_max_entries: must be >= 0 (0 turns de-duplication off)")
    if not n.rocketmq5_max_delay_seconds > 0:
        problems.append("node.rocketmq5_max_delay_seconds: must be > 0 (seconds; RocketMQ's proxy allows 86400)")
    problems.extend(_pop_problems(n))
    if not c.name or not re.fullmatch(r"[A-Za-z0-9_%|-]{1,127}", c.name):
        problems.append(f"cluster.name: {c.name!r} must be 1-127 letters, digits, '_', '-', '%', '|'")
    try:
        hp = parse_host_port(c.store_host)
    except ValueError as e:
        problems.append(f"cluster.store_host: {e}")
    else:
        try:
            ipaddress.ip_address(hp.host)
        except ValueError:
            problems.append(
                f"cluster.store_host: host {hp.host!r} must be an IP literal (it is encoded into every msgId), "
                "e.g. 10.0.0.7:10911"
            )
    _check_address("cluster.raft_listen", c.raft_listen, problems)
    _check_address("cluster.raft_address", c.raft_address, problems, allow_empty=True)
    _check_members(cfg, problems)
    _check_groups(cfg, problems)
    _check_group_discovery(c, problems)
    raft_ok = not any("cluster.raft." in p for p in problems)
    if c.durability in DURABILITY_MODES and raft_ok:  # the checks across Raft settings
        try:
            cfg.raft_settings()
        except ValueError as e:
            problems.append(f"cluster.raft: {e}")
    _check_security(cfg, problems)


def _check_choices(cfg: NodeConfig, problems: list[str]) -> None:
    """Keys that take one of a few values (their ``choices`` metadata, also shown in the docs and the chart)."""
    for section, cls in _SECTIONS.items():
        obj = getattr(cfg, section)
        for f in dataclasses.fields(cls):
            allowed = choices_of(f)
            value = getattr(obj, f.name)
            if allowed and value not in allowed:
                problems.append(f"{section}.{f.name}: {value!r} is not one of {', '.join(allowed)}")


def _check_security(cfg: NodeConfig, problems: list[str]) -> None:
    s = cfg.security
    if bool(s.tls_cert_file) != bool(s.tls_key_file):
        problems.append("security.tls_cert_file and security.tls_key_file: set both (TLS on) or neither")
    if (s.tls_client_ca_file or s.tls_ca_file) and not s.tls_cert_file:
        problems.append("security.tls_client_ca_file / tls_ca_file need TLS on (security.tls_cert_file and "
                        "tls_key_file)")
    if s.tls_raft and not s.tls_cert_file:
        problems.append("security.tls_raft: needs TLS on (security.tls_cert_file and tls_key_file) and the "
                        "members' CA (security.tls_ca_file or tls_client_ca_file)")
    elif s.tls_raft and not (s.tls_ca_file or s.tls_client_ca_file):
        problems.append("security.tls_raft: set security.tls_ca_file (or tls_client_ca_file): the CA that signed "
                        "every member's certificate")
    if s.auth_max_clock_skew_seconds <= 0:
        problems.append("security.auth_max_clock_skew_seconds: must be > 0")
    if not 0 < s.console_session_hours <= 24 * 30:
        problems.append(f"security.console_session_hours: must be > 0 and at most 720 (30 days), got "
                        f"{s.console_session_hours!r}")
    if bool(s.auth_admin_access_key) != bool(s.auth_admin_secret_key):
        problems.append("security.auth_admin_access_key and auth_admin_secret_key: set both or neither")
    if s.auth_admin_previous_secret_key and not s.auth_admin_secret_key:
        problems.append("security.auth_admin_previous_secret_key: set security.auth_admin_secret_key (the new "
                        "secret) too; the previous one is only kept during a rotation")
    if s.auth_enabled and not s.auth_admin_access_key:
        problems.append("security.auth_enabled: set security.auth_admin_access_key and auth_admin_secret_key (the "
                        "bootstrap admin; e.g. RAFTMQ_SECURITY_AUTH_ADMIN_SECRET_KEY from a Kubernetes Secret)")
    if s.auth_enabled and (cfg.cluster.members or cfg.cluster.groups) and not cfg.cluster.secret:
        problems.append("security.auth_enabled: a cluster needs cluster.secret too (user secrets are replicated "
                        "encrypted with a key derived from it, and it guards the member-to-member calls)")
    if not isinstance(s.open_http_paths, list) or not all(isinstance(p, str) and p.startswith("/")
                                                           for p in s.open_http_paths):
        problems.append(f"security.open_http_paths: must be a list of paths such as /metrics, got "
                        f"{s.open_http_paths!r}")


    from raftmq.node.networks import check_networks

    problems.extend(check_networks(s.allowed_client_networks, "security.allowed_client_networks"))
    problems.extend(check_networks(s.trusted_http_proxies, "security.trusted_http_proxies"))
    problems.extend(check_networks(s.allowed_member_networks, "security.allowed_member_networks"))


_MEMBER_KEYS = ("id", "raft", "grpc")
_MEMBER_OPTIONAL_KEYS = ("host",)


def _member(m: Mapping) -> Member:
    return Member(_text(m["id"]), _text(m["raft"]), _text(m["grpc"]), _text(m.get("host", "")))


def _member_entry(m: Any, where: str, problems: list[str]) -> dict[str, str] | None:
    """One member of ``cluster.members`` or of a group: ``{id, raft, grpc[, host]}`` as text, exactly as written,
    its addresses checked; None (the problem named) when it is not such a mapping."""
    if (not isinstance(m, Mapping) or not set(_MEMBER_KEYS) <= set(m)
            or set(m) - set(_MEMBER_KEYS) - set(_MEMBER_OPTIONAL_KEYS)):
        problems.append(f"{where}: must be a mapping with the keys id, raft, grpc and optionally host; got {m!r}")
        return None
    entry = {k: _text(m[k]) for k in (*_MEMBER_KEYS, *_MEMBER_OPTIONAL_KEYS) if k in m}
    _check_address(f"{where}.raft", entry["raft"], problems)
    _check_address(f"{where}.grpc", entry["grpc"], problems)
    return entry


def _check_members(cfg: NodeConfig, problems: list[str]) -> None:
    members = cfg.cluster.members
    if not isinstance(members, list):
        problems.append("cluster.members: must be a list of {id, raft, grpc} (empty for a single node)")
        cfg.cluster.members = []
        return
    seen: set[str] = set()
    entries = []
    for i, m in enumerate(members):
        where = f"cluster.members[{i}]"
        entry = _member_entry(m, where, problems)
        entries.append(entry)
        if entry is None:
            continue
        if entry["id"] in seen:
            problems.append(f"{where}: duplicate member id {entry['id']!r}")
        seen.add(entry["id"])
    ok = None not in entries
    if ok:
        cfg.cluster.members = entries
    if ok and members and cfg.node.id not in seen:
        problems.append(f"cluster.members: this node's id {cfg.node.id!r} is not among the members {sorted(seen)}")


_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_GROUP_KEYS = {"name", "store_host", "members", "endpoints", "preferred_leader"}


def _check_groups(cfg: NodeConfig, problems: list[str]) -> None:
    """``cluster.groups``: every problem at once, one line each, naming the group (docs/design/scale-out.md)."""
    c = cfg.cluster
    groups = c.groups
    if not groups:
        if c.group:
            problems.append(f"cluster.group: {c.group!r} is set but cluster.groups is empty; list the groups, or drop "
                            "cluster.group for a one-group cluster")
        return
    if not isinstance(groups, list):
        problems.append("cluster.groups: must be a list of {name, store_host, members[, endpoints]}")
        c.groups = []
        return
    if c.members:
        problems.append("cluster.groups and cluster.members: set one of them - cluster.members is a one-group "
                        "cluster, cluster.groups lists every group with its members")
    names: set[str] = set()
    ids: dict[str, str] = {}
    rafts: dict[str, str] = {}
    hosts: dict[str, str] = {}
    ok = True
    for i, g in enumerate(groups):
        where = f"cluster.groups[{i}]"
        if not isinstance(g, Mapping) or not {"name", "store_host", "members"} <= set(g) or set(g) - _GROUP_KEYS:
            problems.append(f"{where}: must be a mapping with the keys name, store_host, members and optionally "
                            f"endpoints; got {g!r}")
            ok = False
            continue
        name = _text(g["name"])
        where = f"cluster.groups[{i}] ({name})"
        if not _GROUP_NAME.match(name):
            problems.append(f"{where}: name {name!r} must be 1-63 letters, digits, '_', '-' (it is a RocketMQ broker "
                            "name)")
        if name in names:
            problems.append(f"{where}: duplicate group name {name!r}")
        names.add(name)
        host = _text(g["store_host"])
        try:
            ipaddress.ip_address(parse_host_port(host).host)
        except ValueError:
            problems.append(f"{where}.store_host: {host!r} must be an IP literal and port (it is encoded into every "
                            "msgId), e.g. 10.0.0.7:10911")
        if host in hosts:
            problems.append(f"{where}.store_host: {host} is group {hosts[host]}'s too; every group needs its own "
                            "(a msgId is STOREHOST + offset: two groups would hand out the same ids)")
        hosts.setdefault(host, name)
        endpoints = g.get("endpoints", [])
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        if not isinstance(endpoints, list):
            problems.append(f"{where}.endpoints: must be a list of host:port")
            ok = False
        else:
            for e in endpoints:
                _check_address(f"{where}.endpoints", _text(e), problems)
        members = g["members"]
        if not isinstance(members, list) or not members:
            problems.append(f"{where}.members: must be a non-empty list of {{id, raft, grpc}}")
            ok = False
            continue
        own_ids = []
        for j, m in enumerate(members):
            mw = f"{where}.members[{j}]"
            entry = _member_entry(m, mw, problems)
            if entry is None:
                ok = False
                continue
            mid, raft = entry["id"], entry["raft"]
            own_ids.append(mid)
            if mid in ids:
                problems.append(f"{mw}: member id {mid!r} is already in group {ids[mid]} (ids are unique across groups)")
            ids.setdefault(mid, name)
            if raft in rafts:
                problems.append(f"{mw}.raft: {raft} is already a member's of group {rafts[raft]}")
            rafts.setdefault(raft, name)
        pinned = _text(g.get("preferred_leader", ""))
        if pinned and pinned not in own_ids:
            problems.append(f"{where}.preferred_leader: {pinned!r} is not one of its members {own_ids}")
    if not ok:
        return
    c.groups = [{"name": _text(g["name"]), "store_host": _text(g["store_host"]),
                 "endpoints": [_text(e) for e in ([g["endpoints"]] if isinstance(g.get("endpoints"), str)
                                                  else g.get("endpoints", []))],
                 "members": [{k: _text(m[k]) for k in (*_MEMBER_KEYS, *_MEMBER_OPTIONAL_KEYS) if k in m}
                             for m in g["members"]],
                 **({"preferred_leader": _text(g["preferred_leader"])} if g.get("preferred_leader") else {})}
                for g in groups]
    if c.group not in names:
        problems.append(f"cluster.group: {c.group!r} is not one of cluster.groups' names {sorted(names)}; set this "
                        "member's own group")
    elif ids.get(cfg.node.id) != c.group:
        where = f"group {ids[cfg.node.id]}" if cfg.node.id in ids else "no group"
        problems.append(f"cluster.groups: this node's id {cfg.node.id!r} is a member of {where}, not of its own group "
                        f"{c.group!r} (cluster.group)")


def _check_group_discovery(c: ClusterSection, problems: list[str]) -> None:
    """``cluster.group_discovery``: a ``host:port`` pattern with ``{index}``; its hosts file readable."""
    if not c.group_discovery:
        if c.group_discovery_hosts:
            problems.append("cluster.group_discovery_hosts: set, but cluster.group_discovery is empty; set the "
                            "pattern of the groups' names, or drop the hosts file")
        return
    pattern = _text(c.group_discovery)
    if "{index}" not in pattern:
        problems.append(f"cluster.group_discovery: {pattern!r} has no {{index}}: give the name of group N's "
                        "headless Service with {index} for N, e.g. raftmq-g{index}-headless:8081")
        return
    try:
        _check_address("cluster.group_discovery", pattern.format(index=0), problems)
    except (KeyError, IndexError, ValueError) as e:
        problems.append(f"cluster.group_discovery: {pattern!r} is not a pattern with only {{index}} in it ({e})")
    if c.group_discovery_hosts and not os.access(c.group_discovery_hosts, os.R_OK):
        problems.append(f"cluster.group_discovery_hosts: {c.group_discovery_hosts} is not a readable file")


def _pop_problems(n: NodeSection) -> list[str]:
    """Retry policies (issue 12): checked here so a typo stops the node at start with the key named."""
    from raftmq.node.pop_core import parse_policy

    out = []
    if n.pop_max_inflight_per_queue < 1:
        out.append("node.pop_max_inflight_per_queue: must be >= 1")
    try:
        parse_policy(n.max_delivery_attempts, n.retry_backoff, "node")
    except ValueError as e:
        out.append(str(e))
    if not isinstance(n.group_policies, dict):
        return out + ["node.group_policies: must be a mapping {group: {max_delivery_attempts, retry_backoff}}"]
    for group, o in n.group_policies.items():
        where = f"node.group_policies.{group}"
        if not isinstance(o, dict) or set(o) - {"max_delivery_attempts", "retry_backoff", "fifo"}:
            out.append(f"{where}: must be a mapping with max_delivery_attempts, retry_backoff and/or fifo, got {o!r}")
            continue
        try:
            parse_policy(o.get("max_delivery_attempts", n.max_delivery_attempts), o.get("retry_backoff",
                                                                                         n.retry_backoff), where,
                         o.get("fifo", False))
        except ValueError as e:
            out.append(str(e))
    return out


def setting_fields() -> list[tuple[str, dataclasses.Field]]:
    """Every key a node's configuration takes, as (``section.key`` path, the field documenting it), in the order
    of ``raftmq config sample``: ``cluster.raft.*`` (replication.RaftSettings) right after ``cluster.raft``, and
    the ``store.StoreConfig`` fields the node does not fill in itself."""
    from raftmq.replication.raft_write_path import RaftSettings
    from raftmq.store import StoreConfig

    out: list[tuple[str, dataclasses.Field]] = []
    for section in _ALL_SECTIONS:
        if section == "store":
            out += [(f"store.{f.name}", f) for f in dataclasses.fields(StoreConfig)
                    if f.name not in _STORE_FIELDS_FROM_NODE]
            continue
        for f in dataclasses.fields(_SECTIONS[section]):
            out.append((f"{section}.{f.name}", f))
            if section == "cluster" and f.name == "raft":
                out += [(f"cluster.raft.{r.name}", r) for r in dataclasses.fields(RaftSettings)
                        if r.name != "durability"]
    return out


def section_docs() -> dict[str, str]:
    """Section path -> what the section is for (the dataclasses' docstrings)."""
    from raftmq.replication.raft_write_path import RaftSettings
    from raftmq.store import StoreConfig

    classes = {**_SECTIONS, "cluster.raft": RaftSettings, "store": StoreConfig}
    return {name: " ".join((cls.__doc__ or "").split("\n\n")[0].split()) for name, cls in classes.items()}

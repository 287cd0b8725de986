"""Prometheus metrics with RocketMQ 5's names, so existing RocketMQ dashboards and alerts work.

Why two kinds: counters and histograms are updated per request (once per batch, never per message); everything
the store already knows (offsets, sizes, dispatch lag) is read at scrape time by a collector, so there is no
background thread and no stale copy.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from raftmq.node.auth.audit import REFUSAL_PORTS, REFUSALS
from raftmq.replication.write_path import WritePath
from raftmq.store.thread_name import cpu_seconds_by_thread

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class GroupLabelled(Collector):
    """Every sample of ``registry`` with the constant label ``group`` (issue 38): a process is a member of one
    group, so its whole /metrics is that group's, and dashboards and alerts select or aggregate by it in a
    cluster of several groups (a one-group cluster's group is its name)."""

    def __init__(self, registry: CollectorRegistry, group: str):
        self._registry = registry
        self._group = group

    def collect(self) -> Iterable[Metric]:
        for family in self._registry.collect():
            out = Metric(family.name, family.documentation, family.type, family.unit)
            out.samples = [s._replace(labels={**s.labels, "group": self._group}) for s in family.samples]
            yield out


class BrokerMetrics:
    """The per-request instruments of one broker; labels carry cluster and node id like RocketMQ 5's, and
    ``exposition`` (what /metrics serves) adds the member's group to every sample."""

    def __init__(self, cluster: str, node_id: str, group: str):
        self.registry = CollectorRegistry(auto_describe=True)
        self.exposition = CollectorRegistry(auto_describe=False)
        self.exposition.register(GroupLabelled(self.registry, group))
        self._base = (cluster, node_id)
        base = ["cluster", "node_id"]
        self.messages_in = Counter(
            "rocketmq_messages_in", "Messages stored (acknowledged puts)", base + ["topic"], registry=self.registry
        )
        self.throughput_in = Counter(
            "rocketmq_throughput_in", "Body bytes stored", base + ["topic"], registry=self.registry
        )
        self.messages_out = Counter(
            "rocketmq_messages_out", "Messages returned by pulls", base + ["topic", "consumer_group"],
            registry=self.registry,
        )
        self.throughput_out = Counter(
            "rocketmq_throughput_out", "Body bytes returned by pulls", base + ["topic", "consumer_group"],
            registry=self.registry,
        )
        self.put_latency = Histogram(
            "raftmq_put_latency_seconds", "Write path put: submit to acknowledgement (group commit + apply)",
            base, buckets=LATENCY_BUCKETS, registry=self.registry,
        ).labels(*self._base)
        self.get_latency = Histogram(
            "raftmq_get_latency_seconds", "Store read of one pull (excluding the long-poll wait)",
            base, buckets=LATENCY_BUCKETS, registry=self.registry,
        ).labels(*self._base)
        self.rpc_latency = Histogram(
            "raftmq_rpc_latency_seconds", "gRPC handling time by method and status code (long polls included)",
            base + ["method", "code"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.rocketmq5_renewals = Counter(
            "raftmq_rocketmq5_receipt_renewals", "RocketMQ 5 PushConsumer messages kept invisible by a renewal",
            base, registry=self.registry,
        ).labels(*self._base)
        self.long_poll_wakeups = Counter(
            "raftmq_long_poll_wakeups", "Parked pulls woken by a message arrival", base, registry=self.registry
        ).labels(*self._base)
        # transactions (RocketMQ 5's rocketmq_commit/rollback_messages_total and rocketmq_half_messages where they
        # exist): counted by the leader that acts, so a failover starts the new leader's counters at zero
        self.half_messages_in = Counter(
            "raftmq_transaction_half_messages", "Half messages stored (SendHalfMessage), by real topic",
            base + ["topic"], registry=self.registry,
        )
        self.commit_messages = Counter(
            "rocketmq_commit_messages", "Transactions committed (the real message stored), by topic",
            base + ["topic"], registry=self.registry,
        )
        self.rollback_messages = Counter(
            "rocketmq_rollback_messages", "Transactions rolled back, by topic", base + ["topic"],
            registry=self.registry,
        )
        self.transaction_checks = Counter(
            "raftmq_transaction_checks", "Check-backs of open transactions (sent to a producer of the group, or "
            "attempted with none connected: each spends one of transaction_check_max)",
            base + ["producer_group", "sent"], registry=self.registry,
        )
        self.transaction_discarded = Counter(
            "raftmq_transaction_discarded", "Half messages moved to TRANS_CHECK_MAX_TIME_TOPIC (checked too often, "
            "or older than file_reserved_time), by real topic", base + ["topic"], registry=self.registry,
        )
        self.security_refusals = Counter(
            "raftmq_security_refusals", "Requests refused by authentication, access rules or network allow-lists "
            "(one audit line each), by reason and port", base + ["reason", "port"], registry=self.registry,
        )
        self.leader_moves = Counter(
            "raftmq_leader_balance_moves", "Leadership handed to the group's preferred leader by the automatic "
            "rebalance (cluster.auto_balance_leaders), by target member and outcome (moved, failed)",
            base + ["to_member", "outcome"], registry=self.registry,
        )
        for reason in REFUSALS:  # every series exists at 0 from the start, so rate() sees the first refusal
            for port in REFUSAL_PORTS:
                self.security_refusals.labels(*self._base, reason, port)
        self.half_messages_pending: Callable[[], dict[str, int]] | None = None  # set by the transaction service
        self.registry.register(_HalfMessagesCollector(self._base, lambda: self.half_messages_pending))
        self.registry.register(ThreadCpuCollector(self._base))
        self._in: dict[str, tuple] = {}
        self._out: dict[tuple[str, str], tuple] = {}
        self._rpc: dict[tuple[str, str], object] = {}

    def record_put(self, topic: str, count: int, body_bytes: int) -> None:
        children = self._in.get(topic)
        if children is None:
            children = self._in[topic] = (
                self.messages_in.labels(*self._base, topic),
                self.throughput_in.labels(*self._base, topic),
            )
        children[0].inc(count)
        children[1].inc(body_bytes)

    def record_pull(self, topic: str, group: str, count: int, body_bytes: int) -> None:
        key = (topic, group)
        children = self._out.get(key)
        if children is None:
            children = self._out[key] = (
                self.messages_out.labels(*self._base, topic, group),
                self.throughput_out.labels(*self._base, topic, group),
            )
        children[0].inc(count)
        children[1].inc(body_bytes)

    def record_rpc(self, method: str, code: str, seconds: float) -> None:
        key = (method, code)
        child = self._rpc.get(key)
        if child is None:
            child = self._rpc[key] = self.rpc_latency.labels(*self._base, method, code)
        child.observe(seconds)  # type: ignore[attr-defined]

    def record_transaction(self, counter: Counter, *labels: str, count: int = 1) -> None:
        """Count ``count`` events on one of the transaction counters (once per batch, not per message)."""
        counter.labels(*self._base, *labels).inc(count)

    def record_leader_move(self, to_member: str, outcome: str) -> None:
        """One hand-over by the automatic leader rebalance (node/leader_balancer.py)."""
        self.leader_moves.labels(*self._base, to_member, outcome).inc()

    def record_refusal(self, reason: str, port: str) -> None:
        """One refused request (``node.auth.refusal_listeners``): reason is the audit event, port grpc/http/raft."""
        self.security_refusals.labels(*self._base, reason, port).inc()

    def add_collector(self, collector: Collector) -> None:
        self.registry.register(collector)


class ThreadCpuCollector(Collector):
    """``raftmq_thread_cpu_seconds_total{thread}``: this process's CPU time by kernel thread name (``reput``,
    ``raft-tick``, ``raft-commit``, ... see store.thread_name; ``main`` runs the gRPC event loop), read from
    /proc at scrape time. Shows which part of a member is busy, and how close its Python threads are to the one
    core a single interpreter can use. A thread that ends takes its seconds with it (a counter reset to rate())."""

    def __init__(self, base: tuple[str, str]):
        self._base = base

    def collect(self) -> Iterable[CounterMetricFamily]:
        by_name = cpu_seconds_by_thread(os.getpid())
        family = CounterMetricFamily("raftmq_thread_cpu_seconds", "CPU seconds of this member's threads by kernel "
                                     "thread name (main: the gRPC event loop)", labels=["cluster", "node_id", "thread"])
        for name, seconds in sorted(by_name.items()):
            family.add_metric([*self._base, name], seconds)
        yield family


class _HalfMessagesCollector(Collector):
    """``rocketmq_half_messages``: transactions still open, by real topic, read from the store at scrape time (so
    every member reports the replicated state, and a failover does not reset it)."""

    def __init__(self, base: tuple[str, str], source: Callable[[], Callable[[], dict[str, int]] | None]):
        self._base = base
        self._source = source

    def collect(self) -> Iterable[GaugeMetricFamily]:
        pending = self._source()
        if pending is None:
            return
        try:
            counts = pending()
        except Exception:  # store not open yet, closing, or dispatch far behind: no sample this scrape
            return
        g = GaugeMetricFamily("rocketmq_half_messages", "Open transactions (half messages not yet committed, "
                              "rolled back or discarded), by real topic", labels=["cluster", "node_id", "topic"])
        for topic, n in sorted(counts.items()):
            g.add_metric([*self._base, topic], float(n))
        yield g


class ConsumerGroupCollector(Collector):
    """``raftmq_consumer_group_members``: live consumers per group, from the leader's in-memory table (a follower
    exports nothing: membership is only kept where the heartbeats go)."""

    def __init__(self, cluster: str, node_id: str, registry, is_leader: Callable[[], bool]):
        self._base = (cluster, node_id)
        self._registry = registry  # node.consumer_groups.ConsumerGroupRegistry
        self._is_leader = is_leader

    def collect(self) -> Iterable[GaugeMetricFamily]:
        if not self._is_leader():
            return
        g = GaugeMetricFamily("raftmq_consumer_group_members", "Live consumers of a group (heartbeating to this "
                              "leader), summed over the topics they consume", labels=["cluster", "node_id", "consumer_group"])
        for group, n in sorted(self._registry.group_sizes().items()):
            g.add_metric([*self._base, group], float(n))
        yield g


# store.stats() keys with a RocketMQ 5 name; every other numeric key is exported as raftmq_store_<key>.
_ROCKETMQ_NAMES = {
    "dispatch_behind_bytes": ("rocketmq_storage_dispatch_behind_bytes", "Commit-log bytes not yet dispatched"),
    "commit_log_min_offset": ("raftmq_commitlog_min_offset", "Physical offset of the oldest commit-log byte kept"),
    "commit_log_max_offset": ("raftmq_commitlog_max_offset", "Physical offset where the next record goes"),
    "timer_messages_pending": ("rocketmq_timing_messages", "Timer messages (TIMER_DELIVER_MS) stored and not yet "
                               "delivered (exact on the leader; an upper bound from the replicated progress elsewhere)"),
    "timer_messages_delivered": ("raftmq_timer_messages_delivered", "Timer messages this node re-put into their "
                                 "topics since it started (only a leader delivers)"),
}
_NAME_CLEAN = re.compile(r"[^a-zA-Z0-9_]")


class StoreCollector(Collector):
    """Reads store and node state at scrape time."""

    def __init__(self, cluster: str, node_id: str, stats: Callable[[], dict], ready: Callable[[], bool]):
        self._labels = {"cluster": cluster, "node_id": node_id}
        self._stats = stats
        self._ready = ready

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=list(self._labels))
        g.add_metric(list(self._labels.values()), value)
        return g

    def collect(self) -> Iterable[GaugeMetricFamily]:
        yield self._gauge("raftmq_node_ready", "1 when the node serves requests (store recovered, caught up)",
                          1.0 if self._ready() else 0.0)
        try:
            stats = self._stats()
        except Exception:  # store not open yet (starting) or already closed (stopping)
            return
        lo, hi = stats.get("commit_log_min_offset"), stats.get("commit_log_max_offset")
        if isinstance(lo, int) and isinstance(hi, int):
            yield self._gauge("rocketmq_storage_size", "Bytes of commit log kept (max - min offset)", hi - lo)
            flushed = stats.get("commit_log_flushed_offset")
            if isinstance(flushed, int):
                yield self._gauge("rocketmq_storage_flush_behind_bytes", "Commit-log bytes not yet flushed",
                                  max(0, hi - flushed))
        yield from self._integrity(stats)
        for key, value in sorted(stats.items()):
            if key in _INTEGRITY_KEYS or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            name, doc = _ROCKETMQ_NAMES.get(key, (f"raftmq_store_{_NAME_CLEAN.sub('_', key)}", f"store stat {key}"))
            yield self._gauge(name, doc, float(value))


    def _integrity(self, stats: dict) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        """Damage found (by file kind), scrubber progress, disk writability (issue 10)."""
        labels = list(self._labels)
        values = list(self._labels.values())
        found = stats.get("corruption_found")
        if isinstance(found, dict):
            c = CounterMetricFamily("rocketmq_storage_corruption", "Damaged records / units / files found in the "
                                    "store (commit log, consume queue, index), at start, by the scrubber or by a read",
                                    labels=[*labels, "kind"])
            for kind, n in sorted(found.items()):
                c.add_metric([*values, kind], float(n))
            yield c
        yield self._gauge("raftmq_store_disk_writable", "0 while the disk cannot take writes (full, I/O error)",
                          0.0 if stats.get("disk_problem") else 1.0)
        if "scrub_bytes_total" in stats:
            c = CounterMetricFamily("raftmq_scrub_bytes", "Commit-log bytes re-read and checked by the scrubber",
                                    labels=labels)
            c.add_metric(values, float(stats["scrub_bytes_total"]))
            yield c
            yield self._gauge("raftmq_scrub_position_bytes", "Commit-log offset the scrubber is checking",
                              float(stats.get("scrub_position", 0)))
            yield self._gauge("raftmq_scrub_last_full_timestamp_seconds", "Unix time the last complete scrub pass "
                              "ended (0: none yet)", float(stats.get("scrub_last_full_timestamp_ms", 0)) / 1000)
        if "anti_entropy_bytes_total" in stats:  # a replicated member comparing its commit log with its peers'
            for name, key, doc in (
                    ("raftmq_anti_entropy_bytes", "anti_entropy_bytes_total",
                     "Commit-log bytes compared with the peers by anti-entropy"),
                    ("raftmq_anti_entropy_repaired_blocks", "anti_entropy_blocks_repaired_total",
                     "4 KiB commit-log blocks that differed from the majority and were replaced with its copy"),
                    ("raftmq_anti_entropy_passes", "anti_entropy_passes", "Complete anti-entropy passes")):
                c = CounterMetricFamily(name, doc, labels=labels)
                c.add_metric(values, float(stats[key]))
                yield c
            yield self._gauge("raftmq_anti_entropy_unrepaired_blocks", "4 KiB commit-log blocks that differ from "
                              "the peers' while no majority of the group holds one copy (retried every pass)",
                              float(stats["anti_entropy_unrepaired_blocks"]))
            yield self._gauge("raftmq_anti_entropy_position_bytes", "Commit-log offset anti-entropy is comparing",
                              float(stats["anti_entropy_position"]))
            yield self._gauge("raftmq_anti_entropy_last_pass_timestamp_seconds", "Unix time the last complete "
                              "anti-entropy pass ended (0: none yet)",
                              float(stats["anti_entropy_last_pass_timestamp_ms"]) / 1000)
            yield self._gauge("raftmq_anti_entropy_last_pass_duration_seconds", "How long the last complete "
                              "anti-entropy pass took", float(stats["anti_entropy_last_pass_seconds"]))


_INTEGRITY_KEYS = frozenset({"corruption_found", "disk_problem", "scrub_bytes_total", "scrub_position",
                             "scrub_last_full_timestamp_ms", "anti_entropy_bytes_total", "anti_entropy_position",
                             "anti_entropy_passes", "anti_entropy_last_pass_timestamp_ms",
                             "anti_entropy_last_pass_seconds", "anti_entropy_blocks_repaired_total",
                             "anti_entropy_unrepaired_blocks"})


class RaftCollector(Collector):
    """Replication health at scrape time, from the write path's cheap accessors (no peer round trips).

    A single node reports itself as a leader of a group of one in term 0, so alerts on has_leader work unchanged
    when the deployment grows to a cluster.
    """

    def __init__(self, cluster: str, node_id: str, write_path: Callable[[], WritePath | None]):
        self._labels = {"cluster": cluster, "node_id": node_id}
        self._node_id = node_id
        self._write_path = write_path

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=list(self._labels))
        g.add_metric(list(self._labels.values()), value)
        return g

    def collect(self) -> Iterable[GaugeMetricFamily]:
        wp = self._write_path()
        if wp is None:
            return
        leader = wp.leader()
        yield self._gauge("raftmq_raft_has_leader", "1 when this node knows a leader", float(leader is not None))
        yield self._gauge("raftmq_raft_is_leader", "1 when this node is the leader (role gauge)",
                          float(leader is not None and leader.id == self._node_id))
        # plain attribute reads of pysyncobj's counters: never a round trip to (or a wait for) its tick thread
        for name, doc, accessor in (
            ("raftmq_raft_term", "Current Raft term (0 for a single node)", wp.term),
            ("raftmq_raft_commit_index", "Highest Raft log index known committed by a majority", wp.commit_index),
            ("raftmq_raft_applied_index", "Raft log index of the last entry applied here", wp.raft_applied_index),
        ):
            yield self._gauge(name, doc, float(accessor()))
        for name, doc, value in (
            ("raftmq_raft_leader_changes", "Leader changes seen by this node", wp.leader_changes),
            ("raftmq_raft_snapshot_installs", "Raft snapshots installed from a leader (this member fell behind the "
             "compacted log)", wp.snapshot_installs),
            ("raftmq_raft_catch_up_bytes", "Commit-log bytes copied from peers (start-up rebuild and snapshot "
             "gaps)", wp.catch_up_bytes),
            ("raftmq_raft_snapshot_bytes_kept", "Commit-log bytes a snapshot install kept instead of copying them "
             "again: this member held them (a learner's copy) and a peer's digests proved them the group's",
             wp.snapshot_bytes_kept),
            ("raftmq_raft_durable_ack_rounds", "sync durability: committed batches made durable on a majority by "
             "this leader's own fsync, the followers having fsynced before acknowledging (no SyncJournal round)",
             wp.durable_ack_rounds),
        ):
            c = CounterMetricFamily(name, doc, labels=list(self._labels))
            c.add_metric(list(self._labels.values()), float(value))
            yield c
        # issue 11: elections, term changes, time without a leader (a climbing term means flapping leadership)
        counters = wp.election_counters()
        for name, doc, value in (
            ("raftmq_raft_elections", "Elections this member started (after a pre-vote won)",
             counters.get("elections", 0)),
            ("raftmq_raft_pre_votes", "Pre-votes this member asked for when its election timer fired",
             counters.get("pre_votes", 0)),
            ("raftmq_raft_term_changes", "Raft term increments seen by this member since it started",
             wp.term_changes),
            ("raftmq_raft_leaderless_seconds", "Seconds this member knew no leader since it started",
             wp.leaderless_seconds),
            ("raftmq_raft_tick_stalls", "Raft tick-thread stalls (starved CPU, slow disk); each got a grace period "
             "instead of a needless election", counters.get("tick_stalls", 0)),
            ("raftmq_raft_resent_known_entries", "Entries a leader re-sent that this member held already (matching; skipped)",
             counters.get("resent_known_entries", 0)),
            ("raftmq_raft_stale_acks_dropped", "Acknowledgements of an earlier term this member ignored as leader "
             "(they say nothing of its own term's entries)", counters.get("stale_acks_dropped", 0)),
            ("raftmq_raft_journal_torn_tail_bytes", "Bytes of a torn Raft-journal tail this member dropped when it "
             "started (a crash or power cut cut its last write short; fetched again from the leader)",
             counters.get("journal_torn_tail_bytes", 0)),
            ("raftmq_raft_withheld_bytes_adopted", "Commit-log bytes found beyond the last applied entry after a "
             "restart (power cut) that replayed entries or a peer's copy proved and kept",
             counters.get("withheld_bytes_adopted", 0)),
            ("raftmq_raft_withheld_bytes_cut", "Commit-log bytes found beyond the last applied entry after a restart "
             "that a committed entry showed were not the group's (lost by a majority's power cut under async)",
             counters.get("withheld_bytes_cut", 0)),
            ("raftmq_raft_rewound_entries", "Applied entries this member rewound because the leader's log held "
             "others at their indexes (async, after a power cut of a majority)", counters.get("rewound_entries", 0)),
            ("raftmq_raft_stale_batches_dropped", "Message batches dropped at apply because a deposed leader had "
             "screened them for duplicates in an earlier term (their sends ended unknown and were retried)",
             counters.get("stale_batches_dropped", 0)),
        ):
            c = CounterMetricFamily(name, doc, labels=list(self._labels))
            c.add_metric(list(self._labels.values()), float(value))
            yield c
        commits, msgs, puts = wp.group_commit_stats()  # issue 17: how well requests share one entry / append
        for name, doc, value in (
            ("raftmq_group_commits", "Group commits on this node (replicated: one Raft entry each; single "
             "node: one store append each)", commits),
            ("raftmq_group_commit_messages", "Messages written by those group commits (divide by "
             "raftmq_group_commits for messages per Raft entry)", msgs),
            ("raftmq_group_commit_requests", "Send requests that shared those group commits (divide by "
             "raftmq_group_commits for requests per Raft entry)", puts),
        ):
            c = CounterMetricFamily(name, doc, labels=list(self._labels))
            c.add_metric(list(self._labels.values()), float(value))
            yield c
        stages = SummaryMetricFamily("raftmq_write_stage_seconds", "Where the leader's group commits spent their "
                                     "time, by stage (replicated only; divide sum by count for the mean per batch: "
                                     "replication/stage_times.py)", labels=[*self._labels, "stage"])
        for stage, (count, seconds) in wp.write_stage_seconds().items():
            stages.add_metric([*self._labels.values(), stage], count, seconds)
        yield stages
        yield from self._dedup(wp)
        throttle = wp.catch_up_throttle  # commit-log copies this node serves to peers
        if throttle is not None:
            for name, doc, value in (
                ("raftmq_raft_catch_up_served_bytes", "Commit-log bytes sent to catching-up peers (FetchCommitLog, "
                 "rate-limited by cluster.raft.catch_up_bytes_per_s)", throttle.bytes_served),
                ("raftmq_raft_catch_up_refused", "Catch-up fetches refused because cluster.raft."
                 "catch_up_max_streams were being served (the peer retries)", throttle.refused),
            ):
                c = CounterMetricFamily(name, doc, labels=list(self._labels))
                c.add_metric(list(self._labels.values()), float(value))
                yield c
            yield self._gauge("raftmq_raft_catch_up_streams", "Catch-up fetches this node is serving now",
                              float(throttle.streams))

    def _dedup(self, wp: WritePath) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        """De-duplication (docs/design/deduplication.md): retries answered without storing, the window's size."""
        dedup = wp.dedup
        if dedup is None:
            return
        window = dedup.window
        with window.lock:
            duplicates = sorted(window.duplicates.items())
            entries, nbytes, early = len(window), window.approx_bytes(), window.early_evictions
        labels, values = list(self._labels), list(self._labels.values())
        c = CounterMetricFamily("raftmq_dedup_duplicates", "Sends this member (as leader) answered with the "
                                "result of an earlier send of the same UNIQ_KEY instead of storing them again",
                                labels=[*labels, "topic"])
        for topic, n in duplicates:
            c.add_metric([*values, topic], float(n))
        yield c
        c = CounterMetricFamily("raftmq_dedup_early_evictions", "Ids the de-duplication window forgot before their "
                                "window ended because node.dedup_max_entries was reached (a retry of one is stored "
                                "again)", labels=labels)
        c.add_metric(values, float(early))
        yield c
        yield self._gauge("raftmq_dedup_window_entries", "Ids in this member's de-duplication window", entries)
        yield self._gauge("raftmq_dedup_window_bytes", "Memory the de-duplication window takes (estimated)", nbytes)

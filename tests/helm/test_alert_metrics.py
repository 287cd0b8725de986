"""Every metric the chart's PrometheusRule alerts on is really exported by a running node.

A renamed metric would otherwise disable its alert without a sound.
"""

from __future__ import annotations

import re

from tests.helm.chart import objects, one

# Series that come from Prometheus itself or the kubelet, not from the node.
EXTERNAL = {"up", "kubelet_volume_stats_used_bytes", "kubelet_volume_stats_capacity_bytes"}


def alert_metrics() -> set[str]:
    rule = one(objects({"metrics": {"prometheusRule": {"enabled": True}}}), "PrometheusRule")
    names = set()
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            names |= set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", r["expr"]))
    return names - EXTERNAL


def test_the_alerts_use_the_node_metrics_we_expect():
    assert alert_metrics() == {
        "raftmq_raft_has_leader", "raftmq_raft_leader_changes_total", "raftmq_raft_term", "raftmq_node_ready",
        "rocketmq_storage_dispatch_behind_bytes", "raftmq_store_disk_used_ratio",
        "rocketmq_storage_corruption_total", "raftmq_store_disk_writable", "raftmq_raft_rewound_entries_total",
        "raftmq_raft_withheld_bytes_cut_total", "raftmq_anti_entropy_unrepaired_blocks",
        "raftmq_dedup_early_evictions_total",
    }


def test_a_running_node_exports_every_alerted_metric(shared_cluster):
    status, text = shared_cluster[1].http_get("/metrics")  # a replicated member: anti-entropy metrics are a cluster's
    assert status == 200
    exported = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    missing = alert_metrics() - exported
    assert not missing, f"alerted metrics the node does not export: {sorted(missing)}"

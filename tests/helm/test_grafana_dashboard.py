"""The chart's Grafana dashboard: rendered for the sidecar, well formed, and built only on metrics a node exports.

A panel whose metric was renamed would show "No data" forever without anyone noticing, so every series a query
names is looked up in a real node's /metrics after the node did what the panels watch (puts, pulls, a group).
"""

from __future__ import annotations

import json
import re

import pytest

from raftmq.client import Admin, Message, Producer, PullConsumer, SimpleConsumer
from tests.helm.chart import objects, one
from tests.support.waiting import wait_for

FUNCTIONS = {"sum", "max", "min", "rate", "increase", "histogram_quantile", "by", "le"}


def dashboard(values: dict | None = None) -> tuple[dict, dict]:
    cm = one(objects({"metrics": {"grafanaDashboard": {"enabled": True, **(values or {})}}}), "ConfigMap",
             "rel-raftmq-dashboard")
    return cm, json.loads(cm["data"]["raftmq.json"])


def queries(dash: dict) -> list[str]:
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def metric_names() -> set[str]:
    names = set()
    for expr in queries(dashboard()[1]):
        names |= set(re.findall(r"\b((?:raftmq|rocketmq)_[a-zA-Z0-9_]+)\s*\{", expr))
    return names


def test_off_by_default():
    assert not [o for o in objects() if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")]


def test_sidecar_label_namespace_and_annotations():
    cm, _ = dashboard({"label": "grafana_dashboard", "labelValue": "yes", "namespace": "monitoring",
                       "annotations": {"grafana_folder": "messaging"}})
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "yes"
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "messaging"}


def test_bad_label_is_refused_at_render():
    with pytest.raises(Exception, match="label"):
        objects({"metrics": {"grafanaDashboard": {"enabled": True, "label": "not a label!"}}})


def test_panels_are_well_formed():
    _, dash = dashboard()
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        if p["type"] != "row":
            assert p["targets"] and p["datasource"]["uid"] == "${datasource}", p["title"]
    for expr in queries(dash):
        assert expr.count("(") == expr.count(")"), expr
        # every series is scoped to the release the ServiceMonitor labels, so two releases never mix
        for selector in re.findall(r"(?:raftmq|rocketmq)_[a-zA-Z0-9_]+\{([^}]*)\}", expr):
            assert 'namespace="$namespace"' in selector and 'job="$job"' in selector, expr
            assert 'group=~"$group"' in selector, expr  # issue 38: the group variable narrows every panel
        # ... and every aggregation keeps the groups apart
        for by in re.findall(r"\b(?:sum|max|min)\s*(by \([^)]*\))?\s*\(", expr):
            assert by and "group" in by, expr
    group = next(v for v in dash["templating"]["list"] if v["name"] == "group")
    assert group["multi"] and group["includeAll"] and "group)" in group["query"]["query"]
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in ("messages in", "latency", "disk", "role", "term", "commit lag", "leader changes", "consumers",
                  "consumer lag", "refused requests"):
        assert topic in titles, topic


def test_a_running_node_exports_every_metric_the_dashboard_queries(shared_node):
    wanted = metric_names()
    assert {"rocketmq_messages_in_total", "raftmq_put_latency_seconds_bucket", "raftmq_raft_term"} <= wanted
    node = shared_node
    with Admin([node.grpc_address]) as admin:
        admin.create_topic("dash", queues=2)
    with Producer([node.grpc_address]) as producer:
        producer.send_batch("dash", [Message(b"m1"), Message(b"m2")])
    with PullConsumer("dash-group", "dash", [node.grpc_address], start_from="first") as consumer:
        got = []
        while len(got) < 2:
            got += consumer.poll(timeout=5.0)
        with SimpleConsumer("dash-pop", "dash", [node.grpc_address], await_duration=2) as pop:
            received = wait_for(lambda: pop.receive(1, 30), what="a message for the receive/ack group")
            pop.ack(received)  # lag and in-flight gauges exist once a receive/ack group has state
        status, text = node.http_get("/metrics")  # while the pull group is live (its members gauge)
    assert status == 200
    exported = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    missing = wanted - exported
    assert not missing, f"dashboard queries metrics the node does not export: {sorted(missing)}"
    # issue 38: a one-group cluster's member labels every sample with its group, the cluster's name
    unlabelled = [line for line in text.splitlines() if line and not line.startswith("#")
                  and 'group="DefaultCluster"' not in line]
    assert not unlabelled, unlabelled[:5]

"""The chart's ServiceMonitor and PrometheusRule, checked against the prometheus-operator's real CRD schemas.

kubernetes-validate knows only built-in kinds, so these objects are validated with jsonschema against the v1
``openAPIV3Schema`` vendored in tests/helm/crds (see its README for the source). The API server silently prunes
fields a CRD does not declare, so here every undeclared field is an error: a typo such as ``scrapeTimout`` would
otherwise install fine and do nothing. The alert expressions are parsed for metric names, which must be ones a
running node exports: an alert over a metric that does not exist never fires.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path

import helm_python as helm
import jsonschema
import pytest

from tests.helm.chart import NAMESPACE, RELEASE, all_of, objects, one

CRDS = Path(__file__).resolve().parent / "crds"
SCHEMAS = {
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.v1.schema.json",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.v1.schema.json",
}
MONITORED = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
VALUE_SETS = {
    "monitored-defaults": {"metrics": MONITORED},
    "five-labelled-custom-thresholds": {
        "replicas": 5,
        "metrics": {
            "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}, "interval": "15s",
                               "scrapeTimeout": "5s"},
            "prometheusRule": {"enabled": True, "labels": {"release": "prom", "team": "mq"},
                               "diskWarningRatio": 0.6, "diskCriticalRatio": 0.9, "dispatchBehindBytes": 1 << 30,
                               "leaderChangesPerHour": 10, "termIncreasesPer15m": 20, "noLeaderFor": "30s"},
        },
    },
    "single-overridden-name": {"replicas": 1, "allowSingleReplica": True, "fullnameOverride": "mq",
                               "metrics": MONITORED},
}
# Series that come from Prometheus itself or the kubelet, not from the node.
EXTERNAL = {"up", "kubelet_volume_stats_used_bytes", "kubelet_volume_stats_capacity_bytes"}
LABEL_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _closed(schema):
    """The schema with every declared object closed to undeclared fields (the API server would prune them)."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items()}
    if isinstance(out.get("pattern"), str) and out["pattern"].startswith("^(?i)"):
        out["pattern"] = "(?i)^" + out["pattern"][5:]  # Go's RE2 takes a flag mid-pattern, Python's re does not
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@cache
def validator(kind: str) -> jsonschema.Draft4Validator:
    schema = _closed(json.loads((CRDS / SCHEMAS[kind]).read_text()))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def crd_errors(obj: dict) -> list[str]:
    """Every way ``obj`` breaks its CRD schema or Kubernetes object metadata rules (empty: valid)."""
    errors = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
              for e in validator(obj["kind"]).iter_errors(obj)]
    if obj.get("apiVersion") != "monitoring.coreos.com/v1":
        errors.append(f"apiVersion {obj.get('apiVersion')!r} is not monitoring.coreos.com/v1")
    meta = obj.get("metadata", {})
    for key in ("name", "namespace"):
        if not isinstance(meta.get(key), str) or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", meta[key]):
            errors.append(f"metadata.{key} {meta.get(key)!r} is not a DNS label")
    for k, v in (meta.get("labels") or {}).items():
        if not LABEL_NAME.match(str(k)) or not isinstance(v, str) or not LABEL_VALUE.match(v):
            errors.append(f"metadata.labels {k!r}: {v!r} is not a valid label")
    return errors


# ---------------------------------------------------------------- PromQL: just enough to find the series names

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_IDENT = re.compile(r"(?<![\w.])[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}


def series_names(expr: str) -> set[str]:
    """Metric names an expression selects: identifiers that are not functions, keywords or grouping labels."""
    rest = _STRING.sub('""', expr)
    for open_, close in ("()", "{}", "[]"):
        assert rest.count(open_) == rest.count(close), f"unbalanced {open_}{close} in {expr!r}"
    rest = _RANGE.sub(" ", _MATCHERS.sub(" ", rest))
    rest = _GROUPING.sub(" ", rest)
    names = set()
    for m in _IDENT.finditer(rest):
        if m.group().lower() in _KEYWORDS or rest[m.end():].lstrip().startswith("("):
            continue  # a function call or aggregation
        names.add(m.group())
    return names


def grouping_labels(expr: str) -> list[set[str]]:
    """The label sets of every ``by (...)`` in ``expr``: an aggregated alert keeps only those labels."""
    return [{x.strip() for x in m.group(2).split(",") if x.strip()}
            for m in _GROUPING.finditer(_STRING.sub('""', expr)) if m.group(1) == "by"]


def alerts(values: dict) -> dict[str, dict]:
    rule = one(objects(values), "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


# ---------------------------------------------------------------- tests


@pytest.fixture(params=sorted(VALUE_SETS), ids=str)
def monitored(request) -> list[dict]:
    return objects(VALUE_SETS[request.param])


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_monitoring_objects_validate_against_the_operator_crds(monitored, kind):
    obj = one(monitored, kind)
    assert obj["metadata"]["namespace"] == NAMESPACE
    assert crd_errors(obj) == []


def test_the_crd_check_can_fail():
    """Typos the API server would prune, bad durations and missing required fields are all reported."""
    objs = objects(VALUE_SETS["monitored-defaults"])
    sm, rule = one(objs, "ServiceMonitor"), one(objs, "PrometheusRule")

    broken = copy.deepcopy(sm)
    broken["spec"]["endpoints"][0]["scrapeTimout"] = "5s"
    assert any("scrapeTimout" in e for e in crd_errors(broken))
    broken = copy.deepcopy(sm)
    broken["spec"]["endpoints"][0]["interval"] = "30 seconds"
    assert any("interval" in e for e in crd_errors(broken))
    broken = copy.deepcopy(sm)
    del broken["spec"]["selector"]
    assert any("selector" in e for e in crd_errors(broken))
    broken = copy.deepcopy(sm)
    broken["metadata"]["labels"]["release"] = 7
    assert any("release" in e for e in crd_errors(broken))

    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["for"] = "one minute"
    assert any("for" in e for e in crd_errors(broken))
    broken = copy.deepcopy(rule)
    del broken["spec"]["groups"][0]["rules"][0]["expr"]
    assert any("expr" in e for e in crd_errors(broken))
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["severity"] = "critical"  # belongs under labels
    assert any("severity" in e for e in crd_errors(broken))


@pytest.mark.parametrize("which", ["serviceMonitor", "prometheusRule"])
def test_extra_labels_that_are_not_strings_are_refused_or_rendered_valid(which):
    """A number or boolean as an extra label value would make an object the API server rejects: the chart's
    values schema must refuse it with a message, or the template must render it as a valid label."""
    values = {"metrics": {which: {"enabled": True, "labels": {"release": "prom", "tier": 1, "paging": True}}}}
    try:
        objs = objects(values)
    except helm.HelmValuesError as e:
        assert "labels" in str(e)
        return
    for obj in objs:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            assert crd_errors(obj) == []


def test_alerts_select_the_job_the_service_monitor_sets(monitored):
    """Rules match job=<release>: the value of the ServiceMonitor's jobLabel on the Service it scrapes."""
    sm = one(monitored, "ServiceMonitor")
    selector = sm["spec"]["selector"]["matchLabels"]
    services = [s for s in all_of(monitored, "Service")
                if all(s["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())]
    assert len(services) == 1
    assert services[0]["metadata"]["labels"][sm["spec"]["jobLabel"]] == RELEASE
    rule = one(monitored, "PrometheusRule")
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            for name in series_names(r["expr"]) - {"kubelet_volume_stats_used_bytes",
                                                    "kubelet_volume_stats_capacity_bytes"}:
                assert re.search(rf'\b{name}\{{[^}}]*job="{RELEASE}"', r["expr"]), (r["alert"], name)


def test_annotations_use_only_labels_the_alert_keeps():
    """``$labels.x`` in an aggregated alert (``max by (job) ...``) is empty unless x is a grouping label."""
    for name, alert in alerts(VALUE_SETS["monitored-defaults"]).items():
        used = set(re.findall(r"\$labels\.(\w+)", json.dumps(alert["annotations"])))
        for kept in grouping_labels(alert["expr"]):
            assert used <= kept, f"{name} aggregates by {sorted(kept)} but its annotations use {sorted(used)}"


def test_series_names_parser():
    expr = ('sum by (job, pod) (rate(foo_total{a="b{c}", d=~"x|y"}[5m])) / on(x) group_left(y) bar > 1e3 '
            'or absent(up{job="x"}) unless baz offset 5m and max_over_time(q:rec[1h:1m]) > bool 0.5')
    assert series_names(expr) == {"foo_total", "bar", "up", "baz", "q:rec"}
    assert grouping_labels(expr) == [{"job", "pod"}]
    with pytest.raises(AssertionError, match="unbalanced"):
        series_names("max(up{job='x'}")


def test_the_alerts_use_the_metrics_we_expect():
    names = set().union(*(series_names(a["expr"]) for a in alerts(VALUE_SETS["monitored-defaults"]).values()))
    assert names - EXTERNAL == {
        "raftmq_raft_has_leader", "raftmq_raft_leader_changes_total", "raftmq_raft_term", "raftmq_node_ready",
        "rocketmq_storage_dispatch_behind_bytes", "raftmq_store_disk_used_ratio",
        "rocketmq_storage_corruption_total", "raftmq_store_disk_writable", "raftmq_raft_rewound_entries_total",
        "raftmq_raft_withheld_bytes_cut_total", "raftmq_anti_entropy_unrepaired_blocks",
        "raftmq_dedup_early_evictions_total",
    }
    assert names & EXTERNAL == EXTERNAL


def test_every_alerted_series_is_exported_by_a_running_node(shared_cluster):
    status, text = shared_cluster[1].http_get("/metrics")  # the chart runs replicated members (anti-entropy metrics)
    assert status == 200
    exported = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    for name, alert in alerts(VALUE_SETS["monitored-defaults"]).items():
        missing = series_names(alert["expr"]) - EXTERNAL - exported
        assert not missing, f"alert {name} uses series no node exports: {sorted(missing)}"


# ---------------------------------------------------------------- values the operator would reject later

DURATIONS = ["30s", "1m30s", "2h", "500ms", "0", "1y2w3d4h5m6s7ms", "90s", "30s1m", "1m1m", "1.5m", "30", "5 m",
             "-1s", "1h 5m", "ms", "1M"]


@pytest.mark.parametrize("duration", DURATIONS)
def test_the_values_schema_takes_exactly_the_durations_the_crd_takes(duration):
    """A duration the values schema let through but the CRD refused would fail at install, far from the value."""
    crd_ok = re.fullmatch(r"(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)",
                          duration) is not None
    values = {"metrics": {"serviceMonitor": {"enabled": True, "interval": duration, "scrapeTimeout": "0"},
                          "prometheusRule": {"enabled": True, "noLeaderFor": duration}}}
    try:
        objs = objects(values)
    except helm.HelmValuesError as e:
        assert not crd_ok, f"{duration!r} is a valid Prometheus duration but the chart refused it: {e}"
        assert "interval" in str(e) and "noLeaderFor" in str(e)
        return
    assert crd_ok, f"the chart took {duration!r}, which the CRD refuses"
    for kind in SCHEMAS:
        assert crd_errors(one(objs, kind)) == []


@pytest.mark.parametrize(("interval", "timeout", "ok"), [
    ("30s", "10s", True), ("1m", "60s", True), ("1m30s", "90s", True), ("1s", "999ms", True), ("0", "10s", True),
    ("10s", "30s", False), ("1m", "1m1s", False), ("500ms", "1s", False), ("1h", "1d", False),
])
def test_a_scrape_timeout_longer_than_the_interval_is_refused(interval, timeout, ok):
    """The operator rejects such a ServiceMonitor (only its logs say so) and nothing is scraped: refuse at render."""
    values = {"metrics": {"serviceMonitor": {"enabled": True, "interval": interval, "scrapeTimeout": timeout}}}
    if ok:
        assert crd_errors(one(objects(values), "ServiceMonitor")) == []
        return
    with pytest.raises(helm.HelmRenderError, match="scrapeTimeout .* is longer than metrics.serviceMonitor.interval"):
        objects(values)

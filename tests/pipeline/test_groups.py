"""The pipeline jobs on a many-group layout (issue 38): the stores of a real 2-group cluster (2 members each,
real node processes), given as the directory holding every member's store or one member of each group;
reported per group, replicas compared within each group only, Spark in local mode."""

from __future__ import annotations

import filecmp
import json
import os

import pytest

from raftmq.client import Admin, Producer
from raftmq.pipeline.main import main as pipeline_main
from tests.client.test_cluster_check_e2e import converged
from tests.replication.cluster_util import wait_leader
from tests.support.processes import group_specs, start_nodes, stop_all

pytestmark = pytest.mark.spark

QUIET = ["--quiet"]
SENT = {"g0": 30, "g1": 45}
HOSTS = {"g0": "127.0.0.1:10911", "g1": "127.0.0.1:10912"}


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory):
    """A stopped 2-group cluster's data: ``<dir>/g<G>-n<J>/store``; ``SENT`` messages acknowledged per group."""
    base = tmp_path_factory.mktemp("two-groups")
    specs = group_specs(base, groups=2, members=2)
    nodes = start_nodes([s for group in specs for s in group], timeout=120)
    try:
        groups = [nodes[:2], nodes[2:]]
        for g in groups:
            wait_leader(g)
        with Admin([nodes[0].grpc_address]) as admin:
            admin.create_topic("Layout", queues=2)
        with Producer([nodes[0].grpc_address]) as p:
            for broker, n in SENT.items():
                acked = p.send_batch("Layout", [f"{broker}-{i}".encode() for i in range(n)], broker=broker)
                assert {r.broker for r in acked} == {broker}
        for g in groups:
            converged([n.grpc_address for n in g])
    finally:
        stop_all(nodes)
    return base


def _group(report: dict, host: str) -> dict:
    return next(g for g in report["groups"] if g["storeHost"] == host)


def test_stats_report_each_group_once(spark, cluster_dir, capsys) -> None:
    assert pipeline_main(["stats", str(cluster_dir), "--json", *QUIET]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(g["storeHost"] for g in report["groups"]) == sorted(HOSTS.values())
    for name, host in HOSTS.items():
        g = _group(report, host)
        assert sorted(g["members"]) == [f"{name}-n0/store", f"{name}-n1/store"], g
        layout = {t["topic"]: t["messages"] for t in g["topics"]}
        assert layout["Layout"] == SENT[name], g["topics"]
    # one member of each group, given one by one: the same per-group answer
    one_each = [str(cluster_dir / "g0-n1" / "store"), str(cluster_dir / "g1-n0" / "store")]
    assert pipeline_main(["stats", *one_each, *QUIET]) == 0
    text = capsys.readouterr().out
    assert text.count("== group at store host ") == 2 and "g1-n0" in text and "g0-n1" in text, text


def test_replicas_compare_within_each_group_and_name_the_group_that_differs(spark, cluster_dir, tmp_path,
                                                                           capsys) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(cluster_dir, copy, ignore=shutil.ignore_patterns("*.log", "lock"))
    assert pipeline_main(["replicas", str(copy), *QUIET]) == 0
    out = capsys.readouterr().out
    assert "DIFFER" not in out and "verdict: replicas agree in every group compared (2 of 2)" in out, out
    assert f"group at store host {HOSTS['g0']}: replicas agree" in out, out
    segment = sorted((copy / "g1-n1" / "store" / "commitlog").iterdir())[0]
    data = bytearray(segment.read_bytes())
    at = data.index(b"g1-17")  # a body byte of a message of g1
    data[at] ^= 0xFF
    segment.write_bytes(bytes(data))
    assert pipeline_main(["replicas", str(copy), *QUIET]) == 1
    out = capsys.readouterr().out
    assert f"verdict: replicas DIFFER in 1 group(s): group at store host {HOSTS['g1']}" in out, out
    assert f"group at store host {HOSTS['g0']}: replicas agree" in out and "g1-n0/store vs g1-n1/store" not in out
    assert "first difference" in out and "(topic Layout," in out, out


def test_verify_reindex_and_export_every_group(spark, cluster_dir, tmp_path, capsys) -> None:
    assert pipeline_main(["verify", str(cluster_dir), *QUIET]) == 0
    out = capsys.readouterr().out
    assert out.count("verdict: OK: 0 difference(s)") == 4 and "verdict: OK in every member store" in out, out

    rebuilt = tmp_path / "rebuilt"
    assert pipeline_main(["reindex", str(cluster_dir), str(rebuilt), "--no-index", *QUIET]) == 0
    capsys.readouterr()
    for name, host in HOSTS.items():
        for j in range(2):
            member = f"{name}-n{j}"
            ours = rebuilt / f"storehost-{host.replace(':', '-')}" / f"{member}-store" / "consumequeue" / "Layout"
            theirs = cluster_dir / member / "store" / "consumequeue" / "Layout"
            queues = os.listdir(ours)  # a batch goes to one queue: the queues that hold messages
            assert queues and set(queues) <= set(os.listdir(theirs)), member
            for q in queues:
                assert sorted(os.listdir(ours / q)) == sorted(os.listdir(theirs / q)), (member, q)
                for f in os.listdir(theirs / q):
                    assert filecmp.cmp(ours / q / f, theirs / q / f, shallow=False), (member, q, f)

    parquet = tmp_path / "parquet"
    assert pipeline_main(["export", str(cluster_dir), str(parquet), "--topic", "Layout", *QUIET]) == 0
    capsys.readouterr()
    rows = spark.read.parquet(str(parquet)).select("group", "body").collect()
    by_group: dict[str, set[bytes]] = {}
    for r in rows:
        by_group.setdefault(r["group"], set()).add(bytes(r["body"]))
    assert by_group == {f"storehost-{host.replace(':', '-')}": {f"{name}-{i}".encode() for i in range(SENT[name])}
                        for name, host in HOSTS.items()}

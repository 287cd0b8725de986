"""``raftmq pipeline`` is wired into the client CLI through the ``raftmq.commands`` entry point."""

from __future__ import annotations

import importlib.metadata

import pytest

from raftmq.client.cli import build_parser
from raftmq.pipeline.jobs import JOBS


def test_every_job_is_a_raftmq_pipeline_subcommand() -> None:
    eps = [ep for ep in importlib.metadata.entry_points(group="raftmq.commands") if ep.name == "pipeline"]
    assert eps and eps[0].value == "raftmq.pipeline.cli:register"
    parser = build_parser(eps)
    for job in JOBS:
        args = parser.parse_args(["pipeline", job, "STORE", *(["OUT"] if job in ("reindex", "export") else []),
                                  *(["OTHER"] if job == "replicas" else [])])
        assert callable(args.func)


def test_missing_store_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    parser = build_parser([ep for ep in importlib.metadata.entry_points(group="raftmq.commands")
                           if ep.name == "pipeline"])
    args = parser.parse_args(["pipeline", "stats", str(tmp_path / "none")])
    assert args.func(args) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_sizes_parse_with_units() -> None:
    from raftmq.pipeline.jobs.common import parse_size

    assert (parse_size("4096"), parse_size("512K"), parse_size("64M"), parse_size("1g")) == (4096, 512 << 10,
                                                                                           64 << 20, 1 << 30)
    with pytest.raises(Exception, match="not a size"):
        parse_size("lots")

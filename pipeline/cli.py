"""``raftmq pipeline <job>``: registered through the ``raftmq.commands`` entry point.

Only argument definitions are imported here; Spark is imported when a job actually runs.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from raftmq.pipeline.jobs import JOBS
from raftmq.pipeline.jobs.common import run_job


def _job(name: str) -> Any:
    return importlib.import_module(f"raftmq.pipeline.jobs.{name}")


def register(subparsers: Any) -> None:
    """Add ``pipeline`` with one sub-command per job; each sets ``func(args) -> exit code``."""
    p = subparsers.add_parser(
        "pipeline",
        help="Spark jobs over store directories (reindex, export, stats, verify, replicas)",
        description="Spark jobs over raftmq / RocketMQ 4.9 store directories. Local mode by default "
        "(local[*]); --master runs the same job on any Spark cluster.",
    )
    jobs = p.add_subparsers(dest="job", metavar="JOB", required=True)
    for name in JOBS:
        mod = _job(name)
        jp = jobs.add_parser(name, help=mod.HELP, description=mod.__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(jp)
        jp.set_defaults(func=lambda args, _n=name, _m=mod: run_job(_n, _m.run, args))

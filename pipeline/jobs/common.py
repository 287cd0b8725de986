"""What every job shares: the store/Spark options, size parsing, and turning bad input into one line + exit code."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from raftmq.pipeline.errors import PipelineError

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """``"64M"`` -> 67108864; plain numbers are bytes."""
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = t[-1:] if t[-1:] in _UNITS and not t[-1:].isdigit() else ""
    number = t[: len(t) - len(unit)]
    if not number.isdigit() or int(number) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (use e.g. 4096, 512K, 64M, 1G)")
    return int(number) * _UNITS[unit]


def add_spark_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("spark")
    g.add_argument("--master", default=None,
                   help="Spark master URL (default local[*], or $RAFTMQ_SPARK_MASTER)")
    g.add_argument("--split-size", type=parse_size, default=64 << 20, metavar="BYTES",
                   help="bytes of commit log per task; large segments are cut into ranges (default 64M)")
    g.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    g.add_argument("--progress-interval", type=float, default=5.0, metavar="SECONDS",
                   help="how often task progress is printed (default 5)")


def add_store_geometry(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("store geometry (inferred from the store's files when not given)")
    g.add_argument("--cq-file-size", type=int, default=None, metavar="BYTES",
                   help="consume-queue file size (RocketMQ default 6000000)")
    g.add_argument("--index-slots", type=int, default=None, help="maxHashSlotNum (default 5000000)")
    g.add_argument("--index-num", type=int, default=None, help="maxIndexNum (default 20000000)")
    g.add_argument("--delay-levels", default="1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
                   help="messageDelayLevel of the broker (tags codes of SCHEDULE_TOPIC_XXXX)")


STORES_HELP = ("store root directory (holds commitlog/); for a cluster of several Raft groups, one member's store "
               "of each group or a directory holding every member's store: reported per group")


def add_stores(p: argparse.ArgumentParser) -> None:
    """The store(s) a job reads: one store root as before groups, or a many-group layout (pipeline/groups.py)."""
    p.add_argument("stores", nargs="+", metavar="STORE", help=STORES_HELP)


def group_heading(group: Any, member: Any) -> str:
    """The line that opens a group's part of a report."""
    return (f"== group at {group.name}: member {member.label} ({member.layout.root}; "
            f"{len(group.members)} member store(s) of this group given)")


def run_job(name: str, fn: Callable[[Any], int], args: Any) -> int:
    """Run a job; a ``PipelineError`` becomes ``raftmq pipeline <job>: error: <reason>`` and its exit code."""
    try:
        return fn(args)
    except PipelineError as e:
        print(f"raftmq pipeline {name}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"raftmq pipeline {name}: interrupted", file=sys.stderr)
        return 130


def standalone_main(name: str, add_arguments: Callable[[argparse.ArgumentParser], None],
                    run: Callable[[Any], int], doc: str | None, argv: list[str] | None = None) -> int:
    """``spark-submit pipeline/jobs/<job>.py ...``: the same options as ``raftmq pipeline <job>``."""
    parser = argparse.ArgumentParser(prog=f"{os.path.basename(sys.argv[0])}", description=doc)
    add_arguments(parser)
    return run_job(name, run, parser.parse_args(argv))


class JobContext:
    """Session, progress and store layout of one job run; ``close`` stops only a session it started itself."""

    def __init__(self, name: str, args: Any) -> None:
        from raftmq.pipeline.progress import Progress  # pyspark-free: the first progress line comes at once

        self.name = name
        self.args = args
        self.progress = Progress(name, quiet=getattr(args, "quiet", False),
                                 interval=getattr(args, "progress_interval", 5.0))
        self._spark = None
        self._created = False

    @property
    def spark(self):  # noqa: ANN201 - pyspark is imported lazily
        if self._spark is None:
            from pyspark.sql import SparkSession

            from raftmq.pipeline.spark import get_session

            self._created = SparkSession.getActiveSession() is None
            if self._created:
                with self.progress.waiting("starting Spark"):
                    self._spark = get_session(getattr(self.args, "master", None),
                                              app_name=f"raftmq-pipeline-{self.name}")
            else:
                self._spark = get_session(getattr(self.args, "master", None), app_name=f"raftmq-pipeline-{self.name}")
            self.progress.watch(self._spark.sparkContext)
        return self._spark

    def __enter__(self) -> JobContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.close()
        if self._created and self._spark is not None:
            self._spark.stop()


def resolve_geometry(layout: Any, args: Any) -> tuple[int, Any]:
    """``(cq_file_size, IndexGeometry)`` from the options, else from the store's files, else RocketMQ's defaults."""
    from raftmq.pipeline.errors import PipelineError as _E
    from raftmq.pipeline.layout import IndexGeometry, infer_cq_file_size, infer_index_geometry

    cq = args.cq_file_size or infer_cq_file_size(layout) or 300_000 * 20
    if cq % 20:
        cq = -(-cq // 20) * 20  # RocketMQ rounds the configured size up to whole units
    if args.index_slots and args.index_num:
        geo = IndexGeometry(args.index_slots, args.index_num)
    elif args.index_slots or args.index_num:
        raise _E("give both --index-slots and --index-num (or neither, to infer them from the store)")
    else:
        geo = infer_index_geometry(layout)
        if geo is None:
            if layout.index_file_names():
                raise _E("cannot infer the index geometry from the store's index files; "
                         "pass --index-slots and --index-num as configured on the broker")
            geo = IndexGeometry(5_000_000, 20_000_000)
    if geo.hash_slot_num <= 0 or geo.index_num <= 1:
        raise _E(f"index geometry slots={geo.hash_slot_num} num={geo.index_num} is not usable")
    return cq, geo


def delay_levels(args: Any) -> list[int]:
    from raftmq.store.errors import StoreError
    from raftmq.store.message import parse_delay_levels

    try:
        return parse_delay_levels(args.delay_levels)
    except StoreError as e:
        raise PipelineError(str(e)) from None

"""Single entry point for spark-submit: ``spark-submit pipeline/main.py <job> [options]``."""

from __future__ import annotations

import argparse
import sys

from raftmq.pipeline.cli import register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pipeline/main.py", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(["pipeline", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

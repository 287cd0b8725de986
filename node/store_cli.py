"""``raftmq store check|repair DIR``: offline tools for a store directory (``store.repair`` does the work).

Exit codes: 0 nothing damaged (check) / repaired or nothing to do (repair), 1 damage found (check) or repair
refused, 2 bad usage (not a store directory, store in use).
"""

from __future__ import annotations

import argparse
import json
import sys

from raftmq.store.errors import StoreLockedError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("store", help="check or repair a store directory (offline)",
                              description="Offline tools for one node's data directory (the node must be stopped "
                              "for repair).")
    sub = p.add_subparsers(dest="store_command", metavar="{check,repair}")
    sub.required = True
    c = sub.add_parser("check", help="report every damaged commit-log record and derived-file problem",
                       description="Read every commit-log segment (magic, length, body CRC, own offset) and every "
                       "consume-queue unit; print one line per problem and exit 1 if there is any, 0 if none.")
    c.add_argument("dir", metavar="DIR", help="the node's data directory (node.data_dir)")
    c.add_argument("--json", action="store_true", help="one JSON document instead of lines")
    c.add_argument("--segment-size", type=int, default=None, metavar="BYTES",
                   help="commit-log segment size (default: inferred from the files)")
    c.set_defaults(func=run_check)
    r = sub.add_parser("repair", help="quarantine damaged commit-log records and rebuild derived files",
                       description="Copy each damaged commit-log range to DIR/quarantine/<time>/ (with a "
                       "manifest), overwrite it in place with filler records of the same length in topic "
                       "RMQ_SYS_QUARANTINE (every intact record keeps its offset; no offset or msgId is reused), "
                       "then rebuild consume queues and index. Stop the node first.")
    r.add_argument("dir", metavar="DIR")
    r.add_argument("--dry-run", action="store_true", help="print what would be done and change nothing")
    r.add_argument("--segment-size", type=int, default=None, metavar="BYTES")
    r.add_argument("--config", "-c", metavar="FILE", help="the node's YAML configuration: the store settings the "
                   "derived files are rebuilt with; segment sizes and index geometry it does not set are read from "
                   "the files (repair is refused when the index geometry cannot be read: give it then)")
    r.add_argument("--set", dest="assignments", action="append", default=[], metavar="SECTION.KEY=VALUE")
    r.set_defaults(func=run_repair)


def _report_dict(rep) -> dict:
    return {"store": rep.root, "segment_size": rep.segment_size, "records": rep.scan.records,
            "data_end": rep.scan.data_end, "problems": [p.as_dict() for p in rep.problems], "notes": rep.notes}


def run_check(args: argparse.Namespace) -> int:
    from raftmq.store.repair import check_store

    try:
        rep = check_store(args.dir, args.segment_size)
    except (FileNotFoundError, NotADirectoryError) as e:
        print(f"store check: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(_report_dict(rep), indent=2))
    else:
        for p in rep.problems:
            print(p.line())
        for n in rep.notes:
            print(f"note: {n}", file=sys.stderr)
        print(f"{args.dir}: {rep.scan.records} commit-log record(s) read, {len(rep.problems)} problem(s)"
              + (f"; repair with `raftmq store repair {args.dir}` (try --dry-run first)" if rep.problems else ""),
              file=sys.stderr)
    return 1 if rep.problems else 0


def run_repair(args: argparse.Namespace) -> int:
    from raftmq.store.repair import RepairRefused, repair_store

    explicit: dict[str, object] = {}
    if args.config or args.assignments:
        from raftmq.node.config import ConfigError, load_config

        try:
            node_cfg = load_config(args.config, assignments=args.assignments)
        except ConfigError as e:
            for problem in e.problems:
                print(f"config error: {problem}", file=sys.stderr)
            return 2
        explicit = {**node_cfg.store, "store_host": node_cfg.cluster.store_host,
                    "cluster_name": node_cfg.cluster.name}
    try:
        actions, rep, cfg = repair_store(args.dir, dry_run=args.dry_run, segment_size=args.segment_size,
                                         explicit=explicit)
    except (FileNotFoundError, NotADirectoryError) as e:
        print(f"store repair: {e}", file=sys.stderr)
        return 2
    except StoreLockedError as e:
        print(f"store repair: {e} (stop the node first)", file=sys.stderr)
        return 2
    except RepairRefused as e:
        print(f"store repair refused: {e}", file=sys.stderr)
        return 1
    prefix = "would " if args.dry_run else ""
    for a in actions:
        print(prefix + a.line())
    derived = [p for p in rep.problems if p.kind == "consumequeue"]
    if cfg is not None:
        index = (f"index files of {cfg.max_hash_slot_num} slots x {cfg.max_index_num} entries"
                 if cfg.message_index_enable else "no index (message_index_enable false)")
        print(f"{prefix}rebuild consume queues and index from the commit log"
              + (f" ({len(derived)} queue(s) disagree with it)" if derived else "")
              + f": segments of {cfg.mapped_file_size_commit_log} bytes, {index}")
    else:
        print(f"{args.dir}: nothing to repair")
    return 0

"""preStop hook: if this member leads the Raft group, hand leadership to the most caught-up healthy follower.

Why: a leader that simply exits leaves the group leaderless for an election timeout and fails in-flight writes;
a transfer first makes the switch orderly. Runs in the broker container before SIGTERM, uses only the `raftmq`
CLI against the local node, never fails the shutdown (always exits 0) and stays within --timeout seconds.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def log(message):
    print(f"raftmq pre-stop: {message}", file=sys.stderr, flush=True)


def raftmq(args, server, seconds):
    """Run a `raftmq` command against the local node; returns stdout, or None on failure."""
    cmd = ["raftmq", *args, "--server", server, "--timeout", f"{max(seconds, 1.0):.1f}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=max(seconds, 1.0) + 5)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log(f"{' '.join(cmd[:3])} failed: {exc}")
        return None
    if done.returncode != 0:
        log(f"{' '.join(cmd[:3])} exited {done.returncode}: {done.stderr.strip()}")
        return None
    return done.stdout


def status(server, seconds):
    out = raftmq(["cluster", "status", "--json"], server, seconds)
    if out is None:
        return None
    try:
        return json.loads(out)
    except ValueError:
        log(f"cluster status printed no JSON: {out[:200]!r}")
        return None


def best_follower(st, me):
    """The healthy follower with the least lag (ready ones first), or None.

    Readiness of other members is only known when the answering node reports it, so it ranks, not filters.
    """
    candidates = [
        m for m in st.get("members", [])
        if m.get("id") != me and m.get("role") == "follower" and m.get("healthy") and not m.get("error")
    ]
    candidates.sort(key=lambda m: (not m.get("ready"), m.get("lag_bytes", 0), -m.get("applied_index", 0),
                                   m.get("id", "")))
    return candidates[0]["id"] if candidates else None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--server", default="127.0.0.1:8081", help="the local node's gRPC address")
    p.add_argument("--timeout", type=float, default=20.0, help="upper bound for the whole hook, seconds")
    p.add_argument("--id", default=os.environ.get("RAFTMQ_NODE_ID") or os.environ.get("POD_NAME", ""),
                   help="this member's id (default $RAFTMQ_NODE_ID, else $POD_NAME)")
    args = p.parse_args(argv)
    deadline = time.monotonic() + args.timeout

    def left():
        return deadline - time.monotonic()

    st = status(args.server, min(5.0, left()))
    if st is None:
        log("cannot read cluster status; stopping without a transfer")
        return 0
    if st.get("leader_id") != args.id:
        log(f"{args.id} is not the leader (leader: {st.get('leader_id') or 'none'}); nothing to do")
        return 0
    target = best_follower(st, args.id)
    if target is None:
        log("no healthy follower to take over; stopping without a transfer")
        return 0
    log(f"{args.id} leads; transferring leadership to {target}")
    if raftmq(["cluster", "transfer-leader", "--to", target], args.server, min(10.0, left())) is None:
        return 0
    while left() > 0:
        st = status(args.server, min(3.0, left()))
        if st is not None and st.get("leader_id") and st.get("leader_id") != args.id:
            log(f"leader is now {st['leader_id']}")
            return 0
        time.sleep(min(0.5, max(left(), 0)))
    log("leadership did not move within the timeout; stopping anyway")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""preStop hook: if a scale-down removes this pod, take it out of the Raft group first; otherwise, if this member
leads the Raft group, hand leadership to the most caught-up healthy follower.

Why: a leader that simply exits leaves the group leaderless for an election timeout and fails in-flight writes;
a transfer first makes the switch orderly. A pod beyond the StatefulSet's replicas is going for good: removed
before it stops, the group keeps its full fault tolerance instead of counting a dead voter until the leader
removes it (issue 39). Runs in the broker container before SIGTERM, uses the `raftmq` CLI against the local node
(and the node's own Kubernetes glue to read the StatefulSet), never fails the shutdown (always exits 0) and stays
within --timeout seconds.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def log(message):
    print(f"raftmq pre-stop: {message}", file=sys.stderr, flush=True)


def raftmq(args, server, seconds, failed=None):
    """Run a `raftmq` command against the local node; returns stdout, or None on failure (its stderr appended to
    ``failed`` when given)."""
    cmd = ["raftmq", *args, "--server", server, "--timeout", f"{max(seconds, 1.0):.1f}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=max(seconds, 1.0) + 5)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log(f"{' '.join(cmd[:3])} failed: {exc}")
        return None
    if done.returncode != 0:
        log(f"{' '.join(cmd[:3])} exited {done.returncode}: {done.stderr.strip()}")
        if failed is not None:
            failed.append(done.stderr)
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


def scaled_away(member_id):
    """This pod is at or beyond its StatefulSet's replicas (a scale-down deletes it); False when unknown."""
    try:
        from raftmq.node.kube_members import StatefulSetMembers

        members = StatefulSetMembers.from_environment("auto")
        return members is not None and member_id in members.retiring([member_id])
    except Exception as exc:  # noqa: BLE001 - never fail the shutdown over it
        log(f"cannot tell whether a scale-down removes this pod: {exc}")
        return False


def leave_group(args, left):
    """Remove this member (the leader hands leadership away first); retried while another change runs (the other
    pods of the same scale-down remove themselves too)."""
    log(f"{args.id} is beyond the StatefulSet's replicas: removing it from the Raft group")
    while left() > 1.0:
        failed = []
        out = raftmq(["cluster", "remove-member", args.id], args.server, min(15.0, left()), failed)
        if out is not None:
            log(out.strip())
            return
        if failed and "is not a member" in failed[0]:
            return  # the leader removed it already
        time.sleep(min(1.0, max(left() - 1.0, 0)))
    log("not removed within the timeout; the leader removes it once it is gone")


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

    if args.id and scaled_away(args.id):
        leave_group(args, left)
        return 0
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

"""A store writer that is meant to be killed: the subprocess side of the crash tests.

Why a separate process: only a real SIGKILL shows what recovery does with whatever the writer left on disk. The
writer follows a plan that is a pure function of ``(seed, start)``, so the parent can regenerate exactly what
message ``i`` was (topic, queue, body, keys) and check the recovered store against it. After each put *returns*
the writer reports it on stdout with one unbuffered line::

    ack <first_seq> <count> <first_queue_offset> <first_physical_offset> <status>

so a line the parent has read is a put the store acknowledged before the kill.

Run: ``python tests/store/crash_writer.py --root DIR --seed N --start I --config '{"flush_disk_type": "SYNC"}'``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass

TOPICS = ("CrashA", "CrashB")
QUEUES = 3
BORN_HOST = ("10.1.2.3", 40000)
BORN_TIMESTAMP = 1_700_000_000_000


@dataclass(frozen=True)
class PlannedPut:
    """One put call of the plan: ``count`` messages ``first..first+count-1`` to one topic and queue."""

    first: int
    count: int
    topic: str
    queue_id: int
    batched: bool


def body_for(seq: int) -> bytes:
    """Known, checkable content for message ``seq``: its number, then pseudo-random bytes (any byte value)."""
    rnd = random.Random(seq * 7919 + 17)
    return f"seq={seq:09d};".encode() + rnd.randbytes(rnd.randrange(0, 700))


def key_for(seq: int) -> str:
    return f"key-{seq}"


def uniq_key_for(seq: int) -> str:
    return f"C0FFEE{seq:026X}"


def tags_for(seq: int) -> str:
    return ("Aa", "BB", "TagC")[seq % 3]


def plan(seed: int, start: int) -> Iterator[PlannedPut]:
    """The endless sequence of puts from message ``start`` on; a pure function of its arguments."""
    rnd = random.Random(seed * 1_000_003 + start)
    seq = start
    while True:
        batched = rnd.random() < 0.5
        count = rnd.randrange(2, 40) if batched else 1
        yield PlannedPut(seq, count, rnd.choice(TOPICS), rnd.randrange(QUEUES), batched)
        seq += count


def placement(seed: int, start: int, upto: int) -> dict[int, tuple[str, int]]:
    """Topic and queue of every message ``start <= seq < upto`` under the plan."""
    out: dict[int, tuple[str, int]] = {}
    for p in plan(seed, start):
        if p.first >= upto:
            return out
        for s in range(p.first, p.first + p.count):
            out[s] = (p.topic, p.queue_id)
    return out


def make_message(seq: int, topic: str, queue_id: int):
    from raftmq.store import Message

    return Message(
        topic=topic,
        queue_id=queue_id,
        body=body_for(seq),
        properties={"TAGS": tags_for(seq), "KEYS": f"{key_for(seq)} all", "UNIQ_KEY": uniq_key_for(seq)},
        born_timestamp=BORN_TIMESTAMP + seq,
        born_host=BORN_HOST,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write messages until killed")
    ap.add_argument("--root", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--limit", type=int, default=1_000_000, help="stop after this many messages (safety net)")
    ap.add_argument("--config", default="{}", help="StoreConfig keyword arguments as JSON")
    args = ap.parse_args(argv)

    from raftmq.store import MessageStore, StoreConfig

    st = MessageStore(StoreConfig(root_dir=args.root, **json.loads(args.config)))
    st.open()
    out = sys.stdout.fileno()
    os.write(out, b"ready\n")
    for p in plan(args.seed, args.start):
        if p.first >= args.start + args.limit:
            break
        msgs = [make_message(s, p.topic, p.queue_id) for s in range(p.first, p.first + p.count)]
        results = st.put_messages(msgs) if p.batched else [st.put_message(msgs[0])]
        statuses = {r.status.name for r in results}
        status = statuses.pop() if len(statuses) == 1 else "MIXED"
        os.write(out, f"ack {p.first} {p.count} {results[0].queue_offset} {results[0].physical_offset} "
                      f"{status}\n".encode())
    st.shutdown()
    os.write(out, b"done\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

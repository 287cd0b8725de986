"""Issue 40 with the official RocketMQ 5 Python Producer: it re-sends a failed send by itself with the same
message_id (its UNIQ_KEY); with the leader SIGKILLed or SIGSTOPped mid-stream, every message it saw acknowledged is
stored once and no message_id is stored twice in the whole topic (docs/design/deduplication.md)."""

from __future__ import annotations

import collections
import time

import pytest

from tests.rocketmq5.raftmq_side import create_topic, leader_of, read_all, read_keys
from tests.support.processes import running_nodes

pytestmark = [pytest.mark.slow, pytest.mark.rocketmq5]


@pytest.mark.parametrize("fault", ["sigkill", "sigstop"])
def test_the_clients_own_retries_store_nothing_twice(tmp_path, run_driver, fault):
    with running_nodes(tmp_path, 3) as nodes:
        leader = leader_of(nodes)
        create_topic(leader, "once")
        d = run_driver("producer.py", {"endpoints": ";".join(n.grpc_address for n in nodes), "topics": ["once"],
                                       "steps": [{"op": "stream", "topic": "once", "count": 300, "prefix": "s"}],
                                       "request_timeout": 3})
        d.until("started", timeout=60)
        acked = []
        while len(acked) < 40:
            line = d.until("stream", timeout=60)
            if line["ok"]:
                acked.append(line)
        if fault == "sigkill":
            leader.kill()
        else:
            leader.freeze()
            time.sleep(6.0)  # past the election timeout: a new leader takes over meanwhile
            leader.thaw()
        rest = d.all(timeout=300)
        acked += [x for x in rest if x["op"] == "stream" and x["ok"]]
        failed = [x for x in rest if x["op"] == "stream" and not x["ok"]]
        print(f"{fault}: acknowledged {len(acked)}, failed {len(failed)} (e.g. {failed[:1]})")
        live = [n for n in nodes if n.alive]
        new_leader = leader_of(live)
        read_keys(new_leader, "once", [x["message_id"] for x in acked], timeout=60)
        for n in live:
            stored = collections.Counter(m.uniq_key for m in read_all(n, "once"))
            twice = [k for k, c in stored.items() if c > 1]
            assert not twice, f"{n.spec.id}: stored twice: {twice[:5]}"
            assert all(stored[x["message_id"]] == 1 for x in acked)

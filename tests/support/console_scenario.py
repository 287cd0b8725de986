"""A small, realistic cluster state for the web console's browser test and its screenshots.

Two topics (one with a consumer group that is live and part-way through), a dead-letter topic for the group,
and bodies chosen to break a careless renderer: HTML/script, terminal escape sequences, a bidi override, a
binary body and one larger than the console shows inline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from raftmq.client import Admin, Producer, PullConsumer
from raftmq.client.security import ClientSecurity
from raftmq.client.types import SendResult

TOPIC = "orders"
OTHER_TOPIC = "payments"
GROUP = "billing"
DLQ_TOPIC = "%DLQ%" + GROUP
HOSTILE_TEXT = ("<script>document.title='pwned'</script><b>bold?</b> & \x1b[2K\r\x1b[31mFAKE: all replicas "
                "identical\x1b[0m \u202eevil\u202c")
BINARY_BODY = bytes(range(256)) * 2
LARGE_BODY = ("line of text %05d\n" * 3000 % tuple(range(3000))).encode()  # 54 000 bytes > the 16 KiB shown


@dataclass
class Scenario:
    hostile: SendResult
    binary: SendResult
    large: SendResult
    keyed: list[SendResult] = field(default_factory=list)
    consumer: PullConsumer | None = None

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()


def populate(servers: list[str], *, keyed: int = 30, security: ClientSecurity | None = None) -> Scenario:
    """Create the topics, send the messages, consume part of them with a live group member; returns what was
    sent (the consumer keeps heartbeating until ``Scenario.close``). ``security``: a user allowed all of it."""
    with Admin(servers, security=security) as admin:
        admin.create_topic(TOPIC, queues=4)
        admin.create_topic(OTHER_TOPIC, queues=2)
        admin.create_topic(DLQ_TOPIC, queues=1)
    with Producer(servers, security=security) as p:
        hostile = p.send(TOPIC, HOSTILE_TEXT.encode(), tags="<img src=x onerror=alert(1)>",
                         keys=["hostile-key"], properties={"note": "<i>not italic</i>"}, queue_id=0)
        binary = p.send(TOPIC, BINARY_BODY, keys=["binary-key"], queue_id=1)
        large = p.send(TOPIC, LARGE_BODY, keys=["large-key"], queue_id=2)
        sent = [p.send(TOPIC, f"order #{i}: 3 x widget", keys=[f"order-{i}", "batch-a"], tags="created")
                for i in range(keyed)]
        for i in range(5):
            p.send(OTHER_TOPIC, f"payment {i}", keys=[f"pay-{i}"])
        p.send(DLQ_TOPIC, "poison order that failed 16 times", keys=["order-poison"])
        p.send(DLQ_TOPIC, "another poison order", keys=["order-poison-2"])
    consumer = PullConsumer(GROUP, TOPIC, servers, start_from="first", auto_commit=False,
                            heartbeat_interval=5.0, client_id="billing-worker-1", security=security)
    consumer.start()
    got = 0
    deadline = time.monotonic() + 60
    while got < 10 and time.monotonic() < deadline:
        got += len(consumer.poll(timeout=1.0))
    consumer.commit()
    return Scenario(hostile, binary, large, sent, consumer)

"""Driver: the official RocketMQ 5 Python SimpleConsumer / PushConsumer, run by tests/rocketmq5 in the client's venv.

    python consumer.py '<plan as JSON>'

The plan: {"endpoints", "group", "topic", "filter": {"type": "TAG"|"SQL", "expression"}?, "await_s"?, "ak"?, "sk"?,
"tls"?, "mode": "simple"|"push", ...}. Every event prints one JSON line (stdout, flushed), so the test asserts on
what the client itself saw.

simple: "steps": [...], each printing one line:
  {"op": "receive", "max", "invisible"}        the messages received (they are remembered by body)
  {"op": "ack", "body", "handle": "latest"|"first"}  ack the remembered message with that body
  {"op": "change", "body", "invisible"}        change its invisible duration (the client keeps the new handle)
  {"op": "drain", "count", "max"?, "invisible"?, "timeout"?}  receive and ack until count distinct bodies acked;
                                                  one "got" line per message, then a summary
push: {"fail": [bodies answered FAILURE every time], "stop_file": path, "timeout": s}: one "consume" line per
  listener call; runs until stop_file exists (then shuts down cleanly) or the timeout.
This file must not import raftmq (the client brings its own apache.rocketmq.v2 stubs).
"""

import json
import os
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import FilterType

_out = threading.Lock()


def emit(**fields):
    line = json.dumps(fields) + "\n"
    with _out:  # the PushConsumer's listener runs on several threads: whole lines only
        sys.stdout.write(line)
        sys.stdout.flush()


def describe(m):
    return {"body": m.body.decode(errors="replace"), "message_id": m.message_id, "topic": m.topic, "tag": m.tag,
            "keys": list(m.keys or []), "props": dict(m.properties or {}), "attempt": m.delivery_attempt,
            "group": m.message_group, "delivery_ts": m.delivery_timestamp, "born_ts": m.born_timestamp,
            "corrupted": bool(getattr(m, "corrupted", False))}


def failure(e):
    return {"ok": False, "error": type(e).__name__, "message": str(e)[:500]}


def simple(plan, config, subscription):
    consumer = SimpleConsumer(config, plan["group"], subscription, await_duration=plan.get("await_s", 3),
                              tls_enable=plan.get("tls", False))
    consumer.startup()
    held = {}  # body -> the message as last received
    handles = {}  # body -> every receipt handle it had, first first
    try:
        for step in plan["steps"]:
            op = step["op"]
            try:
                if op == "receive":
                    msgs = consumer.receive(step.get("max", 16), step.get("invisible", 15))
                    for m in msgs:
                        body = m.body.decode(errors="replace")
                        held[body] = m
                        handles.setdefault(body, []).append(m.receipt_handle)
                    emit(op=op, ok=True, messages=[describe(m) for m in msgs])
                elif op == "ack":
                    m = held[step["body"]]
                    m.receipt_handle = handles[step["body"]][0 if step.get("handle") == "first" else -1]
                    consumer.ack(m)
                    emit(op=op, ok=True, body=step["body"])
                elif op == "change":
                    m = held[step["body"]]
                    old = m.receipt_handle
                    consumer.change_invisible_duration(m, step["invisible"])
                    handles[step["body"]].append(m.receipt_handle)
                    emit(op=op, ok=True, body=step["body"], new_handle=m.receipt_handle != old)
                elif op == "drain":
                    deadline = time.monotonic() + step.get("timeout", 60)
                    acked = set()
                    while len(acked) < step["count"] and time.monotonic() < deadline:
                        try:
                            msgs = consumer.receive(step.get("max", 16), step.get("invisible", 15))
                        except Exception as e:  # noqa: BLE001 - a failover: the client retries; so do we
                            emit(op="receive_error", **failure(e))
                            time.sleep(0.5)
                            continue
                        for m in msgs:
                            emit(op="got", **describe(m))
                            try:
                                consumer.ack(m)
                                acked.add(m.body.decode(errors="replace"))
                            except Exception as e:  # noqa: BLE001 - stale after a failover: it comes back
                                emit(op="ack_error", body=m.body.decode(errors="replace"), **failure(e))
                    emit(op="drained", ok=len(acked) >= step["count"], acked=len(acked))
                else:
                    raise ValueError(f"unknown step {op}")
            except Exception as e:  # noqa: BLE001 - report what the client raised
                emit(op=op, **failure(e))
    finally:
        consumer.shutdown()


class Listener:
    def __init__(self, fail):
        self.fail = set(fail)

    def consume(self, message):
        d = describe(message)
        result = ConsumeResult.FAILURE if d["body"] in self.fail else ConsumeResult.SUCCESS
        emit(op="consume", result=result.name, **d)
        return result


def push(plan, config, subscription):
    consumer = PushConsumer(config, plan["group"], Listener(plan.get("fail", [])), subscription,
                            tls_enable=plan.get("tls", False))
    consumer.startup()
    emit(op="started", ok=True)
    deadline = time.monotonic() + plan.get("timeout", 120)
    try:
        while not os.path.exists(plan["stop_file"]) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        consumer.shutdown()
    emit(op="stopped", ok=True)


def main():
    plan = json.loads(sys.argv[1])
    credentials = Credentials(plan.get("ak", ""), plan.get("sk", ""))
    config = ClientConfiguration(plan["endpoints"], credentials)
    f = plan.get("filter") or {}
    kind = FilterType.SQL if f.get("type") == "SQL" else FilterType.TAG
    subscription = {plan["topic"]: FilterExpression(f.get("expression", "*"), kind)}
    (simple if plan["mode"] == "simple" else push)(plan, config, subscription)


if __name__ == "__main__":
    main()

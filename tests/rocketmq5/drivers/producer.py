"""Driver: the official RocketMQ 5 Python Producer, run by tests/rocketmq5 in the client's own venv.

    python producer.py '<plan as JSON>'

The plan: {"endpoints": "h:p;h:p", "topics": [...], "checker": "commit"|"rollback"|{body: answer}|null,
"ak": "", "sk": "", "steps": [...]}. Each step prints one JSON line (stdout, flushed) with what happened, so the
test asserts on the client's own view: its receipts, its exceptions, its checker calls. Steps:
  {"op": "send", "topic", "body", "tag"?, "keys"?, "props"?, "group"?, "delay_s"?, "body_size"?, "async"?}
  {"op": "tx", "topic", "body", "end": "commit" | "rollback" | "none"}
  {"op": "wait_checks", "body", "timeout"}  wait until the checker has been asked about the message with body
  {"op": "stream", "topic", "count", "prefix"}  send count messages one by one; one line per outcome
  {"op": "bench", "topic", "size", "threads", "seconds"}   sync sends from threads: counts, p50/p99
  {"op": "sleep", "seconds"}
This file must not import raftmq (the client brings its own apache.rocketmq.v2 stubs: a second copy in the same
process would clash in protobuf's descriptor pool).
"""

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)

checks = []
checks_lock = threading.Condition()


_out = threading.Lock()


def emit(**fields):
    line = json.dumps(fields) + "\n"
    with _out:  # sends and checks run on several threads: whole lines only
        sys.stdout.write(line)
        sys.stdout.flush()


class Checker(TransactionChecker):
    def __init__(self, answer):
        self.answer = answer

    def check(self, message):
        body = message.body.decode()
        emit(op="check", message_id=message.message_id, topic=message.topic, body=body,
             properties=dict(message.properties or {}))
        with checks_lock:
            checks.append(body)
            checks_lock.notify_all()
        answer = self.answer.get(body, "unknown") if isinstance(self.answer, dict) else self.answer
        return {"commit": TransactionResolution.COMMIT, "rollback": TransactionResolution.ROLLBACK}.get(
            answer, TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)


def message_of(step):
    m = Message()
    m.topic = step["topic"]
    body = step.get("body", "")
    if "body_size" in step:
        body = "x" * step["body_size"]
    m.body = body.encode()
    if step.get("tag"):
        m.tag = step["tag"]
    if step.get("keys"):
        Message.keys.fset(m, *step["keys"])  # the setter takes several keys; plain assignment passes one
    for k, v in (step.get("props") or {}).items():
        m.add_property(k, v)
    if step.get("group"):
        m.message_group = step["group"]
    if "delay_s" in step:
        m.delivery_timestamp = int(time.time()) + step["delay_s"]
    return m


def failure(e):
    return {"ok": False, "error": type(e).__name__, "message": str(e)[:500]}


def send(producer, step):
    try:
        m = message_of(step)
        r = producer.send_async(m).result(timeout=30) if step.get("async") else producer.send(m)
        return {"ok": True, "message_id": r.message_id, "offset": r.offset, "queue": r.message_queue.message_queue0().id}
    except Exception as e:  # the client's own exception is what the test looks at
        return failure(e)


def bench(producer, step):
    body = b"x" * step["size"]
    stop_at = time.monotonic() + step["seconds"]
    latencies, errors = [], []

    def worker():
        mine = []
        while time.monotonic() < stop_at:
            m = Message()
            m.topic, m.body = step["topic"], body
            t0 = time.perf_counter()
            try:
                producer.send(m)
                mine.append(time.perf_counter() - t0)
            except Exception as e:
                errors.append(str(e)[:200])
        latencies.extend(mine)

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(step["threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    latencies.sort()
    pick = (lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000) if latencies else None
    return {"sent": len(latencies), "errors": len(errors), "first_error": errors[:1], "seconds": elapsed,
            "p50_ms": pick(0.5) if pick else None, "p99_ms": pick(0.99) if pick else None}


def main():
    plan = json.loads(sys.argv[1])
    config = ClientConfiguration(plan["endpoints"], Credentials(plan.get("ak", ""), plan.get("sk", "")),
                                 request_timeout=plan.get("request_timeout", 3))
    checker = Checker(plan["checker"]) if plan.get("checker") else None
    producer = Producer(config, tuple(plan["topics"]), checker=checker, tls_enable=bool(plan.get("tls")))
    producer.startup()
    emit(op="started")
    try:
        for step in plan["steps"]:
            op = step["op"]
            if op == "send":
                emit(op="send", **send(producer, step))
            elif op == "tx":
                try:
                    tx = producer.begin_transaction()
                    r = producer.send(message_of(step), tx)
                    if step["end"] == "commit":
                        tx.commit()
                    elif step["end"] == "rollback":
                        tx.rollback()
                    emit(op="tx", ok=True, message_id=r.message_id, transaction_id=r.transaction_id)
                except Exception as e:
                    emit(op="tx", **failure(e))
            elif op == "wait_checks":
                want = step.get("body")
                with checks_lock:
                    ok = checks_lock.wait_for(lambda b=want: b in checks, step.get("timeout", 60))
                emit(op="wait_checks", ok=ok, checks=len(checks))
            elif op == "stream":
                for i in range(step["count"]):
                    body = f"{step['prefix']}-{i}"
                    emit(op="stream", body=body, **send(producer, {"topic": step["topic"], "body": body}))
            elif op == "bench":  # threads x sync sends of size bytes for seconds: throughput and latency
                emit(op="bench", **bench(producer, step))
            elif op == "sleep":
                time.sleep(step["seconds"])
    finally:
        producer.shutdown()
        emit(op="stopped")


if __name__ == "__main__":
    main()

"""The official RocketMQ 5 Java client (rocketmq-client-java 5.0.8 from Maven Central) against real raftmq nodes.

The driver (tests/rocketmq5/java, built once per source hash by its build.sh into ~/.cache/raftmq/) runs the
client's own Producer, SimpleConsumer and PushConsumer; what it sends is read back through raftmq's own API, and
what raftmq's SDK sends is received by it. In CI a missing JDK/Maven is an error; elsewhere these tests skip.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import threading
from pathlib import Path
from queue import Empty, Queue

import grpc
import pytest

from raftmq.client import Producer
from tests.rocketmq5.raftmq_side import create_topic, leader_of, read_all, read_keys
from tests.support.certs import CertificateAuthority
from tests.support.processes import NodeProcess, node_specs, running_nodes, stop_all
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.rocketmq5]

BUILD = Path(__file__).resolve().parent / "java" / "build.sh"


@pytest.fixture(scope="session")
def java_classpath() -> str:
    if not (shutil.which("java") and shutil.which("mvn")):
        if os.environ.get("CI"):
            raise RuntimeError("the RocketMQ 5 Java client tests need a JDK 17 and Maven on the CI machine")
        pytest.skip("no JDK/Maven here: the Java client tests need both")
    built = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=900)
    if built.returncode != 0:
        raise RuntimeError(f"building the Java client driver failed:\n{built.stderr[-3000:]}")
    return built.stdout.strip().splitlines()[-1]


class JavaDriver:
    """One driver JVM; its JSON lines arrive on a queue."""

    def __init__(self, classpath: str, command: str, **args):
        argv = ["java", "-cp", classpath, "io.raftmq.rmq5.Driver", command,
                *(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in args.items())]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: Queue = Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            try:
                self.lines.put(json.loads(raw))
            except ValueError:
                pass
        self.lines.put(None)

    def next(self, timeout: float = 120.0) -> dict | None:
        try:
            return self.lines.get(timeout=timeout)
        except Empty:
            raise AssertionError(f"the Java driver printed nothing for {timeout}s:\n{''.join(self.stderr)[-3000:]}") \
                from None

    def all(self, timeout: float = 180.0) -> list[dict]:
        out = []
        while (line := self.next(timeout)) is not None:
            out.append(line)
        code = self.proc.wait(30)
        assert code == 0 and out and out[-1] == {"op": "done"}, (code, out[-5:], "".join(self.stderr)[-3000:])
        return out[:-1]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def java(java_classpath):
    started: list[JavaDriver] = []

    def run(command: str, **args) -> JavaDriver:
        d = JavaDriver(java_classpath, command, **args)
        started.append(d)
        return d

    yield run
    for d in started:
        d.close()


def _endpoints(nodes) -> str:
    return ";".join(n.grpc_address for n in nodes)


def test_java_producer_kinds_are_stored_and_the_simple_consumer_reads_both_apis(shared_node, java):
    nodes = [shared_node]
    e = _endpoints(nodes)
    create_topic(nodes[0], "jt", message_type="MIXED")  # every kind of send
    sent: dict[str, dict] = {}
    for kind, extra in [("normal", {"tag": "A", "count": 3}), ("fifo", {"group": "order-1", "count": 3}),
                        ("delay", {"delay_s": 3}), ("tx-commit", {}), ("tx-rollback", {})]:
        lines = java("produce", endpoints=e, topic="jt", kind=kind, prefix=kind + "-", **extra).all()
        assert lines and all(x["ok"] for x in lines), lines
        sent.update({x["body"]: x for x in lines})
    visible = [b for b in sent if b != "tx-rollback-0"]
    stored = read_keys(nodes[0], "jt", [sent[b]["message_id"] for b in visible], timeout=60)
    by_body = {m.body.decode(): m for m in stored.values()}
    assert by_body["normal-0"].tags == "A" and list(by_body["normal-0"].keys) == ["key-normal-0"]
    assert by_body["normal-0"].properties["n"] == "0"
    assert len({by_body[f"fifo-{i}"].queue_id for i in range(3)}) == 1  # one message group, one queue
    delayed = by_body["delay-0"]
    assert delayed.store_timestamp >= int(delayed.properties["TIMER_DELIVER_MS"])  # held until its time
    assert sent["tx-rollback-0"]["message_id"] not in {m.uniq_key for m in read_all(nodes[0], "jt")}
    with Producer(e.split(";")) as p:  # raftmq's own SDK: the Java consumer reads it too
        p.send("jt", "from-raftmq", tags="B", properties={"origin": "sdk"})
    got = java("simple", endpoints=e, topic="jt", group="java-g", count=len(visible) + 1).all()
    assert got[-1]["op"] == "drained" and got[-1]["ok"] and got[-1]["acked"] == len(visible) + 1, got[-3:]
    received = {x["body"]: x for x in got if x["op"] == "got"}
    assert set(received) == set(visible) | {"from-raftmq"}
    assert received["from-raftmq"]["props"] == {"origin": "sdk"} and received["from-raftmq"]["tag"] == "B"
    assert received["fifo-0"]["group"] == "order-1" and received["delay-0"]["delivery_ts"] > 0


def test_java_orphan_transaction_is_checked_and_redelivery_counts_attempts(tmp_path, java):
    store = {"transaction_timeout_ms": 1000, "transaction_check_interval_ms": 300}
    with running_nodes(tmp_path, store=store) as nodes:
        e = _endpoints(nodes)
        create_topic(nodes[0], "orph", message_type="TRANSACTION")
        lines = java("produce", endpoints=e, topic="orph", kind="tx-orphan", prefix="o-", wait_s=8).all()
        send = next(x for x in lines if x["op"] == "send")
        assert any(x["op"] == "check" and x["body"] == "o-0" for x in lines), lines  # asked over Telemetry
        read_keys(nodes[0], "orph", [send["message_id"]], timeout=30)  # its checker said COMMIT
        got = java("simple", endpoints=e, topic="orph", group="g-re", count=1, change="o-0").all()
        attempts = [x["attempt"] for x in got if x["op"] == "got"]
        assert attempts == [1, 2], got  # changed to 2 s instead of acked: delivered again, attempt + 1


def test_java_push_consumer_retries_then_dead_letters(tmp_path, java):
    policies = {"java-push": {"max_delivery_attempts": 3, "retry_backoff": "1s 1s"}}
    with running_nodes(tmp_path, node={"group_policies": policies}) as nodes:
        e = _endpoints(nodes)
        create_topic(nodes[0], "pj")
        with Producer(e.split(";")) as p:
            for body in ("ok-1", "ok-2", "poison"):
                p.send("pj", body)
        lines = java("push", endpoints=e, topic="pj", group="java-push", fail="poison", expect=2,
                     fail_times=3).all()
        assert lines[-1] == {"op": "stopped", "ok": True}, lines[-3:]
        assert [x["attempt"] for x in lines if x.get("body") == "poison"] == [1, 2, 3]

        def dead():
            try:
                return read_all(nodes[0], "%DLQ%java-push")
            except grpc.RpcError:  # created with the first dead letter
                return []

        assert [m.body for m in wait_for(dead, "the poison message in the DLQ", timeout=60)] == [b"poison"]


def test_java_client_over_tls_and_a_plaintext_client_refused(tmp_path, java):
    ca = CertificateAuthority(tmp_path)
    server = ca.issue("node")
    [spec] = node_specs(tmp_path, 1, security={"tls_cert_file": str(server.cert), "tls_key_file": str(server.key)})
    node = NodeProcess(spec)
    node.http_context = ssl.create_default_context(cafile=str(ca.cert_file))
    try:
        node.start(env={"GRPC_VERBOSITY": "INFO"}).wait_ready(90)  # gRPC's own lines are off by default
        e = node.grpc_address
        create_topic_tls(node, ca, "secure")
        # the Java client's default (enableSsl true); it does not check the server's certificate chain
        lines = java("produce", endpoints=e, topic="secure", tls=True, count=2, prefix="s-").all()
        assert all(x["ok"] for x in lines), lines
        got = java("simple", endpoints=e, topic="secure", group="tls-g", count=2, tls=True).all()
        assert got[-1]["ok"], got
        plain = java("produce", endpoints=e, topic="secure", tls=False, count=1, prefix="p-",
                     request_timeout_s=3).all()
        # a plaintext client cannot talk to a TLS port: its start fails (no route), naming the transport
        assert plain[0]["op"] == "start" and plain[0]["ok"] is False, plain
        assert "UNAVAILABLE" in plain[0]["error"], plain
        # with GRPC_VERBOSITY=INFO the node's log names it: gRPC's "Handshake failed ... WRONG_VERSION_NUMBER"
        wait_for(lambda: "WRONG_VERSION_NUMBER" in node.log_tail(200), "the handshake failure in the node log",
                 timeout=30)
    finally:
        stop_all([node])


def create_topic_tls(node, ca, name: str) -> None:
    from raftmq.v1 import raftmq_pb2 as pb
    from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

    channel = grpc.secure_channel(node.grpc_address, grpc.ssl_channel_credentials(ca.cert_file.read_bytes()))
    pb_grpc.AdminServiceStub(channel).CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(
        name=name, read_queue_nums=4, write_queue_nums=4)), timeout=30)
    channel.close()


def test_java_sends_through_a_leader_sigkill_lose_nothing_acknowledged(tmp_path, java):
    with running_nodes(tmp_path, 3) as nodes:
        leader = leader_of(nodes)
        create_topic(leader, "ha")
        d = java("produce", endpoints=_endpoints(nodes), topic="ha", count=150, prefix="h-")
        seen = []
        wait_for(lambda: seen.append(d.next()) or len(seen) >= 30, "30 sends before the kill", timeout=120)
        leader.kill()
        lines = seen + d.all(timeout=240)
        acked = [x for x in lines if x["op"] == "send" and x["ok"]]
        assert len(acked) > 30 + len([x for x in lines if x["op"] == "send" and not x["ok"]])  # it went on
        survivor = next(n for n in nodes if n is not leader)
        read_keys(survivor, "ha", [x["message_id"] for x in acked], timeout=60)  # every acknowledged send

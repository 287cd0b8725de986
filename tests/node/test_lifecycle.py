"""Restart, SIGTERM (idle, under load, with a parked long poll), and a node that is not ready yet."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request

import grpc
import pytest

from raftmq.node.config import load_config
from raftmq.node.server import Broker
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.node.conftest import Api
from tests.support.processes import NodeProcess, free_ports, node_specs, running_nodes


def test_restart_keeps_everything_and_sigterm_is_clean(tmp_path):
    with running_nodes(tmp_path, 1) as [node]:
        api = Api(node)
        topic = api.topic("keep", queues=2)
        sent = [api.send(topic, f"m{i}".encode() * 100, queue_id=i % 2, keys=[f"key{i}"], tags="T")
                for i in range(300)]  # ~ 100 KiB per queue: several 256 KiB commit-log files in all
        api.msg.CommitOffset(pb.CommitOffsetRequest(group="g", topic=topic, offsets={0: 7, 1: 9}), timeout=10)
        data_dir = node.spec.data_dir
        assert (data_dir / "abort").exists()  # a running store has its abort file

        assert node.stop() == 0  # SIGTERM: clean exit
        assert not (data_dir / "abort").exists()
        assert "stopped" in node.log_tail()

        node.start().wait_ready()
        api = Api(node)
        assert topic in {t.name for t in api.admin.ListTopics(pb.ListTopicsRequest(), timeout=10).topics}
        offsets = api.msg.GetQueueOffsets(pb.GetQueueOffsetsRequest(topic=topic), timeout=10).queues
        assert [(q.min_offset, q.max_offset) for q in offsets] == [(0, 150), (0, 150)]
        for qid in (0, 1):
            bodies, offset = [], 0
            while offset < 150:
                r = api.pull(topic, qid, offset, max_count=32)
                assert r.status == pb.FOUND
                bodies += [m.body for m in r.messages]
                offset = r.next_offset
            assert bodies == [f"m{i}".encode() * 100 for i in range(qid, 300, 2)]
        assert dict(api.msg.FetchOffset(pb.FetchOffsetRequest(group="g", topic=topic), timeout=10).offsets) == \
            {0: 7, 1: 9}
        found = api.msg.QueryMessageByKey(pb.QueryMessageByKeyRequest(topic=topic, key="key123"), timeout=10)
        assert [m.msg_id for m in found.messages] == [sent[123].msg_id]
        view = api.msg.ViewMessage(pb.ViewMessageRequest(msg_id=sent[299].msg_id), timeout=10).message
        assert view.body == b"m299" * 100
        # the store keeps writing after the restart where it left off
        r = api.send(topic, b"after restart", queue_id=0)
        assert r.queue_offset == 150 and r.physical_offset > sent[-1].physical_offset


def test_sigterm_under_load_loses_no_acknowledged_message(tmp_path):
    with running_nodes(tmp_path, 1) as [node]:
        topic = Api(node).topic("load")
        acked: list[tuple[str, bytes]] = []
        failures: list[grpc.StatusCode] = []
        stop = threading.Event()

        def producer(i: int) -> None:
            with grpc.insecure_channel(node.grpc_address) as ch:
                stub = pb_grpc.MessagingServiceStub(ch)
                n = 0
                while not stop.is_set():
                    body = f"p{i}-{n}".encode()
                    try:
                        r = stub.SendMessage(pb.SendMessageRequest(message=pb.Message(topic=topic, body=body)),
                                             timeout=10)
                    except grpc.RpcError as e:
                        failures.append(e.code())
                        return
                    acked.append((r.result.msg_id, body))
                    n += 1

        threads = [threading.Thread(target=producer, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        while len(acked) < 200:
            time.sleep(0.05)
        assert node.stop() == 0
        stop.set()
        for t in threads:
            t.join(30)
        # After SIGTERM a request is refused (UNAVAILABLE), never half-done.
        assert set(failures) <= {grpc.StatusCode.UNAVAILABLE}, failures

        node.start().wait_ready()
        stub = pb_grpc.MessagingServiceStub(node.channel())
        for msg_id, body in acked:
            assert stub.ViewMessage(pb.ViewMessageRequest(msg_id=msg_id), timeout=10).message.body == body


def test_sigterm_while_a_long_poll_is_parked(tmp_path):
    with running_nodes(tmp_path, 1) as [node]:
        api = Api(node)
        topic = api.topic("park")
        outcome: dict = {}

        def park():
            try:
                outcome["resp"] = api.pull(topic, 0, 0, long_poll_timeout_ms=60_000)
            except grpc.RpcError as e:
                outcome["code"] = e.code()

        t = threading.Thread(target=park)
        t.start()
        time.sleep(0.5)
        assert node.stop() == 0
        t.join(30)
        assert not t.is_alive()
        # The parked pull was answered (NO_NEW_MSG) during the drain, not cut off.
        assert outcome.get("resp") is not None and outcome["resp"].status == pb.NO_NEW_MSG, outcome
        assert not (node.spec.data_dir / "abort").exists()


def _config(tmp_path):
    grpc_port, http_port = free_ports(2)
    return load_config(None, environ={}, assignments=[
        f"node.data_dir={tmp_path / 'store'}", f"node.grpc_listen=127.0.0.1:{grpc_port}",
        f"node.http_listen=127.0.0.1:{http_port}", "kubernetes.role_label=false",
        "store.mapped_file_size_commit_log=262144", "store.max_hash_slot_num=1024", "store.max_index_num=4096",
        "store.preallocate=false",
    ]), grpc_port, http_port


def test_not_ready_node_answers_unavailable(tmp_path):
    cfg, grpc_port, http_port = _config(tmp_path)

    async def main():
        broker = Broker(cfg)
        await broker.start_endpoints()  # listening, store not opened yet
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
                stub = pb_grpc.MessagingServiceStub(ch)
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    await stub.SendMessage(pb.SendMessageRequest(message=pb.Message(topic="T", body=b"x")),
                                           timeout=10)
                assert e.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "not ready" in e.value.details()
                with pytest.raises(urllib.error.HTTPError) as h:
                    await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{http_port}/ready", None, 5)
                assert h.value.code == 503
                await broker.open()
                admin = pb_grpc.AdminServiceStub(ch)
                await admin.CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(name="T")), timeout=10)
                r = await stub.SendMessage(pb.SendMessageRequest(message=pb.Message(topic="T", body=b"x")),
                                           timeout=10)
                assert r.result.queue_offset == 0
        finally:
            await broker.stop()

    asyncio.run(main())


def test_start_failures_exit_1_with_the_reason(tmp_path):
    import socket

    with running_nodes(tmp_path / "a", 1) as [node]:
        # Same data directory as a running node: the store lock says who holds it.
        spec = node_specs(tmp_path / "b", 1)[0]
        spec.data_dir = node.spec.data_dir
        other = NodeProcess(spec).start()
        assert other.proc.wait(60) == 1
        assert "is in use by another process" in other.log_tail()
        other.kill()
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        spec = node_specs(tmp_path / "c", 1)[0]
        spec.http_port = held.getsockname()[1]
        proc = NodeProcess(spec).start()
        assert proc.proc.wait(60) == 1
        assert f"cannot listen for HTTP on 127.0.0.1:{spec.http_port}" in proc.log_tail()
        proc.kill()


def test_auto_create_topics(tmp_path):
    cfg, grpc_port, _ = _config(tmp_path)
    cfg.node.auto_create_topics = True

    async def main():
        broker = Broker(cfg)
        await broker.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
                stub = pb_grpc.MessagingServiceStub(ch)
                r = await stub.SendMessage(pb.SendMessageRequest(message=pb.Message(topic="fresh", body=b"x")),
                                           timeout=10)
                assert r.result.topic == "fresh"
                topics = await pb_grpc.AdminServiceStub(ch).ListTopics(pb.ListTopicsRequest(), timeout=10)
                [fresh] = [t for t in topics.topics if t.name == "fresh"]
                assert (fresh.read_queue_nums, fresh.write_queue_nums, fresh.perm) == (4, 4, 6)
                with pytest.raises(grpc.aio.AioRpcError) as e:  # never a system topic
                    await stub.SendMessage(pb.SendMessageRequest(
                        message=pb.Message(topic="SCHEDULE_TOPIC_XXXX", body=b"x")), timeout=10)
                assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        finally:
            await broker.stop()

    asyncio.run(main())

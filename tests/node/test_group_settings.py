"""Issue 34: consumer-group settings (FIFO, maximum delivery attempts, retry back-off) are replicated group
settings changed at runtime (`raftmq group update`, as Apache's updateSubGroup), not node configuration that
needs a restart of every member. The node configuration stays the default of a group without settings."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from raftmq.client import Admin, ConsumeResult, Producer, PullConsumer, PushConsumer
from raftmq.client.consumer_group import describe_consumer_group, update_consumer_group
from raftmq.client.errors import InvalidArgumentError
from tests.support.processes import REPO_ROOT, node_specs, start_nodes, stop_all
from tests.support.waiting import wait_for


def _cli(node, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftmq.client", *args, "--server", node.grpc_address],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)


def _stored(node, group: str) -> dict | None:
    path = node.spec.data_dir / "config" / "subscriptionGroup.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())["subscriptionGroupTable"].get(group)


def _dead_letters(addresses: list[str], group: str) -> list[str]:
    """Bodies in the group's dead-letter topic (none while it does not exist)."""
    with Admin(addresses) as admin:
        if not any(t.name == "%DLQ%" + group for t in admin.list_topics(include_system=True)):
            return []
    with PullConsumer("dlq-reader", "%DLQ%" + group, addresses, start_from="first", auto_commit=False) as c:
        return [m.text for m in c.poll(1.0)]


def _poison_attempts(addresses: list[str], topic: str, group: str, body: str) -> list[int]:
    """Deliveries of a message whose handler always fails, until it is dead-lettered."""
    attempts: list[int] = []

    def listener(m):
        if m.text == body:
            attempts.append(m.delivery_attempt)
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS

    with PushConsumer(group, topic, listener, addresses, concurrency=1, invisible_duration=20):
        wait_for(lambda: body in _dead_letters(addresses, group), f"{body} in %DLQ%{group}", timeout=120)
    return attempts


def test_group_settings_change_at_runtime_on_every_member_and_survive_a_new_leader(tmp_path):
    # the node configuration says 5 deliveries for everyone; the group is changed to 2 while the cluster runs
    nodes = start_nodes(node_specs(tmp_path, 3, node={"max_delivery_attempts": 5, "retry_backoff": "1s"}))
    try:
        everyone = [n.grpc_address for n in nodes]
        with Admin(everyone) as admin:
            admin.create_topic("Jobs", queues=1)
            leader_id = admin.cluster_status().leader_id
        follower = next(n for n in nodes if n.spec.id != leader_id)
        r = _cli(follower, "group", "update", "workers", "--max-attempts", "2", "--retry-backoff", "1s 2s")
        assert r.returncode == 0, r.stderr  # asked on a follower: relayed to the leader
        assert "Settings (group settings): fifo no, max delivery attempts 2, retry back-off 1s 2s" in r.stdout
        for n in nodes:  # replicated: every member holds it, in RocketMQ's subscriptionGroup.json shape
            stored = wait_for(lambda n=n: _stored(n, "workers"), f"the settings on {n.spec.id}", timeout=30)
            assert stored["retryMaxTimes"] == 1 and stored["consumeMessageOrderly"] is False
            assert stored["groupRetryPolicy"] == {"customizedRetryPolicy": {"next": [1000, 2000]},
                                                  "type": "CUSTOMIZED"}
            assert stored["groupName"] == "workers" and stored["consumeEnable"] is True
        d = describe_consumer_group(everyone, "workers")  # no member, no offset yet: its settings describe it
        assert (d.settings.max_delivery_attempts, d.settings.retry_backoff_ms, d.settings.source) == \
            (2, [1000, 2000], "group settings")
        with Producer(everyone) as p:
            p.send("Jobs", "poison-1")
        assert _poison_attempts(everyone, "Jobs", "workers", "poison-1") == [1, 2]  # in force without a restart

        # a new leader applies the same settings (they are replicated state, not the old leader's memory)
        next(n for n in nodes if n.spec.id == leader_id).kill()
        survivors = [n.grpc_address for n in nodes if n.spec.id != leader_id]
        with Producer(survivors) as p:
            p.send("Jobs", "poison-2")
        assert _poison_attempts(survivors, "Jobs", "workers", "poison-2") == [1, 2]

        # --reset: the node configuration applies again
        update_consumer_group(survivors, "workers", reset=True)
        d = describe_consumer_group(survivors, "workers")
        assert (d.settings.max_delivery_attempts, d.settings.source) == (5, "node config")
    finally:
        stop_all(nodes)


def test_group_update_changes_only_what_is_given_and_refuses_bad_values(tmp_path):
    nodes = start_nodes(node_specs(tmp_path, 1, node={"group_policies": {"ordered": {"fifo": True}}}))
    try:
        [node] = nodes
        s = update_consumer_group(node.grpc_address, "ordered", max_delivery_attempts=7)
        assert (s.fifo, s.max_delivery_attempts, s.source) == (True, 7, "group settings")  # fifo kept from config
        assert s.retry_backoff_ms[:3] == [1000, 5000, 10000]  # the node's default back-off, kept
        s = update_consumer_group(node.grpc_address, "ordered", fifo=False)
        assert (s.fifo, s.max_delivery_attempts) == (False, 7)
        r = _cli(node, "group", "describe", "ordered")
        assert r.returncode == 0 and "Settings (group settings): fifo no, max delivery attempts 7" in r.stdout, r
        r = _cli(node, "group", "describe", "ordered", "--json")
        assert json.loads(r.stdout)["settings"]["max_delivery_attempts"] == 7
        with pytest.raises(InvalidArgumentError, match="retry_backoff: 'soon' is not a list like '1s 5s 1m 2h'"):
            update_consumer_group(node.grpc_address, "ordered", retry_backoff="soon")
        with pytest.raises(InvalidArgumentError, match="max_delivery_attempts: must be an integer 1..1000"):
            update_consumer_group(node.grpc_address, "ordered", max_delivery_attempts=5000)
        for args, code, says in [
            (("group", "update", "ordered"), 2, "nothing to update"),
            (("group", "update", "ordered", "--reset", "--fifo"), 2, "give it alone"),
            (("group", "update", "ordered", "--max-attempts", "0"), 2, "--max-attempts"),
            (("group", "update", "ordered", "--retry-backoff", "1x"), 4, "is not a list like"),
            (("group", "update", "bad@group", "--fifo"), 4, "group"),
        ]:
            r = _cli(node, *args)
            assert r.returncode == code and says in r.stderr, (args, r.returncode, r.stderr)
        assert _stored(node, "ordered")["retryMaxTimes"] == 6  # the refused updates changed nothing
        # kept across a restart (persisted where RocketMQ keeps it)
        assert node.stop() == 0
        node.start().wait_ready()
        d = describe_consumer_group(node.grpc_address, "ordered")
        assert (d.settings.fifo, d.settings.max_delivery_attempts, d.settings.source) == \
            (False, 7, "group settings")
    finally:
        stop_all(nodes)

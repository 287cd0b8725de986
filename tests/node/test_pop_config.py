"""Retry-policy configuration (node.max_delivery_attempts, retry_backoff, group_policies): defaults as RocketMQ 5,
per-group overrides, and start-up errors that name the key."""

import pytest

from raftmq.node.config import ConfigError, load_config
from raftmq.node.pop_core import GroupPolicy, parse_policy


def test_defaults_are_rocketmq5s():
    p = GroupPolicy()
    assert p.max_delivery_attempts == 16
    assert [p.backoff_ms(a) for a in (1, 2, 3, 5)] == [1000, 5000, 10_000, 60_000]
    assert p.backoff_ms(99) == 7_200_000, "past the end: the last delay"


@pytest.mark.parametrize("assignment,message", [
    ("node.max_delivery_attempts=0", "node.max_delivery_attempts: must be an integer 1..1000"),
    ("node.retry_backoff=1x", "node.retry_backoff: '1x' is not a list"),
    ("node.group_policies={g: {max_delivery_attempts: 5, foo: 1}}", "node.group_policies.g: must be a mapping"),
    ("node.group_policies={g: {retry_backoff: ''}}", "node.group_policies.g.retry_backoff: empty"),
    ("node.pop_max_inflight_per_queue=0", "node.pop_max_inflight_per_queue: must be >= 1"),
])
def test_bad_policies_stop_the_node_naming_the_key(assignment, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_config(None, environ={}, assignments=[assignment])


def test_group_override_inherits_what_it_does_not_set():
    cfg = load_config(None, environ={}, assignments=["node.group_policies={g: {retry_backoff: '2s 3s'}}"])
    o = cfg.node.group_policies["g"]
    p = parse_policy(o.get("max_delivery_attempts", cfg.node.max_delivery_attempts), o["retry_backoff"], "g")
    assert p == GroupPolicy(16, (2000, 3000))

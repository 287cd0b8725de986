"""Metrics of pop consumption, read at scrape time: in-flight and lag per group and queue (RocketMQ 5's
``rocketmq_consumer_inflight_messages`` / ``rocketmq_consumer_lag_messages``) from the replicated pop state, and the
received / acked / nacked / redelivered / dead-lettered counts of the groups this member served as leader."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

_COUNTERS = (
    ("received", "rocketmq_consumer_received_messages", "Messages handed out by ReceiveMessage (redeliveries too)"),
    ("acked", "rocketmq_consumer_acked_messages", "Messages acked"),
    ("nacked", "rocketmq_consumer_nacked_messages", "Messages given back (nack, or send_back to the retry topic)"),
    ("redelivered", "rocketmq_consumer_redelivered_messages", "Deliveries with delivery_attempt > 1"),
    ("dead_lettered", "rocketmq_send_to_dlq_messages", "Messages moved to %DLQ%<group>"),
)


class PopCollector(Collector):
    def __init__(self, cluster: str, node_id: str, pop: Callable[[], object | None]):
        self._base = (cluster, node_id)
        self._pop = pop  # the broker's PopCore once the store is open

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        pop = self._pop()
        if pop is None:
            return
        labels = ["cluster", "node_id", "consumer_group", "topic", "queue_id"]
        inflight = GaugeMetricFamily("rocketmq_consumer_inflight_messages",
                                     "Messages received and not yet acked (invisible), per group and queue", labels=labels)
        lag = GaugeMetricFamily("rocketmq_consumer_lag_messages",
                                "Messages of the queue not yet acked by the group (stored - acked position)",
                                labels=labels)
        try:
            rows = pop.inflight_and_lag()
        except Exception:  # store closing
            return
        for group, topic, qid, n, behind in sorted(rows):
            inflight.add_metric([*self._base, group, topic, str(qid)], float(n))
            lag.add_metric([*self._base, group, topic, str(qid)], float(behind))
        yield inflight
        yield lag
        for attr, name, doc in _COUNTERS:
            c = CounterMetricFamily(name, doc + " (counted by the leader that served them)",
                                    labels=["cluster", "node_id", "consumer_group"])
            for group, n in sorted(getattr(pop.counters, attr).items()):
                c.add_metric([*self._base, group], float(n))
            yield c

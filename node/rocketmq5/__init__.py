"""RocketMQ 5 protocol adapter: serves ``apache.rocketmq.v2.MessagingService`` beside raftmq's own API (issue 13).

The official RocketMQ 5 clients (Java, Go, Python, ...) talk to this service unchanged. It is an adapter only:
sends go through raftmq's one write path (node.messaging), transactions through node.transaction_service, and
consumption through node.pop_core; nothing here stores anything by itself.
"""

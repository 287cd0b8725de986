"""Generated code of the RocketMQ 5 gRPC protocol (apache/rocketmq-apis), served by raftmq.node.rocketmq5."""

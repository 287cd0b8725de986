"""raftmq Python SDK: ``Producer``, ``TransactionProducer``, ``PullConsumer``, ``SimpleConsumer`` and
``PushConsumer`` (each with an ``Async...`` twin for asyncio), ``Admin``; typed results in ``client.types`` and
typed errors in ``client.errors``. Talks only the v1 gRPC API (``raftmq.v1``)."""

from raftmq.client.admin import Admin
from raftmq.client.async_producer import AsyncProducer
from raftmq.client.async_pull_consumer import AsyncPullConsumer
from raftmq.client.async_push_consumer import AsyncPushConsumer
from raftmq.client.async_simple_consumer import AsyncSimpleConsumer
from raftmq.client.async_transaction_producer import AsyncTransactionProducer
from raftmq.client.consumer import PullConsumer
from raftmq.client.errors import (
    AlreadyExistsError,
    BusyError,
    ConnectionError,
    InvalidArgumentError,
    NotFoundError,
    NotLeaderError,
    NotRaftmqServerError,
    PermissionDeniedError,
    RaftmqError,
    RequestTooLargeError,
    StorageFullError,
    TopicNotFoundError,
    UnavailableError,
    UnknownOutcomeError,
)
from raftmq.client.producer import Producer
from raftmq.client.simple_consumer import (
    ConsumeResult,
    PushConsumer,
    ReceivedMessage,
    SimpleConsumer,
    StaleReceiptHandleError,
)
from raftmq.client.transaction_producer import TransactionProducer, TransactionResult, TransactionState
from raftmq.client.types import (
    ClusterStatus,
    MemberStatus,
    Message,
    MessageView,
    QueueOffsets,
    SendResult,
    TopicConfig,
    TopicPage,
)

__all__ = [
    "Admin", "AsyncProducer", "AsyncPullConsumer", "AsyncPushConsumer", "AsyncSimpleConsumer", "AsyncTransactionProducer", "PullConsumer", "Producer", "SimpleConsumer", "PushConsumer", "ConsumeResult", "ReceivedMessage",
    "StaleReceiptHandleError", "TransactionProducer", "TransactionResult", "TransactionState",
    "ClusterStatus", "MemberStatus", "Message", "MessageView", "QueueOffsets", "SendResult", "TopicConfig",
    "TopicPage",
    "RaftmqError", "InvalidArgumentError", "NotFoundError", "TopicNotFoundError", "AlreadyExistsError",
    "NotLeaderError", "PermissionDeniedError", "UnavailableError", "BusyError", "ConnectionError", "UnknownOutcomeError",
    "StorageFullError",
    "NotRaftmqServerError", "RequestTooLargeError",
]

from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PullStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PULL_STATUS_UNSPECIFIED: _ClassVar[PullStatus]
    FOUND: _ClassVar[PullStatus]
    NO_NEW_MSG: _ClassVar[PullStatus]
    NO_MATCHED_MSG: _ClassVar[PullStatus]
    OFFSET_TOO_SMALL: _ClassVar[PullStatus]
    OFFSET_OVERFLOW: _ClassVar[PullStatus]
    OFFSET_MOVED: _ClassVar[PullStatus]

class TransactionResolution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSACTION_RESOLUTION_UNSPECIFIED: _ClassVar[TransactionResolution]
    TX_COMMIT: _ClassVar[TransactionResolution]
    TX_ROLLBACK: _ClassVar[TransactionResolution]
    TX_UNKNOWN: _ClassVar[TransactionResolution]
PULL_STATUS_UNSPECIFIED: PullStatus
FOUND: PullStatus
NO_NEW_MSG: PullStatus
NO_MATCHED_MSG: PullStatus
OFFSET_TOO_SMALL: PullStatus
OFFSET_OVERFLOW: PullStatus
OFFSET_MOVED: PullStatus
TRANSACTION_RESOLUTION_UNSPECIFIED: TransactionResolution
TX_COMMIT: TransactionResolution
TX_ROLLBACK: TransactionResolution
TX_UNKNOWN: TransactionResolution

class Message(_message.Message):
    __slots__ = ("topic", "queue_id", "body", "tags", "keys", "properties", "born_timestamp", "born_host", "flag", "uniq_key", "delay_level", "message_group", "deliver_at_ms", "broker")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    UNIQ_KEY_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    body: bytes
    tags: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    born_timestamp: int
    born_host: str
    flag: int
    uniq_key: str
    delay_level: int
    message_group: str
    deliver_at_ms: int
    broker: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., body: _Optional[bytes] = ..., tags: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., born_timestamp: _Optional[int] = ..., born_host: _Optional[str] = ..., flag: _Optional[int] = ..., uniq_key: _Optional[str] = ..., delay_level: _Optional[int] = ..., message_group: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., broker: _Optional[str] = ...) -> None: ...

class SendResult(_message.Message):
    __slots__ = ("msg_id", "uniq_key", "topic", "queue_id", "queue_offset", "physical_offset", "store_timestamp", "note", "duplicate", "broker")
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    UNIQ_KEY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    uniq_key: str
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_timestamp: int
    note: str
    duplicate: bool
    broker: str
    def __init__(self, msg_id: _Optional[str] = ..., uniq_key: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., physical_offset: _Optional[int] = ..., store_timestamp: _Optional[int] = ..., note: _Optional[str] = ..., duplicate: _Optional[bool] = ..., broker: _Optional[str] = ...) -> None: ...

class MessageView(_message.Message):
    __slots__ = ("msg_id", "uniq_key", "topic", "queue_id", "queue_offset", "physical_offset", "store_size", "body", "tags", "keys", "properties", "born_timestamp", "born_host", "store_timestamp", "store_host", "sys_flag", "flag", "reconsume_times", "body_crc", "prepared_transaction_offset")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    UNIQ_KEY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_SIZE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    BODY_CRC_FIELD_NUMBER: _ClassVar[int]
    PREPARED_TRANSACTION_OFFSET_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    uniq_key: str
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_size: int
    body: bytes
    tags: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    sys_flag: int
    flag: int
    reconsume_times: int
    body_crc: int
    prepared_transaction_offset: int
    def __init__(self, msg_id: _Optional[str] = ..., uniq_key: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., physical_offset: _Optional[int] = ..., store_size: _Optional[int] = ..., body: _Optional[bytes] = ..., tags: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., born_timestamp: _Optional[int] = ..., born_host: _Optional[str] = ..., store_timestamp: _Optional[int] = ..., store_host: _Optional[str] = ..., sys_flag: _Optional[int] = ..., flag: _Optional[int] = ..., reconsume_times: _Optional[int] = ..., body_crc: _Optional[int] = ..., prepared_transaction_offset: _Optional[int] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: Message
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: SendResult
    def __init__(self, result: _Optional[_Union[SendResult, _Mapping]] = ...) -> None: ...

class SendBatchRequest(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class SendBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SendResult, _Mapping]]] = ...) -> None: ...

class PullMessageRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset", "max_count", "max_bytes", "tag_expression", "long_poll_timeout_ms", "consumer_group", "from_leader", "sql_expression", "broker")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    TAG_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    LONG_POLL_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    FROM_LEADER_FIELD_NUMBER: _ClassVar[int]
    SQL_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    max_count: int
    max_bytes: int
    tag_expression: str
    long_poll_timeout_ms: int
    consumer_group: str
    from_leader: bool
    sql_expression: str
    broker: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., max_count: _Optional[int] = ..., max_bytes: _Optional[int] = ..., tag_expression: _Optional[str] = ..., long_poll_timeout_ms: _Optional[int] = ..., consumer_group: _Optional[str] = ..., from_leader: _Optional[bool] = ..., sql_expression: _Optional[str] = ..., broker: _Optional[str] = ...) -> None: ...

class PullMessageResponse(_message.Message):
    __slots__ = ("status", "messages", "next_offset", "min_offset", "max_offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: PullStatus
    messages: _containers.RepeatedCompositeFieldContainer[MessageView]
    next_offset: int
    min_offset: int
    max_offset: int
    def __init__(self, status: _Optional[_Union[PullStatus, str]] = ..., messages: _Optional[_Iterable[_Union[MessageView, _Mapping]]] = ..., next_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...

class QueryMessageByKeyRequest(_message.Message):
    __slots__ = ("topic", "key", "begin_timestamp", "end_timestamp", "max_num")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    begin_timestamp: int
    end_timestamp: int
    max_num: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., begin_timestamp: _Optional[int] = ..., end_timestamp: _Optional[int] = ..., max_num: _Optional[int] = ...) -> None: ...

class QueryMessageByKeyResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[MessageView]
    def __init__(self, messages: _Optional[_Iterable[_Union[MessageView, _Mapping]]] = ...) -> None: ...

class ViewMessageRequest(_message.Message):
    __slots__ = ("msg_id", "topic")
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    topic: str
    def __init__(self, msg_id: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class ViewMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: MessageView
    def __init__(self, message: _Optional[_Union[MessageView, _Mapping]] = ...) -> None: ...

class QueueOffsets(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset", "last_store_timestamp")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., last_store_timestamp: _Optional[int] = ...) -> None: ...

class GetQueueOffsetsRequest(_message.Message):
    __slots__ = ("topic", "broker")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker: str
    def __init__(self, topic: _Optional[str] = ..., broker: _Optional[str] = ...) -> None: ...

class GetQueueOffsetsResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ...) -> None: ...

class SearchOffsetRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp", "broker")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp: int
    broker: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp: _Optional[int] = ..., broker: _Optional[str] = ...) -> None: ...

class SearchOffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class CommitOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "offsets", "broker")
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    offsets: _containers.ScalarMap[int, int]
    broker: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., offsets: _Optional[_Mapping[int, int]] = ..., broker: _Optional[str] = ...) -> None: ...

class CommitOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FetchOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "broker")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    broker: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., broker: _Optional[str] = ...) -> None: ...

class FetchOffsetResponse(_message.Message):
    __slots__ = ("offsets",)
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.ScalarMap[int, int]
    def __init__(self, offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...

class ConsumerHeartbeatRequest(_message.Message):
    __slots__ = ("group", "topic", "client_id", "heartbeat_interval_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    client_id: str
    heartbeat_interval_ms: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., client_id: _Optional[str] = ..., heartbeat_interval_ms: _Optional[int] = ...) -> None: ...

class ConsumerHeartbeatResponse(_message.Message):
    __slots__ = ("client_ids", "generation", "read_queue_nums")
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    client_ids: _containers.RepeatedScalarFieldContainer[str]
    generation: int
    read_queue_nums: int
    def __init__(self, client_ids: _Optional[_Iterable[str]] = ..., generation: _Optional[int] = ..., read_queue_nums: _Optional[int] = ...) -> None: ...

class UnregisterConsumerRequest(_message.Message):
    __slots__ = ("group", "topic", "client_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    client_id: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class UnregisterConsumerResponse(_message.Message):
    __slots__ = ("client_ids", "generation")
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    client_ids: _containers.RepeatedScalarFieldContainer[str]
    generation: int
    def __init__(self, client_ids: _Optional[_Iterable[str]] = ..., generation: _Optional[int] = ...) -> None: ...

class DescribeConsumerGroupRequest(_message.Message):
    __slots__ = ("group", "broker")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    group: str
    broker: str
    def __init__(self, group: _Optional[str] = ..., broker: _Optional[str] = ...) -> None: ...

class ConsumerGroupMember(_message.Message):
    __slots__ = ("client_id", "topic", "queue_ids", "last_heartbeat_ms", "expires_in_ms", "broker")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_MS_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    topic: str
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    last_heartbeat_ms: int
    expires_in_ms: int
    broker: str
    def __init__(self, client_id: _Optional[str] = ..., topic: _Optional[str] = ..., queue_ids: _Optional[_Iterable[int]] = ..., last_heartbeat_ms: _Optional[int] = ..., expires_in_ms: _Optional[int] = ..., broker: _Optional[str] = ...) -> None: ...

class ConsumerGroupQueue(_message.Message):
    __slots__ = ("topic", "queue_id", "client_id", "committed", "committed_offset", "max_offset", "lag", "broker")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    client_id: str
    committed: bool
    committed_offset: int
    max_offset: int
    lag: int
    broker: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., client_id: _Optional[str] = ..., committed: _Optional[bool] = ..., committed_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., lag: _Optional[int] = ..., broker: _Optional[str] = ...) -> None: ...

class ConsumerGroupSettings(_message.Message):
    __slots__ = ("fifo", "max_delivery_attempts", "retry_backoff_ms", "source")
    FIFO_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    fifo: bool
    max_delivery_attempts: int
    retry_backoff_ms: _containers.RepeatedScalarFieldContainer[int]
    source: str
    def __init__(self, fifo: _Optional[bool] = ..., max_delivery_attempts: _Optional[int] = ..., retry_backoff_ms: _Optional[_Iterable[int]] = ..., source: _Optional[str] = ...) -> None: ...

class DescribeConsumerGroupResponse(_message.Message):
    __slots__ = ("group", "members", "queues", "generations", "settings")
    class GenerationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    group: str
    members: _containers.RepeatedCompositeFieldContainer[ConsumerGroupMember]
    queues: _containers.RepeatedCompositeFieldContainer[ConsumerGroupQueue]
    generations: _containers.ScalarMap[str, int]
    settings: ConsumerGroupSettings
    def __init__(self, group: _Optional[str] = ..., members: _Optional[_Iterable[_Union[ConsumerGroupMember, _Mapping]]] = ..., queues: _Optional[_Iterable[_Union[ConsumerGroupQueue, _Mapping]]] = ..., generations: _Optional[_Mapping[str, int]] = ..., settings: _Optional[_Union[ConsumerGroupSettings, _Mapping]] = ...) -> None: ...

class UpdateConsumerGroupRequest(_message.Message):
    __slots__ = ("group", "fifo", "max_delivery_attempts", "retry_backoff", "reset", "broker")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    group: str
    fifo: bool
    max_delivery_attempts: int
    retry_backoff: str
    reset: bool
    broker: str
    def __init__(self, group: _Optional[str] = ..., fifo: _Optional[bool] = ..., max_delivery_attempts: _Optional[int] = ..., retry_backoff: _Optional[str] = ..., reset: _Optional[bool] = ..., broker: _Optional[str] = ...) -> None: ...

class UpdateConsumerGroupResponse(_message.Message):
    __slots__ = ("group", "settings")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    group: str
    settings: ConsumerGroupSettings
    def __init__(self, group: _Optional[str] = ..., settings: _Optional[_Union[ConsumerGroupSettings, _Mapping]] = ...) -> None: ...

class QueryRouteRequest(_message.Message):
    __slots__ = ("topic", "local")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    topic: str
    local: bool
    def __init__(self, topic: _Optional[str] = ..., local: _Optional[bool] = ...) -> None: ...

class GroupRoute(_message.Message):
    __slots__ = ("name", "endpoints", "leader", "available", "error", "has_topic", "read_queue_nums", "write_queue_nums", "perm", "store_host", "preferred_leader")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HAS_TOPIC_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_LEADER_FIELD_NUMBER: _ClassVar[int]
    name: str
    endpoints: _containers.RepeatedScalarFieldContainer[str]
    leader: str
    available: bool
    error: str
    has_topic: bool
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    store_host: str
    preferred_leader: str
    def __init__(self, name: _Optional[str] = ..., endpoints: _Optional[_Iterable[str]] = ..., leader: _Optional[str] = ..., available: _Optional[bool] = ..., error: _Optional[str] = ..., has_topic: _Optional[bool] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., store_host: _Optional[str] = ..., preferred_leader: _Optional[str] = ...) -> None: ...

class QueryRouteResponse(_message.Message):
    __slots__ = ("cluster_name", "groups", "answered_by", "group", "groups_digest")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    GROUPS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    groups: _containers.RepeatedCompositeFieldContainer[GroupRoute]
    answered_by: str
    group: str
    groups_digest: str
    def __init__(self, cluster_name: _Optional[str] = ..., groups: _Optional[_Iterable[_Union[GroupRoute, _Mapping]]] = ..., answered_by: _Optional[str] = ..., group: _Optional[str] = ..., groups_digest: _Optional[str] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("name", "read_queue_nums", "write_queue_nums", "perm", "order", "message_type", "dedup_window_seconds")
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    DEDUP_WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool
    message_type: str
    dedup_window_seconds: int
    def __init__(self, name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., order: _Optional[bool] = ..., message_type: _Optional[str] = ..., dedup_window_seconds: _Optional[int] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic", "broker")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    topic: TopicConfig
    broker: str
    def __init__(self, topic: _Optional[_Union[TopicConfig, _Mapping]] = ..., broker: _Optional[str] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("topic", "broker")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    topic: TopicConfig
    broker: str
    def __init__(self, topic: _Optional[_Union[TopicConfig, _Mapping]] = ..., broker: _Optional[str] = ...) -> None: ...

class GroupTopicOutcome(_message.Message):
    __slots__ = ("group", "outcome")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    group: str
    outcome: str
    def __init__(self, group: _Optional[str] = ..., outcome: _Optional[str] = ...) -> None: ...

class TopicResponse(_message.Message):
    __slots__ = ("topic", "groups")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    topic: TopicConfig
    groups: _containers.RepeatedCompositeFieldContainer[GroupTopicOutcome]
    def __init__(self, topic: _Optional[_Union[TopicConfig, _Mapping]] = ..., groups: _Optional[_Iterable[_Union[GroupTopicOutcome, _Mapping]]] = ...) -> None: ...

class CreateTopicsRequest(_message.Message):
    __slots__ = ("topics", "skip_existing", "broker")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SKIP_EXISTING_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    skip_existing: bool
    broker: str
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ..., skip_existing: _Optional[bool] = ..., broker: _Optional[str] = ...) -> None: ...

class CreateTopicsResponse(_message.Message):
    __slots__ = ("created", "existing", "groups")
    CREATED_FIELD_NUMBER: _ClassVar[int]
    EXISTING_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    created: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    existing: _containers.RepeatedScalarFieldContainer[str]
    groups: _containers.RepeatedCompositeFieldContainer[GroupTopicOutcome]
    def __init__(self, created: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ..., existing: _Optional[_Iterable[str]] = ..., groups: _Optional[_Iterable[_Union[GroupTopicOutcome, _Mapping]]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("include_system", "filter", "after", "limit", "broker", "include_marks")
    INCLUDE_SYSTEM_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_MARKS_FIELD_NUMBER: _ClassVar[int]
    include_system: bool
    filter: str
    after: str
    limit: int
    broker: str
    include_marks: bool
    def __init__(self, include_system: _Optional[bool] = ..., filter: _Optional[str] = ..., after: _Optional[str] = ..., limit: _Optional[int] = ..., broker: _Optional[str] = ..., include_marks: _Optional[bool] = ...) -> None: ...

class TopicMark(_message.Message):
    __slots__ = ("name", "deleted", "at_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    deleted: bool
    at_ms: int
    def __init__(self, name: _Optional[str] = ..., deleted: _Optional[bool] = ..., at_ms: _Optional[int] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics", "matching", "more", "marks")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MATCHING_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    MARKS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    matching: int
    more: bool
    marks: _containers.RepeatedCompositeFieldContainer[TopicMark]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ..., matching: _Optional[int] = ..., more: _Optional[bool] = ..., marks: _Optional[_Iterable[_Union[TopicMark, _Mapping]]] = ...) -> None: ...

class ListSettingsRequest(_message.Message):
    __slots__ = ("broker",)
    BROKER_FIELD_NUMBER: _ClassVar[int]
    broker: str
    def __init__(self, broker: _Optional[str] = ...) -> None: ...

class SettingEntry(_message.Message):
    __slots__ = ("name", "present", "record", "marked", "deleted", "at_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    MARKED_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    present: bool
    record: str
    marked: bool
    deleted: bool
    at_ms: int
    def __init__(self, name: _Optional[str] = ..., present: _Optional[bool] = ..., record: _Optional[str] = ..., marked: _Optional[bool] = ..., deleted: _Optional[bool] = ..., at_ms: _Optional[int] = ...) -> None: ...

class ListSettingsResponse(_message.Message):
    __slots__ = ("users", "groups", "auth")
    USERS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    AUTH_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[SettingEntry]
    groups: _containers.RepeatedCompositeFieldContainer[SettingEntry]
    auth: bool
    def __init__(self, users: _Optional[_Iterable[_Union[SettingEntry, _Mapping]]] = ..., groups: _Optional[_Iterable[_Union[SettingEntry, _Mapping]]] = ..., auth: _Optional[bool] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name", "broker")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    name: str
    broker: str
    def __init__(self, name: _Optional[str] = ..., broker: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupTopicOutcome]
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupTopicOutcome, _Mapping]]] = ...) -> None: ...

class ClusterStatusRequest(_message.Message):
    __slots__ = ("broker",)
    BROKER_FIELD_NUMBER: _ClassVar[int]
    broker: str
    def __init__(self, broker: _Optional[str] = ...) -> None: ...

class MemberStatus(_message.Message):
    __slots__ = ("id", "grpc_address", "raft_address", "role", "term", "commit_index", "applied_index", "applied_offset", "dispatch_behind_bytes", "lag_bytes", "healthy", "ready", "error", "storage_integrity", "membership", "progress")
    ID_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_BEHIND_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STORAGE_INTEGRITY_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    id: str
    grpc_address: str
    raft_address: str
    role: str
    term: int
    commit_index: int
    applied_index: int
    applied_offset: int
    dispatch_behind_bytes: int
    lag_bytes: int
    healthy: bool
    ready: bool
    error: str
    storage_integrity: str
    membership: str
    progress: str
    def __init__(self, id: _Optional[str] = ..., grpc_address: _Optional[str] = ..., raft_address: _Optional[str] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., applied_offset: _Optional[int] = ..., dispatch_behind_bytes: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., healthy: _Optional[bool] = ..., ready: _Optional[bool] = ..., error: _Optional[str] = ..., storage_integrity: _Optional[str] = ..., membership: _Optional[str] = ..., progress: _Optional[str] = ...) -> None: ...

class ClusterStatusResponse(_message.Message):
    __slots__ = ("cluster_name", "leader_id", "members", "durability", "group")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    leader_id: str
    members: _containers.RepeatedCompositeFieldContainer[MemberStatus]
    durability: str
    group: str
    def __init__(self, cluster_name: _Optional[str] = ..., leader_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[MemberStatus, _Mapping]]] = ..., durability: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class TransferLeaderRequest(_message.Message):
    __slots__ = ("to_id",)
    TO_ID_FIELD_NUMBER: _ClassVar[int]
    to_id: str
    def __init__(self, to_id: _Optional[str] = ...) -> None: ...

class TransferLeaderResponse(_message.Message):
    __slots__ = ("leader_id",)
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    leader_id: str
    def __init__(self, leader_id: _Optional[str] = ...) -> None: ...

class RebuildMemberRequest(_message.Message):
    __slots__ = ("member_id", "discard")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    DISCARD_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    discard: bool
    def __init__(self, member_id: _Optional[str] = ..., discard: _Optional[bool] = ...) -> None: ...

class RebuildMemberResponse(_message.Message):
    __slots__ = ("set_aside",)
    SET_ASIDE_FIELD_NUMBER: _ClassVar[int]
    set_aside: str
    def __init__(self, set_aside: _Optional[str] = ...) -> None: ...

class AddMemberRequest(_message.Message):
    __slots__ = ("id", "raft_address", "grpc_address", "dry_run", "replaces")
    ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    REPLACES_FIELD_NUMBER: _ClassVar[int]
    id: str
    raft_address: str
    grpc_address: str
    dry_run: bool
    replaces: str
    def __init__(self, id: _Optional[str] = ..., raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., dry_run: _Optional[bool] = ..., replaces: _Optional[str] = ...) -> None: ...

class RemoveMemberRequest(_message.Message):
    __slots__ = ("id", "dry_run")
    ID_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    id: str
    dry_run: bool
    def __init__(self, id: _Optional[str] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class MembershipChangeResponse(_message.Message):
    __slots__ = ("plan", "voters", "learners", "index")
    PLAN_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    plan: str
    voters: _containers.RepeatedScalarFieldContainer[str]
    learners: _containers.RepeatedScalarFieldContainer[str]
    index: int
    def __init__(self, plan: _Optional[str] = ..., voters: _Optional[_Iterable[str]] = ..., learners: _Optional[_Iterable[str]] = ..., index: _Optional[int] = ...) -> None: ...

class SendHalfMessageRequest(_message.Message):
    __slots__ = ("message", "producer_group")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    message: Message
    producer_group: str
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., producer_group: _Optional[str] = ...) -> None: ...

class SendHalfMessageResponse(_message.Message):
    __slots__ = ("result", "transaction_id")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    result: SendResult
    transaction_id: str
    def __init__(self, result: _Optional[_Union[SendResult, _Mapping]] = ..., transaction_id: _Optional[str] = ...) -> None: ...

class EndTransactionRequest(_message.Message):
    __slots__ = ("producer_group", "transaction_id", "msg_id", "resolution")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    transaction_id: str
    msg_id: str
    resolution: TransactionResolution
    def __init__(self, producer_group: _Optional[str] = ..., transaction_id: _Optional[str] = ..., msg_id: _Optional[str] = ..., resolution: _Optional[_Union[TransactionResolution, str]] = ...) -> None: ...

class EndTransactionResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: SendResult
    def __init__(self, result: _Optional[_Union[SendResult, _Mapping]] = ...) -> None: ...

class TransactionStreamRequest(_message.Message):
    __slots__ = ("register_group", "check_answer")
    REGISTER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CHECK_ANSWER_FIELD_NUMBER: _ClassVar[int]
    register_group: str
    check_answer: EndTransactionRequest
    def __init__(self, register_group: _Optional[str] = ..., check_answer: _Optional[_Union[EndTransactionRequest, _Mapping]] = ...) -> None: ...

class TransactionCheck(_message.Message):
    __slots__ = ("transaction_id", "msg_id", "message", "check_times")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CHECK_TIMES_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    msg_id: str
    message: MessageView
    check_times: int
    def __init__(self, transaction_id: _Optional[str] = ..., msg_id: _Optional[str] = ..., message: _Optional[_Union[MessageView, _Mapping]] = ..., check_times: _Optional[int] = ...) -> None: ...

class SendStreamRequest(_message.Message):
    __slots__ = ("id", "sends")
    ID_FIELD_NUMBER: _ClassVar[int]
    SENDS_FIELD_NUMBER: _ClassVar[int]
    id: int
    sends: _containers.RepeatedCompositeFieldContainer[SendStreamItem]
    def __init__(self, id: _Optional[int] = ..., sends: _Optional[_Iterable[_Union[SendStreamItem, _Mapping]]] = ...) -> None: ...

class SendStreamItem(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class SendStreamResponse(_message.Message):
    __slots__ = ("id", "outcomes")
    ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    id: int
    outcomes: _containers.RepeatedCompositeFieldContainer[SendOutcome]
    def __init__(self, id: _Optional[int] = ..., outcomes: _Optional[_Iterable[_Union[SendOutcome, _Mapping]]] = ...) -> None: ...

class SendOutcome(_message.Message):
    __slots__ = ("code", "error", "leader", "results")
    CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    code: int
    error: str
    leader: str
    results: _containers.RepeatedCompositeFieldContainer[SendResult]
    def __init__(self, code: _Optional[int] = ..., error: _Optional[str] = ..., leader: _Optional[str] = ..., results: _Optional[_Iterable[_Union[SendResult, _Mapping]]] = ...) -> None: ...

class ReceiveMessageRequest(_message.Message):
    __slots__ = ("group", "topic", "tag_expression", "sql_expression", "max_messages", "invisible_duration_ms", "long_poll_timeout_ms", "fifo", "broker")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TAG_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    SQL_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    LONG_POLL_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    tag_expression: str
    sql_expression: str
    max_messages: int
    invisible_duration_ms: int
    long_poll_timeout_ms: int
    fifo: bool
    broker: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., tag_expression: _Optional[str] = ..., sql_expression: _Optional[str] = ..., max_messages: _Optional[int] = ..., invisible_duration_ms: _Optional[int] = ..., long_poll_timeout_ms: _Optional[int] = ..., fifo: _Optional[bool] = ..., broker: _Optional[str] = ...) -> None: ...

class ReceivedMessage(_message.Message):
    __slots__ = ("message", "receipt_handle", "delivery_attempt", "invisible_until", "message_group", "broker")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    message: MessageView
    receipt_handle: str
    delivery_attempt: int
    invisible_until: int
    message_group: str
    broker: str
    def __init__(self, message: _Optional[_Union[MessageView, _Mapping]] = ..., receipt_handle: _Optional[str] = ..., delivery_attempt: _Optional[int] = ..., invisible_until: _Optional[int] = ..., message_group: _Optional[str] = ..., broker: _Optional[str] = ...) -> None: ...

class ReceiveMessageResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ReceivedMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ReceivedMessage, _Mapping]]] = ...) -> None: ...

class AckMessageRequest(_message.Message):
    __slots__ = ("group", "topic", "receipt_handles", "broker")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLES_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipt_handles: _containers.RepeatedScalarFieldContainer[str]
    broker: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handles: _Optional[_Iterable[str]] = ..., broker: _Optional[str] = ...) -> None: ...

class AckEntryResult(_message.Message):
    __slots__ = ("receipt_handle", "ok", "error")
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    receipt_handle: str
    ok: bool
    error: str
    def __init__(self, receipt_handle: _Optional[str] = ..., ok: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class AckMessageResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AckEntryResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AckEntryResult, _Mapping]]] = ...) -> None: ...

class ChangeInvisibleDurationRequest(_message.Message):
    __slots__ = ("group", "topic", "receipt_handle", "invisible_duration_ms", "broker")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipt_handle: str
    invisible_duration_ms: int
    broker: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., invisible_duration_ms: _Optional[int] = ..., broker: _Optional[str] = ...) -> None: ...

class ChangeInvisibleDurationResponse(_message.Message):
    __slots__ = ("receipt_handle", "invisible_until")
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    receipt_handle: str
    invisible_until: int
    def __init__(self, receipt_handle: _Optional[str] = ..., invisible_until: _Optional[int] = ...) -> None: ...

class ForwardToDeadLetterQueueRequest(_message.Message):
    __slots__ = ("group", "topic", "receipt_handle", "broker")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    receipt_handle: str
    broker: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., broker: _Optional[str] = ...) -> None: ...

class ForwardToDeadLetterQueueResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: SendResult
    def __init__(self, result: _Optional[_Union[SendResult, _Mapping]] = ...) -> None: ...

class SendMessageBackRequest(_message.Message):
    __slots__ = ("group", "topic", "queue_id", "queue_offset", "delay_level", "broker")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    delay_level: int
    broker: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., delay_level: _Optional[int] = ..., broker: _Optional[str] = ...) -> None: ...

class SendMessageBackResponse(_message.Message):
    __slots__ = ("result", "dead_lettered")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    result: SendResult
    dead_lettered: bool
    def __init__(self, result: _Optional[_Union[SendResult, _Mapping]] = ..., dead_lettered: _Optional[bool] = ...) -> None: ...

class ResetGroupOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic", "timestamp", "offset", "broker")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    timestamp: int
    offset: int
    broker: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., timestamp: _Optional[int] = ..., offset: _Optional[int] = ..., broker: _Optional[str] = ...) -> None: ...

class GroupOffsetReset(_message.Message):
    __slots__ = ("group", "offsets")
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group: str
    offsets: _containers.ScalarMap[int, int]
    def __init__(self, group: _Optional[str] = ..., offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...

class ResetGroupOffsetsResponse(_message.Message):
    __slots__ = ("offsets", "groups")
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.ScalarMap[int, int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupOffsetReset]
    def __init__(self, offsets: _Optional[_Mapping[int, int]] = ..., groups: _Optional[_Iterable[_Union[GroupOffsetReset, _Mapping]]] = ...) -> None: ...

class AclRule(_message.Message):
    __slots__ = ("effect", "actions", "resources")
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    effect: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    resources: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, effect: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., resources: _Optional[_Iterable[str]] = ...) -> None: ...

class AclUser(_message.Message):
    __slots__ = ("access_key", "admin", "rules", "bootstrap", "networks")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_FIELD_NUMBER: _ClassVar[int]
    NETWORKS_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    admin: bool
    rules: _containers.RepeatedCompositeFieldContainer[AclRule]
    bootstrap: bool
    networks: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, access_key: _Optional[str] = ..., admin: _Optional[bool] = ..., rules: _Optional[_Iterable[_Union[AclRule, _Mapping]]] = ..., bootstrap: _Optional[bool] = ..., networks: _Optional[_Iterable[str]] = ...) -> None: ...

class PutAclUserRequest(_message.Message):
    __slots__ = ("access_key", "secret_key", "admin", "networks", "broker")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_KEY_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    NETWORKS_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    secret_key: str
    admin: bool
    networks: _containers.RepeatedScalarFieldContainer[str]
    broker: str
    def __init__(self, access_key: _Optional[str] = ..., secret_key: _Optional[str] = ..., admin: _Optional[bool] = ..., networks: _Optional[_Iterable[str]] = ..., broker: _Optional[str] = ...) -> None: ...

class PutAclUserResponse(_message.Message):
    __slots__ = ("user", "created")
    USER_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    user: AclUser
    created: bool
    def __init__(self, user: _Optional[_Union[AclUser, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class DeleteAclUserRequest(_message.Message):
    __slots__ = ("access_key", "broker")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    broker: str
    def __init__(self, access_key: _Optional[str] = ..., broker: _Optional[str] = ...) -> None: ...

class DeleteAclUserResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAclUsersRequest(_message.Message):
    __slots__ = ("broker",)
    BROKER_FIELD_NUMBER: _ClassVar[int]
    broker: str
    def __init__(self, broker: _Optional[str] = ...) -> None: ...

class ListAclUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[AclUser]
    def __init__(self, users: _Optional[_Iterable[_Union[AclUser, _Mapping]]] = ...) -> None: ...

class AddAclRuleRequest(_message.Message):
    __slots__ = ("access_key", "rule", "broker")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    rule: AclRule
    broker: str
    def __init__(self, access_key: _Optional[str] = ..., rule: _Optional[_Union[AclRule, _Mapping]] = ..., broker: _Optional[str] = ...) -> None: ...

class AddAclRuleResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: AclUser
    def __init__(self, user: _Optional[_Union[AclUser, _Mapping]] = ...) -> None: ...

class RemoveAclRuleRequest(_message.Message):
    __slots__ = ("access_key", "index", "broker", "rule")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    index: int
    broker: str
    rule: AclRule
    def __init__(self, access_key: _Optional[str] = ..., index: _Optional[int] = ..., broker: _Optional[str] = ..., rule: _Optional[_Union[AclRule, _Mapping]] = ...) -> None: ...

class RemoveAclRuleResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: AclUser
    def __init__(self, user: _Optional[_Union[AclUser, _Mapping]] = ...) -> None: ...

class EndConsoleSessionRequest(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: str
    def __init__(self, session: _Optional[str] = ...) -> None: ...

class EndConsoleSessionResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: str
    def __init__(self, user: _Optional[str] = ...) -> None: ...

class PullStreamRequest(_message.Message):
    __slots__ = ("topic", "offsets", "max_count", "max_bytes", "tag_expression", "consumer_group", "from_leader", "sql_expression")
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    MAX_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    TAG_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    FROM_LEADER_FIELD_NUMBER: _ClassVar[int]
    SQL_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    offsets: _containers.ScalarMap[int, int]
    max_count: int
    max_bytes: int
    tag_expression: str
    consumer_group: str
    from_leader: bool
    sql_expression: str
    def __init__(self, topic: _Optional[str] = ..., offsets: _Optional[_Mapping[int, int]] = ..., max_count: _Optional[int] = ..., max_bytes: _Optional[int] = ..., tag_expression: _Optional[str] = ..., consumer_group: _Optional[str] = ..., from_leader: _Optional[bool] = ..., sql_expression: _Optional[str] = ...) -> None: ...

class PullStreamResponse(_message.Message):
    __slots__ = ("queue_id", "pull")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    PULL_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    pull: PullMessageResponse
    def __init__(self, queue_id: _Optional[int] = ..., pull: _Optional[_Union[PullMessageResponse, _Mapping]] = ...) -> None: ...

class SetAclUserNetworksRequest(_message.Message):
    __slots__ = ("access_key", "networks", "broker")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    NETWORKS_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    networks: _containers.RepeatedScalarFieldContainer[str]
    broker: str
    def __init__(self, access_key: _Optional[str] = ..., networks: _Optional[_Iterable[str]] = ..., broker: _Optional[str] = ...) -> None: ...

class SetAclUserNetworksResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: AclUser
    def __init__(self, user: _Optional[_Union[AclUser, _Mapping]] = ...) -> None: ...

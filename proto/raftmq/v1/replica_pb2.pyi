from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetReplicaStatusRequest(_message.Message):
    __slots__ = ("skip_metadata",)
    SKIP_METADATA_FIELD_NUMBER: _ClassVar[int]
    skip_metadata: bool
    def __init__(self, skip_metadata: _Optional[bool] = ...) -> None: ...

class GetReplicaStatusResponse(_message.Message):
    __slots__ = ("member_id", "is_leader", "leader_id", "raft_term", "applied_index", "commit_log_min_offset", "commit_log_max_offset", "commit_log_file_size", "metadata", "commit_index", "raft_applied_index", "dispatch_behind_bytes", "ready", "not_ready_reason", "storage_integrity", "acl_key_ids", "membership", "voters", "membership_role")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_TERM_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    RAFT_APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_BEHIND_BYTES_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    NOT_READY_REASON_FIELD_NUMBER: _ClassVar[int]
    STORAGE_INTEGRITY_FIELD_NUMBER: _ClassVar[int]
    ACL_KEY_IDS_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_ROLE_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    is_leader: bool
    leader_id: str
    raft_term: int
    applied_index: int
    commit_log_min_offset: int
    commit_log_max_offset: int
    commit_log_file_size: int
    metadata: bytes
    commit_index: int
    raft_applied_index: int
    dispatch_behind_bytes: int
    ready: bool
    not_ready_reason: str
    storage_integrity: str
    acl_key_ids: _containers.RepeatedScalarFieldContainer[str]
    membership: str
    voters: _containers.RepeatedScalarFieldContainer[str]
    membership_role: str
    def __init__(self, member_id: _Optional[str] = ..., is_leader: _Optional[bool] = ..., leader_id: _Optional[str] = ..., raft_term: _Optional[int] = ..., applied_index: _Optional[int] = ..., commit_log_min_offset: _Optional[int] = ..., commit_log_max_offset: _Optional[int] = ..., commit_log_file_size: _Optional[int] = ..., metadata: _Optional[bytes] = ..., commit_index: _Optional[int] = ..., raft_applied_index: _Optional[int] = ..., dispatch_behind_bytes: _Optional[int] = ..., ready: _Optional[bool] = ..., not_ready_reason: _Optional[str] = ..., storage_integrity: _Optional[str] = ..., acl_key_ids: _Optional[_Iterable[str]] = ..., membership: _Optional[str] = ..., voters: _Optional[_Iterable[str]] = ..., membership_role: _Optional[str] = ...) -> None: ...

class FetchCommitLogRequest(_message.Message):
    __slots__ = ("from_offset", "up_to_index", "max_chunk_bytes")
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    UP_TO_INDEX_FIELD_NUMBER: _ClassVar[int]
    MAX_CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    from_offset: int
    up_to_index: int
    max_chunk_bytes: int
    def __init__(self, from_offset: _Optional[int] = ..., up_to_index: _Optional[int] = ..., max_chunk_bytes: _Optional[int] = ...) -> None: ...

class CommitLogChunk(_message.Message):
    __slots__ = ("offset", "data", "last", "end_offset", "end_index")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_INDEX_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    last: bool
    end_offset: int
    end_index: int
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., last: _Optional[bool] = ..., end_offset: _Optional[int] = ..., end_index: _Optional[int] = ...) -> None: ...

class SyncJournalRequest(_message.Message):
    __slots__ = ("index", "term")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    index: int
    term: int
    def __init__(self, index: _Optional[int] = ..., term: _Optional[int] = ...) -> None: ...

class SyncJournalResponse(_message.Message):
    __slots__ = ("durable", "durable_index")
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    DURABLE_INDEX_FIELD_NUMBER: _ClassVar[int]
    durable: bool
    durable_index: int
    def __init__(self, durable: _Optional[bool] = ..., durable_index: _Optional[int] = ...) -> None: ...

class ChecksumCommitLogRequest(_message.Message):
    __slots__ = ("from_offset", "to_offset", "chunk_bytes")
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    from_offset: int
    to_offset: int
    chunk_bytes: int
    def __init__(self, from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ..., chunk_bytes: _Optional[int] = ...) -> None: ...

class CommitLogDigest(_message.Message):
    __slots__ = ("offset", "length", "sha256")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    offset: int
    length: int
    sha256: bytes
    def __init__(self, offset: _Optional[int] = ..., length: _Optional[int] = ..., sha256: _Optional[bytes] = ...) -> None: ...

class ChecksumCommitLogResponse(_message.Message):
    __slots__ = ("member_id", "chunks", "end_offset", "applied_offset", "applied_index", "min_offset")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    APPLIED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    chunks: _containers.RepeatedCompositeFieldContainer[CommitLogDigest]
    end_offset: int
    applied_offset: int
    applied_index: int
    min_offset: int
    def __init__(self, member_id: _Optional[str] = ..., chunks: _Optional[_Iterable[_Union[CommitLogDigest, _Mapping]]] = ..., end_offset: _Optional[int] = ..., applied_offset: _Optional[int] = ..., applied_index: _Optional[int] = ..., min_offset: _Optional[int] = ...) -> None: ...

class ConsumeQueueRange(_message.Message):
    __slots__ = ("topic", "queue_id", "from_offset", "to_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    from_offset: int
    to_offset: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ...) -> None: ...

class ChecksumConsumeQueuesRequest(_message.Message):
    __slots__ = ("ranges",)
    RANGES_FIELD_NUMBER: _ClassVar[int]
    ranges: _containers.RepeatedCompositeFieldContainer[ConsumeQueueRange]
    def __init__(self, ranges: _Optional[_Iterable[_Union[ConsumeQueueRange, _Mapping]]] = ...) -> None: ...

class ConsumeQueueDigest(_message.Message):
    __slots__ = ("topic", "queue_id", "min_offset", "max_offset", "from_offset", "to_offset", "sha256")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    from_offset: int
    to_offset: int
    sha256: bytes
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ..., sha256: _Optional[bytes] = ...) -> None: ...

class ChecksumConsumeQueuesResponse(_message.Message):
    __slots__ = ("member_id", "queues")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    queues: _containers.RepeatedCompositeFieldContainer[ConsumeQueueDigest]
    def __init__(self, member_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[ConsumeQueueDigest, _Mapping]]] = ...) -> None: ...

class FetchCommitLogBytesRequest(_message.Message):
    __slots__ = ("from_offset", "to_offset")
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    from_offset: int
    to_offset: int
    def __init__(self, from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ...) -> None: ...

class FetchCommitLogBytesResponse(_message.Message):
    __slots__ = ("offset", "data")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("member_id", "raft_address", "grpc_address")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    raft_address: str
    grpc_address: str
    def __init__(self, member_id: _Optional[str] = ..., raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("refusal",)
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    refusal: str
    def __init__(self, refusal: _Optional[str] = ...) -> None: ...

class GetStartupStateRequest(_message.Message):
    __slots__ = ("incarnation",)
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    incarnation: str
    def __init__(self, incarnation: _Optional[str] = ...) -> None: ...

class StartupState(_message.Message):
    __slots__ = ("member_id", "incarnation", "raft_started", "fresh", "heard_asker_before_raft")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    RAFT_STARTED_FIELD_NUMBER: _ClassVar[int]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    HEARD_ASKER_BEFORE_RAFT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    incarnation: str
    raft_started: bool
    fresh: bool
    heard_asker_before_raft: bool
    def __init__(self, member_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., raft_started: _Optional[bool] = ..., fresh: _Optional[bool] = ..., heard_asker_before_raft: _Optional[bool] = ...) -> None: ...

from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WriteOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WRITE_OUTCOME_UNSPECIFIED: _ClassVar[WriteOutcome]
    NOT_WRITTEN: _ClassVar[WriteOutcome]
    OUTCOME_UNKNOWN: _ClassVar[WriteOutcome]
WRITE_OUTCOME_UNSPECIFIED: WriteOutcome
NOT_WRITTEN: WriteOutcome
OUTCOME_UNKNOWN: WriteOutcome

class Message(_message.Message):
    __slots__ = ("type", "payload", "vchannel", "properties")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    VCHANNEL_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    type: str
    payload: bytes
    vchannel: str
    properties: _containers.ScalarMap[str, str]
    def __init__(self, type: _Optional[str] = ..., payload: _Optional[bytes] = ..., vchannel: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ProduceRequest(_message.Message):
    __slots__ = ("pchannel", "message", "producer_id", "sequence", "txn_id")
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    message: Message
    producer_id: int
    sequence: int
    txn_id: int
    def __init__(self, pchannel: _Optional[str] = ..., message: _Optional[_Union[Message, _Mapping]] = ..., producer_id: _Optional[int] = ..., sequence: _Optional[int] = ..., txn_id: _Optional[int] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("message_id", "message_id_text", "time_tick", "error")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_TEXT_FIELD_NUMBER: _ClassVar[int]
    TIME_TICK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    message_id: bytes
    message_id_text: str
    time_tick: int
    error: AppendError
    def __init__(self, message_id: _Optional[bytes] = ..., message_id_text: _Optional[str] = ..., time_tick: _Optional[int] = ..., error: _Optional[_Union[AppendError, _Mapping]] = ...) -> None: ...

class ProduceBatchRequest(_message.Message):
    __slots__ = ("pchannel", "messages", "producer_id", "first_sequence", "independent", "compact", "ids")
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    INDEPENDENT_FIELD_NUMBER: _ClassVar[int]
    COMPACT_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    producer_id: int
    first_sequence: int
    independent: bool
    compact: bool
    ids: _containers.RepeatedCompositeFieldContainer[AppendIds]
    def __init__(self, pchannel: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., producer_id: _Optional[int] = ..., first_sequence: _Optional[int] = ..., independent: _Optional[bool] = ..., compact: _Optional[bool] = ..., ids: _Optional[_Iterable[_Union[AppendIds, _Mapping]]] = ...) -> None: ...

class AppendIds(_message.Message):
    __slots__ = ("producer_id", "sequence")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    sequence: int
    def __init__(self, producer_id: _Optional[int] = ..., sequence: _Optional[int] = ...) -> None: ...

class PackRun(_message.Message):
    __slots__ = ("first_message_id", "first_message_id_text", "first_time_tick", "count")
    FIRST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_MESSAGE_ID_TEXT_FIELD_NUMBER: _ClassVar[int]
    FIRST_TIME_TICK_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    first_message_id: bytes
    first_message_id_text: str
    first_time_tick: int
    count: int
    def __init__(self, first_message_id: _Optional[bytes] = ..., first_message_id_text: _Optional[str] = ..., first_time_tick: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class ProduceBatchResponse(_message.Message):
    __slots__ = ("results", "runs")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ProduceResponse]
    runs: _containers.RepeatedCompositeFieldContainer[PackRun]
    def __init__(self, results: _Optional[_Iterable[_Union[ProduceResponse, _Mapping]]] = ..., runs: _Optional[_Iterable[_Union[PackRun, _Mapping]]] = ...) -> None: ...

class AppendError(_message.Message):
    __slots__ = ("code", "message", "outcome")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    outcome: WriteOutcome
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., outcome: _Optional[_Union[WriteOutcome, str]] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeliveryPolicy(_message.Message):
    __slots__ = ("all", "latest", "start_from", "start_after", "start_from_time_tick", "after_checkpoint")
    ALL_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    START_FROM_FIELD_NUMBER: _ClassVar[int]
    START_AFTER_FIELD_NUMBER: _ClassVar[int]
    START_FROM_TIME_TICK_FIELD_NUMBER: _ClassVar[int]
    AFTER_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    all: Empty
    latest: Empty
    start_from: bytes
    start_after: bytes
    start_from_time_tick: int
    after_checkpoint: str
    def __init__(self, all: _Optional[_Union[Empty, _Mapping]] = ..., latest: _Optional[_Union[Empty, _Mapping]] = ..., start_from: _Optional[bytes] = ..., start_after: _Optional[bytes] = ..., start_from_time_tick: _Optional[int] = ..., after_checkpoint: _Optional[str] = ...) -> None: ...

class ConsumeRequest(_message.Message):
    __slots__ = ("pchannel", "policy", "vchannel", "appended_only", "read_only", "max_batch_messages", "max_batch_bytes")
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    VCHANNEL_FIELD_NUMBER: _ClassVar[int]
    APPENDED_ONLY_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    policy: DeliveryPolicy
    vchannel: str
    appended_only: bool
    read_only: bool
    max_batch_messages: int
    max_batch_bytes: int
    def __init__(self, pchannel: _Optional[str] = ..., policy: _Optional[_Union[DeliveryPolicy, _Mapping]] = ..., vchannel: _Optional[str] = ..., appended_only: _Optional[bool] = ..., read_only: _Optional[bool] = ..., max_batch_messages: _Optional[int] = ..., max_batch_bytes: _Optional[int] = ...) -> None: ...

class ConsumedBatch(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ConsumedMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ConsumedMessage, _Mapping]]] = ...) -> None: ...

class ConsumedMessage(_message.Message):
    __slots__ = ("message_id", "message_id_text", "time_tick", "type", "payload", "vchannel", "properties", "source_node_id", "last_confirmed_id", "producer_id", "sequence", "txn_id", "wal_record", "term")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_TEXT_FIELD_NUMBER: _ClassVar[int]
    TIME_TICK_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    VCHANNEL_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_CONFIRMED_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    WAL_RECORD_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    message_id: bytes
    message_id_text: str
    time_tick: int
    type: str
    payload: bytes
    vchannel: str
    properties: _containers.ScalarMap[str, str]
    source_node_id: int
    last_confirmed_id: bytes
    producer_id: int
    sequence: int
    txn_id: int
    wal_record: bool
    term: int
    def __init__(self, message_id: _Optional[bytes] = ..., message_id_text: _Optional[str] = ..., time_tick: _Optional[int] = ..., type: _Optional[str] = ..., payload: _Optional[bytes] = ..., vchannel: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ..., source_node_id: _Optional[int] = ..., last_confirmed_id: _Optional[bytes] = ..., producer_id: _Optional[int] = ..., sequence: _Optional[int] = ..., txn_id: _Optional[int] = ..., wal_record: _Optional[bool] = ..., term: _Optional[int] = ...) -> None: ...

class AssignChannelRequest(_message.Message):
    __slots__ = ("pchannel", "term")
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    term: int
    def __init__(self, pchannel: _Optional[str] = ..., term: _Optional[int] = ...) -> None: ...

class AssignChannelResponse(_message.Message):
    __slots__ = ("pchannel", "first_time_tick", "first_message_id", "first_message_id_text", "attempts", "trace_id", "term")
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    FIRST_TIME_TICK_FIELD_NUMBER: _ClassVar[int]
    FIRST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_MESSAGE_ID_TEXT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    first_time_tick: int
    first_message_id: bytes
    first_message_id_text: str
    attempts: int
    trace_id: str
    term: int
    def __init__(self, pchannel: _Optional[str] = ..., first_time_tick: _Optional[int] = ..., first_message_id: _Optional[bytes] = ..., first_message_id_text: _Optional[str] = ..., attempts: _Optional[int] = ..., trace_id: _Optional[str] = ..., term: _Optional[int] = ...) -> None: ...

class RemoveChannelRequest(_message.Message):
    __slots__ = ("pchannel",)
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    def __init__(self, pchannel: _Optional[str] = ...) -> None: ...

class RemoveChannelResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListChannelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ChannelInfo(_message.Message):
    __slots__ = ("pchannel", "first_time_tick", "fenced", "term")
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    FIRST_TIME_TICK_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    first_time_tick: int
    fenced: bool
    term: int
    def __init__(self, pchannel: _Optional[str] = ..., first_time_tick: _Optional[int] = ..., fenced: _Optional[bool] = ..., term: _Optional[int] = ...) -> None: ...

class ListChannelsResponse(_message.Message):
    __slots__ = ("channels", "fenced")
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    channels: _containers.RepeatedCompositeFieldContainer[ChannelInfo]
    fenced: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, channels: _Optional[_Iterable[_Union[ChannelInfo, _Mapping]]] = ..., fenced: _Optional[_Iterable[str]] = ...) -> None: ...

class GetMVCCRequest(_message.Message):
    __slots__ = ("pchannel", "vchannel")
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    VCHANNEL_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    vchannel: str
    def __init__(self, pchannel: _Optional[str] = ..., vchannel: _Optional[str] = ...) -> None: ...

class GetMVCCResponse(_message.Message):
    __slots__ = ("time_tick", "confirmed")
    TIME_TICK_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    time_tick: int
    confirmed: bool
    def __init__(self, time_tick: _Optional[int] = ..., confirmed: _Optional[bool] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ("pchannel", "consumer", "message_id", "time_tick")
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_TICK_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    consumer: str
    message_id: bytes
    time_tick: int
    def __init__(self, pchannel: _Optional[str] = ..., consumer: _Optional[str] = ..., message_id: _Optional[bytes] = ..., time_tick: _Optional[int] = ...) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RemoveCheckpointRequest(_message.Message):
    __slots__ = ("pchannel", "consumer")
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    consumer: str
    def __init__(self, pchannel: _Optional[str] = ..., consumer: _Optional[str] = ...) -> None: ...

class GetRetentionRequest(_message.Message):
    __slots__ = ("pchannel",)
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    def __init__(self, pchannel: _Optional[str] = ...) -> None: ...

class ConsumerRetention(_message.Message):
    __slots__ = ("consumer", "message_id", "message_id_text", "time_tick", "backlog_messages", "backlog_bytes", "time_tick_lag_ms")
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_TEXT_FIELD_NUMBER: _ClassVar[int]
    TIME_TICK_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_BYTES_FIELD_NUMBER: _ClassVar[int]
    TIME_TICK_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    consumer: str
    message_id: bytes
    message_id_text: str
    time_tick: int
    backlog_messages: int
    backlog_bytes: int
    time_tick_lag_ms: int
    def __init__(self, consumer: _Optional[str] = ..., message_id: _Optional[bytes] = ..., message_id_text: _Optional[str] = ..., time_tick: _Optional[int] = ..., backlog_messages: _Optional[int] = ..., backlog_bytes: _Optional[int] = ..., time_tick_lag_ms: _Optional[int] = ...) -> None: ...

class GetRetentionResponse(_message.Message):
    __slots__ = ("truncated_before", "truncated_before_text", "storage_bytes", "consumers", "latest_time_tick")
    TRUNCATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_BEFORE_TEXT_FIELD_NUMBER: _ClassVar[int]
    STORAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    LATEST_TIME_TICK_FIELD_NUMBER: _ClassVar[int]
    truncated_before: bytes
    truncated_before_text: str
    storage_bytes: int
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerRetention]
    latest_time_tick: int
    def __init__(self, truncated_before: _Optional[bytes] = ..., truncated_before_text: _Optional[str] = ..., storage_bytes: _Optional[int] = ..., consumers: _Optional[_Iterable[_Union[ConsumerRetention, _Mapping]]] = ..., latest_time_tick: _Optional[int] = ...) -> None: ...

class TruncateRequest(_message.Message):
    __slots__ = ("pchannel", "retention_s", "up_to")
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    RETENTION_S_FIELD_NUMBER: _ClassVar[int]
    UP_TO_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    retention_s: float
    up_to: bytes
    def __init__(self, pchannel: _Optional[str] = ..., retention_s: _Optional[float] = ..., up_to: _Optional[bytes] = ...) -> None: ...

class TruncateResponse(_message.Message):
    __slots__ = ("moved", "truncated_before", "truncated_before_text", "truncated_through", "truncated_through_text")
    MOVED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_BEFORE_TEXT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_THROUGH_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_THROUGH_TEXT_FIELD_NUMBER: _ClassVar[int]
    moved: bool
    truncated_before: bytes
    truncated_before_text: str
    truncated_through: bytes
    truncated_through_text: str
    def __init__(self, moved: _Optional[bool] = ..., truncated_before: _Optional[bytes] = ..., truncated_before_text: _Optional[str] = ..., truncated_through: _Optional[bytes] = ..., truncated_through_text: _Optional[str] = ...) -> None: ...

class DeleteChannelRequest(_message.Message):
    __slots__ = ("pchannel",)
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    def __init__(self, pchannel: _Optional[str] = ...) -> None: ...

class DeleteChannelResponse(_message.Message):
    __slots__ = ("subscriptions_deleted", "keys_deleted")
    SUBSCRIPTIONS_DELETED_FIELD_NUMBER: _ClassVar[int]
    KEYS_DELETED_FIELD_NUMBER: _ClassVar[int]
    subscriptions_deleted: int
    keys_deleted: int
    def __init__(self, subscriptions_deleted: _Optional[int] = ..., keys_deleted: _Optional[int] = ...) -> None: ...

class BeginTxnRequest(_message.Message):
    __slots__ = ("pchannel", "vchannel", "keepalive_s")
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    VCHANNEL_FIELD_NUMBER: _ClassVar[int]
    KEEPALIVE_S_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    vchannel: str
    keepalive_s: float
    def __init__(self, pchannel: _Optional[str] = ..., vchannel: _Optional[str] = ..., keepalive_s: _Optional[float] = ...) -> None: ...

class BeginTxnResponse(_message.Message):
    __slots__ = ("txn_id",)
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    txn_id: int
    def __init__(self, txn_id: _Optional[int] = ...) -> None: ...

class TxnRequest(_message.Message):
    __slots__ = ("pchannel", "txn_id")
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    txn_id: int
    def __init__(self, pchannel: _Optional[str] = ..., txn_id: _Optional[int] = ...) -> None: ...

class KeepAliveTxnResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

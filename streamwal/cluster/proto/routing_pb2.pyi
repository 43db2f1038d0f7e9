from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class LookupChannelRequest(_message.Message):
    __slots__ = ("pchannel",)
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    def __init__(self, pchannel: _Optional[str] = ...) -> None: ...

class LookupChannelResponse(_message.Message):
    __slots__ = ("pchannel", "node_id", "address", "state", "term", "read_revision")
    PCHANNEL_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    READ_REVISION_FIELD_NUMBER: _ClassVar[int]
    pchannel: str
    node_id: int
    address: str
    state: str
    term: int
    read_revision: int
    def __init__(self, pchannel: _Optional[str] = ..., node_id: _Optional[int] = ..., address: _Optional[str] = ..., state: _Optional[str] = ..., term: _Optional[int] = ..., read_revision: _Optional[int] = ...) -> None: ...

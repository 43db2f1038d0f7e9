"""Messages being built (:class:`MutableMessage`) and persisted (:class:`ImmutableMessage`).

Both are immutable values; the ``with_*`` methods return changed copies, so a message
can be shared between tasks and retried without one attempt leaking into another.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from streamwal.errors import InvalidInputError
from streamwal.wal.message.message_type import MessageKind, MessageType
from streamwal.wal.message_id import MessageId

__all__ = [
    "MAX_TIME_TICK",
    "NO_PROPERTIES",
    "RESERVED_PREFIX",
    "ImmutableMessage",
    "MutableMessage",
    "built_immutable",
    "built_mutable",
]

RESERVED_PREFIX = "_"
"""Property keys starting with this belong to log format v1's own fields: a v1 writer
refuses a caller's key there (format v2 carries the caller's map verbatim)."""

MAX_TIME_TICK = 2**64 - 1

_EMPTY: Mapping[str, str] = MappingProxyType({})
NO_PROPERTIES: Mapping[str, str] = _EMPTY
"""The one empty property map, frozen: a decoder hands it to a message without
properties (the usual case) rather than a map of its own."""
_ENTRY_OVERHEAD = 64  # bytes counted per message beyond payload and properties


def _frozen_properties(properties: Mapping[str, str]) -> Mapping[str, str]:
    if properties is _EMPTY:  # the usual case; skips an ABC isinstance check per message
        return _EMPTY
    if not isinstance(properties, Mapping):
        raise InvalidInputError(f"properties must be a mapping, got {type(properties).__name__}")
    for key, value in properties.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidInputError(f"property {key!r}: keys and values must be str")
    return MappingProxyType(dict(properties)) if properties else _EMPTY


def _check_time_tick(time_tick: int | None) -> None:
    if time_tick is None:
        return
    if not isinstance(time_tick, int) or isinstance(time_tick, bool):
        raise InvalidInputError(f"time tick must be an int, got {time_tick!r}")
    if not 0 <= time_tick <= MAX_TIME_TICK:
        raise InvalidInputError(f"time tick {time_tick} is outside [0, 2**64)")


def _check_node_id(source: int | None) -> None:
    if source is None:
        return
    if not isinstance(source, int) or isinstance(source, bool) or source < 0:
        raise InvalidInputError(f"source node id must be an int >= 0, got {source!r}")


_ID_LIMIT = 2**64
_UNPAIRED = "a producer id and a sequence number go together (or neither)"


def _check_id(name: str, value: int | None) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < _ID_LIMIT:
        raise InvalidInputError(f"{name} must be an int in [0, 2**64), got {value!r}")


def _check_exactly_once(producer_id: int | None, sequence: int | None, txn_id: int | None) -> None:
    if (producer_id is None) != (sequence is None):
        raise InvalidInputError(_UNPAIRED)
    _check_id("producer id", producer_id)
    _check_id("sequence number", sequence)
    _check_id("transaction id", txn_id)


@dataclass(frozen=True, slots=True)
class MutableMessage:
    """A message on its way into the log.

    ``type`` is the caller's opaque string (or, for the WAL's own records, a
    :class:`MessageType`). ``vchannel`` ``""`` means every vchannel of the channel.
    ``properties`` are the caller's, carried verbatim (any key, any value).
    The time tick, last-confirmed id and source are stamped by the WAL.
    ``producer_id`` and ``sequence`` (both or neither) make the append idempotent;
    ``txn_id`` puts it in a transaction (:meth:`streamwal.wal.WAL.begin_txn`).
    """

    type: MessageKind
    payload: bytes = b""
    vchannel: str = ""
    properties: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    version: int = 1
    time_tick: int | None = None
    last_confirmed: MessageId | None = None
    source: int | None = None
    producer_id: int | None = None
    sequence: int | None = None
    txn_id: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.type, MessageType | str):
            raise InvalidInputError(f"type must be a str or a MessageType, got {self.type!r}")
        if not isinstance(self.payload, bytes):
            if not isinstance(self.payload, bytearray | memoryview):
                raise InvalidInputError(f"payload must be bytes, got {type(self.payload).__name__}")
            object.__setattr__(self, "payload", bytes(self.payload))
        if not isinstance(self.vchannel, str):
            raise InvalidInputError(f"vchannel must be a str, got {self.vchannel!r}")
        if not isinstance(self.version, int) or isinstance(self.version, bool) or self.version < 1:
            raise InvalidInputError(f"version must be an int >= 1, got {self.version!r}")
        if self.last_confirmed is not None and not isinstance(self.last_confirmed, MessageId):
            raise InvalidInputError(
                f"last_confirmed must be a MessageId, got {self.last_confirmed!r}"
            )
        _check_time_tick(self.time_tick)
        _check_node_id(self.source)
        _check_exactly_once(self.producer_id, self.sequence, self.txn_id)
        object.__setattr__(self, "properties", _frozen_properties(self.properties))

    def with_producer(self, producer_id: int, sequence: int) -> MutableMessage:
        """This message as sequence ``sequence`` of producer ``producer_id`` (idempotence)."""
        _check_exactly_once(producer_id, sequence, self.txn_id)
        return self._replace(producer_id=producer_id, sequence=sequence)

    def with_txn(self, txn_id: int) -> MutableMessage:
        """This message inside transaction ``txn_id``."""
        _check_exactly_once(self.producer_id, self.sequence, txn_id)
        return self._replace(txn_id=txn_id)

    def with_time_tick(self, time_tick: int) -> MutableMessage:
        _check_time_tick(time_tick)
        return self._replace(time_tick=time_tick)

    def with_last_confirmed(self, message_id: MessageId | None) -> MutableMessage:
        if message_id is not None and not isinstance(message_id, MessageId):
            raise InvalidInputError(f"last_confirmed must be a MessageId, got {message_id!r}")
        return self._replace(last_confirmed=message_id)

    def with_source(self, node_id: int) -> MutableMessage:
        _check_node_id(node_id)
        return self._replace(source=node_id)

    def stamped(
        self, time_tick: int, last_confirmed: MessageId | None, source: int
    ) -> MutableMessage:
        """All three WAL stamps at once (the append path's one copy)."""
        _check_time_tick(time_tick)
        _check_node_id(source)
        return _built(
            self.type,
            self.payload,
            self.vchannel,
            self.properties,
            self.version,
            time_tick,
            last_confirmed,
            source,
            self.producer_id,
            self.sequence,
            self.txn_id,
        )

    def _replace(self, **changes: Any) -> MutableMessage:
        # Copy without re-validating the fields that did not change.
        get = changes.get
        return _built(
            get("type", self.type),
            get("payload", self.payload),
            get("vchannel", self.vchannel),
            get("properties", self.properties),
            get("version", self.version),
            get("time_tick", self.time_tick),
            get("last_confirmed", self.last_confirmed),
            get("source", self.source),
            get("producer_id", self.producer_id),
            get("sequence", self.sequence),
            get("txn_id", self.txn_id),
        )

    def into_immutable(self, message_id: MessageId, term: int = 0) -> ImmutableMessage:
        """What this stamped message is once persisted at ``message_id``.

        A time tick without a last-confirmed id confirms itself (the first time tick
        of an owner); any other message must carry one.
        """
        if self.time_tick is None or self.source is None:
            raise InvalidInputError("a message is persisted only with a time tick and a source")
        if self.last_confirmed is None and self.type is not MessageType.TIME_TICK:
            raise InvalidInputError(f"a {self.type} message needs a last-confirmed id")
        return self.persisted_as(message_id, self.time_tick, self.last_confirmed, self.source, term)

    def persisted_as(
        self,
        message_id: MessageId,
        time_tick: int,
        last_confirmed: MessageId | None,
        source: int,
        term: int = 0,
    ) -> ImmutableMessage:
        """This message persisted with these stamps (``last_confirmed=None``: itself),
        by an owner of ``term``.

        No validation: for the WAL, which stamped it, and :meth:`into_immutable`. Built
        through the slots directly: the dataclass ``__init__`` of a frozen class sets
        each field through ``object.__setattr__`` and then runs ``__post_init__``, which
        cost the append path (one per message) more than twice as much.
        """
        return built_immutable(
            message_id,
            self.type,
            self.payload,
            time_tick,
            message_id if last_confirmed is None else last_confirmed,
            source,
            self.vchannel,
            self.properties,  # already frozen by MutableMessage
            self.version,
            self.producer_id,
            self.sequence,
            self.txn_id,
            term,
        )


_Msg = TypeVar("_Msg")


def _slot_setter(cls: type[_Msg], name: str) -> Callable[[_Msg, Any], None]:
    """The setter of ``cls``'s slot ``name``: builds a frozen message field by field."""
    setter: Callable[[_Msg, Any], None] = cls.__dict__[name].__set__
    return setter


_new = object.__new__
_m_type = _slot_setter(MutableMessage, "type")
_m_payload = _slot_setter(MutableMessage, "payload")
_m_vchannel = _slot_setter(MutableMessage, "vchannel")
_m_properties = _slot_setter(MutableMessage, "properties")
_m_version = _slot_setter(MutableMessage, "version")
_m_time_tick = _slot_setter(MutableMessage, "time_tick")
_m_last_confirmed = _slot_setter(MutableMessage, "last_confirmed")
_m_source = _slot_setter(MutableMessage, "source")
_m_producer_id = _slot_setter(MutableMessage, "producer_id")
_m_sequence = _slot_setter(MutableMessage, "sequence")
_m_txn_id = _slot_setter(MutableMessage, "txn_id")


def _built(
    type: MessageKind,
    payload: bytes,
    vchannel: str,
    properties: Mapping[str, str],
    version: int,
    time_tick: int | None,
    last_confirmed: MessageId | None,
    source: int | None,
    producer_id: int | None,
    sequence: int | None,
    txn_id: int | None,
) -> MutableMessage:
    """A ``MutableMessage`` of checked fields, through its slots (a stamp per append)."""
    msg = _new(MutableMessage)
    _m_type(msg, type)
    _m_payload(msg, payload)
    _m_vchannel(msg, vchannel)
    _m_properties(msg, properties)
    _m_version(msg, version)
    _m_time_tick(msg, time_tick)
    _m_last_confirmed(msg, last_confirmed)
    _m_source(msg, source)
    _m_producer_id(msg, producer_id)
    _m_sequence(msg, sequence)
    _m_txn_id(msg, txn_id)
    return msg


def built_mutable(
    type: MessageKind,
    payload: bytes,
    vchannel: str = "",
    properties: Mapping[str, str] = _EMPTY,
    producer_id: int | None = None,
    sequence: int | None = None,
    txn_id: int | None = None,
) -> MutableMessage:
    """``MutableMessage(...)`` for a decoder whose fields already have their types (the
    node's, from protobuf: ``type`` a str, ``payload`` bytes,
    ``vchannel`` a str, the ids unsigned 64-bit ints). The checks of values the decoder
    cannot guarantee still hold (:class:`~streamwal.errors.InvalidInputError` for a
    producer id without a sequence); the type checks of
    ``__post_init__``, once per message a node receives, are left out."""
    if (producer_id is None) != (sequence is None):
        raise InvalidInputError(_UNPAIRED)
    # ids are uint64 on the wire, but a batch numbers its messages first + i
    if sequence is not None and sequence >= _ID_LIMIT:
        raise InvalidInputError(f"sequence number must be an int in [0, 2**64), got {sequence}")
    return _built(
        type,
        payload,
        vchannel,
        _frozen_properties(properties),
        1,
        None,
        None,
        None,
        producer_id,
        sequence,
        txn_id,
    )


@dataclass(frozen=True, slots=True)
class ImmutableMessage:
    """A persisted message: every field is known, including its position in the log.

    ``term``: the term of the owner that wrote it (0 for a log written before terms, or
    in format v1). :attr:`is_wal_record`: the WAL wrote it (a time tick, a transaction
    marker), not a caller, whatever the caller's type string says.
    """

    message_id: MessageId
    type: MessageKind
    payload: bytes
    time_tick: int
    last_confirmed: MessageId
    source: int
    vchannel: str = ""
    properties: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    version: int = 1
    producer_id: int | None = None
    sequence: int | None = None
    txn_id: int | None = None
    term: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.properties, MappingProxyType):
            object.__setattr__(self, "properties", _frozen_properties(self.properties))

    @property
    def is_wal_record(self) -> bool:
        """The WAL wrote this record itself (its type is a :class:`MessageType`)."""
        return type(self.type) is MessageType

    @property
    def estimated_size(self) -> int:
        """Bytes this message is accounted for in memory (payload, properties, overhead)."""
        size = len(self.payload) + len(self.vchannel) + _ENTRY_OVERHEAD
        if self.properties is _EMPTY:  # the usual case, once per appended message
            return size
        return size + sum(len(k) + len(v) for k, v in self.properties.items())

    def applies_to(self, vchannel: str) -> bool:
        """Whether a reader of ``vchannel`` should see this message."""
        return not self.vchannel or self.vchannel == vchannel


_new_immutable = object.__new__
_set_message_id = _slot_setter(ImmutableMessage, "message_id")
_set_type = _slot_setter(ImmutableMessage, "type")
_set_payload = _slot_setter(ImmutableMessage, "payload")
_set_time_tick = _slot_setter(ImmutableMessage, "time_tick")
_set_last_confirmed = _slot_setter(ImmutableMessage, "last_confirmed")
_set_source = _slot_setter(ImmutableMessage, "source")
_set_vchannel = _slot_setter(ImmutableMessage, "vchannel")
_set_properties = _slot_setter(ImmutableMessage, "properties")
_set_version = _slot_setter(ImmutableMessage, "version")
_set_producer_id = _slot_setter(ImmutableMessage, "producer_id")
_set_sequence = _slot_setter(ImmutableMessage, "sequence")
_set_txn_id = _slot_setter(ImmutableMessage, "txn_id")
_set_term = _slot_setter(ImmutableMessage, "term")


def built_immutable(
    message_id: MessageId,
    type: MessageKind,
    payload: bytes,
    time_tick: int,
    last_confirmed: MessageId,
    source: int,
    vchannel: str,
    properties: Mapping[str, str],
    version: int,
    producer_id: int | None,
    sequence: int | None,
    txn_id: int | None,
    term: int = 0,
) -> ImmutableMessage:
    """``ImmutableMessage(...)`` of fields the caller has checked (the WAL that stamped
    them, the decoder that parsed them), built through the slots: the dataclass
    ``__init__`` of a frozen class sets each field through ``object.__setattr__``, a
    cost of every message appended or read. ``properties`` are frozen (and their keys
    checked) as ``__post_init__`` does."""
    if not isinstance(properties, MappingProxyType):
        properties = _frozen_properties(properties)
    msg = _new_immutable(ImmutableMessage)
    _set_message_id(msg, message_id)
    _set_type(msg, type)
    _set_payload(msg, payload)
    _set_time_tick(msg, time_tick)
    _set_last_confirmed(msg, last_confirmed)
    _set_source(msg, source)
    _set_vchannel(msg, vchannel)
    _set_properties(msg, properties)
    _set_version(msg, version)
    _set_producer_id(msg, producer_id)
    _set_sequence(msg, sequence)
    _set_txn_id(msg, txn_id)
    _set_term(msg, term)
    return msg

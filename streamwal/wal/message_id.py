"""Backend-neutral message ids: a total order with a lossless byte form.

Each backend defines its own subclass; ids of different backends never compare.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import total_ordering
from typing import Any

from streamwal.errors import BackendMismatchError, DecodeError

__all__ = ["MessageId"]


@total_ordering
class MessageId(ABC):
    """A position in one channel's log.

    Subclasses provide :meth:`sort_key` (the log order), :meth:`to_bytes` (lossless,
    what goes on the wire and in acknowledgement files) and ``__str__`` (short and
    readable, for logs and traces).
    """

    __slots__ = ()

    @abstractmethod
    def sort_key(self) -> tuple[int, ...]:
        """The tuple that orders ids like the log does."""

    @abstractmethod
    def to_bytes(self) -> bytes:
        """A lossless serialization; the backend's ``message_id_from_bytes`` reverses it."""

    def in_pack(self, index: int) -> MessageId:
        """The id of message ``index`` of a pack of several messages stored in the entry
        this id names (log format v2). It orders after the entry's own id and before the
        next entry's. :class:`~streamwal.errors.DecodeError` if this id cannot address
        messages inside it (it already names a part of an entry)."""
        raise DecodeError(f"{type(self).__name__} {self} cannot address messages of a pack")

    def follows_in_entry(self, previous: MessageId) -> bool:
        """Whether this id names the message right after ``previous`` inside one entry
        (same entry, index one more). Its byte form is then ``previous``'s with the
        trailing 4-byte big-endian index one more, and its text ``previous``'s with the
        part after the last ``:`` one more: a compact ``ProduceBatchResponse`` sends one
        id per run of such messages (``streaming.proto``, ``PackRun``). ``False`` unless
        a backend's ids are laid out that way."""
        return False

    def pack_member_bytes(self, count: int) -> list[bytes]:
        """The byte forms of messages ``0 .. count - 1`` of a pack in this entry (what
        :meth:`in_pack` then :meth:`to_bytes` give each), for a reader that needs only
        the bytes (``streamwal verify``): a backend may compute them without an id
        object per message. :class:`~streamwal.errors.DecodeError` as :meth:`in_pack`."""
        return [self.in_pack(index).to_bytes() for index in range(count)]

    def _check(self, other: object) -> MessageId:
        if not isinstance(other, MessageId):
            raise BackendMismatchError(f"cannot compare {type(self).__name__} with {other!r}")
        if type(other) is not type(self):
            raise BackendMismatchError(
                f"cannot compare {type(self).__name__} with {type(other).__name__}"
            )
        return other

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId) or type(other) is not type(self):
            return NotImplemented
        return self.sort_key() == other.sort_key()

    def __lt__(self, other: Any) -> bool:
        return self.sort_key() < self._check(other).sort_key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.sort_key()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self})"

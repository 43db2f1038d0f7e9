"""The shutdown both holders of a node's channels go through: its channel manager
(:mod:`streamwal.node.channels`) and its read-only handles
(:mod:`streamwal.node.read_only`) close once, and from then on refuse every new call
with the same error, so a client sees one answer (UNAVAILABLE) whichever it reached."""

from __future__ import annotations

from streamwal.errors import ClosedError

__all__ = ["ClosesOnce"]


class ClosesOnce:
    """Mixed into a holder of channels whose ``close`` asks :meth:`_close_once` first."""

    _closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the node is shutting down")

    def _close_once(self) -> bool:
        """Whether this is the first close, the one that closes what is held: a later
        one has nothing left to do (``close`` stays idempotent)."""
        if self._closed:
            return False
        self._closed = True
        return True

"""What the history rules read of one entry: its facts.

A module of its own so that the checker, its exactly-once rules and the process
that decodes entries for it share the type without importing one another; the
decoding itself is :func:`streamwal.verify.history.entry_facts`, beside
``decode_entry``.
"""

from __future__ import annotations

__all__ = ["Facts"]

Facts = tuple[
    bytes, str | None, int, bytes, bytes, int, int | None, int | None, int | None, int | None, int
]
"""What the rules read of one entry, in builtins only (so that a batch of them crosses
to another process as one ``marshal`` blob): its id's bytes; its type's wire name
(``None``: foreign or undecodable, and every other field empty); time tick; the
payload's sha256; the last-confirmed id's bytes (an owner's first time tick confirms
itself: its own id); source node; producer id and sequence; transaction id; and a
``CommitTxn``'s member count (its payload, parsed); and the term of the owner that
wrote it (0: unknown, as in log format v1)."""

"""Backends that implement the WAL's backend contract (:mod:`streamwal.wal.backend`)."""

# This folder is also streamwal/adaptors (a symlink): loaded by its bare name it would
# be a second copy of every class, so that name is refused.
if __name__ != "streamwal.adaptors":
    raise ImportError(f"import streamwal.adaptors, not {__name__} (streamwal is the import root)")

"""Backends that implement the WAL's backend contract (:mod:`streamwal.wal.backend`)."""

"""Backends that implement the WAL's backend contract (:mod:`wal.backend`)."""

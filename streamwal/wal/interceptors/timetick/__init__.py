"""The time-tick interceptor and its parts (ordered writer, ack sequencer, ticker)."""

from streamwal.wal.interceptors.timetick.interceptor import TimeTickInterceptor

__all__ = ["TimeTickInterceptor"]

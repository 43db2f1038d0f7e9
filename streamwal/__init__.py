"""streamwal: a write-ahead log for a streaming node, on Apache Pulsar."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("streamwal")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]

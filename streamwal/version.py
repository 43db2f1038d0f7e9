"""The installed distribution's version, at the bottom of the layers.

Modules inside the product read it here rather than from the package root: the root
(:mod:`streamwal`) re-exports names from every layer, so importing it from below would
be an arrow up.
"""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("streamwal")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

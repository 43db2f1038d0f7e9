"""What a failed append left in the log, as a client of the node reads it.

:func:`write_outcome` and :data:`OUTCOME_KEY` (from
:mod:`streamwal.node.call_outcome`) read it from a failed call; :func:`rpc_error` and
:func:`in_band_error` make the typed error of a failure the node answered in band.
"""

from __future__ import annotations

import grpc

from streamwal.errors import WriteOutcome
from streamwal.node.call_outcome import OUTCOME_KEY, write_outcome
from streamwal.node.client_errors import NodeCallError, node_error
from streamwal.node.proto import streaming_pb2 as pb

__all__ = ["OUTCOME_KEY", "in_band_error", "rpc_error", "write_outcome"]

_CODES = {code.value[0]: code for code in grpc.StatusCode}
_OUTCOMES = {pb.NOT_WRITTEN: WriteOutcome.NOT_WRITTEN, pb.OUTCOME_UNKNOWN: WriteOutcome.UNKNOWN}


def rpc_error(
    code: grpc.StatusCode, details: str, outcome: WriteOutcome | None = None
) -> NodeCallError:
    """A failure as a client sees a failed call, so in-band and call errors are handled
    alike (``outcome``: where :func:`write_outcome` finds it), as its typed error."""
    empty = grpc.aio.Metadata()
    trailing = (
        grpc.aio.Metadata() if outcome is None else grpc.aio.Metadata((OUTCOME_KEY, outcome.value))
    )
    return node_error(grpc.aio.AioRpcError(code, empty, trailing, details))


def in_band_error(error: pb.AppendError, which: str | None) -> NodeCallError:
    """An in-band error as the status a unary ``produce`` would have raised, with the
    outcome where :func:`write_outcome` finds it (none from an older node: unknown);
    its details name ``which`` append failed, if said."""
    code = _CODES.get(error.code, grpc.StatusCode.UNKNOWN)
    details = error.message if which is None else f"{which}: {error.message}"
    return rpc_error(code, details, _OUTCOMES.get(error.outcome))

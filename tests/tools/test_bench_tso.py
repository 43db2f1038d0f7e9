"""The TSO benchmark alone (:func:`streamwal_lab.bench.tso.handler`): one JSON object.

It was ``streamwal tso bench``; the benchmark is the lab's now (the ``tso`` suite of
``streamwal bench``), and its stand-alone handler still prints the bare figures.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from streamwal_lab.bench import tso as bench


def main(argv: list[str]) -> int:
    """The handler on ``argv`` parsed as its own command line."""
    parser = argparse.ArgumentParser(prog="tso-bench")
    bench.add_arguments(parser)
    return bench.handler(parser.parse_args(argv))


@pytest.fixture
def etcd_endpoint(stack: Any) -> str:
    """The shared stack's etcd (``host:port``)."""
    return str(stack.etcd_endpoint)


@pytest.mark.integration
def test_bench_prints_one_json_object(
    etcd_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--etcd", etcd_endpoint, "--duration", "0.05", "--samples", "5"]
    assert main([*args, "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    for key in (
        "local_allocator_per_s",
        "oracle_generate_per_s",
        "grpc_batched_c1_per_s",
        "grpc_batched_c4_per_s",
        "grpc_batched_c16_per_s",
        "grpc_unbatched_c16_rpc_per_s",
        "fetch_inprocess_p50_ms",
        "fetch_grpc_p99_ms",
    ):
        assert figures[key] > 0, key

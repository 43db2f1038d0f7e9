"""The targets of the batching and read-path cells, judged from synthetic results."""

from __future__ import annotations

from streamwal_lab.bench.targets import evaluate


def test_node_targets_need_the_full_size_cell() -> None:
    cell = {"payload_bytes": 128, "concurrency": 32}
    small = {"cells": [{**cell, "concurrency": 2}], "consume": {"node_batch_vs_wal_ratio": 2.0}}
    assert evaluate({"node": small}) == []
    full = {
        "cells": [{**cell, "stream_throughput_ratio": 0.95, "unary_throughput_ratio": 0.4}],
        "consume": {"node_batch_vs_wal_ratio": 1.2},
    }
    met = {t.name: t.met for t in evaluate({"node": full})}
    assert met == {
        "ProduceStream/WAL, 128 B x 32": True,
        "Produce/WAL, 128 B x 32": False,
        "ConsumeBatch/WAL scanner": True,
    }
    assert {t.name: t.ceiling for t in evaluate({"node": full})} == dict.fromkeys(met)
    ceilings = {"ceiling_stream_throughput_ratio": 0.8, "ceiling_unary_throughput_ratio": 0.6}
    measured = {
        **full,
        "cells": [
            {**cell, "stream_throughput_ratio": 0.95, "unary_throughput_ratio": 0.4, **ceilings}
        ],
    }
    assert {t.name: t.ceiling for t in evaluate({"node": measured})} == {
        "ProduceStream/WAL, 128 B x 32": 0.8,
        "Produce/WAL, 128 B x 32": 0.6,
        "ConsumeBatch/WAL scanner": None,
    }
    older = {**full, "consume": {}}  # a result from before ConsumeBatch: that one not met
    assert not {t.name: t.met for t in evaluate({"node": older})}["ConsumeBatch/WAL scanner"]


def test_batch_read_and_channel_targets() -> None:
    results = {
        "pipelined": {
            "cells": [
                {"payload_bytes": 128, "wal_vs_raw_ratio": 3.1, "node_vs_raw_ratio": 1.9},
                {"payload_bytes": 4096, "wal_vs_raw_ratio": 0.1, "node_vs_raw_ratio": 0.1},
            ]
        },
        "reads": {
            "catch_up_vs_raw_batched_ratio": 2.0,
            "consume_batch_vs_raw_batched_ratio": 1.9,
            "consume_batch_vs_catch_up_ratio": float("nan"),
        },
        "node-channels": {
            "points": [
                {"channels": 16, "node_vs_raw_ratio": 0.91},
                {"channels": 256, "node_vs_raw_ratio": 0.3},
            ]
        },
    }
    met = {(t.suite, t.name): t.met for t in evaluate(results)}
    assert met == {
        ("pipelined", "batch appends WAL/raw send_async, 128 B"): True,
        ("pipelined", "batch produce node/raw send_async, 128 B"): False,
        ("reads", "WAL catch-up/raw reader of the raw producer's channel"): True,
        ("reads", "ConsumeBatch through the node/raw reader of the raw producer's channel"): False,
        ("reads", "ConsumeBatch through the node/WAL catch-up"): False,
        ("node-channels", "node/raw, 16 channels"): True,
        ("node-channels", "node/raw, 256 channels"): False,
    }

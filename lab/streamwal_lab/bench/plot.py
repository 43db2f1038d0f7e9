"""PNG charts of a report (matplotlib, imported only when charts are asked for).

- ``append-throughput``: appends/s against concurrent appenders, one panel per payload;
- ``append-latency``: p50 and p99 against concurrent appenders, one panel per payload;
- ``channels``: throughput and memory per channel against open channels.

WAL and raw share colours across charts: WAL solid, raw dashed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot"]

_WAL = {"color": "tab:blue", "linestyle": "-", "marker": "o", "label": "WAL"}
_RAW = {"color": "tab:orange", "linestyle": "--", "marker": "s", "label": "raw producer"}


def _size(payload: int) -> str:
    return f"{payload // 1024} KiB" if payload >= 1024 else f"{payload} B"


def plot(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    """Write the charts the report has data for; their paths.

    Raises ``RuntimeError`` if matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib: pip install matplotlib") from exc
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    suites = report["suites"]
    if "append" in suites and suites["append"]["cells"]:
        written += _append_charts(plt, suites["append"]["cells"], out_dir, stem)
    if "channels" in suites and suites["channels"]["points"]:
        written.append(_channels_chart(plt, suites["channels"]["points"], out_dir, stem))
    return written


def _append_charts(plt: Any, cells: list[dict[str, Any]], out_dir: Path, stem: str) -> list[Path]:
    payloads = sorted({c["payload_bytes"] for c in cells})
    paths = []
    for kind in ("throughput", "latency"):
        fig, axes = plt.subplots(
            1, len(payloads), figsize=(3.6 * len(payloads), 3.3), squeeze=False
        )
        for ax, payload in zip(axes[0], payloads, strict=True):
            row = sorted(
                (c for c in cells if c["payload_bytes"] == payload), key=lambda c: c["concurrency"]
            )
            xs = [c["concurrency"] for c in row]
            if kind == "throughput":
                for mode, style in (("wal", _WAL), ("raw", _RAW)):
                    ax.plot(xs, [c[mode]["per_s"] for c in row], **style)
                ax.set_ylabel("appends/s")
                ax.set_ylim(bottom=0)
            else:
                for mode, style in (("wal", _WAL), ("raw", _RAW)):
                    p99 = {**style, "label": f"{style['label']} p99"}
                    p50 = {**style, "label": f"{style['label']} p50", "alpha": 0.45}
                    p50["marker"] = "."
                    ax.plot(xs, [c[mode]["p99_ms"] for c in row], **p99)
                    ax.plot(xs, [c[mode]["p50_ms"] for c in row], **p50)
                ax.set_ylabel("latency (ms)")
                ax.set_ylim(bottom=0)
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [str(x) for x in xs])
            ax.set_xlabel("concurrent appenders")
            ax.set_title(_size(payload))
            ax.grid(True, alpha=0.3)
        axes[0][0].legend(fontsize="small")
        title = "Append throughput" if kind == "throughput" else "Append latency (p50, p99)"
        fig.suptitle(f"{title}: WAL vs raw producer, same broker", fontsize="medium")
        fig.tight_layout()
        path = out_dir / f"{stem}-append-{kind}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def _channels_chart(plt: Any, points: list[dict[str, Any]], out_dir: Path, stem: str) -> Path:
    xs = [p["channels"] for p in points]
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.3))
    for mode, style in (("wal", _WAL), ("raw", _RAW)):
        left.plot(xs, [p[mode]["throughput"]["per_s"] for p in points], **style)
        right.plot(xs, [p[mode]["rss_per_channel_mib"] * 1024 for p in points], **style)
    left.set_ylabel("appends/s (all channels)")
    left.set_ylim(bottom=0)
    right.set_ylabel("RSS per open channel (KiB)")
    right.set_title("target: < 2048 KiB", fontsize="small")
    right.set_ylim(bottom=0)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel("open channels on one node")
        ax.grid(True, alpha=0.3)
    left.legend(fontsize="small")
    right.legend(fontsize="small")
    fig.suptitle("One node, many channels", fontsize="medium")
    fig.tight_layout()
    path = out_dir / f"{stem}-channels.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path

"""What an operator sees of the demo's traces in Jaeger's real UI, in headless Chromium.

The demo (as a user runs it) makes the traces: a channel's open that retried while
the broker was unreachable, and its move to node 2 with node 1's refused write. The
test opens both in Jaeger's UI and reads the page as a person would: the attempt
rows, the red error marks, the span details (the refused write's domain error, the
move's reason) and each node's process. A second test kills (-9) the owner of a
channel in a 3-node cluster and opens the failover's trace: its parts in the order
they happened, and the duration the page shows against the outage the writers saw.

It needs Jaeger serving its UI (``STREAMWAL_JAEGER_UI_ASSETS``: see docs/traces.md)
and a Chromium (Debian's ``chromium``) driven by playwright. Without them it FAILS
and names what to install: a test of the UI that passes without a UI would say
nothing. ``STREAMWAL_JAEGER_UI=unavailable`` declares a machine that has no UI to
test; the test is then skipped, saying so. ``STREAMWAL_UPDATE_SCREENSHOTS=1`` writes
the screenshots docs/traces.md shows (docs/img/jaeger-*.png); otherwise they go to
the test's temporary folder.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.jaeger_ui import ui_is_real
from streamwal_lab.stack.paths import ENV_JAEGER_UI_ASSETS
from tests.cluster.failovers import DEFAULT_TIMES, failover_trace, kill_an_owner
from tests.node.processes import run_python
from tests.node.processes import shown as shown_of

pytestmark = pytest.mark.integration

ENV_UI = "STREAMWAL_JAEGER_UI"
ENV_CHROMIUM = "STREAMWAL_CHROMIUM"
ENV_UPDATE = "STREAMWAL_UPDATE_SCREENSHOTS"
_DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"


@dataclass(frozen=True)
class Row:
    """One span row of the trace timeline, as shown."""

    service: str
    operation: str
    error: bool


def _chromium() -> str:
    for candidate in (os.environ.get(ENV_CHROMIUM), "chromium", "chromium-browser"):
        found = candidate and shutil.which(candidate)
        if found:
            return found
    pytest.fail(
        "no Chromium to open Jaeger's UI in: install Debian's `chromium` "
        f"(apt-get install -y chromium; .ci/run does), or name one in {ENV_CHROMIUM}, "
        f"or set {ENV_UI}=unavailable on a machine that has no UI to test"
    )


@pytest.fixture
async def jaeger_ui(telemetry_stack: StackInfo) -> str:
    """Jaeger's URL once it serves the real UI; a failure naming what is missing."""
    if os.environ.get(ENV_UI) == "unavailable":
        pytest.skip(f"{ENV_UI}=unavailable: this machine has no Jaeger UI to test")
    url = telemetry_stack.jaeger_url
    assert url, "the stack has no Jaeger"
    if not await asyncio.to_thread(ui_is_real, url):
        given = os.environ.get(ENV_JAEGER_UI_ASSETS)
        pytest.fail(
            f"Jaeger at {url} serves no UI (a Go build's placeholder page). "
            + (
                f"{ENV_JAEGER_UI_ASSETS} is set ({given}) but the running Jaeger was started "
                "without it: `streamwal stack down --only jaeger && streamwal stack up`"
                if given
                else f"Set {ENV_JAEGER_UI_ASSETS} to built jaeger-ui assets (CI: "
                "../shared/jaeger-ui/, which .ci/run exports) and restart Jaeger"
            )
            + f", or set {ENV_UI}=unavailable on a machine that has no UI to test"
        )
    return url


async def _demo_traces(jaeger_url: str) -> tuple[str, str]:
    """The demo's open and move trace ids, from its output (it gives UI links)."""
    code, text, err = await run_python("-m", "streamwal.cli", "demo", "--part", "move", timeout=180)
    shown = shown_of(text, err, 3000, 1500)
    assert code == 0, shown
    opened = re.search(rf"\n   trace: {re.escape(jaeger_url)}/trace/([0-9a-f]{{32}})", text)
    moved = re.search(rf"move trace: {re.escape(jaeger_url)}/trace/([0-9a-f]{{32}})", text)
    assert opened and moved, shown
    return opened.group(1), moved.group(1)


async def _rows(page: Any) -> list[Row]:
    found = await page.eval_on_selector_all(
        ".span-row",
        """rows => rows.map(r => [
            r.querySelector('.span-svc-name')?.textContent.trim() ?? '',
            r.querySelector('.endpoint-name')?.textContent.trim() ?? '',
            r.querySelector('.SpanBarRow--errorIcon') !== null,
        ])""",
    )
    return [Row(service, operation, error) for service, operation, error in found]


async def _open(page: Any, jaeger_url: str, trace_id: str, spans: int) -> list[Row]:
    """The trace's page once all ``spans`` rows show (Jaeger may still be receiving)."""
    for _ in range(20):
        await page.goto(f"{jaeger_url}/trace/{trace_id}")
        await page.wait_for_selector(".span-row", timeout=30_000)
        rows = await _rows(page)
        if len(rows) >= spans:
            return rows
        await asyncio.sleep(0.5)
    return rows


async def _details(page: Any, index: int) -> str:
    """The text of row ``index``'s details, its events expanded."""
    await page.locator(".span-row").nth(index).locator(".span-name").click()
    detail = page.locator(".VirtualizedTraceView--row", has_text="Process:").first
    await detail.wait_for(timeout=10_000)
    events = detail.locator(".AccordianLogs--content .AccordianKeyValues--header")
    for i in range(await events.count()):
        await events.nth(i).click()
    text = str(await detail.inner_text())
    await page.locator(".span-row").nth(index).locator(".span-name").click()  # fold again
    return text


async def _shoot(page: Any, name: str, tmp_path: Path) -> Path:
    folder = _DOCS_IMG if os.environ.get(ENV_UPDATE) == "1" else tmp_path
    path = folder / name
    await page.screenshot(path=str(path))
    return path


async def test_an_operator_reads_the_open_and_the_move_in_jaegers_ui(
    jaeger_ui: str, tmp_path: Path
) -> None:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e './lab[dev]' (it drives Chromium)")
    chromium = _chromium()
    open_id, move_id = await _demo_traces(jaeger_ui)
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 620})

            # the open: a failed attempt per unreachable second, each marked red, then
            # the one that persisted the first time tick
            rows = await _open(page, jaeger_ui, open_id, spans=5)
            assert ("streamwal-node", "wal.open", False) in {
                (r.service, r.operation, r.error) for r in rows
            }, rows
            attempts = [i for i, r in enumerate(rows) if r.operation == ATTEMPT]
            assert len(attempts) >= 2, rows
            assert all(rows[i].error for i in attempts[:-1]), rows
            assert not rows[attempts[-1]].error, rows
            assert all(rows[i].service == "streamwal-node" for i in attempts), rows
            await _shoot(page, "jaeger-open-trace.png", tmp_path)
            failed = await _details(page, attempts[0])
            assert "UnavailableError" in failed, failed
            assert "wal.channel" in failed and "demo-a-" in failed, failed
            assert "(exclusivity probe)" not in failed, failed
            assert "service.instance.id" in failed and "node-1" in failed, failed

            # the move: the request, node 2's open, node 1's refused write marked red
            rows = await _open(page, jaeger_ui, move_id, spans=7)
            operations = [r.operation for r in rows]
            assert operations[0] == "cluster.move", rows
            assert "client /streamwal.v1.StreamingNode/AssignChannel" in operations, rows
            (refused,) = [
                i
                for i, r in enumerate(rows)
                if r.service == "streamwal-node" and r.operation.endswith("/Produce")
            ]
            assert rows[refused].error, rows
            (opened,) = [i for i, r in enumerate(rows) if r.operation == "wal.open"]
            await _shoot(page, "jaeger-move-trace.png", tmp_path)
            move = await _details(page, 0)
            assert "streamwal.cluster.reason" in move and "operator request" in move, move
            fenced = await _details(page, refused)
            assert "ChannelFencedError" in fenced, fenced
            assert "AbortError" not in fenced, fenced
            new_owner = await _details(page, opened)
            # two nodes, two processes: each span's process names its node
            assert re.search(r"service\.instance\.id\s*=?\s*node-1", fenced), fenced
            assert re.search(r"service\.instance\.id\s*=?\s*node-2", new_owner), new_owner
        finally:
            await browser.close()


ATTEMPT = "wal.first_time_tick.attempt"
_FAILOVER_PARTS = ["cluster.evidence", "cluster.move", "wal.open", "cluster.first_write"]
_UNITS = {"μs": 1e-6, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _seconds(shown: str) -> float:
    """A duration as Jaeger's UI prints it (``980.5ms``, ``1.68s``) in seconds."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*(μs|µs|us|ms|s|m)", shown.strip())
    assert match, f"not a duration Jaeger prints: {shown!r}"
    return float(match.group(1)) * _UNITS[match.group(2)]


async def test_an_operator_reads_a_failover_whole_in_jaegers_ui(
    jaeger_ui: str,
    telemetry_stack: StackInfo,
    tmp_path: Path,
    etcd_prefix: Any,
    unique: str,
) -> None:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e './lab[dev]' (it drives Chromium)")
    chromium = _chromium()
    channels = [f"uifo-{unique}-{i}" for i in range(3)]
    killed = await kill_an_owner(
        telemetry_stack, tmp_path, etcd_prefix("uifo"), channels, **DEFAULT_TIMES
    )
    channel = sorted(killed.gaps)[0]
    gap_s = killed.gaps[channel]
    # the trace as Jaeger's API holds it (one root, parts in order, bounds)
    move, root = await failover_trace(telemetry_stack, killed, channel, _FAILOVER_PARTS)
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 620})
            rows = await _open(page, jaeger_ui, move.trace_id, spans=len(_FAILOVER_PARTS) + 1)
            operations = [r.operation for r in rows]
            # the root first: the whole outage; then its parts, in the order they came
            assert operations[0] == "cluster.failover", rows
            assert all(r.service == "streamwal-node" for r in rows), rows
            where = [operations.index(part) for part in _FAILOVER_PARTS]
            assert where == sorted(where), rows
            shown = (
                await page.locator(".LabeledList--item", has_text="Duration")
                .locator("strong")
                .inner_text()
            )
            duration_s = _seconds(shown)
            # what the page shows is the root's length (to the UI's rounding) ...
            assert abs(duration_s - root.duration_us / 1e6) <= 0.01 + 0.01 * duration_s, (
                shown,
                root.duration_us,
            )
            # ... and that is the outage: at least 0.8 of the gap the writers saw, at most
            # that gap plus a renewal interval and the precision its start is known to
            precision_s = float(root.tags["streamwal.cluster.last_renewal_precision_ms"]) / 1000
            bound_s = gap_s + killed.lease_ttl_s / 3 + precision_s
            print(f"{channel}: kill to first ack {gap_s:.2f}s, Jaeger shows {shown}")
            assert 0.8 * gap_s <= duration_s <= bound_s + 0.01, (shown, gap_s, bound_s)
            await _shoot(page, "jaeger-failover-trace.png", tmp_path)
            details = await _details(page, 0)
            assert "streamwal.cluster.reason" in details and "node-lost" in details, details
            assert "connection-refused" in details, details
            assert channel in details, details
        finally:
            await browser.close()

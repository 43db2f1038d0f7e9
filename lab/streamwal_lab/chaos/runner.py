"""Running scenarios: one :class:`~streamwal_lab.chaos.env.ChaosEnv` each, bounded in time.

A scenario that raises or overruns its time limit is reported as a problem (it never
takes the run down), and whatever it started is stopped before the next one begins.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios import SCENARIOS, Scenario
from streamwal_lab.chaos.services import PrivatePulsar

__all__ = ["run_scenario", "run_scenarios"]


async def run_scenario(
    scenario: Scenario,
    rounds: int,
    *,
    pulsar_url: str,
    etcd_endpoint: str,
    workdir: Path,
    seed: int,
    say: Callable[[str], None] = lambda _: None,
    keep_workdir: bool = True,
    pulsar_admin_url: str | None = None,
    admin_url: str | None = None,
    stock_pulsar: PrivatePulsar | None = None,
    auth_token_file: Path | None = None,
) -> ScenarioResult:
    """Run ``scenario`` for ``rounds`` rounds; never raises (failures become problems).

    ``pulsar_admin_url``: the shared broker's, whose topics the scenario's channels
    leave behind (see :meth:`ChaosEnv.close`). ``stock_pulsar``: a running stock
    broker to use instead of starting one (see :attr:`ChaosEnv.stock_pulsar`).
    ``auth_token_file``: run the nodes with ``auth.enabled`` (see
    :mod:`streamwal_lab.chaos.auth`)."""
    env = ChaosEnv(
        workdir=workdir,
        pulsar_url=pulsar_url,
        etcd_endpoint=etcd_endpoint,
        rng=random.Random(seed),
        say=say,
        pulsar_admin_url=pulsar_admin_url,
        admin_url=admin_url or pulsar_admin_url,
        stock_pulsar=stock_pulsar,
        auth_token_file=auth_token_file,
    )
    started = time.monotonic()
    limit = scenario.time_limit(rounds)
    try:
        async with asyncio.timeout(limit):
            result = await scenario.run(env, rounds)
    except TimeoutError:
        result = ScenarioResult(scenario.name, problems=[f"did not finish within {limit:.0f}s"])
    except Exception as exc:
        detail = traceback.format_exception_only(exc)[-1].strip()
        result = ScenarioResult(scenario.name, problems=[f"the scenario failed: {detail}"])
        say("".join(traceback.format_exception(exc)))
    finally:
        await env.close()
    result.seconds = time.monotonic() - started
    result.figures["seed"] = seed
    if result.ok and not keep_workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


async def run_scenarios(
    names: Sequence[str],
    *,
    rounds: int | None,
    quick: bool,
    pulsar_url: str,
    etcd_endpoint: str,
    workdir: Path,
    seed: int,
    say: Callable[[str], None] = lambda _: None,
    keep: bool = False,
    pulsar_admin_url: str | None = None,
    admin_url: str | None = None,
    auth_token_file: Path | None = None,
) -> list[ScenarioResult]:
    """Run ``names`` one after the other; logs of a passed scenario are removed
    unless ``keep``."""
    results = []
    for index, name in enumerate(names):
        scenario = SCENARIOS[name]
        count = (
            rounds if rounds is not None else (scenario.quick_rounds if quick else scenario.rounds)
        )
        say(f"== {name}: {count} round(s) — {scenario.summary}")
        result = await run_scenario(
            scenario,
            count,
            pulsar_url=pulsar_url,
            etcd_endpoint=etcd_endpoint,
            workdir=workdir / name,
            seed=seed + index,
            say=say,
            keep_workdir=keep,
            pulsar_admin_url=pulsar_admin_url,
            admin_url=admin_url,
            auth_token_file=auth_token_file,
        )
        verdict = "ok" if result.ok else "FAILED"
        say(
            f"   {verdict}: {result.acks_checked} acknowledgements checked, "
            f"{len(result.violations)} violations, {len(result.problems)} problems, "
            f"{result.seconds:.0f}s"
        )
        for line in result.violations[:5] + result.problems[:5]:
            say(f"   - {line}")
        results.append(result)
    return results

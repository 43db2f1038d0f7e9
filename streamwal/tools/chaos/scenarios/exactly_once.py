"""Exactly once through faults: idempotent retries and transactions.

Three nodes (node 1 runs the oracle and never owns the channel). Clients reach the
nodes through fault proxies. Idempotent producers retry every failed append, same
payload and numbers, on the next node until it is acknowledged; a transactional
writer commits transactions of four messages. Each round, one fault: the proxies cut
every client connection at once (appends in flight get an ambiguous failure: done,
answer lost), or the channel is taken over by the other node, or its owner is killed
with SIGKILL and the other node takes over. At the end the checker must find every
acknowledged payload exactly once (``duplicates found`` is its count of
``ack-duplicated`` and ``idempotent-duplicated`` violations: 0), and a reader must
deliver every committed transaction whole and once, nothing of an abandoned one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import grpc

from streamwal.tools.chaos.env import ChaosEnv
from streamwal.tools.chaos.result import ScenarioResult
from streamwal.tools.chaos.scenarios.common import assign, tso_group
from streamwal.tools.chaos.traffic import Traffic
from streamwal.tools.chaos.txn_traffic import TxnTraffic, check_delivery
from streamwal.tools.faultproxy import FaultProxy
from streamwal.tools.verify import verify_channel

__all__ = ["FAULTS", "run"]

FAULTS = ("lost-answers", "takeover", "kill-9-owner")
_DUPLICATE_RULES = ("ack-duplicated", "idempotent-duplicated")


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("exactly-once")
    started = time.monotonic()
    nodes = await tso_group(env, 3)
    movers = nodes[1:]
    async with contextlib.AsyncExitStack() as stack:
        proxies = [await stack.enter_async_context(FaultProxy(n.port)) for n in movers]
        via = [p.url_host for p in proxies]
        channel = env.name("eos")
        owner = 0
        answer = await assign(movers[owner].address, channel)
        result.expect(not isinstance(answer, grpc.StatusCode), f"first assign failed: {answer}")
        traffic = env.traffic(channel, via, workers=3, idempotent=True)
        traffic.prefer(via[owner])
        await traffic.start()
        txns = TxnTraffic(channel, via, rng=env.rng)
        txns.prefer(via[owner])
        await txns.start()
        done: dict[str, int] = {}
        for round_ in range(rounds):
            await _keep_flowing(result, traffic, movers[owner].address, via[owner], round_)
            await asyncio.sleep(env.rng.uniform(0.1, 0.4))
            fault = FAULTS[round_ % len(FAULTS)]
            done[fault] = done.get(fault, 0) + 1
            if fault == "lost-answers":
                for proxy in proxies:
                    proxy.reset()
            else:
                victim, survivor = movers[owner], movers[1 - owner]
                if fault == "kill-9-owner":
                    await victim.kill()
                answer = await assign(survivor.address, channel)
                if isinstance(answer, grpc.StatusCode):
                    result.problems.append(f"round {round_}: takeover: {answer.name}")
                owner = 1 - owner
                traffic.prefer(via[owner])
                txns.prefer(via[owner])
                if fault == "kill-9-owner":
                    await victim.start()
            result.faults += 1
            result.rounds += 1
        await _keep_flowing(result, traffic, movers[owner].address, via[owner], rounds)
        await txns.stop()
        await env.check(result, [traffic])
        delivery = await check_delivery(movers[owner].address, txns)
    result.problems.extend(delivery.problems)
    report = await verify_channel(
        env.pulsar_url, channel, delivered=delivery.delivered_ids, admin_url=env.admin_url
    )
    txn_violations = [v for v in report.violations if v.rule.startswith("txn-")]
    result.violations.extend(f"{channel}: {v}" for v in txn_violations)
    duplicates = sum(1 for v in report.violations if v.rule in _DUPLICATE_RULES)
    result.figures.update(
        {
            "faults": done,
            "duplicates found": duplicates,
            "idempotent appends acknowledged after a retry": traffic.retried,
            "idempotent appends in the log": report.idempotent,
            "transactions committed (acknowledged)": len(txns.committed),
            "transactions abandoned": len(txns.abandoned),
            "transactions with an unknown commit": len(txns.unknown),
            "of them delivered": delivery.unknown_delivered,
            "transactions in the log": report.transactions,
            "transaction codes": dict(txns.codes),
        }
    )
    result.expect(bool(txns.committed), "no transaction was committed")
    result.seconds = time.monotonic() - started
    return result


async def _keep_flowing(
    result: ScenarioResult, traffic: Traffic, owner: str, via: str, round_: int
) -> None:
    """:func:`~streamwal.tools.chaos.scenarios.common.keep_flowing`, with clients that
    reach the owner through its proxy."""
    if await traffic.wait_for_acks(5, timeout=20):
        return
    answer = await assign(owner, traffic.channel, timeout=90)
    result.expect(not isinstance(answer, grpc.StatusCode), f"round {round_}: reassign: {answer}")
    traffic.prefer(via)
    resumed = await traffic.wait_for_acks(5, timeout=60)
    result.expect(resumed, f"round {round_}: appends did not resume")

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

import contextlib

from streamwal.verify.cli import verify_channel
from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import ROTATING_FAULTS, RotatingFaults
from streamwal_lab.chaos.txn_traffic import TxnTraffic, check_delivery

__all__ = ["FAULTS", "run"]

FAULTS = ROTATING_FAULTS
_DUPLICATE_RULES = ("ack-duplicated", "idempotent-duplicated")


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("exactly-once")
    async with contextlib.AsyncExitStack() as stack:
        faults = await RotatingFaults.behind_proxies(stack, env, result, "eos")
        channel = faults.channel
        via = faults.via
        traffic = env.traffic(channel, via, workers=3, idempotent=True)
        traffic.prefer(via[0])
        await traffic.start()
        txns = TxnTraffic(channel, via, rng=env.rng)
        txns.prefer(via[0])
        await txns.start()
        await faults.run_rounds(env.rng, rounds, traffic, [traffic, txns])
        await txns.stop()
        await env.check(result, [traffic])
        delivery = await check_delivery(faults.owner_address, txns)
    result.problems.extend(delivery.problems)
    report = await verify_channel(
        env.pulsar_url, channel, delivered=delivery.delivered_ids, admin_url=env.admin_url
    )
    txn_violations = [v for v in report.violations if v.rule.startswith("txn-")]
    result.violations.extend(f"{channel}: {v}" for v in txn_violations)
    duplicates = sum(1 for v in report.violations if v.rule in _DUPLICATE_RULES)
    result.figures.update(
        {
            "faults": faults.done,
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
    return result

"""While a topic's bundle moves between brokers, the admin API answers "no owner" for
a moment: the admin client asks again until the bundle has landed, and only then
(unit: a local HTTP server playing a broker in the middle of a move)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.errors import UnavailableError
from tests.adaptors.pulsar.fake_admin import FakeAdmin, serving, url_of


class _Moving(FakeAdmin):
    """Answers ``refusals`` in turn (code, reason), then 200; counts every request."""

    refusals: list[tuple[int, str]] = []
    asked = 0

    def respond(self, body: bytes) -> tuple[int, dict[str, str], object]:
        _Moving.asked += 1
        if _Moving.refusals:
            code, reason = _Moving.refusals.pop(0)
            return code, {}, {"reason": reason}
        return 200, {}, {"landed": True}


@pytest.fixture
def broker() -> Iterator[str]:
    _Moving.refusals, _Moving.asked = [], 0
    with serving(_Moving) as (server,):
        yield url_of(server)


@pytest.mark.parametrize(
    "refusal",
    [
        (412, "Can't find owner for topic persistent://public/default/t"),
        (500, "Failed to acquire ownership for namespace bundle public/default/0x0_0x1"),
        (500, "Resource at /namespace/public/default/0x00000000_0x10000000 is already locked"),
        (503, "Namespace bundle is being unloaded"),
    ],
)
async def test_a_call_during_a_move_is_asked_again_until_the_bundle_lands(
    broker: str, refusal: tuple[int, str]
) -> None:
    _Moving.refusals = [refusal] * 3
    answer = await PulsarAdmin(broker).put("persistent/public/default/t/subscription/s", {})
    assert answer == {"landed": True}
    assert _Moving.asked == 4


async def test_other_refusals_are_not_asked_again(broker: str) -> None:
    _Moving.refusals = [(412, "Topic has active producers/subscriptions")]
    with pytest.raises(UnavailableError, match="412 Topic has active producers"):
        await PulsarAdmin(broker).delete("persistent/public/default/t")
    assert _Moving.asked == 1


async def test_a_move_that_never_lands_fails_within_the_timeout(broker: str) -> None:
    _Moving.refusals = [(412, "Can't find owner for topic t")] * 1000
    started = time.monotonic()
    with pytest.raises(UnavailableError, match="Can't find owner"):
        await PulsarAdmin(broker, timeout=1.5).get("persistent/public/default/t/stats")
    assert time.monotonic() - started < 3
    assert 3 <= _Moving.asked < 20

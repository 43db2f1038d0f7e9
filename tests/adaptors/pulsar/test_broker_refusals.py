"""What the real broker refuses, and the typed error each refusal surfaces as."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import urllib.request

import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.adaptors.testing import append_many, read_all, writable
from streamwal.errors import ChannelFencedError, ClosedError, InvalidInputError
from streamwal.wal.backend import DeliveryPolicy, append_entry
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration

#: the broker's default maxMessageSize (the local broker keeps it)
BROKER_MAX_MESSAGE_SIZE = 5 * 1024 * 1024


def _post(url: str) -> object:
    request = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read() or b"null")


async def terminate(stack: StackInfo, topic: str) -> object:
    """Terminate ``topic`` through the admin API: it then takes no more entries."""
    path = urllib.parse.quote(topic.removeprefix("persistent://"))
    url = f"{stack.pulsar_admin_url.rstrip('/')}/admin/v2/persistent/{path}/terminate"
    return await asyncio.to_thread(_post, url)


async def test_a_terminated_topic_fences_its_owner_for_good(stack: StackInfo, unique: str) -> None:
    config = PulsarConfig(service_url=stack.pulsar_url)
    channel = f"terminated-{unique}"
    async with PulsarOpener(config) as node_a, PulsarOpener(config) as node_b:
        wal = await writable(node_a, channel)
        acked = await append_many(wal, "a", 3)
        # A reader keeps the topic in use: terminated, it has no producer while the
        # owner reconnects, and a clean-up deleting unused topics at that moment would
        # let the producer write to a topic auto-created afresh.
        in_use = await wal.read(DeliveryPolicy.latest())
        last = await terminate(stack, config.topic(channel))
        assert isinstance(last, dict) and last["entryId"] >= 0  # the broker's last entry

        with pytest.raises(ChannelFencedError, match="TopicTerminated"):
            await asyncio.wait_for(append_entry(wal, b"after-terminate", {}), 10)
        for _ in range(3):  # every later append fails at once, without the broker
            refused = append_entry(wal, b"later", {})
            assert asyncio.isfuture(refused) and refused.done()
            with pytest.raises(ChannelFencedError):
                await refused
        with pytest.raises(ChannelFencedError):
            await wal.ensure_writable()
        # a new owner cannot write either, and is told so with the final error
        other = await node_b.open(channel, wal.access_mode)
        with pytest.raises(ChannelFencedError):
            await asyncio.wait_for(other.ensure_writable(), 10)
        await other.close()
        # what was acknowledged before the termination stays readable
        entries = await read_all(node_b, channel, 3)
        assert [e.message_id for e in entries] == acked
        await in_use.close()
        await wal.close()


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
async def test_over_the_brokers_size_limit_is_invalid_input(
    stack: StackInfo, unique: str, batching: bool
) -> None:
    """A payload the adaptor's pre-check lets through (its limit set above the
    broker's) is refused by the client against the limit the broker announced:
    typed as invalid input, and its neighbours in the same burst are unaffected."""
    config = PulsarConfig(
        service_url=stack.pulsar_url,
        max_message_size=2 * BROKER_MAX_MESSAGE_SIZE,
        batching=batching,
    )
    channel = f"too-big-{unique}"
    async with PulsarOpener(config) as opener:
        wal = await writable(opener, channel)
        burst = [
            append_entry(wal, b"before", {}),
            append_entry(wal, b"x" * (BROKER_MAX_MESSAGE_SIZE + 1024), {}),
            append_entry(wal, b"after", {}),
        ]
        before, too_big, after = await asyncio.gather(*burst, return_exceptions=True)
        assert isinstance(too_big, InvalidInputError), too_big
        assert "MessageTooBig" in str(too_big)
        assert not isinstance(before, BaseException) and not isinstance(after, BaseException)
        assert before < after
        entries = await read_all(opener, channel, 2)
        assert [e.payload for e in entries] == [b"before", b"after"]
        await wal.close()


async def test_a_payload_at_the_configured_limit_is_refused_typed(
    stack: StackInfo, unique: str
) -> None:
    """With the defaults, a payload of exactly ``max_message_size`` passes the
    pre-check, but with the message's metadata it is over the broker's limit."""
    config = PulsarConfig(service_url=stack.pulsar_url)
    assert config.max_message_size == BROKER_MAX_MESSAGE_SIZE
    async with PulsarOpener(config) as opener:
        wal = await writable(opener, f"at-limit-{unique}")
        with pytest.raises(InvalidInputError, match="MessageTooBig"):
            await append_entry(wal, b"x" * config.max_message_size, {})
        await append_many(wal, "ok", 2)  # the channel still takes appends
        await wal.close()


async def test_a_read_pending_when_the_client_goes_is_closed_error(
    stack: StackInfo, unique: str
) -> None:
    """The connection under a scanner closing (here: the client itself) ends a
    pending read promptly with the typed error, not with a hang."""
    opener = PulsarOpener(PulsarConfig(service_url=stack.pulsar_url))
    await opener.start()
    try:
        wal = await writable(opener, f"client-gone-{unique}")
        await append_many(wal, "a", 1)
        scanner = await wal.read(DeliveryPolicy.latest())
        pending = asyncio.ensure_future(scanner.__anext__())
        await asyncio.sleep(0.2)
        assert not pending.done()
        await opener.client.close()
        with pytest.raises(ClosedError):
            await asyncio.wait_for(pending, 5)
    finally:
        await opener.close()

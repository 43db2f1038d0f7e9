"""Deleting the topics a run created: idle ones go, one a producer still holds stays."""

from __future__ import annotations

import pytest
from pulsar import asyncio as pulsar_asyncio

from streamwal.adaptors.pulsar.opener import client_logger
from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.topics import delete_created, list_topics

pytestmark = pytest.mark.integration


async def test_created_topics_are_deleted_unless_in_use(stack: StackInfo, unique: str) -> None:
    admin = stack.pulsar_admin_url
    before = await list_topics(admin)
    idle = f"persistent://public/default/topics-idle-{unique}"
    busy = f"persistent://public/default/topics-busy-{unique}"
    other = f"persistent://public/default/topics-other-{unique}"
    client = pulsar_asyncio.Client(stack.pulsar_url, logger=client_logger())
    try:
        for topic in (idle, other):
            producer = await client.create_producer(topic)
            await producer.send(b"x")
            await producer.close()
        held = await client.create_producer(busy)
        await held.send(b"x")
        assert {idle, busy, other} <= await list_topics(admin) - before

        # this test's topics only: another test (or xdist worker) creates topics meanwhile
        ours = lambda t: unique in t and "-other-" not in t  # noqa: E731
        deleted, created = await delete_created(admin, before, ours)
        after = await list_topics(admin)
        assert idle not in after  # idle: deleted
        assert busy in after  # a producer holds it: left alone
        assert other in after  # not chosen
        assert created >= 2 and deleted >= 1
        await held.close()
        deleted, _ = await delete_created(admin, before, lambda t: unique in t)
        assert deleted == 2
        assert not {busy, other} & await list_topics(admin)
    finally:
        await client.close()

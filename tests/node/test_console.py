"""The console producer and consumer on one node, the node client's public read API,
a sparse write's time tick as recent as the write, what a read that times out says,
and the exit code of a configuration typo, which is the same for every command that
reads a node's file (docs/cli.md, "Exit codes")."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from streamwal import DeliveryPolicy
from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.console import consumed_json
from streamwal.errors import OutcomeUnknownError, UnavailableError, WriteOutcome
from streamwal.node.channel_status import channel_status
from streamwal.node.client import Consumed, NodeClient, WireMessageId, policy
from streamwal.node.client_errors import NodeCallError
from streamwal.tso.timestamp import HybridTimestamp
from streamwal_lab.stack import StackInfo
from tests.node.processes import free_port, plain_node, streamwal_cli


async def _read(client: NodeClient, channel: str, delivery: object, limit: int) -> list[bytes]:
    """The first ``limit`` payloads a producer sent (the WAL's time ticks left out)."""
    payloads: list[bytes] = []
    stream = client.consume(channel, delivery, timeout=20)  # type: ignore[arg-type]
    async for message in stream:
        if message.type != "TimeTick":
            payloads.append(message.payload)
        if len(payloads) == limit:
            break
    await stream.aclose()
    return payloads


@pytest.mark.integration
async def test_the_console_and_the_read_api_on_one_node(
    stack: StackInfo, tmp_path: Path, unique: str, etcd_prefix: Callable[[str], str]
) -> None:
    node = plain_node(tmp_path, stack, etcd_prefix("console"))
    await node.start()
    channel = f"console-{unique}"
    try:
        async with NodeClient(node.address) as client:
            await client.assign(channel)
            at = ("--node", node.address)
            produced = await streamwal_cli(
                "produce", channel, "-m", "a", "-m", "b", "--property", "k=v", "--json", *at
            )
            assert produced.returncode == 0, produced
            from_stdin = await streamwal_cli("produce", channel, *at, stdin="c\nd\n")
            assert from_stdin.returncode == 0, from_stdin
            acks = [json.loads(line) for line in produced.stdout.splitlines()]
            assert [sorted(a) for a in acks] == [["id", "id_text", "time_tick"]] * 2
            # the plain form: one line per line of stdin, its id and its time tick
            plain = [line.split() for line in from_stdin.stdout.splitlines()]
            assert [p[1:3] for p in plain] == [["time", "tick"]] * 2, plain
            assert int(plain[0][3]) > acks[1]["time_tick"], plain

            consumed = await streamwal_cli(
                "consume", channel, "--json", "--count", "4", "--timeout", "20", *at
            )
            assert consumed.returncode == 0, consumed
            read = [json.loads(line) for line in consumed.stdout.splitlines()]
            assert [m["payload"] for m in read] == ["a", "b", "c", "d"]
            assert [m["id"] for m in read[:2]] == [a["id"] for a in acks]
            assert read[0]["properties"] == {"k": "v"} and read[3]["properties"] == {}
            # callers' appends, each with the term of the owner that wrote it
            assert not any(m["wal_record"] for m in read), read
            assert {m["term"] for m in read} == {read[0]["term"]} and read[0]["term"] >= 1, read
            after = await streamwal_cli(
                "consume", channel, "--policy", "after", "--from", acks[0]["id"],
                "--count", "3", "--timeout", "20", *at,
            )  # fmt: skip
            assert after.returncode == 0, after
            assert after.stdout.splitlines() == ["b", "c", "d"]
            short = await streamwal_cli("consume", channel, "--count", "9", "--timeout", "2", *at)
            assert short.returncode == 1, short
            assert "4 of 9 messages, then none for 2s" in short.stderr

            # a channel not open on the node: exit 3, nothing opened there
            missing = f"{channel}-missing"
            for args in (("consume", missing, "--timeout", "5"), ("produce", missing, "-m", "x")):
                refused = await streamwal_cli(*args, *at)
                assert refused.returncode == 3, refused
                assert f"asked node {node.address}" in refused.stderr, refused.stderr
            listed = [c.pchannel for c in (await client.list_channels()).channels]
            assert missing not in listed

            # the public policy type, and the wire type still
            first = WireMessageId(bytes.fromhex(acks[0]["id"]))
            assert await _read(client, channel, DeliveryPolicy.start_after(first), 3) == [
                b"b", b"c", b"d"
            ]  # fmt: skip
            assert await _read(client, channel, DeliveryPolicy.start_from(first), 1) == [b"a"]
            assert await _read(client, channel, DeliveryPolicy.all(), 2) == [b"a", b"b"]
            assert await _read(client, channel, policy("all"), 1) == [b"a"]

            # the commands that read the broker take it from the node's file
            by_file = ("--config", str(node.config_path))
            status_cli = await streamwal_cli("channel", "status", channel, "--json", *by_file)
            assert status_cli.returncode == 0, status_cli
            assert json.loads(status_cli.stdout)["channel"] == channel
            checked = await streamwal_cli("verify", "--channel", channel, *by_file)
            assert checked.returncode == 0, checked

            # seconds after the first appends, a write's time tick is still the TSO's now,
            # and so is the latest time tick `channel status` reads
            late = await client.produce(channel, b"late")
            behind_ms = time.time() * 1000 - HybridTimestamp.of(late.time_tick).physical_ms
            assert behind_ms < 1500, behind_ms
            status = await channel_status(PulsarConfig(service_url=stack.pulsar_url), channel)
            assert status["latest_time_tick"] >= late.time_tick

            # a read that times out: nothing was written, and the error says no write
            got: list[Consumed] = []
            with pytest.raises(NodeCallError) as timed_out:
                async for message in client.consume(channel, DeliveryPolicy.all(), timeout=1.0):
                    got.append(message)
            assert len(got) >= 4
    finally:
        assert await node.terminate() == 0
    error = timed_out.value
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert isinstance(error, UnavailableError) and not isinstance(error, OutcomeUnknownError)
    assert error.read and error.outcome is WriteOutcome.NOT_WRITTEN
    assert "write outcome" not in str(error) and "a read" in str(error), str(error)


def test_a_payload_that_is_not_text_is_printed_as_base64() -> None:
    message = Consumed(b"\x01", "1:0:0", 7, "Insert", b"\xff\xfe", "", {}, 1)
    assert consumed_json(message) == {
        "id": "01", "id_text": "1:0:0", "time_tick": 7, "type": "Insert", "vchannel": "",
        "properties": {}, "wal_record": False, "term": 0, "payload": "//4=",
        "encoding": "base64",
    }  # fmt: skip


async def test_a_configuration_typo_exits_2_in_every_command(tmp_path: Path) -> None:
    config = tmp_path / "node.yaml"
    config.write_text("pulsar:\n  service_ulr: pulsar://127.0.0.1:6650\n")
    commands = [
        ("serve", "--config", str(config)),
        ("cluster", "status", "--config", str(config)),
        ("channel", "status", "c", "--config", str(config)),
        ("verify", "--channel", "c", "--config", str(config)),
        ("produce", "c", "-m", "x", "--config", str(config)),
        ("consume", "c", "--config", str(config)),
    ]
    for args in commands:
        done = await streamwal_cli(*args, timeout=60)
        assert done.returncode == 2, (args, done)
        assert "service_ulr" in done.stderr, (args, done.stderr)


async def test_channel_status_and_verify_read_the_broker_of_the_nodes_file(
    tmp_path: Path,
) -> None:
    nowhere = free_port()  # bound and released: nothing listens there
    config = tmp_path / "node.yaml"
    config.write_text(
        f"pulsar:\n  service_url: pulsar://127.0.0.1:{nowhere}\n"
        f"  admin_url: http://127.0.0.1:{nowhere}\n  operation_timeout_s: 1\n"
    )
    for args in (("channel", "status", "c"), ("verify", "--channel", "c")):
        done = await streamwal_cli(*args, "--config", str(config), timeout=60)
        assert done.returncode == 2, (args, done)  # unreadable: the file's broker is not there
        assert str(nowhere) in done.stderr, (args, done.stderr)

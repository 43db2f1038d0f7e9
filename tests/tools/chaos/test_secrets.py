"""Secrets in the configuration (Pulsar token, etcd password) never show in a node's
log, in its error output, or in the spans it exports."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
import yaml

from streamwal.node.client import NodeClient, policy
from streamwal.node.config import load_config
from streamwal.server.runtime import Node
from streamwal_lab.chaos.spans import capture_spans
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess, serve_once, stack_environ

pytestmark = pytest.mark.integration


def _secrets() -> tuple[str, str]:
    tag = uuid.uuid4().hex
    return f"tok-SECRET-{tag}", f"pw-SECRET-{tag}"


async def test_a_node_process_never_logs_its_secrets(
    stack: StackInfo, tmp_path: Path, unique: str, etcd_prefix: Callable[[str], str]
) -> None:
    token, password = _secrets()
    node = NodeProcess(
        tmp_path,
        1,
        {
            "pulsar": {"service_url": stack.pulsar_url, "auth_token": token},
            "etcd": {"endpoints": [stack.etcd_endpoint], "user": "root", "password": password},
            "tso": {"mode": "in-process", "key_prefix": etcd_prefix("secrets")},
            "telemetry": {"log_level": "DEBUG"},
        },
    )
    await node.start()
    channel = f"secrets-{unique}"
    try:
        async with NodeClient(node.address) as client:
            await client.assign(channel)
            await client.produce(channel, b"payload")
            with pytest.raises(grpc.aio.AioRpcError):
                await client.produce(f"missing-{unique}", b"x")
            with pytest.raises(grpc.aio.AioRpcError):
                async for _ in client.consume(channel, policy("start_from", message_id=b"bad")):
                    pass
    finally:
        await node.terminate()
    log = node.log_text()
    assert "DEBUG" in log  # the most talkative level was on
    assert token not in log and password not in log
    assert "SECRET" not in log


@pytest.mark.parametrize(
    ("config", "env_key"),
    [
        ({"pulsar": {"auth_token": "{token}", "access_mode": "Nope"}}, None),
        ({"etcd": {"password": "{password}"}}, None),  # a password without a user
        ({"pulsar": {"auth_token": {"nested": "{token}"}}}, None),
        ({"pulsar": {"operation_timeout_s": "soon"}}, "STREAMWAL_PULSAR__AUTH_TOKEN"),
        ({"etcd": {"user": "root", "endpoints": ["nohost"]}}, "STREAMWAL_ETCD__PASSWORD"),
    ],
)
def test_configuration_errors_never_print_secrets(
    tmp_path: Path, config: dict[str, object], env_key: str | None
) -> None:
    token, password = _secrets()
    text = yaml.safe_dump(config).replace("'{token}'", token).replace("'{password}'", password)
    text = text.replace("{token}", token).replace("{password}", password)
    path = tmp_path / "node.yaml"
    path.write_text(text)
    env = {"PATH": "/usr/bin:/bin"}
    if env_key is not None:
        env[env_key] = token if "TOKEN" in env_key else password
    done = serve_once(path, env)
    assert done.returncode == 2, done.stderr
    assert "invalid configuration" in done.stderr
    output = done.stdout + done.stderr
    assert token not in output and password not in output and "SECRET" not in output


async def test_spans_and_records_of_an_in_process_node_never_hold_secrets(
    stack: StackInfo,
    unique: str,
    caplog: pytest.LogCaptureFixture,
    etcd_prefix: Callable[[str], str],
) -> None:
    token, password = _secrets()
    config = load_config(
        environ={
            **stack_environ(stack, 7, etcd_prefix("secrets")),
            "STREAMWAL_PULSAR__AUTH_TOKEN": token,
            "STREAMWAL_ETCD__USER": "root",
            "STREAMWAL_ETCD__PASSWORD": password,
        }
    )
    channel = f"secrets-spans-{unique}"
    caplog.set_level(logging.DEBUG)
    with capture_spans() as capture:
        async with Node(config) as node, NodeClient(node.address) as client:
            opened = await client.assign(channel)
            await client.produce(channel, b"payload")
            with pytest.raises(grpc.aio.AioRpcError):
                await client.assign("bad name!")
    spans = capture.get_finished_spans()
    assert any(s.name == "wal.open" for s in spans)
    assert any(format(s.context.trace_id, "032x") == opened.trace_id for s in spans if s.context)
    dumped = "\n".join(s.to_json() for s in spans)
    assert token not in dumped and password not in dumped and "SECRET" not in dumped
    records = "\n".join(r.getMessage() + repr(r.args) for r in caplog.records)
    assert records  # the node did log
    assert token not in records and password not in records
    assert token not in repr(config) and password not in repr(config)

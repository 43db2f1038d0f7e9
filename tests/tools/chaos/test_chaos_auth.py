"""``streamwal chaos --auth``: every node of the run checks its callers, and every
client of the run (``NodeClient``, ``ClusterClient``, the scenarios' raw channels)
sends the run's token; a scenario run with auth on keeps every guarantee (the owner
killed under load: the takeover node asks the TSO leader with its peer token)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from streamwal import environment
from streamwal.node.auth import Authorizer, IdentityBook
from streamwal.node.config import load_config
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.node.server_tracing import ServerInterceptor
from streamwal_lab.chaos.auth import chaos_channel, enable_auth
from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.runner import run_scenario
from streamwal_lab.chaos.scenarios import SCENARIOS
from streamwal_lab.stack import StackInfo


class _Lists(pb_grpc.StreamingNodeServicer):  # type: ignore[misc]
    async def ListChannels(self, request: Any, context: Any) -> pb.ListChannelsResponse:
        return pb.ListChannelsResponse(fenced=["reached"])


@pytest.fixture
def token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(environment.TOKEN_FILE, "")  # restored after the test
    return enable_auth(tmp_path)


async def _server(token_file: Path, tmp_path: Path) -> tuple[grpc.aio.Server, str]:
    env = ChaosEnv(tmp_path, "pulsar://127.0.0.1:30001", "127.0.0.1:2379", random.Random(1))
    env.auth_token_file = token_file
    node = env.node(1, {"pulsar": {"service_url": env.pulsar_url, "admin_url": None}})
    config = load_config(node.config_path, environ={})
    assert config.auth.enabled and config.auth.peer_token_file == str(token_file)
    authorizer = Authorizer(IdentityBook(config.auth.identities))
    server = grpc.aio.server(interceptors=[ServerInterceptor(guard=authorizer.wrap)])
    pb_grpc.add_StreamingNodeServicer_to_server(_Lists(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
async def served(token_file: Path, tmp_path: Path) -> AsyncIterator[str]:
    server, address = await _server(token_file, tmp_path)
    try:
        yield address
    finally:
        await server.stop(None)


async def test_run_nodes_check_callers_and_the_run_s_clients_pass(
    served: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with chaos_channel(served) as channel:
        answer = await pb_grpc.StreamingNodeStub(channel).ListChannels(pb.ListChannelsRequest())
        assert list(answer.fenced) == ["reached"]
    monkeypatch.delenv(environment.TOKEN_FILE)  # a client of no run: refused
    async with chaos_channel(served) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pb_grpc.StreamingNodeStub(channel).ListChannels(pb.ListChannelsRequest())
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.integration
async def test_kill_9_of_the_owner_with_auth(
    stack: StackInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(environment.TOKEN_FILE, "")  # restored after the test
    token_file = enable_auth(tmp_path)
    scenario = SCENARIOS["kill-9-owner"]
    seed = random.SystemRandom().randrange(1 << 31)
    result = await run_scenario(
        scenario,
        scenario.quick_rounds,
        pulsar_url=stack.pulsar_url,
        etcd_endpoint=stack.etcd_endpoint,
        workdir=tmp_path / "run",
        seed=seed,
        auth_token_file=token_file,
    )
    detail = f"seed {seed}, logs in {tmp_path}:\n" + "\n".join(
        result.violations[:20] + result.problems[:20]
    )
    assert result.ok, detail
    assert result.acks_checked > 0 and result.acked_violations == 0, detail
    assert result.ownerships == result.rounds + 1, detail
    logs = "".join(p.read_text() for p in (tmp_path / "run").rglob("node-*.log"))
    assert "audit: chaos AssignChannel" in logs  # the nodes checked their callers
    assert "UNAUTHENTICATED" not in logs and token_file.read_text() not in logs

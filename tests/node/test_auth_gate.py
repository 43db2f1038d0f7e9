"""The node's access check on a real gRPC server (no broker): identities by token and
by client certificate, UNAUTHENTICATED and PERMISSION_DENIED before the handler runs,
request streams checked frame by frame, the audit log, the span's identity, and the
table that gives every RPC of every service a role."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streamwal import environment
from streamwal.cluster.proto import routing_pb2
from streamwal.errors import ConfigError, PermissionDeniedError, UnauthenticatedError
from streamwal.node.auth import (
    AUDIT_LOGGER,
    IDENTITY_ATTRIBUTE,
    RULES,
    Authorizer,
    IdentityBook,
    InsecureExposureError,
    exposure_warning,
)
from streamwal.node.auth_settings import AuthSettings, IdentitySettings
from streamwal.node.client import NodeClient
from streamwal.node.client_errors import (
    NodeChannelNotFoundError,
    NodePermissionDeniedError,
    NodeUnauthenticatedError,
)
from streamwal.node.config import load_config
from streamwal.node.health import HealthService
from streamwal.node.logs import NodeJsonFormatter
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.node.server_tracing import ServerInterceptor
from streamwal.tls_files import TLSFiles
from streamwal.tso import ClientTLS
from streamwal.tso.proto import tso_pb2
from streamwal.tso.tls import server_credentials
from tests.node.certs import TestCA


def test_every_rpc_of_every_service_has_a_rule() -> None:
    """An RPC added to any service the node serves without a row in the table fails
    here (and would be refused to everyone): the next RPC gets a role on purpose."""
    services = [
        pb.DESCRIPTOR.services_by_name["StreamingNode"],
        routing_pb2.DESCRIPTOR.services_by_name["ClusterRouting"],
        tso_pb2.DESCRIPTOR.services_by_name["TSO"],
        health_pb2.DESCRIPTOR.services_by_name["Health"],
    ]
    served = {f"/{s.full_name}/{m.name}" for s in services for m in s.methods}
    assert served - set(RULES) == set(), "RPCs without a role in streamwal/node/auth/table.py"
    assert set(RULES) - served == set(), "rules for RPCs no service has"


def test_the_contract_s_roles() -> None:
    def roles(method: str) -> set[str]:
        return set(RULES[f"/streamwal.v1.StreamingNode/{method}"].roles)

    for admin in ("AssignChannel", "RemoveChannel", "Truncate", "DeleteChannel"):
        assert roles(admin) == {"admin"}
        assert RULES[f"/streamwal.v1.StreamingNode/{admin}"].audited
    for producer in ("Produce", "ProduceStream", "ProduceBatch", "ProduceBatchStream"):
        assert roles(producer) == {"producer"}
    for txn in ("BeginTxn", "CommitTxn", "RollbackTxn", "KeepAliveTxn"):
        assert roles(txn) == {"producer"}
    for consumer in (
        "Consume",
        "ConsumeBatch",
        "GetMVCC",
        "Checkpoint",
        "RemoveCheckpoint",
        "GetRetention",
        "ListChannels",
    ):
        assert roles(consumer) == {"consumer"}
    assert RULES["/grpc.health.v1.Health/Check"].open
    assert RULES["/streamwal.tso.v1.TSO/AllocTimestamp"].roles == {"node"}


def test_docs_table_lists_every_rule() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "auth.md").read_text()
    for full in RULES:
        method = full.rpartition("/")[2]
        assert f"| {method} |" in text, f"docs/auth.md has no row for {full}"


class _Servicer(pb_grpc.StreamingNodeServicer):  # type: ignore[misc]
    """Answers and counts what reached it (a refused call must not)."""

    def __init__(self) -> None:
        self.reached: list[tuple[str, str]] = []

    async def Produce(self, request: pb.ProduceRequest, context: Any) -> pb.ProduceResponse:
        self.reached.append(("Produce", request.pchannel))
        return pb.ProduceResponse(time_tick=7)

    async def Truncate(self, request: pb.TruncateRequest, context: Any) -> pb.TruncateResponse:
        self.reached.append(("Truncate", request.pchannel))
        if request.pchannel == "missing":
            await context.abort(grpc.StatusCode.NOT_FOUND, "not here")
        return pb.TruncateResponse()

    async def ListChannels(
        self, request: pb.ListChannelsRequest, context: Any
    ) -> pb.ListChannelsResponse:
        self.reached.append(("ListChannels", ""))
        return pb.ListChannelsResponse()

    async def ProduceStream(
        self, requests: AsyncIterator[pb.ProduceRequest], context: Any
    ) -> AsyncIterator[pb.ProduceResponse]:
        async for request in requests:
            self.reached.append(("ProduceStream", request.pchannel))
            yield pb.ProduceResponse(message_id_text=request.pchannel)

    async def ProduceBatchStream(
        self, requests: AsyncIterator[pb.ProduceBatchRequest], context: Any
    ) -> AsyncIterator[pb.ProduceBatchResponse]:
        async for request in requests:
            self.reached.append(("ProduceBatchStream", request.pchannel))
            yield pb.ProduceBatchResponse(results=[pb.ProduceResponse() for _ in request.messages])

    async def Consume(
        self, request: pb.ConsumeRequest, context: Any
    ) -> AsyncIterator[pb.ConsumedMessage]:
        self.reached.append(("Consume", request.pchannel))
        yield pb.ConsumedMessage(vchannel="v")


class _World:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ca = TestCA(folder)
        self.server_pair = self.ca.issue("localhost", server=True, client=False)
        self.ops = self.ca.issue("ops", server=False, client=True)
        self.stranger = self.ca.issue("stranger", server=False, client=True)
        self.tokens: dict[str, str] = {}
        for name in ("writer", "reader", "admin", "limited"):
            path = folder / f"{name}.token"
            path.write_text(f"  token-of-{name}-0123456789\n")
            self.tokens[name] = f"token-of-{name}-0123456789"

    def identities(self) -> list[IdentitySettings]:
        f = self.folder
        return [
            IdentitySettings("writer", ("producer",), token_file=str(f / "writer.token")),
            IdentitySettings("reader", ("consumer",), token_file=str(f / "reader.token")),
            IdentitySettings("admin", ("admin",), token_file=str(f / "admin.token")),
            IdentitySettings(
                "limited", ("producer", "admin"), ("team-a-",), token_file=str(f / "limited.token")
            ),
            IdentitySettings("ops", ("admin", "consumer"), certificate="ops"),
        ]

    def tls(self, pair: Any = None) -> ClientTLS:
        return ClientTLS(
            ca_file=self.ca.ca_file,
            cert_file=None if pair is None else pair.cert_file,
            key_file=None if pair is None else pair.key_file,
            server_name="localhost",
        )


@pytest.fixture
def world(tmp_path: Path) -> _World:
    return _World(tmp_path)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
async def served(
    world: _World, exporter: InMemorySpanExporter
) -> AsyncIterator[tuple[str, _Servicer]]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    authorizer = Authorizer(IdentityBook(world.identities()))
    server = grpc.aio.server(
        interceptors=[ServerInterceptor(tracer_provider=provider, guard=authorizer.wrap)]
    )
    servicer = _Servicer()
    pb_grpc.add_StreamingNodeServicer_to_server(servicer, server)
    health = HealthService()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    await health.set("", health_pb2.HealthCheckResponse.SERVING)
    creds = server_credentials(
        world.server_pair.cert_file, world.server_pair.key_file, world.ca.ca_file
    )
    port = server.add_secure_port("127.0.0.1:0", creds)
    await server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        await server.stop(None)


def _client(world: _World, address: str, who: str | None, pair: Any = None) -> NodeClient:
    pair = pair or world.stranger
    token = None if who is None else world.tokens[who]
    return NodeClient(address, tls=world.tls(pair), token=token, tracing=False, retries=2)


async def test_tokens_roles_and_prefixes(served: tuple[str, _Servicer], world: _World) -> None:
    address, servicer = served
    async with _client(world, address, "writer") as writer:
        await writer.produce("any", b"x")
        with pytest.raises(NodePermissionDeniedError) as denied:
            await writer._unary(writer._stub.Truncate, pb.TruncateRequest(pchannel="any"))
        assert isinstance(denied.value, PermissionDeniedError)
        assert "Truncate" in denied.value.details() and "'any'" in denied.value.details()
        assert "admin role" in denied.value.details()
        with pytest.raises(NodePermissionDeniedError):
            await writer.list_channels()
    async with _client(world, address, "limited") as limited:
        await limited.produce("team-a-1", b"x")
        with pytest.raises(NodePermissionDeniedError) as denied:
            await limited.produce("team-b-1", b"x")
        assert "team-b-1" in denied.value.details() and "team-a-" in denied.value.details()
    async with _client(world, address, None) as nobody:
        with pytest.raises(NodeUnauthenticatedError) as unknown:
            await nobody.produce("any", b"x")
        assert isinstance(unknown.value, UnauthenticatedError)
        assert "Produce" in unknown.value.details()
    bad = NodeClient(address, tls=world.tls(world.stranger), token="nope", tracing=False)
    async with bad:
        with pytest.raises(NodeUnauthenticatedError) as wrong:
            await bad.produce("any", b"x")
        assert "nope" not in wrong.value.details()
    # refused calls never reached the servicer, even with retries configured
    assert servicer.reached == [("Produce", "any"), ("Produce", "team-a-1")]


async def test_client_certificate_identity(served: tuple[str, _Servicer], world: _World) -> None:
    address, servicer = served
    async with _client(world, address, None, pair=world.ops) as ops:
        await ops._unary(ops._stub.Truncate, pb.TruncateRequest(pchannel="c1"))
        await ops.list_channels()
        with pytest.raises(NodePermissionDeniedError):
            await ops.produce("c1", b"x")
    # a wrong token is refused even over a known certificate's connection
    wrong = NodeClient(address, tls=world.tls(world.ops), token="nope", tracing=False)
    async with wrong:
        with pytest.raises(NodeUnauthenticatedError):
            await wrong.list_channels()
    assert servicer.reached == [("Truncate", "c1"), ("ListChannels", "")]


async def test_streams_are_checked_frame_by_frame(
    served: tuple[str, _Servicer], world: _World
) -> None:
    address, servicer = served
    channel = grpc.aio.secure_channel(
        address,
        world.tls(world.stranger).credentials(),
        options=world.tls().channel_options(),
    )
    stub = pb_grpc.StreamingNodeStub(channel)
    metadata = (("authorization", f"Bearer {world.tokens['limited']}"),)
    frames = [pb.ProduceRequest(pchannel=c) for c in ("team-a-1", "team-a-2", "team-b", "team-a-3")]
    call = stub.ProduceStream(iter(frames), metadata=metadata)
    answers = [r async for r in call]
    assert await call.code() == grpc.StatusCode.OK  # refusals in band, as failed appends
    assert [a.message_id_text for a in answers[:2]] == ["team-a-1", "team-a-2"]
    refused = answers[2:]
    assert len(refused) == 2  # the refused frame and every one after it
    for answer in refused:
        assert answer.error.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
        assert answer.error.outcome == pb.NOT_WRITTEN
        assert "team-b" in answer.error.message and "ProduceStream" in answer.error.message
    # no identity: every frame answered UNAUTHENTICATED, none served
    call = stub.ProduceStream(iter(frames[:2]))
    answers = [r async for r in call]
    assert [a.error.code for a in answers] == [grpc.StatusCode.UNAUTHENTICATED.value[0]] * 2
    batches = stub.ProduceBatchStream(
        iter([pb.ProduceBatchRequest(pchannel="team-a-1", messages=[pb.Message()] * 3)]),
        metadata=(("authorization", f"Bearer {world.tokens['reader']}"),),
    )
    (answer,) = [r async for r in batches]
    results = answer.results
    assert [r.error.code for r in results] == [grpc.StatusCode.PERMISSION_DENIED.value[0]] * 3
    # a read of a channel outside the prefixes ends before its handler starts
    reader = stub.Consume(pb.ConsumeRequest(pchannel="x"), metadata=metadata)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in reader:
            pass
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # health stays open
    health = health_pb2_grpc.HealthStub(channel)
    answer = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    await channel.close()
    assert servicer.reached == [("ProduceStream", "team-a-1"), ("ProduceStream", "team-a-2")]


async def test_audit_log_and_span_identity(
    served: tuple[str, _Servicer],
    world: _World,
    exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    address, _ = served
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    async with _client(world, address, "admin") as admin:
        await admin._unary(admin._stub.Truncate, pb.TruncateRequest(pchannel="c1"))
        with pytest.raises(NodeChannelNotFoundError):
            await admin._unary(admin._stub.Truncate, pb.TruncateRequest(pchannel="missing"))
    async with _client(world, address, "writer") as writer:
        with pytest.raises(NodePermissionDeniedError):
            await writer._unary(writer._stub.Truncate, pb.TruncateRequest(pchannel="c2"))
        await writer.produce("c3", b"x")  # not an admin call: not audited
    records = [r for r in caplog.records if r.name == AUDIT_LOGGER]
    fields = [r.fields for r in records]  # type: ignore[attr-defined]
    assert fields == [
        {"identity": "admin", "operation": "Truncate", "channel": "c1", "outcome": "OK"},
        {
            "identity": "admin",
            "operation": "Truncate",
            "channel": "missing",
            "outcome": "NOT_FOUND",
        },
        {
            "identity": "writer",
            "operation": "Truncate",
            "channel": "c2",
            "outcome": "PERMISSION_DENIED",
        },
    ]
    line = json.loads(NodeJsonFormatter(1).format(records[0]))
    assert line["identity"] == "admin" and line["outcome"] == "OK"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    produce = spans["/streamwal.v1.StreamingNode/Produce"]
    assert produce.attributes is not None and produce.attributes[IDENTITY_ATTRIBUTE] == "writer"
    for span in exporter.get_finished_spans():
        for value in (span.attributes or {}).values():
            assert "token-of-" not in str(value)
    for record in caplog.records:
        assert "token-of-" not in record.getMessage()


def test_safe_by_default(tmp_path: Path) -> None:
    off = AuthSettings()
    assert exposure_warning("127.0.0.1:7000", TLSFiles(), off) is None
    assert exposure_warning("localhost:7000", TLSFiles(), off) is None
    with pytest.raises(InsecureExposureError) as refused:
        exposure_warning("0.0.0.0:7000", TLSFiles(), off)
    assert "node.tls" in str(refused.value) and "auth.enabled" in str(refused.value)
    assert "auth.insecure" in str(refused.value)
    warning = exposure_warning("10.1.2.3:7000", TLSFiles(), AuthSettings(insecure=True))
    assert warning is not None and warning.startswith("insecure:")
    token = tmp_path / "t"
    token.write_text("secret-token-value")
    on = AuthSettings(
        enabled=True, identities=(IdentitySettings("a", ("admin",), token_file=str(token)),)
    )
    tls = TLSFiles(cert_file="c", key_file="k")
    assert exposure_warning("0.0.0.0:7000", tls, on) is None
    with pytest.raises(InsecureExposureError) as no_tls:
        exposure_warning("0.0.0.0:7000", TLSFiles(), on)
    assert "node.tls" in str(no_tls.value) and "auth.enabled" not in str(no_tls.value)


def test_settings_load_and_never_show_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = tmp_path / "admin.token"
    token.write_text("very-secret-value\n")
    path = tmp_path / "node.yaml"
    path.write_text(
        "auth:\n  enabled: true\n  identities:\n"
        f"    - name: ops\n      roles: [admin, consumer]\n      token_file: {token}\n"
        "      channels: [team-a-]\n"
        "    - name: app\n      roles: [producer]\n      token_env: APP_TOKEN\n"
    )
    config = load_config(path, environ={})
    assert config.auth.identities[0].roles == ("admin", "consumer")
    assert config.auth.identities[0].channels == ("team-a-",)
    assert "very-secret" not in repr(config)
    # a variable is read when the node starts (from its own environment)
    monkeypatch.delenv("APP_TOKEN", raising=False)
    with pytest.raises(ConfigError) as unset:
        IdentityBook(config.auth.identities)
    assert unset.value.key == "auth.identities[1]" and "APP_TOKEN" in str(unset.value)
    monkeypatch.setenv("APP_TOKEN", "other-secret")
    IdentityBook(config.auth.identities)
    token.write_text("  \n")
    with pytest.raises(ConfigError) as empty_file:
        load_config(path, environ={})
    assert empty_file.value.key == "auth.identities[0]" and "very-secret" not in str(empty_file)
    path.write_text(
        "auth:\n  identities:\n    - name: x\n      roles: [root]\n      token_env: T\n"
    )
    with pytest.raises(ConfigError) as role:
        load_config(path, environ={"T": "t"})
    assert role.value.key == "auth.identities[0].roles" and "root" in str(role.value)
    path.write_text("auth:\n  enabled: true\n")
    with pytest.raises(ConfigError) as empty:
        load_config(path, environ={})
    assert empty.value.key == "auth.identities"
    path.write_text(
        "auth:\n  identities:\n    - name: c\n      roles: [admin]\n      certificate: c\n"
    )
    with pytest.raises(ConfigError) as no_ca:
        load_config(path, environ={})
    assert "node.tls.ca_file" in str(no_ca.value)


async def test_auth_off_checks_nothing_and_audits_admin_calls(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = grpc.aio.server(interceptors=[ServerInterceptor(guard=Authorizer(None).wrap)])
    servicer = _Servicer()
    pb_grpc.add_StreamingNodeServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    try:
        async with NodeClient(f"127.0.0.1:{port}", tracing=False) as anyone:
            await anyone.produce("c", b"x")
            await anyone._unary(anyone._stub.Truncate, pb.TruncateRequest(pchannel="c"))
            frames = iter([pb.ProduceRequest(pchannel="c")])
            assert len([r async for r in anyone._stub.ProduceStream(frames)]) == 1
    finally:
        await server.stop(None)
    assert servicer.reached == [("Produce", "c"), ("Truncate", "c"), ("ProduceStream", "c")]
    fields = [r.fields for r in caplog.records if r.name == AUDIT_LOGGER]  # type: ignore[attr-defined]
    assert fields == [
        {"identity": "<anonymous>", "operation": "Truncate", "channel": "c", "outcome": "OK"}
    ]


async def test_clients_send_the_token_the_environment_names(
    served: tuple[str, _Servicer], world: _World, monkeypatch: pytest.MonkeyPatch
) -> None:
    address, servicer = served
    monkeypatch.setenv(environment.TOKEN_FILE, str(world.folder / "writer.token"))
    async with NodeClient(address, tls=world.tls(world.stranger), tracing=False) as client:
        await client.produce("from-env", b"x")
    async with NodeClient(
        address, tls=world.tls(world.stranger), tracing=False, token=world.tokens["reader"]
    ) as given:  # an argument wins over the variable
        with pytest.raises(NodePermissionDeniedError):
            await given.produce("from-env", b"x")
    assert servicer.reached == [("Produce", "from-env")]

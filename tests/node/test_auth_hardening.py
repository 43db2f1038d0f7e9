"""The access check against the ways around it, on a real gRPC server (no broker): every
method that names a channel holds a prefix-limited identity to its prefixes (an empty
channel included, streams frame by frame), ambiguous credentials are refused, a
listing shows a limited identity only its own channels, a node on an exposed address
refuses to start, and no token reaches an answer, a log line or ``config show``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import grpc
import pytest

from streamwal.cli import main
from streamwal.cluster.proto import routing_pb2, routing_pb2_grpc
from streamwal.errors import ConfigError
from streamwal.node.auth import (
    AUDIT_LOGGER,
    RULES,
    Authorizer,
    Identity,
    IdentityBook,
    InsecureExposureError,
    exposure_warning,
    is_loopback,
)
from streamwal.node.auth_settings import AuthSettings, IdentitySettings
from streamwal.node.config import load_config
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.node.server_tracing import ServerInterceptor
from streamwal.tls_files import TLSFiles
from streamwal.tso.tls import server_credentials
from tests.node.test_auth_gate import _Servicer, _World

_EVERY_ROLE = ("admin", "producer", "consumer", "node")


class _Listing(_Servicer):
    """The gate test's servicer, with a listing of four channels and a batch read."""

    async def ListChannels(
        self, request: pb.ListChannelsRequest, context: Any
    ) -> pb.ListChannelsResponse:
        self.reached.append(("ListChannels", ""))
        return pb.ListChannelsResponse(
            channels=[pb.ChannelInfo(pchannel=c) for c in ("team-a-1", "team-b-1", "team-ab")],
            fenced=["team-a-2", "team-b-2"],
        )

    async def ConsumeBatch(
        self, request: pb.ConsumeRequest, context: Any
    ) -> AsyncIterator[pb.ConsumedBatch]:
        self.reached.append(("ConsumeBatch", request.pchannel))
        yield pb.ConsumedBatch()


class _Hardened(_World):
    """The gate test's callers, plus one holding every role limited to ``team-a-``,
    and (``ambiguous``) two identities that both claim the certificate ``twice``."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        path = folder / "tenant.token"
        path.write_text("token-of-tenant-0123456789\n")
        self.tokens["tenant"] = "token-of-tenant-0123456789"
        self.twice = self.ca.issue("twice", server=False, client=True)

    def identities(self) -> list[IdentitySettings]:
        tenant = IdentitySettings(
            "tenant", _EVERY_ROLE, ("team-a-",), token_file=str(self.folder / "tenant.token")
        )
        return [*super().identities(), tenant]

    def ambiguous(self) -> list[IdentitySettings]:
        # every test certificate names localhost too (a SAN): "twice"'s common name
        # is one identity's, its SAN another's
        return [
            IdentitySettings("by-cn", ("admin",), certificate="twice"),
            IdentitySettings("by-san", ("consumer",), certificate="localhost"),
        ]


@pytest.fixture
def world(tmp_path: Path) -> _Hardened:
    return _Hardened(tmp_path)


class _Served(NamedTuple):
    """The gate in front of a bare servicer, and a stranger's channel to it."""

    channel: grpc.aio.Channel
    servicer: _Listing
    address: str

    @property
    def stub(self) -> pb_grpc.StreamingNodeStub:
        return pb_grpc.StreamingNodeStub(self.channel)


@pytest.fixture
async def served(world: _Hardened) -> AsyncIterator[_Served]:
    async with _serve(world, world.identities()) as served:
        yield served


@contextlib.asynccontextmanager
async def _serve(world: _Hardened, identities: list[IdentitySettings]) -> AsyncIterator[_Served]:
    server = grpc.aio.server(
        interceptors=[ServerInterceptor(guard=Authorizer(IdentityBook(identities)).wrap)]
    )
    servicer = _Listing()
    pb_grpc.add_StreamingNodeServicer_to_server(servicer, server)
    routing_pb2_grpc.add_ClusterRoutingServicer_to_server(
        routing_pb2_grpc.ClusterRoutingServicer(), server
    )
    creds = server_credentials(
        world.server_pair.cert_file, world.server_pair.key_file, world.ca.ca_file
    )
    port = server.add_secure_port("127.0.0.1:0", creds)
    await server.start()
    address = f"127.0.0.1:{port}"
    channel = grpc.aio.secure_channel(
        address,
        world.tls(world.stranger).credentials(),
        options=world.tls().channel_options(),
    )
    try:
        yield _Served(channel, servicer, address)
    finally:
        await channel.close()
        await server.stop(None)


def _bearer(world: _World, who: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {world.tokens[who]}"),)


def _channel_methods() -> Iterator[tuple[str, Any]]:
    """Every RPC whose rule holds its ``pchannel`` to the caller's prefixes, with its
    descriptor."""
    services = [
        pb.DESCRIPTOR.services_by_name["StreamingNode"],
        routing_pb2.DESCRIPTOR.services_by_name["ClusterRouting"],
    ]
    for service in services:
        for method in service.methods:
            full = f"/{service.full_name}/{method.name}"
            if RULES[full].channel:
                yield full, method


async def _call(
    channel: grpc.aio.Channel, full: str, method: Any, pchannel: str, metadata: Any
) -> grpc.StatusCode:
    """The status a call of ``full`` on ``pchannel`` gets; a produce stream's in-band
    refusal counts as the call's."""
    module = pb if method.containing_service.name == "StreamingNode" else routing_pb2
    request_type = getattr(module, method.input_type.name)
    response_type = getattr(module, method.output_type.name)
    request = request_type(pchannel=pchannel)
    if "messages" in request_type.DESCRIPTOR.fields_by_name:
        request.messages.add()
    kw = {"request_serializer": request_type.SerializeToString}
    kw["response_deserializer"] = response_type.FromString
    try:
        if method.client_streaming:
            call = channel.stream_stream(full, **kw)(iter([request]), metadata=metadata)
            answers = [a async for a in call]
            # a ProduceResponse each, or a ProduceBatchResponse of them
            single = [r for a in answers for r in getattr(a, "results", [a])]
            errors = [r.error for r in single if r.HasField("error")]
            return grpc.StatusCode.OK if not errors else _code(errors[0].code)
        if method.server_streaming:
            async for _ in channel.unary_stream(full, **kw)(request, metadata=metadata):
                pass
            return grpc.StatusCode.OK
        await channel.unary_unary(full, **kw)(request, metadata=metadata)
        return grpc.StatusCode.OK
    except grpc.aio.AioRpcError as exc:
        return exc.code()


def _code(value: int) -> grpc.StatusCode:
    return next(code for code in grpc.StatusCode if code.value[0] == value)


async def test_every_channel_call_is_held_to_the_prefixes(
    served: _Served, world: _Hardened
) -> None:
    """Checkpoints, GetRetention, Truncate, DeleteChannel, read-only consumes, batches,
    streams, LookupChannel: an identity holding every role but limited to ``team-a-``
    is refused (before the handler) any other channel and the empty one, and let
    through to the handler (answered, or UNIMPLEMENTED by the bare servicer) on its own."""
    metadata = _bearer(world, "tenant")
    methods = list(_channel_methods())
    assert {m.name for _, m in methods} >= {
        "Checkpoint",
        "RemoveCheckpoint",
        "GetRetention",
        "Truncate",
        "DeleteChannel",
        "Consume",
        "ConsumeBatch",
        "ProduceBatchStream",
        "LookupChannel",
    }
    for full, method in methods:
        for outside in ("team-b-1", "", "team-", "TEAM-A-1"):
            code = await _call(served.channel, full, method, outside, metadata)
            assert code == grpc.StatusCode.PERMISSION_DENIED, (full, outside, code)
        inside = await _call(served.channel, full, method, "team-a-1", metadata)
        assert inside not in (
            grpc.StatusCode.PERMISSION_DENIED,
            grpc.StatusCode.UNAUTHENTICATED,
        ), (full, inside)
    # a read-only consume is a consume: the same check
    read_only = pb.ConsumeRequest(pchannel="team-b-1", read_only=True)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in served.stub.Consume(read_only, metadata=metadata):
            pass
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert all(reached.startswith("team-a-") for _, reached in served.servicer.reached)


async def test_a_later_frame_of_another_channel_is_refused(
    served: _Served, world: _Hardened
) -> None:
    stub = served.stub
    frames = [
        pb.ProduceBatchRequest(pchannel=c, messages=[pb.Message()])
        for c in ("team-a-1", "team-a-1", "team-b-1", "team-a-1")
    ]
    answers = [
        a async for a in stub.ProduceBatchStream(iter(frames), metadata=_bearer(world, "tenant"))
    ]
    codes = [a.results[0].error.code for a in answers]
    denied = grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert codes == [0, 0, denied, denied]
    assert served.servicer.reached == [("ProduceBatchStream", "team-a-1")] * 2


async def test_ambiguous_credentials_are_refused(
    served: _Served,
    world: _Hardened,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stub = served.stub
    request = pb.ProduceRequest(pchannel="c")
    writer = world.tokens["writer"]
    # several authorization entries: refused even when one (or each) is right
    for pair in ((writer, writer), ("wrong", writer), (writer, "wrong")):
        metadata = tuple(("authorization", f"Bearer {token}") for token in pair)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Produce(request, metadata=metadata)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "several authorization" in (err.value.details() or "")
    # the scheme in any case, spaces around and after it: the same token (gRPC's
    # client sends no control characters, a tab included)
    for value in (f"bearer {writer}", f"BEARER {writer}  ", f"  Bearer   {writer}", writer):
        await stub.Produce(request, metadata=(("authorization", value),))
    # a key in upper case: gRPC's client refuses to send it (HTTP/2 header names are
    # lower case), so the server's one comparison sees every key a client can send
    with pytest.raises(Exception) as upper:
        await stub.Produce(request, metadata=(("Authorization", f"Bearer {writer}"),))
    assert "metadata" in repr(upper.value).lower() or "ExecuteBatch" in type(upper.value).__name__
    # a token with white space inside is another token
    with pytest.raises(grpc.aio.AioRpcError) as inner:
        await stub.Produce(
            request, metadata=(("authorization", f"Bearer {writer[:5]} {writer[5:]}"),)
        )
    assert inner.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # a certificate two identities claim (its CN one, its SAN another)
    async with _serve(world, world.ambiguous()) as (_, _, other):
        twice = grpc.aio.secure_channel(
            other, world.tls(world.twice).credentials(), options=world.tls().channel_options()
        )
        try:
            with pytest.raises(grpc.aio.AioRpcError) as both:
                await pb_grpc.StreamingNodeStub(twice).ListChannels(pb.ListChannelsRequest())
        finally:
            await twice.close()
    assert both.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "several identities" in (both.value.details() or "")
    produced = [c for name, c in served.servicer.reached if name == "Produce"]
    assert produced == ["c"] * 4
    assert not any("token-of-" in r.getMessage() for r in caplog.records)


async def test_a_limited_identity_lists_only_its_channels(
    served: _Served, world: _Hardened
) -> None:
    stub = served.stub
    limited = await stub.ListChannels(pb.ListChannelsRequest(), metadata=_bearer(world, "tenant"))
    assert [c.pchannel for c in limited.channels] == ["team-a-1"]
    assert list(limited.fenced) == ["team-a-2"]
    every = await stub.ListChannels(pb.ListChannelsRequest(), metadata=_bearer(world, "reader"))
    assert [c.pchannel for c in every.channels] == ["team-a-1", "team-b-1", "team-ab"]
    assert list(every.fenced) == ["team-a-2", "team-b-2"]


async def test_refused_admin_calls_are_audited(
    served: _Served,
    world: _Hardened,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    stub = served.stub
    calls = [
        (stub.Truncate, pb.TruncateRequest(pchannel="team-b-1"), _bearer(world, "tenant")),
        (stub.DeleteChannel, pb.DeleteChannelRequest(pchannel="x"), ()),
        (stub.AssignChannel, pb.AssignChannelRequest(pchannel="x"), _bearer(world, "reader")),
        (stub.RemoveChannel, pb.RemoveChannelRequest(pchannel="x"), (("authorization", "no"),)),
    ]
    for rpc, request, metadata in calls:
        with pytest.raises(grpc.aio.AioRpcError):
            await rpc(request, metadata=metadata)
    fields = [r.fields for r in caplog.records if r.name == AUDIT_LOGGER]  # type: ignore[attr-defined]
    assert fields == [
        {
            "identity": "tenant",
            "operation": "Truncate",
            "channel": "team-b-1",
            "outcome": "PERMISSION_DENIED",
        },
        {
            "identity": "<unauthenticated>",
            "operation": "DeleteChannel",
            "channel": "x",
            "outcome": "UNAUTHENTICATED",
        },
        {
            "identity": "reader",
            "operation": "AssignChannel",
            "channel": "x",
            "outcome": "PERMISSION_DENIED",
        },
        {
            "identity": "<unauthenticated>",
            "operation": "RemoveChannel",
            "channel": "x",
            "outcome": "UNAUTHENTICATED",
        },
    ]
    assert served.servicer.reached == []


def test_prefixes_are_string_prefixes() -> None:
    """docs/auth.md: ``ch`` covers ``chX``; a prefix meant as a name ends with its
    separator. The empty channel is under no prefix."""
    identity = Identity("t", frozenset({"consumer"}), ("ch",))
    assert identity.covers("ch") and identity.covers("chX") and identity.covers("ch-1")
    assert not identity.covers("c") and not identity.covers("") and not identity.covers("xch")
    assert Identity("all", frozenset({"consumer"})).covers("")


@pytest.mark.parametrize(
    ("listen", "loopback"),
    [
        ("127.0.0.1:7000", True),
        ("127.3.4.5:7000", True),
        ("[::1]:7000", True),
        ("localhost:7000", True),
        ("LocalHost:7000", True),
        ("[::ffff:127.0.0.1]:7000", True),
        ("0.0.0.0:7000", False),
        ("[::]:7000", False),
        (":7000", False),
        ("10.1.2.3:7000", False),
        ("[fe80::1]:7000", False),
        ("node-1.example.internal:7000", False),
        ("localhost.example.com:7000", False),
        ("127.0.0.1.nip.io:7000", False),
    ],
)
def test_what_counts_as_loopback(listen: str, loopback: bool) -> None:
    assert is_loopback(listen) is loopback
    if loopback:
        assert exposure_warning(listen, TLSFiles(), AuthSettings()) is None
        return
    with pytest.raises(InsecureExposureError) as refused:
        exposure_warning(listen, TLSFiles(), AuthSettings())
    text = str(refused.value)
    for what in ("node.tls", "auth.enabled", "auth.insecure", listen):
        assert what in text, (what, text)


def test_config_show_names_token_files_never_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "ops.token"
    token.write_text("ops-token-SECRET\n")
    peer = tmp_path / "peer.token"
    peer.write_text("peer-token-SECRET\n")
    path = tmp_path / "node.yaml"
    path.write_text(
        "etcd:\n  user: root\n  password: etcd-pw-SECRET\n"
        "auth:\n  enabled: true\n"
        f"  peer_token_file: {peer}\n"
        "  identities:\n"
        f"    - name: ops\n      roles: [admin]\n      token_file: {token}\n"
        "    - name: app\n      roles: [producer]\n      token_env: APP_TOKEN\n"
    )
    for fmt in ("table", "json", "yaml"):
        assert main(["config", "show", "--config", str(path), "--format", fmt]) == 0
        shown = capsys.readouterr().out
        assert "SECRET" not in shown, fmt
        assert str(token) in shown and str(peer) in shown and "APP_TOKEN" in shown


def test_two_identities_never_share_a_token_or_a_certificate_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Either would make one identity the other, silently (the last one read won)."""
    token = tmp_path / "a.token"
    token.write_text("shared-SECRET\n")
    monkeypatch.setenv("B_TOKEN", "  shared-SECRET ")
    with pytest.raises(ConfigError) as same_token:
        IdentityBook(
            [
                IdentitySettings("a", ("admin",), token_file=str(token)),
                IdentitySettings("b", ("consumer",), token_env="B_TOKEN"),
            ]
        )
    assert same_token.value.key == "auth.identities[1]"
    assert "'a'" in str(same_token.value) and "SECRET" not in str(same_token.value)
    path = tmp_path / "node.yaml"
    path.write_text(
        "auth:\n  identities:\n"
        "    - name: ops\n      roles: [admin]\n      certificate: ops.example.com\n"
        "    - name: app\n      roles: [producer]\n      certificate: ops.example.com\n"
    )
    with pytest.raises(ConfigError) as same_name:
        load_config(path, environ={})
    assert same_name.value.key == "auth.identities[1].certificate"
    assert "'ops'" in str(same_name.value)

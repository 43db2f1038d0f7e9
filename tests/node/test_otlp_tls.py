"""The node's span exporter follows the standard OTLP TLS settings.

A real OTLP/gRPC receiver (in this process) takes the spans: in plain text for an
``http://`` endpoint, as the local stack's collector does, and over TLS when the
endpoint or ``OTEL_EXPORTER_OTLP_INSECURE`` asks for it, trusting the CA named by
``OTEL_EXPORTER_OTLP_CERTIFICATE``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from streamwal.node.telemetry import span_exporter
from streamwal.tso.tls import server_credentials
from tests.node.certs import TestCA


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.span_names: list[str] = []
        self.port = 0
        self.ca_file = ""  # the CA of its certificate, when it serves TLS

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                self.span_names += [span.name for span in scope_spans.spans]
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def receiver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[_Receiver]:
    """TLS with a certificate for localhost when parametrized True."""
    servicer = _Receiver()
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    if request.param:
        ca = TestCA(tmp_path)
        pair = ca.issue("collector", server=True, client=False)
        creds = server_credentials(pair.cert_file, pair.key_file)
        servicer.port = server.add_secure_port("127.0.0.1:0", creds)
        servicer.ca_file = ca.ca_file
    else:
        servicer.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer
    server.stop(None)


def _export_one(endpoint: str) -> str:
    name = f"otlp-tls-{uuid.uuid4().hex[:8]}"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(span_exporter(endpoint)))
    try:
        with provider.get_tracer(__name__).start_as_current_span(name):
            pass
    finally:
        provider.shutdown()
    return name


@pytest.mark.parametrize("receiver", [False], indirect=True)
def test_http_endpoint_is_plain_text(receiver: _Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_INSECURE", raising=False)
    name = _export_one(f"http://127.0.0.1:{receiver.port}")
    assert receiver.span_names == [name]


@pytest.mark.parametrize("receiver", [True], indirect=True)
@pytest.mark.parametrize("endpoint", ["https://localhost:{port}", "localhost:{port}"])
def test_tls_endpoint_trusts_the_certificate_variable(
    receiver: _Receiver,
    endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_INSECURE", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", receiver.ca_file)
    name = _export_one(endpoint.format(port=receiver.port))
    assert receiver.span_names == [name]


@pytest.mark.parametrize("receiver", [True], indirect=True)
def test_insecure_false_turns_tls_on_for_an_http_endpoint(
    receiver: _Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "false")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", receiver.ca_file)
    name = _export_one(f"http://localhost:{receiver.port}")
    assert receiver.span_names == [name]

"""Exports GenAI telemetry with the official OpenTelemetry Python SDK over OTLP/HTTP
protobuf, or OTLP/gRPC when OTEL_EXPORTER_OTLP_PROTOCOL is `grpc`, with the exporters'
defaults: the endpoint and headers come from OTEL_EXPORTER_OTLP_ENDPOINT and
OTEL_EXPORTER_OTLP_HEADERS, as a user would set them.

A `chat` span with token usage, an `execute_tool` span inside it, a log record, and a
`gen_ai.client.operation.duration` histogram point; every export must succeed (the
script exits non-zero otherwise)."""

import logging
import os
import sys

from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

if os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
else:
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

failures = []


class CheckedSpans(OTLPSpanExporter):
    def export(self, spans):
        result = super().export(spans)
        if result.name != "SUCCESS":
            failures.append(f"spans: {result}")
        return result


class CheckedLogs(OTLPLogExporter):
    def export(self, batch):
        result = super().export(batch)
        if result.name != "SUCCESS":  # LogExportResult, or LogRecordExportResult
            failures.append(f"logs: {result}")
        return result


class CheckedMetrics(OTLPMetricExporter):
    def export(self, metrics_data, timeout_millis=10_000, **kwargs):
        result = super().export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        if result.name != "SUCCESS":
            failures.append(f"metrics: {result}")
        return result


resource = Resource.create(
    {"service.name": "otel-sdk-agent", "gen_ai.conversation.id": "conv-sdk-1"}
)
tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(SimpleSpanProcessor(CheckedSpans()))
tracer = tracer_provider.get_tracer("patchbay-test")

logger_provider = LoggerProvider(resource=resource)
logger_provider.add_log_record_processor(SimpleLogRecordProcessor(CheckedLogs()))
log = logging.getLogger("agent")
log.propagate = False
log.setLevel(logging.INFO)
log.addHandler(LoggingHandler(level=logging.INFO, logger_provider=logger_provider))

# Exported once, at shutdown (the interval is far longer than the script).
reader = PeriodicExportingMetricReader(CheckedMetrics(), export_interval_millis=3_600_000)
meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
duration = meter_provider.get_meter("patchbay-test").create_histogram(
    "gen_ai.client.operation.duration", unit="s"
)

with tracer.start_as_current_span("chat gpt-test") as chat:
    chat.set_attribute("gen_ai.operation.name", "chat")
    chat.set_attribute("gen_ai.request.model", "gpt-test")
    chat.set_attribute("gen_ai.response.model", "gpt-test")
    chat.set_attribute("gen_ai.response.id", "resp-sdk-1")
    chat.set_attribute("gen_ai.usage.input_tokens", 123)
    chat.set_attribute("gen_ai.usage.output_tokens", 45)
    with tracer.start_as_current_span("execute_tool shell") as tool:
        tool.set_attribute("gen_ai.operation.name", "execute_tool")
        tool.set_attribute("gen_ai.tool.name", "shell")
        tool.set_attribute("gen_ai.tool.call.id", "call-sdk-1")
        tool.set_attribute("gen_ai.tool.call.arguments", '{"command": "echo hi"}')
    log.info("the agent wrote hi to out.txt")
duration.record(1.5, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-test"})

tracer_provider.shutdown()
logger_provider.shutdown()
meter_provider.shutdown()
if failures:
    print("export failed:", failures, file=sys.stderr)
    sys.exit(1)
print("exported")

"""Decodes an OTLP protobuf body with the official `opentelemetry-proto` messages and
prints what it holds as JSON, for tests/exporter.rs to compare with what was sent.

Usage: otel-proto-check.py logs|traces BODY_FILE
"""

import json
import sys

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def value(v):
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def main():
    kind, path = sys.argv[1], sys.argv[2]
    with open(path, "rb") as f:
        body = f.read()
    out = []
    if kind == "logs":
        request = ExportLogsServiceRequest.FromString(body)
        for rl in request.resource_logs:
            resource = attributes(rl.resource.attributes)
            for sl in rl.scope_logs:
                for r in sl.log_records:
                    out.append({
                        "service": resource.get("service.name"),
                        "scope": sl.scope.name,
                        "time": r.time_unix_nano,
                        "severity": r.severity_number,
                        "eventName": r.event_name,
                        "traceId": r.trace_id.hex(),
                        "spanId": r.span_id.hex(),
                        "body": value(r.body),
                        "attributes": attributes(r.attributes),
                    })
    else:
        request = ExportTraceServiceRequest.FromString(body)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append({
                        "name": s.name,
                        "kind": s.kind,
                        "traceId": s.trace_id.hex(),
                        "spanId": s.span_id.hex(),
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "status": s.status.code,
                        "message": s.status.message,
                        "attributes": attributes(s.attributes),
                    })
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

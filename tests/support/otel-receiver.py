"""An OTLP receiver that decodes with the official `opentelemetry-proto` messages, an
implementation independent of patchbay's: OTLP/HTTP (protobuf and JSON, gzip) on one
port and OTLP/gRPC (grpcio's server with the collector's service stubs) on another.

Every request it gets is printed to stdout as one JSON line:
{"transport": "http/protobuf" | "http/json" | "grpc", "kind": "logs" | "traces",
 "path", "contentType", "encoding" (over HTTP), "authorization",
 "items": [the log records or spans, field by field]}.
"ready" is printed first, once both ports listen. It answers every export with an empty
Export*ServiceResponse (a JSON body that does not parse gets 400) and runs until killed.

Usage: otel-receiver.py HTTP_PORT GRPC_PORT
"""

import base64
import gzip
import json
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

lock = threading.Lock()


def emit(line):
    with lock:
        print(json.dumps(line), flush=True)


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


def logs_items(request):
    out = []
    for rl in request.resource_logs:
        resource = attributes(rl.resource.attributes)
        for sl in rl.scope_logs:
            for r in sl.log_records:
                out.append({
                    "service": resource.get("service.name"),
                    "scope": sl.scope.name,
                    "time": r.time_unix_nano,
                    "observedTime": r.observed_time_unix_nano,
                    "severity": r.severity_number,
                    "severityText": r.severity_text,
                    "eventName": r.event_name,
                    "traceId": r.trace_id.hex(),
                    "spanId": r.span_id.hex(),
                    "body": value(r.body),
                    "attributes": attributes(r.attributes),
                })
    return out


def traces_items(request):
    out = []
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append({
                    "service": resource.get("service.name"),
                    "scope": ss.scope.name,
                    "name": s.name,
                    "kind": s.kind,
                    "traceId": s.trace_id.hex(),
                    "spanId": s.span_id.hex(),
                    "parentSpanId": s.parent_span_id.hex(),
                    "start": s.start_time_unix_nano,
                    "end": s.end_time_unix_nano,
                    "status": s.status.code,
                    "message": s.status.message,
                    "attributes": attributes(s.attributes),
                })
    return out


KINDS = {
    "logs": (logs_service_pb2.ExportLogsServiceRequest,
             logs_service_pb2.ExportLogsServiceResponse, logs_items),
    "traces": (trace_service_pb2.ExportTraceServiceRequest,
               trace_service_pb2.ExportTraceServiceResponse, traces_items),
}

ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def hex_ids_to_base64(node):
    """OTLP/JSON writes ids as hex where the protobuf JSON mapping has base64: turned
    back (as the Collector does) so that `json_format` reads the rest as it is."""
    if isinstance(node, dict):
        for key, v in node.items():
            if key in ID_FIELDS and isinstance(v, str):
                node[key] = base64.b64encode(bytes.fromhex(v)).decode()
            else:
                hex_ids_to_base64(v)
    elif isinstance(node, list):
        for v in node:
            hex_ids_to_base64(v)


class Http(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        kind = self.path.rstrip("/").rsplit("/", 1)[-1]
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        encoding = self.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        content_type = self.headers.get("Content-Type", "")
        if kind not in KINDS:
            return self.answer(404, b"", "text/plain")
        request_type, response_type, items = KINDS[kind]
        if content_type.startswith("application/json"):
            transport = "http/json"
            try:
                tree = json.loads(body)
                hex_ids_to_base64(tree)
                request = json_format.ParseDict(tree, request_type())
            except Exception as e:  # the test reads the error from the line
                emit({"transport": transport, "kind": kind, "error": str(e)})
                return self.answer(400, json.dumps({"code": 3, "message": str(e)}).encode(),
                                   "application/json")
            answer = json_format.MessageToJson(response_type()).encode()
            answer_type = "application/json"
        else:
            transport = "http/protobuf"
            request = request_type.FromString(body)
            answer = response_type().SerializeToString()
            answer_type = "application/x-protobuf"
        emit({
            "transport": transport,
            "kind": kind,
            "path": self.path,
            "contentType": content_type,
            "encoding": encoding,
            "authorization": self.headers.get("Authorization"),
            "items": items(request),
        })
        self.answer(200, answer, answer_type)

    def answer(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def metadata_of(context):
    return {k: v for k, v in context.invocation_metadata()}


class Logs(logs_service_pb2_grpc.LogsServiceServicer):
    def Export(self, request, context):
        md = metadata_of(context)
        emit({"transport": "grpc", "kind": "logs", "authorization": md.get("authorization"),
              "items": logs_items(request)})
        return logs_service_pb2.ExportLogsServiceResponse()


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        md = metadata_of(context)
        emit({"transport": "grpc", "kind": "traces", "authorization": md.get("authorization"),
              "items": traces_items(request)})
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    http_port, grpc_port = int(sys.argv[1]), int(sys.argv[2])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    if server.add_insecure_port(f"127.0.0.1:{grpc_port}") == 0:
        sys.exit(f"cannot listen on {grpc_port}")
    server.start()
    http = ThreadingHTTPServer(("127.0.0.1", http_port), Http)
    emit("ready")
    http.serve_forever()


if __name__ == "__main__":
    main()

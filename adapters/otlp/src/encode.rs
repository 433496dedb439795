//! Signals to OTLP request bodies, pure: the other way of [`decode`](crate::OtlpDecoder).
//!
//! Every signal becomes a **log record** ([`Encoder::encode`]): its `eventName` and its
//! `event.name` attribute are the signal type, its body the payload (a kvlist), its
//! attributes the envelope (`signal.id`, `signal.source`, `signal.correlation_id`, each
//! metadata field as `patchbay.metadata.<key>`, the payload's `agentId` as
//! `gen_ai.agent.id` and `session.id`), its time the signal's (in ns).
//!
//! What has a duration also becomes a **span**, following the GenAI semantic
//! conventions:
//!
//! - a `tool_call` and the later `tool_result` with the same `callId` → an
//!   `execute_tool {toolName}` span (`gen_ai.operation.name = "execute_tool"`,
//!   `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.call.arguments` and
//!   `gen_ai.tool.call.result` as JSON text, `gen_ai.agent.id`), status ERROR when
//!   `success` is false;
//! - a `task_dispatch` and the later `completion` with the same `taskId` → an
//!   `invoke_agent {agent}` span (`gen_ai.operation.name = "invoke_agent"`,
//!   `gen_ai.agent.id`: the dispatch's `to`, else the completion's `agentId`,
//!   `patchbay.task.id`), status ERROR when `success` is false; a tool call made while a
//!   task of the same trace is open (the same correlation id) is its child
//!   (`parentSpanId`).
//!
//! Open calls and tasks wait in bounded tables ([`MAX_OPEN`] each, the oldest forgotten
//! first). Ids are deterministic: the trace id is a hash of the signal's correlation id
//! (else of the call or task id), the span id a hash of the call or task id; the log
//! records of a call or task carry its trace and span ids.
//!
//! The [`model`](crate::model) built here is written as OTLP/JSON ([`logs_json`],
//! [`traces_json`]: lowerCamelCase, ids as hex, 64-bit integers as strings) or protobuf
//! ([`logs_protobuf`], [`traces_protobuf`]), which the crate's own
//! [`protobuf::decode`](crate::protobuf::decode) reads back into the same model.

use std::collections::{HashMap, VecDeque};

use patchbay_signal::{Object, Signal};
use serde_json::{Map, Value, json};

use crate::model::{
    AnyValue, Export, KeyValue, LogRecord, Logs, ResourceItems, Scope, ScopeItems, Span, Traces,
    base64_encode, hex_of,
};

/// How many open tool calls, and how many open tasks, wait for their end at most.
pub const MAX_OPEN: usize = 4096;

/// `SpanKind` INTERNAL.
const SPAN_KIND_INTERNAL: i32 = 1;
/// `StatusCode` ERROR.
const STATUS_ERROR: i32 = 2;

/// One batch of signals as OTLP: the logs (one record per signal) and the spans that
/// ended in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// One log record per signal.
    pub logs: Logs,
    /// The spans completed by this batch (`None` when there are none).
    pub traces: Option<Traces>,
}

/// The start of something that becomes a span when it ends.
#[derive(Debug, Clone)]
struct Open {
    start_ns: u64,
    trace_id: String,
    span_id: String,
    /// The tool's name, or the agent a task went to.
    name: String,
    agent: Option<String>,
    /// The tool call's arguments, or the task's description.
    detail: Option<Value>,
    /// The span of the task a tool call was made in.
    parent: Option<String>,
}

impl Open {
    /// What starts at `time` under `key` (a `tool` call or a `task`, `what`), in the trace
    /// of `signal`; the rest is filled in by the caller.
    fn start(signal: &Signal, what: &str, key: &str, time: u64) -> Open {
        Open {
            start_ns: time,
            trace_id: trace_id(signal, key),
            span_id: span_id(what, key),
            name: String::new(),
            agent: None,
            detail: None,
            parent: None,
        }
    }

    /// The span of what ended at `end`, named `name` (trailing spaces cut); `failure` is
    /// the status message of what failed.
    fn into_span(
        self,
        name: &str,
        attributes: Vec<KeyValue>,
        end: u64,
        failure: Option<String>,
    ) -> Span {
        Span {
            trace_id: Some(self.trace_id),
            span_id: Some(self.span_id),
            parent_span_id: self.parent,
            name: name.trim_end().to_owned(),
            kind: SPAN_KIND_INTERNAL,
            start_time_unix_nano: self.start_ns,
            end_time_unix_nano: end.max(self.start_ns),
            attributes,
            events: Vec::new(),
            status_code: if failure.is_some() { STATUS_ERROR } else { 0 },
            status_message: failure.unwrap_or_default(),
        }
    }

    /// Its trace and span ids, for the log records of its start and end.
    fn ids(&self) -> (String, String) {
        (self.trace_id.clone(), self.span_id.clone())
    }
}

/// A table of open calls or tasks, bounded: the oldest is forgotten first.
#[derive(Debug, Default)]
struct OpenTable {
    open: HashMap<String, Open>,
    order: VecDeque<String>,
}

impl OpenTable {
    /// Remembers `value` until its end; returns its ids.
    fn insert(&mut self, key: String, value: Open) -> (String, String) {
        let ids = value.ids();
        if self.open.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
        }
        while self.open.len() > MAX_OPEN {
            match self.order.pop_front() {
                Some(old) => {
                    self.open.remove(&old);
                }
                None => break,
            }
        }
        ids
    }

    /// Ends what is open under `key`, if anything is: its ids and the span `finish` makes
    /// of it (with the key).
    fn close(
        &mut self,
        key: Option<String>,
        finish: impl FnOnce(Open, &str) -> Span,
    ) -> (Option<(String, String)>, Option<Span>) {
        match key.and_then(|key| Some((self.take(&key)?, key))) {
            Some((open, key)) => (Some(open.ids()), Some(finish(open, &key))),
            None => (None, None),
        }
    }

    fn take(&mut self, key: &str) -> Option<Open> {
        let open = self.open.remove(key)?;
        if let Some(at) = self.order.iter().position(|k| k == key) {
            self.order.remove(at);
        }
        Some(open)
    }
}

/// Turns signals into OTLP, remembering open tool calls and tasks between batches.
#[derive(Debug)]
pub struct Encoder {
    resource: Scope,
    scope: Scope,
    calls: OpenTable,
    tasks: OpenTable,
}

impl Encoder {
    /// An encoder whose resource is `service.name = service_name`.
    pub fn new(service_name: &str) -> Self {
        Encoder {
            resource: Scope {
                name: String::new(),
                version: String::new(),
                attributes: vec![kv("service.name", str_value(service_name))],
            },
            scope: Scope {
                name: "patchbay".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                attributes: Vec::new(),
            },
            calls: OpenTable::default(),
            tasks: OpenTable::default(),
        }
    }

    /// How many tool calls and tasks wait for their end.
    pub fn open(&self) -> (usize, usize) {
        (self.calls.open.len(), self.tasks.open.len())
    }

    /// One log record per signal, in order, and the spans the batch completes.
    pub fn encode<S: std::borrow::Borrow<Signal>>(&mut self, batch: &[S]) -> Encoded {
        let mut records = Vec::with_capacity(batch.len());
        let mut spans = Vec::new();
        for signal in batch {
            let signal = signal.borrow();
            let (record, span) = self.one(signal);
            records.push(record);
            spans.extend(span);
        }
        Encoded {
            logs: self.export(records),
            traces: (!spans.is_empty()).then(|| self.export(spans)),
        }
    }

    fn export<T>(&self, items: Vec<T>) -> Export<T> {
        Export {
            resources: vec![ResourceItems {
                resource: self.resource.clone(),
                scopes: vec![ScopeItems {
                    scope: self.scope.clone(),
                    items,
                }],
            }],
            cuts: Default::default(),
        }
    }

    fn one(&mut self, signal: &Signal) -> (LogRecord, Option<Span>) {
        let payload: &Object = &signal.payload;
        let time = nanos(signal.timestamp);
        let text = |key: &str| payload.get(key).and_then(Value::as_str).map(str::to_owned);
        let agent = text("agentId");
        let mut ids = None;
        let mut span = None;
        match &*signal.kind {
            "tool_call" => {
                if let Some(call) = text("callId") {
                    let mut open = Open::start(signal, "tool", &call, time);
                    // A task of the same trace (correlation) is open: the call is made in it.
                    open.parent = self
                        .tasks
                        .open
                        .values()
                        .find(|task| task.trace_id == open.trace_id)
                        .map(|task| task.span_id.clone());
                    open.name = text("toolName").unwrap_or_default();
                    open.agent = agent.clone();
                    open.detail = payload.get("input").cloned();
                    ids = Some(self.calls.insert(call, open));
                }
            }
            "tool_result" => {
                (ids, span) = self.calls.close(text("callId"), |open, call| {
                    tool_span(open, call, payload, time)
                });
            }
            "task_dispatch" => {
                if let Some(task) = text("taskId") {
                    let mut open = Open::start(signal, "task", &task, time);
                    open.agent = text("to");
                    open.detail = payload.get("description").cloned();
                    ids = Some(self.tasks.insert(task, open));
                }
            }
            "completion" => {
                (ids, span) = self.tasks.close(text("taskId"), |open, task| {
                    agent_span(open, task, payload, agent.clone(), time)
                });
            }
            _ => {}
        }
        let mut attributes = vec![
            kv("event.name", str_value(&signal.kind)),
            kv("signal.id", str_value(&signal.id)),
            kv("signal.source", str_value(&signal.source)),
        ];
        if let Some(c) = &signal.correlation_id {
            attributes.push(kv("signal.correlation_id", str_value(c)));
        }
        if let Some(agent) = &agent {
            attributes.push(kv("gen_ai.agent.id", str_value(agent)));
            attributes.push(kv("session.id", str_value(agent)));
        }
        if let Some(meta) = &signal.metadata {
            for (key, value) in meta.iter() {
                attributes.push(kv(&format!("patchbay.metadata.{key}"), any_value(value)));
            }
        }
        let (severity_number, severity_text) = if &*signal.kind == "error" {
            (17, "ERROR")
        } else {
            (9, "INFO")
        };
        let (trace_id, span_id) = ids.unzip();
        let record = LogRecord {
            time_unix_nano: time,
            observed_time_unix_nano: time,
            severity_number,
            severity_text: severity_text.into(),
            body: Some(AnyValue::KvList(kvlist(payload))),
            attributes,
            trace_id,
            span_id,
            event_name: signal.kind.to_string(),
        };
        (record, span)
    }
}

fn tool_span(open: Open, call: &str, payload: &Object, end: u64) -> Span {
    let success = payload.get("success").and_then(Value::as_bool) != Some(false);
    let mut attributes = vec![
        kv("gen_ai.operation.name", str_value("execute_tool")),
        kv("gen_ai.tool.name", str_value(&open.name)),
        kv("gen_ai.tool.call.id", str_value(call)),
    ];
    if let Some(agent) = &open.agent {
        attributes.push(kv("gen_ai.agent.id", str_value(agent)));
    }
    if let Some(input) = &open.detail {
        attributes.push(kv(
            "gen_ai.tool.call.arguments",
            str_value(&input.to_string()),
        ));
    }
    let output = payload.get("output");
    if let Some(output) = output {
        attributes.push(kv(
            "gen_ai.tool.call.result",
            str_value(&output.to_string()),
        ));
    }
    let failure = (!success).then(|| {
        attributes.push(kv("error.type", str_value("tool_error")));
        output
            .and_then(|o| o.get("error"))
            .and_then(Value::as_str)
            .unwrap_or("the tool failed")
            .to_owned()
    });
    let name = format!("execute_tool {}", open.name);
    open.into_span(&name, attributes, end, failure)
}

fn agent_span(
    mut open: Open,
    task: &str,
    payload: &Object,
    completed_by: Option<String>,
    end: u64,
) -> Span {
    let success = payload.get("success").and_then(Value::as_bool) != Some(false);
    let agent = open.agent.take().or(completed_by).unwrap_or_default();
    let mut attributes = vec![
        kv("gen_ai.operation.name", str_value("invoke_agent")),
        kv("gen_ai.agent.id", str_value(&agent)),
        kv("patchbay.task.id", str_value(task)),
    ];
    if let Some(Value::String(d)) = &open.detail {
        attributes.push(kv("gen_ai.agent.description", str_value(d)));
    }
    let result = payload.get("result").and_then(Value::as_str);
    if let Some(result) = result {
        attributes.push(kv("patchbay.task.result", str_value(result)));
    }
    let failure = (!success).then(|| result.unwrap_or("the task failed").to_owned());
    open.into_span(&format!("invoke_agent {agent}"), attributes, end, failure)
}

/// Epoch milliseconds to nanoseconds (negative: 0).
fn nanos(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0).saturating_mul(1_000_000)
}

/// The trace of a call or task: its signal's correlation id's, else its own id's.
fn trace_id(signal: &Signal, id: &str) -> String {
    let seed = match &signal.correlation_id {
        Some(c) => format!("trace:{c}"),
        None => format!("trace:{id}"),
    };
    let hi = fnv1a(seed.as_bytes(), 0xcbf2_9ce4_8422_2325);
    let lo = fnv1a(seed.as_bytes(), 0x6c62_272e_07bb_0142);
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&hi.to_be_bytes());
    bytes[8..].copy_from_slice(&lo.to_be_bytes());
    nonzero_hex(&mut bytes)
}

fn span_id(what: &str, id: &str) -> String {
    let mut bytes = fnv1a(format!("{what}:{id}").as_bytes(), 0xcbf2_9ce4_8422_2325).to_be_bytes();
    nonzero_hex(&mut bytes)
}

/// An id must not be all zeros.
fn nonzero_hex(bytes: &mut [u8]) -> String {
    if bytes.iter().all(|b| *b == 0)
        && let Some(last) = bytes.last_mut()
    {
        *last = 1;
    }
    hex_of(bytes)
}

fn fnv1a(bytes: &[u8], basis: u64) -> u64 {
    let mut hash = basis;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

fn kv(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value,
    }
}

fn str_value(text: &str) -> AnyValue {
    AnyValue::Str(text.to_owned())
}

fn kvlist(object: &Map<String, Value>) -> Vec<KeyValue> {
    object.iter().map(|(k, v)| kv(k, any_value(v))).collect()
}

/// A JSON value as an `AnyValue` (an integer beyond `i64` as a double).
pub fn any_value(value: &Value) -> AnyValue {
    match value {
        Value::Null => AnyValue::Empty,
        Value::Bool(b) => AnyValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AnyValue::Int(i),
            None => AnyValue::Double(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => AnyValue::Str(s.clone()),
        Value::Array(items) => AnyValue::Array(items.iter().map(any_value).collect()),
        Value::Object(object) => AnyValue::KvList(kvlist(object)),
    }
}

// ---------------------------------------------------------------------------------------
// OTLP/JSON

/// An `ExportLogsServiceRequest` as OTLP/JSON.
pub fn logs_json(logs: &Logs) -> Vec<u8> {
    export_json(logs, ["resourceLogs", "scopeLogs", "logRecords"], log_json)
}

/// An `ExportTraceServiceRequest` as OTLP/JSON.
pub fn traces_json(traces: &Traces) -> Vec<u8> {
    export_json(traces, ["resourceSpans", "scopeSpans", "spans"], span_json)
}

/// An export as OTLP/JSON: `keys` name its resources, a resource's scopes and a scope's
/// items (`resourceLogs`, `scopeLogs`, `logRecords`).
fn export_json<T>(export: &Export<T>, keys: [&str; 3], item_json: fn(&T) -> Value) -> Vec<u8> {
    let [resources_key, scopes_key, items_key] = keys;
    let resources: Vec<Value> = export
        .resources
        .iter()
        .map(|r| {
            let scopes: Vec<Value> = r
                .scopes
                .iter()
                .map(|s| {
                    let items: Vec<Value> = s.items.iter().map(item_json).collect();
                    json!({"scope": scope_json(&s.scope), items_key: items})
                })
                .collect();
            json!({
                "resource": {"attributes": attributes_json(&r.resource.attributes)},
                scopes_key: scopes,
            })
        })
        .collect();
    json!({ resources_key: resources }).to_string().into_bytes()
}

fn scope_json(scope: &Scope) -> Value {
    json!({
        "name": scope.name,
        "version": scope.version,
        "attributes": attributes_json(&scope.attributes),
    })
}

fn log_json(r: &LogRecord) -> Value {
    let mut o = Map::new();
    o.insert("timeUnixNano".into(), r.time_unix_nano.to_string().into());
    o.insert(
        "observedTimeUnixNano".into(),
        r.observed_time_unix_nano.to_string().into(),
    );
    o.insert("severityNumber".into(), r.severity_number.into());
    o.insert("severityText".into(), r.severity_text.clone().into());
    if let Some(body) = &r.body {
        o.insert("body".into(), any_json(body));
    }
    o.insert("attributes".into(), attributes_json(&r.attributes));
    if let Some(t) = &r.trace_id {
        o.insert("traceId".into(), t.clone().into());
    }
    if let Some(s) = &r.span_id {
        o.insert("spanId".into(), s.clone().into());
    }
    if !r.event_name.is_empty() {
        o.insert("eventName".into(), r.event_name.clone().into());
    }
    Value::Object(o)
}

fn span_json(s: &Span) -> Value {
    let mut o = Map::new();
    o.insert(
        "traceId".into(),
        s.trace_id.clone().unwrap_or_default().into(),
    );
    o.insert(
        "spanId".into(),
        s.span_id.clone().unwrap_or_default().into(),
    );
    if let Some(p) = &s.parent_span_id {
        o.insert("parentSpanId".into(), p.clone().into());
    }
    o.insert("name".into(), s.name.clone().into());
    o.insert("kind".into(), s.kind.into());
    o.insert(
        "startTimeUnixNano".into(),
        s.start_time_unix_nano.to_string().into(),
    );
    o.insert(
        "endTimeUnixNano".into(),
        s.end_time_unix_nano.to_string().into(),
    );
    o.insert("attributes".into(), attributes_json(&s.attributes));
    if !s.events.is_empty() {
        let events: Vec<Value> = s
            .events
            .iter()
            .map(|e| {
                json!({
                    "timeUnixNano": e.time_unix_nano.to_string(),
                    "name": e.name,
                    "attributes": attributes_json(&e.attributes),
                })
            })
            .collect();
        o.insert("events".into(), events.into());
    }
    let mut status = Map::new();
    if s.status_code != 0 {
        status.insert("code".into(), s.status_code.into());
    }
    if !s.status_message.is_empty() {
        status.insert("message".into(), s.status_message.clone().into());
    }
    o.insert("status".into(), Value::Object(status));
    Value::Object(o)
}

fn attributes_json(list: &[KeyValue]) -> Value {
    list.iter()
        .map(|a| json!({"key": a.key, "value": any_json(&a.value)}))
        .collect::<Vec<_>>()
        .into()
}

fn any_json(value: &AnyValue) -> Value {
    match value {
        AnyValue::Empty => json!({}),
        AnyValue::Str(s) => json!({ "stringValue": s }),
        AnyValue::Bool(b) => json!({ "boolValue": b }),
        AnyValue::Int(i) => json!({ "intValue": i.to_string() }),
        // JSON has no NaN or infinity: the protobuf JSON mapping's strings.
        AnyValue::Double(d) if d.is_nan() => json!({ "doubleValue": "NaN" }),
        AnyValue::Double(d) if d.is_infinite() => {
            json!({ "doubleValue": if *d > 0.0 { "Infinity" } else { "-Infinity" } })
        }
        AnyValue::Double(d) => json!({ "doubleValue": d }),
        AnyValue::Bytes(b) => json!({ "bytesValue": base64_encode(b) }),
        AnyValue::Array(items) => {
            json!({ "arrayValue": { "values": items.iter().map(any_json).collect::<Vec<_>>() } })
        }
        AnyValue::KvList(kvs) => json!({ "kvlistValue": { "values": attributes_json(kvs) } }),
    }
}

// ---------------------------------------------------------------------------------------
// Protobuf

/// An `ExportLogsServiceRequest` as protobuf.
pub fn logs_protobuf(logs: &Logs) -> Vec<u8> {
    export_protobuf(logs, log_protobuf)
}

/// An `ExportTraceServiceRequest` as protobuf.
pub fn traces_protobuf(traces: &Traces) -> Vec<u8> {
    export_protobuf(traces, span_protobuf)
}

/// `resource_*` (1) { resource (1) { attributes (1) }, `scope_*` (2) { scope (1), items (2) } }.
fn export_protobuf<T>(export: &Export<T>, item: fn(&mut Pb, &T)) -> Vec<u8> {
    let mut top = Pb::default();
    for r in &export.resources {
        top.message(1, |rm| {
            rm.message(1, |res| attributes_pb(res, 1, &r.resource.attributes));
            for s in &r.scopes {
                rm.message(2, |sm| {
                    sm.message(1, |sc| {
                        sc.string(1, &s.scope.name);
                        sc.string(2, &s.scope.version);
                        attributes_pb(sc, 3, &s.scope.attributes);
                    });
                    for it in &s.items {
                        sm.message(2, |m| item(m, it));
                    }
                });
            }
        });
    }
    top.0
}

fn log_protobuf(m: &mut Pb, r: &LogRecord) {
    m.fixed64(1, r.time_unix_nano);
    m.varint(2, r.severity_number as i64 as u64);
    m.string(3, &r.severity_text);
    if let Some(body) = &r.body {
        m.message(5, |b| any_pb(b, body));
    }
    attributes_pb(m, 6, &r.attributes);
    if let Some(t) = &r.trace_id {
        m.bytes(9, &unhex(t));
    }
    if let Some(s) = &r.span_id {
        m.bytes(10, &unhex(s));
    }
    m.fixed64(11, r.observed_time_unix_nano);
    m.string(12, &r.event_name);
}

fn span_protobuf(m: &mut Pb, s: &Span) {
    if let Some(t) = &s.trace_id {
        m.bytes(1, &unhex(t));
    }
    if let Some(id) = &s.span_id {
        m.bytes(2, &unhex(id));
    }
    if let Some(p) = &s.parent_span_id {
        m.bytes(4, &unhex(p));
    }
    m.string(5, &s.name);
    m.varint(6, s.kind as i64 as u64);
    m.fixed64(7, s.start_time_unix_nano);
    m.fixed64(8, s.end_time_unix_nano);
    attributes_pb(m, 9, &s.attributes);
    for e in &s.events {
        m.message(11, |em| {
            em.fixed64(1, e.time_unix_nano);
            em.string(2, &e.name);
            attributes_pb(em, 3, &e.attributes);
        });
    }
    if s.status_code != 0 || !s.status_message.is_empty() {
        m.message(15, |st| {
            st.string(2, &s.status_message);
            st.varint(3, s.status_code as i64 as u64);
        });
    }
}

fn attributes_pb(m: &mut Pb, field: u32, list: &[KeyValue]) {
    for a in list {
        m.message(field, |kvm| {
            kvm.string(1, &a.key);
            kvm.message(2, |v| any_pb(v, &a.value));
        });
    }
}

fn any_pb(m: &mut Pb, value: &AnyValue) {
    match value {
        AnyValue::Empty => {}
        AnyValue::Str(s) => m.always_bytes(1, s.as_bytes()),
        AnyValue::Bool(b) => m.always_varint(2, u64::from(*b)),
        AnyValue::Int(i) => m.always_varint(3, *i as u64),
        AnyValue::Double(d) => {
            m.key(4, 1);
            m.0.extend_from_slice(&d.to_bits().to_le_bytes());
        }
        AnyValue::Bytes(b) => m.always_bytes(7, b),
        AnyValue::Array(items) => m.message(5, |a| {
            for item in items {
                a.message(1, |v| any_pb(v, item));
            }
        }),
        AnyValue::KvList(kvs) => m.message(6, |l| attributes_pb(l, 1, kvs)),
    }
}

/// Lowercase hex to bytes (an id the model holds; anything else is left out).
fn unhex(text: &str) -> Vec<u8> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    text.as_bytes()
        .chunks(2)
        .map_while(|pair| match pair {
            [a, b] => Some(digit(*a)? << 4 | digit(*b)?),
            _ => None,
        })
        .collect()
}

/// A protobuf message being written. Scalar fields at their default (0, empty) are left
/// out, as proto3 does; a `oneof` (`AnyValue`) is always written.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn raw_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.raw_varint(u64::from(field) << 3 | u64::from(wire));
    }

    fn varint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.always_varint(field, v);
        }
    }

    fn always_varint(&mut self, field: u32, v: u64) {
        self.key(field, 0);
        self.raw_varint(v);
    }

    fn fixed64(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, 1);
            self.0.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn string(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        if !b.is_empty() {
            self.always_bytes(field, b);
        }
    }

    fn always_bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.raw_varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn message(&mut self, field: u32, write: impl FnOnce(&mut Pb)) {
        let mut inner = Pb::default();
        write(&mut inner);
        self.always_bytes(field, &inner.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Limits, Model, SignalKind};
    use crate::protobuf;

    fn signal(kind: &str, payload: Value, at: i64) -> Signal {
        let Value::Object(payload) = payload else {
            panic!("an object")
        };
        Signal::new(kind, "test:a", payload).at(at)
    }

    fn pair() -> Vec<Signal> {
        vec![
            signal(
                "tool_call",
                json!({"toolName": "Bash", "agentId": "s1", "callId": "c1",
                       "input": {"command": "ls", "n": 3, "big": 1e300, "neg": -5}}),
                1_700_000_000_000,
            )
            .correlated("run-1")
            .with_meta("host", "box"),
            signal(
                "tool_result",
                json!({"toolName": "Bash", "agentId": "s1", "callId": "c1", "success": false,
                       "output": {"error": "exit 1", "list": [1, "a", null, true]}}),
                1_700_000_001_500,
            ),
        ]
    }

    #[test]
    fn a_tool_pair_is_two_records_and_one_span() {
        let mut e = Encoder::new("svc");
        let out = e.encode(&pair());
        let records = &out.logs.resources[0].scopes[0].items;
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].event_name, "tool_call");
        assert_eq!(records[0].time_unix_nano, 1_700_000_000_000_000_000);
        let attr = |r: &LogRecord, k: &str| {
            r.attributes
                .iter()
                .find(|a| a.key == k)
                .map(|a| a.value.clone())
        };
        assert_eq!(attr(&records[0], "gen_ai.agent.id"), Some(str_value("s1")));
        assert_eq!(
            attr(&records[0], "signal.correlation_id"),
            Some(str_value("run-1"))
        );
        assert_eq!(
            attr(&records[0], "patchbay.metadata.host"),
            Some(str_value("box"))
        );
        let spans = &out.traces.as_ref().expect("a span").resources[0].scopes[0].items;
        assert_eq!(spans.len(), 1);
        let s = &spans[0];
        assert_eq!(s.name, "execute_tool Bash");
        assert_eq!(s.status_code, STATUS_ERROR);
        assert_eq!(s.status_message, "exit 1");
        assert_eq!(s.end_time_unix_nano - s.start_time_unix_nano, 1_500_000_000);
        assert_eq!(s.trace_id.as_ref().map(String::len), Some(32));
        assert_eq!(s.span_id.as_ref().map(String::len), Some(16));
        assert_eq!(records[1].span_id, s.span_id);
        assert_eq!(records[0].trace_id, s.trace_id);
        // Deterministic.
        let again = Encoder::new("svc").encode(&pair());
        assert_eq!(again.traces, out.traces);
        assert_eq!(e.open(), (0, 0));
    }

    #[test]
    fn a_tool_call_in_an_open_task_of_its_trace_is_its_child() {
        let mut e = Encoder::new("svc");
        let task = signal(
            "task_dispatch",
            json!({"taskId": "t1", "from": "user", "to": "coder"}),
            1000,
        )
        .correlated("run-1");
        let mut batch = vec![task];
        batch.extend(pair());
        // Another trace's call is not.
        batch.push(
            signal(
                "tool_call",
                json!({"toolName": "Read", "callId": "c2"}),
                1_700_000_002_000,
            )
            .correlated("run-2"),
        );
        batch.push(signal(
            "tool_result",
            json!({"toolName": "Read", "callId": "c2"}),
            1_700_000_003_000,
        ));
        let out = e.encode(&batch);
        let spans = &out.traces.expect("spans").resources[0].scopes[0].items;
        let task_span = span_id("task", "t1");
        assert_eq!(spans[0].name, "execute_tool Bash");
        assert_eq!(spans[0].parent_span_id.as_deref(), Some(task_span.as_str()));
        assert_eq!(spans[1].name, "execute_tool Read");
        assert_eq!(spans[1].parent_span_id, None);
        let done = e.encode(&[signal("completion", json!({"taskId": "t1"}), 5000)]);
        let agent = &done.traces.expect("a span").resources[0].scopes[0].items[0];
        assert_eq!(agent.span_id.as_deref(), Some(task_span.as_str()));
        assert_eq!(agent.trace_id, spans[0].trace_id);
    }

    #[test]
    fn a_task_and_its_completion_are_an_invoke_agent_span() {
        let mut e = Encoder::new("svc");
        let first = e.encode(&[signal(
            "task_dispatch",
            json!({"taskId": "t1", "from": "user", "to": "coder", "description": "fix it"}),
            1000,
        )]);
        assert!(first.traces.is_none());
        assert_eq!(e.open(), (0, 1));
        let out = e.encode(&[signal(
            "completion",
            json!({"taskId": "t1", "success": true, "result": "end_turn"}),
            3000,
        )]);
        let span = &out.traces.expect("a span").resources[0].scopes[0].items[0];
        assert_eq!(span.name, "invoke_agent coder");
        assert_eq!(span.status_code, 0);
        assert!(
            span.attributes
                .contains(&kv("gen_ai.agent.id", str_value("coder")))
        );
    }

    #[test]
    fn the_open_tables_are_bounded() {
        let mut e = Encoder::new("svc");
        let calls: Vec<Signal> = (0..MAX_OPEN + 10)
            .map(|i| {
                signal(
                    "tool_call",
                    json!({"toolName": "t", "agentId": "a", "callId": format!("c{i}")}),
                    1,
                )
            })
            .collect();
        e.encode(&calls);
        assert_eq!(e.open(), (MAX_OPEN, 0));
        // The oldest were forgotten: their results make no span.
        let out = e.encode(&[signal(
            "tool_result",
            json!({"toolName": "t", "agentId": "a", "callId": "c0", "success": true}),
            2,
        )]);
        assert!(out.traces.is_none());
    }

    #[test]
    fn protobuf_and_json_read_back_as_the_same_model() {
        let out = Encoder::new("svc").encode(&pair());
        let limits = Limits::default();
        let traces = out.traces.clone().expect("a span");
        for (kind, model, pb, js) in [
            (
                SignalKind::Logs,
                Model::Logs(out.logs.clone()),
                logs_protobuf(&out.logs),
                logs_json(&out.logs),
            ),
            (
                SignalKind::Traces,
                Model::Traces(traces.clone()),
                traces_protobuf(&traces),
                traces_json(&traces),
            ),
        ] {
            let from_pb = protobuf::decode(kind, &pb, &limits).expect("protobuf decodes");
            assert_eq!(from_pb, model);
            let from_json = Model::from_json(kind, &js, &limits).expect("JSON decodes");
            assert_eq!(from_json, model);
        }
    }

    #[test]
    fn json_is_the_otlp_mapping() {
        let out = Encoder::new("svc").encode(&pair());
        let v: Value = serde_json::from_slice(&logs_json(&out.logs)).unwrap();
        let r = &v["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
        assert_eq!(r["timeUnixNano"], "1700000000000000000");
        assert_eq!(r["eventName"], "tool_call");
        assert_eq!(r["traceId"].as_str().map(str::len), Some(32));
        let body = &r["body"]["kvlistValue"]["values"];
        assert!(body.as_array().unwrap().iter().any(|kv| {
            kv["key"] == "input"
                && kv["value"]["kvlistValue"]["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|i| i["value"] == json!({"intValue": "3"}))
        }));
        assert_eq!(
            v["resourceLogs"][0]["resource"]["attributes"][0],
            json!({"key": "service.name", "value": {"stringValue": "svc"}})
        );
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(unhex("00ff10"), vec![0, 255, 16]);
        assert_eq!(hex_of(&unhex("0123456789abcdef")), "0123456789abcdef");
    }
}

//! OTLP exports (the [`model`](crate::model)) to signals: the mapping of the crate docs.

use std::collections::{HashMap, VecDeque};

use patchbay_graph::approvals::{self, Verdict};
use patchbay_signal::decode::{DEFAULT_MAX_LINE, StreamDecoder};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::well_known::{
    self, AgentState, AgentStateChange, Completion, ErrorPayload, Payload, Severity, TaskDispatch,
    TokenUsage, ToolCall, ToolResult, tool_call_arguments,
};
use patchbay_signal::{Object, Signal, now_ms, object, rfc3339_millis};
use serde_json::Value;

use crate::model::{
    AnyValue, Cuts, KeyValue, Limits, LogRecord, Logs, Metric, Metrics, Model, ModelError,
    PointValue, Scope, SignalKind, Span, Traces, base64_encode,
};

/// The token metrics that can become `token_usage` (see the crate docs' token rule).
pub const TOKEN_METRICS: [&str; 3] = [
    "claude_code.token.usage",
    "gemini_cli.token.usage",
    "gen_ai.client.token.usage",
];

/// How many sessions' token sources are remembered.
const MAX_SESSIONS: usize = 1024;

/// How many token counts from metrics wait for their session to show whether its events
/// carry tokens.
const MAX_PENDING: usize = 256;

/// How many cumulative series' last values are remembered (to turn totals into
/// increments).
const MAX_SERIES: usize = 4096;

/// The attributes that say who and when rather than what: kept in `metadata.attributes`
/// of a mapped event, not in its payload's `output`.
const IDENTITY: [&str; 19] = [
    "session.id",
    "user.id",
    "user.email",
    "user.account_uuid",
    "organization.id",
    "event.name",
    "event.timestamp",
    "event.sequence",
    "prompt.id",
    "prompt_id",
    "conversation.id",
    "terminal.type",
    "app.version",
    "originator",
    "installation.id",
    "interactive",
    "auth_type",
    "anthropic.provider",
    "anthropic.custom_base_url",
];

/// Token counts a metric export carried for a session that had sent no token-bearing
/// event yet: held until the session shows whether its events carry them.
#[derive(Debug, Clone)]
struct PendingTokens {
    agent: String,
    signal: Signal,
}

/// What one record is about: its agent, correlation and time.
#[derive(Debug, Clone)]
struct Ctx {
    agent: String,
    correlation: Option<String>,
    ts: i64,
}

/// Turns OTLP exports into signals (see the crate docs for the mapping). It remembers, per
/// session, which kind of record carries its token counts (so that none is counted twice),
/// the token counts of metrics still waiting for that answer, and the last value of each
/// cumulative token series.
#[derive(Debug, Clone)]
pub struct OtlpDecoder {
    source: String,
    limits: Limits,
    /// Per agent: the record kind whose token counts are its `token_usage`
    /// (`event:NAME`, `span`), with the order they were first seen (to forget the oldest).
    claims: HashMap<String, String>,
    claim_order: VecDeque<String>,
    pending: VecDeque<PendingTokens>,
    /// Per agent: the token metric whose points are its `token_usage` when its events
    /// carry none (the first one seen; Gemini CLI sends two of the same calls).
    metric_sources: HashMap<String, String>,
    series: HashMap<String, f64>,
    last_timestamp: i64,
    cuts: Cuts,
}

impl OtlpDecoder {
    /// A decoder whose signals come from `source`, with the default [`Limits`].
    pub fn new(source: impl Into<String>) -> Self {
        OtlpDecoder::with_limits(source, Limits::default())
    }

    /// A decoder with these limits.
    pub fn with_limits(source: impl Into<String>, limits: Limits) -> Self {
        OtlpDecoder {
            source: source.into(),
            limits,
            claims: HashMap::new(),
            claim_order: VecDeque::new(),
            pending: VecDeque::new(),
            metric_sources: HashMap::new(),
            series: HashMap::new(),
            last_timestamp: 0,
            cuts: Cuts::default(),
        }
    }

    /// The source name of the signals.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The limits the model is read with.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Everything cut so far from the exports decoded (to stay within the limits).
    pub fn cuts(&self) -> Cuts {
        self.cuts
    }

    /// Decodes an OTLP/JSON body of `kind` (a transport knows it from the path). A body
    /// of the wrong shape emits nothing and is the error.
    pub fn decode_json(
        &mut self,
        kind: SignalKind,
        body: &[u8],
        out: &mut Vec<Decoded>,
    ) -> Result<(), ModelError> {
        let model = Model::from_json(kind, body, &self.limits)?;
        self.decode(&model, out);
        Ok(())
    }

    /// Decodes an OTLP protobuf body of `kind`. A broken body emits nothing and is the
    /// error.
    pub fn decode_protobuf(
        &mut self,
        kind: SignalKind,
        body: &[u8],
        out: &mut Vec<Decoded>,
    ) -> Result<(), ModelError> {
        let model = crate::protobuf::decode(kind, body, &self.limits)?;
        self.decode(&model, out);
        Ok(())
    }

    /// Decodes any export.
    pub fn decode(&mut self, model: &Model, out: &mut Vec<Decoded>) {
        match model {
            Model::Logs(logs) => self.logs(logs, out),
            Model::Traces(traces) => self.traces(traces, out),
            Model::Metrics(metrics) => self.metrics(metrics, out),
        }
    }

    /// Emits the token counts of metrics still held (see the crate docs' token rule): at
    /// the end of a stream, or when a transport decides it has waited long enough.
    pub fn flush(&mut self, out: &mut Vec<Decoded>) {
        while let Some(p) = self.pending.pop_front() {
            out.push(Decoded::Signal(p.signal));
        }
    }

    /// Decodes a logs export.
    pub fn logs(&mut self, logs: &Logs, out: &mut Vec<Decoded>) {
        self.note_cuts(logs.cuts);
        for (resource, scope, record) in logs.items() {
            self.log_record(resource, scope, record, out);
        }
    }

    /// Decodes a traces export.
    pub fn traces(&mut self, traces: &Traces, out: &mut Vec<Decoded>) {
        self.note_cuts(traces.cuts);
        for (resource, scope, span) in traces.items() {
            self.span(resource, scope, span, out);
        }
    }

    /// Decodes a metrics export.
    pub fn metrics(&mut self, metrics: &Metrics, out: &mut Vec<Decoded>) {
        self.note_cuts(metrics.cuts);
        for (resource, scope, metric) in metrics.items() {
            self.metric(resource, scope, metric, out);
        }
    }

    fn note_cuts(&mut self, cuts: Cuts) {
        self.cuts.attributes += cuts.attributes;
        self.cuts.strings += cuts.strings;
        self.cuts.array_items += cuts.array_items;
        self.cuts.depth += cuts.depth;
        self.cuts.items += cuts.items;
    }

    // ---- logs ------------------------------------------------------------------------

    fn log_record(
        &mut self,
        resource: &Scope,
        scope: &Scope,
        record: &LogRecord,
        out: &mut Vec<Decoded>,
    ) {
        let attrs = &record.attributes;
        let name = event_name(record, scope);
        let ts = nanos_to_ms(record.time_unix_nano)
            .or_else(|| nanos_to_ms(record.observed_time_unix_nano))
            .or_else(|| str_attr(attrs, "event.timestamp").and_then(|t| rfc3339_millis(&t)))
            .unwrap_or_else(now_ms);
        let mut ctx = Ctx {
            agent: self.agent_of(attrs, resource),
            correlation: record
                .trace_id
                .clone()
                .or_else(|| first_str(attrs, &["prompt.id", "prompt_id"])),
            ts,
        };
        let mut meta = Object::new();
        if let Some(service) = str_attr(&resource.attributes, "service.name") {
            meta.insert("service".into(), service.into());
        }
        if !scope.name.is_empty() {
            meta.insert("scope".into(), scope.name.clone().into());
        }
        for (key, value) in [("traceId", &record.trace_id), ("spanId", &record.span_id)] {
            if let Some(v) = value {
                meta.insert(key.into(), v.clone().into());
            }
        }
        if let Some(session) = first_str(attrs, &["session.id"])
            .or_else(|| str_attr(&resource.attributes, "session.id"))
        {
            meta.insert("sessionId".into(), session.into());
        }
        if let Some(prompt) = first_str(attrs, &["prompt.id", "prompt_id"]) {
            meta.insert("promptId".into(), prompt.into());
        }
        let Some(name) = name else {
            let signal = self.otel_log(resource, scope, record);
            out.push(self.finish(&ctx, signal, meta));
            return;
        };
        // A record patchbay's own `otlp` output wrote carries its signal whole: the type as
        // the event name, the payload as the body, the envelope in `signal.*` attributes.
        if let (Some(id), Some(AnyValue::KvList(_))) = (str_attr(attrs, "signal.id"), &record.body)
            && let Some(Value::Object(payload)) = record.body.as_ref().map(json_of)
        {
            let source = str_attr(attrs, "signal.source").unwrap_or_else(|| self.source.clone());
            if let Some(correlation) = str_attr(attrs, "signal.correlation_id") {
                ctx.correlation = Some(correlation);
            }
            let mut signal = Signal::new(name, source.as_str(), payload);
            signal.id = id.as_str().into();
            out.push(self.finish(&ctx, signal, meta));
            return;
        }
        let signals = self.event(&name, attrs, &mut ctx, &mut meta);
        match signals {
            Some(signals) => {
                for signal in signals {
                    out.push(self.finish(&ctx, signal, meta.clone()));
                }
            }
            None => {
                let payload = attrs_json(attrs, &["event.name", "event.timestamp"]);
                if let Some(body) = &record.body
                    && !matches!(body, AnyValue::Str(s) if *s == name)
                {
                    meta.insert("body".into(), json_of(body));
                }
                if record.severity_number != 0 {
                    meta.insert("severityNumber".into(), record.severity_number.into());
                }
                let signal = Signal::new(name, self.source.as_str(), payload);
                out.push(self.finish(&ctx, signal, meta));
            }
        }
    }

    /// The signals of a named event the mapping knows; `None` to pass it on as it is.
    fn event(
        &mut self,
        name: &str,
        attrs: &[KeyValue],
        ctx: &mut Ctx,
        meta: &mut Object,
    ) -> Option<Vec<Signal>> {
        let source = self.source.clone();
        let (prefix, short) = name.rsplit_once('.').unwrap_or(("", name));
        match short {
            "user_prompt" => {
                let prompt = first_str(attrs, &["prompt", "prompt_text"])
                    .filter(|p| p != "<REDACTED>" && !p.is_empty());
                let task_id = first_str(attrs, &["prompt.id", "prompt_id"])
                    .or_else(|| ctx.correlation.clone())
                    .unwrap_or_else(|| format!("{}:{}", ctx.agent, ctx.ts));
                meta.insert(
                    "attributes".into(),
                    Value::Object(attrs_json(attrs, &["prompt", "prompt_text"])),
                );
                return Some(vec![
                    TaskDispatch {
                        task_id,
                        from: "user".into(),
                        to: ctx.agent.clone(),
                        description: prompt,
                    }
                    .into_signal(source.as_str()),
                ]);
            }
            "tool_result" | "tool_call" if prefix != "gen_ai" => {
                let tool_name =
                    first_str(attrs, &["tool_name", "function_name", "gen_ai.tool.name"])?;
                let call_id = first_str(
                    attrs,
                    &["tool_use_id", "call_id", "callId", "gen_ai.tool.call.id"],
                );
                let args_key = [
                    "arguments",
                    "function_args",
                    "tool_parameters",
                    "tool_input",
                ]
                .into_iter()
                .find(|k| attr(attrs, k).is_some());
                let input = args_key.and_then(|k| attr(attrs, k)).map(|v| match v {
                    AnyValue::Str(s) => tool_call_arguments(s.clone()),
                    AnyValue::KvList(_) => match json_of(v) {
                        Value::Object(o) => o,
                        _ => Object::new(),
                    },
                    other => object! {"value" => json_of(other)},
                });
                let success = match attr(attrs, "success") {
                    Some(v) => truthy(v),
                    None => attr(attrs, "error").is_none(),
                };
                let mut used: Vec<&str> = vec![
                    "tool_name",
                    "function_name",
                    "gen_ai.tool.name",
                    "tool_use_id",
                    "call_id",
                    "callId",
                    "gen_ai.tool.call.id",
                    "success",
                ];
                used.extend(args_key);
                used.extend(IDENTITY);
                let output = attrs_json(attrs, &used);
                meta.insert("attributes".into(), Value::Object(identity_json(attrs)));
                if let Some(call) = &call_id {
                    // As the hooks of Claude Code do: a tool event is correlated by its call.
                    ctx.correlation = Some(call.clone());
                }
                return Some(vec![
                    ToolCall {
                        tool_name: tool_name.clone(),
                        agent_id: ctx.agent.clone(),
                        call_id: call_id.clone(),
                        input,
                    }
                    .into_signal(source.as_str()),
                    ToolResult {
                        tool_name,
                        agent_id: ctx.agent.clone(),
                        call_id,
                        success,
                        output: Some(output),
                    }
                    .into_signal(source.as_str()),
                ]);
            }
            "tool_decision" => {
                let decision = str_attr(attrs, "decision")?;
                let verdict = verdict_of(&decision)?;
                let call = first_str(attrs, &["tool_use_id", "call_id", "callId"])?;
                let by = str_attr(attrs, "source")
                    .map(|s| s.to_ascii_lowercase())
                    .unwrap_or_else(|| "agent".into());
                meta.insert("decision".into(), decision.into());
                if let Some(tool) = first_str(attrs, &["tool_name", "function_name"]) {
                    meta.insert("toolName".into(), tool.into());
                }
                meta.insert("agentId".into(), ctx.agent.clone().into());
                meta.insert(
                    "attributes".into(),
                    Value::Object(attrs_json(attrs, &["decision", "source", "tool_name"])),
                );
                ctx.correlation = Some(call.clone());
                return Some(vec![approvals::decided(&source, &call, verdict, &by)]);
            }
            "api_error" => {
                let message = first_str(attrs, &["error", "error.message", "error_message"])
                    .unwrap_or_else(|| format!("{name}: the request failed"));
                let code = first_str(
                    attrs,
                    &["status_code", "error.type", "error_type", "error.code"],
                );
                meta.insert(
                    "attributes".into(),
                    Value::Object(attrs_json(
                        attrs,
                        &["error", "error.message", "error_message"],
                    )),
                );
                return Some(vec![
                    ErrorPayload {
                        agent_id: Some(ctx.agent.clone()),
                        code,
                        message,
                        severity: Severity::Error,
                    }
                    .into_signal(source.as_str()),
                ]);
            }
            _ => {}
        }
        // Any other event carrying a request's token counts.
        let (prompt, completion) = tokens_of(attrs)?;
        if !self.claim(&ctx.agent, &format!("event:{name}")) {
            self.note_claimed(&ctx.agent, meta);
            return None;
        }
        let model = first_str(
            attrs,
            &["model", "gen_ai.response.model", "gen_ai.request.model"],
        );
        let cost = first_f64(attrs, &["cost_usd", "cost"]).filter(|c| c.is_finite() && *c >= 0.0);
        meta.insert("event".into(), name.into());
        meta.insert(
            "attributes".into(),
            Value::Object(attrs_json(
                attrs,
                &[
                    "input_tokens",
                    "output_tokens",
                    "input_token_count",
                    "output_token_count",
                    "gen_ai.usage.input_tokens",
                    "gen_ai.usage.output_tokens",
                    "cost_usd",
                    "event.name",
                ],
            )),
        );
        Some(vec![
            TokenUsage {
                agent_id: ctx.agent.clone(),
                prompt_tokens: prompt,
                completion_tokens: completion,
                model,
                cost,
            }
            .into_signal(source.as_str()),
        ])
    }

    fn otel_log(&self, resource: &Scope, scope: &Scope, record: &LogRecord) -> Signal {
        let mut payload = Object::new();
        if let Some(body) = &record.body {
            payload.insert("body".into(), json_of(body));
        }
        if record.severity_number != 0 {
            payload.insert("severityNumber".into(), record.severity_number.into());
        }
        if !record.severity_text.is_empty() {
            payload.insert("severityText".into(), record.severity_text.clone().into());
        }
        if !record.event_name.is_empty() {
            payload.insert("eventName".into(), record.event_name.clone().into());
        }
        payload.insert(
            "attributes".into(),
            Value::Object(attrs_json(&record.attributes, &[])),
        );
        let signal = Signal::new("otel.log", self.source.as_str(), payload);
        with_origin(signal, resource, scope)
    }

    // ---- traces ----------------------------------------------------------------------

    fn span(&mut self, resource: &Scope, scope: &Scope, span: &Span, out: &mut Vec<Decoded>) {
        let attrs = &span.attributes;
        let start = nanos_to_ms(span.start_time_unix_nano).unwrap_or_else(now_ms);
        let end = nanos_to_ms(span.end_time_unix_nano).unwrap_or(start);
        let ctx = Ctx {
            agent: self.agent_of(attrs, resource),
            correlation: span.trace_id.clone(),
            ts: end,
        };
        let mut meta = Object::new();
        if let Some(service) = str_attr(&resource.attributes, "service.name") {
            meta.insert("service".into(), service.into());
        }
        for (key, value) in [
            ("traceId", &span.trace_id),
            ("spanId", &span.span_id),
            ("parentSpanId", &span.parent_span_id),
        ] {
            if let Some(v) = value {
                meta.insert(key.into(), v.clone().into());
            }
        }
        meta.insert("span".into(), span.name.clone().into());
        let failed = span.status_code == 2;
        let op = str_attr(attrs, "gen_ai.operation.name")
            .unwrap_or_else(|| span.name.split(' ').next().unwrap_or("").to_owned());
        let source = self.source.clone();
        match op.as_str() {
            "chat" | "text_completion" | "generate_content" => {
                let task_id = first_str(attrs, &["gen_ai.response.id"])
                    .or_else(|| span.span_id.clone())
                    .or_else(|| span.trace_id.clone())
                    .unwrap_or_else(|| format!("{}:{}", ctx.agent, ctx.ts));
                let reasons = attr(attrs, "gen_ai.response.finish_reasons").map(|v| match v {
                    AnyValue::Array(items) => items
                        .iter()
                        .filter_map(|i| match i {
                            AnyValue::Str(s) => Some(s.as_str()),
                            _ => None,
                        })
                        .collect::<Vec<_>>()
                        .join(","),
                    AnyValue::Str(s) => s.clone(),
                    other => json_of(other).to_string(),
                });
                let result = if failed && !span.status_message.is_empty() {
                    Some(span.status_message.clone())
                } else {
                    reasons
                };
                let model = first_str(attrs, &["gen_ai.response.model", "gen_ai.request.model"]);
                meta.insert("attributes".into(), Value::Object(attrs_json(attrs, &[])));
                if let Some((prompt, completion)) = tokens_of(attrs) {
                    if self.claim(&ctx.agent, "span") {
                        let usage = TokenUsage {
                            agent_id: ctx.agent.clone(),
                            prompt_tokens: prompt,
                            completion_tokens: completion,
                            model: model.clone(),
                            cost: None,
                        }
                        .into_signal(source.as_str());
                        out.push(self.finish(&ctx, usage, meta.clone()));
                    } else {
                        self.note_claimed(&ctx.agent, &mut meta);
                    }
                }
                let completion = Completion {
                    task_id,
                    agent_id: Some(ctx.agent.clone()),
                    success: !failed,
                    result,
                }
                .into_signal(source.as_str());
                out.push(self.finish(&ctx, completion, meta));
            }
            "execute_tool" => {
                let tool_name = first_str(attrs, &["gen_ai.tool.name"]).unwrap_or_else(|| {
                    span.name
                        .strip_prefix("execute_tool ")
                        .unwrap_or(&span.name)
                        .to_owned()
                });
                let call_id = first_str(attrs, &["gen_ai.tool.call.id", "gen_ai.tool.call_id"]);
                let input = attr(attrs, "gen_ai.tool.call.arguments").map(|v| match v {
                    AnyValue::Str(s) => tool_call_arguments(s.clone()),
                    other => match json_of(other) {
                        Value::Object(o) => o,
                        v => object! {"value" => v},
                    },
                });
                let mut output = Object::new();
                if let Some(result) = attr(attrs, "gen_ai.tool.call.result") {
                    let value = match result {
                        AnyValue::Str(s) => serde_json::from_str::<Value>(s)
                            .ok()
                            .filter(|v| v.is_object() || v.is_array())
                            .unwrap_or_else(|| Value::String(s.clone())),
                        other => json_of(other),
                    };
                    output.insert("result".into(), value);
                }
                if failed {
                    output.insert("error".into(), span.status_message.clone().into());
                }
                output.insert("durationMs".into(), (end - start).into());
                meta.insert(
                    "attributes".into(),
                    Value::Object(attrs_json(
                        attrs,
                        &["gen_ai.tool.call.arguments", "gen_ai.tool.call.result"],
                    )),
                );
                let call = ToolCall {
                    tool_name: tool_name.clone(),
                    agent_id: ctx.agent.clone(),
                    call_id: call_id.clone(),
                    input,
                }
                .into_signal(source.as_str());
                let start_ctx = Ctx {
                    ts: start,
                    ..ctx.clone()
                };
                out.push(self.finish(&start_ctx, call, meta.clone()));
                let result = ToolResult {
                    tool_name,
                    agent_id: ctx.agent.clone(),
                    call_id,
                    success: !failed,
                    output: Some(output),
                }
                .into_signal(source.as_str());
                out.push(self.finish(&ctx, result, meta));
            }
            "invoke_agent" => {
                let agent = first_str(attrs, &["gen_ai.agent.id", "gen_ai.agent.name"])
                    .unwrap_or_else(|| ctx.agent.clone());
                let name = str_attr(attrs, "gen_ai.agent.name");
                if let Some(name) = &name {
                    meta.insert("agentName".into(), name.clone().into());
                }
                meta.insert("attributes".into(), Value::Object(attrs_json(attrs, &[])));
                let started = AgentStateChange {
                    agent_id: agent.clone(),
                    from: AgentState::Idle,
                    to: AgentState::Thinking,
                    reason: Some("invoke_agent".into()),
                }
                .into_signal(source.as_str());
                let start_ctx = Ctx {
                    ts: start,
                    ..ctx.clone()
                };
                out.push(self.finish(&start_ctx, started, meta.clone()));
                let reason = if failed && !span.status_message.is_empty() {
                    span.status_message.clone()
                } else {
                    "invoke_agent ended".to_owned()
                };
                let ended = AgentStateChange {
                    agent_id: agent,
                    from: AgentState::Thinking,
                    to: if failed {
                        AgentState::Error
                    } else {
                        AgentState::Done
                    },
                    reason: Some(reason),
                }
                .into_signal(source.as_str());
                out.push(self.finish(&ctx, ended, meta));
            }
            _ => {
                let signal = self.otel_span(resource, scope, span, start, end);
                out.push(self.finish(&ctx, signal, meta));
            }
        }
    }

    fn otel_span(
        &self,
        resource: &Scope,
        scope: &Scope,
        span: &Span,
        start: i64,
        end: i64,
    ) -> Signal {
        let mut payload = object! {
            "name" => span.name.clone(),
            "kind" => span.kind,
            "startTime" => start,
            "endTime" => end,
            "durationMs" => end - start,
            "statusCode" => span.status_code,
        };
        if !span.status_message.is_empty() {
            payload.insert("statusMessage".into(), span.status_message.clone().into());
        }
        payload.insert(
            "attributes".into(),
            Value::Object(attrs_json(&span.attributes, &[])),
        );
        if !span.events.is_empty() {
            let events: Vec<Value> = span
                .events
                .iter()
                .map(|e| {
                    Value::Object(object! {
                        "name" => e.name.clone(),
                        "time" => nanos_to_ms(e.time_unix_nano).unwrap_or(0),
                        "attributes" => Value::Object(attrs_json(&e.attributes, &[])),
                    })
                })
                .collect();
            payload.insert("events".into(), Value::Array(events));
        }
        let signal = Signal::new("otel.span", self.source.as_str(), payload);
        with_origin(signal, resource, scope)
    }

    // ---- metrics ---------------------------------------------------------------------

    fn metric(&mut self, resource: &Scope, scope: &Scope, metric: &Metric, out: &mut Vec<Decoded>) {
        let is_tokens = TOKEN_METRICS.contains(&metric.name.as_str());
        // Token counts per (agent, model), in the order first seen.
        let mut groups: Vec<(String, Option<String>, i64, u64, u64, Object)> = Vec::new();
        for point in &metric.points {
            let attrs = &point.attributes;
            let ts = nanos_to_ms(point.time_unix_nano).unwrap_or_else(now_ms);
            let ctx = Ctx {
                agent: self.agent_of(attrs, resource),
                correlation: None,
                ts,
            };
            let mut payload = object! {
                "name" => metric.name.clone(),
                "kind" => metric.kind.as_str(),
            };
            if !metric.unit.is_empty() {
                payload.insert("unit".into(), metric.unit.clone().into());
            }
            if metric.temporality != 0 {
                let t = if metric.temporality == 1 {
                    "delta"
                } else {
                    "cumulative"
                };
                payload.insert("temporality".into(), t.into());
            }
            match &point.value {
                PointValue::Int(i) => {
                    payload.insert("value".into(), (*i).into());
                }
                PointValue::Double(d) => {
                    payload.insert("value".into(), number(*d));
                }
                PointValue::Distribution {
                    count,
                    sum,
                    min,
                    max,
                } => {
                    payload.insert("count".into(), (*count).into());
                    for (k, v) in [("sum", sum), ("min", min), ("max", max)] {
                        if let Some(v) = v {
                            payload.insert(k.into(), number(*v));
                        }
                    }
                }
                PointValue::Empty => {}
            }
            if let Some(start) = nanos_to_ms(point.start_time_unix_nano) {
                payload.insert("startTime".into(), start.into());
            }
            payload.insert("attributes".into(), Value::Object(attrs_json(attrs, &[])));
            let mut meta = Object::new();
            if !metric.description.is_empty() {
                meta.insert("description".into(), metric.description.clone().into());
            }
            if is_tokens {
                let claimed = self.claims.get(&ctx.agent).cloned();
                if let Some(by) = claimed {
                    meta.insert("tokensCountedBy".into(), by.into());
                }
                let increment = point.value.number().map(|v| {
                    if metric.temporality == 2 {
                        self.increment(&metric.name, &ctx.agent, attrs, v)
                    } else {
                        v
                    }
                });
                let kind = first_str(attrs, &["type", "gen_ai.token.type"]);
                if let (Some(v), Some(kind)) = (increment, kind) {
                    let model = first_str(
                        attrs,
                        &["model", "gen_ai.response.model", "gen_ai.request.model"],
                    );
                    let v = if v.is_finite() && v > 0.0 {
                        v.round() as u64
                    } else {
                        0
                    };
                    let i = match groups.iter().position(|g| g.0 == ctx.agent && g.1 == model) {
                        Some(i) => i,
                        None => {
                            groups.push((ctx.agent.clone(), model, ts, 0, 0, Object::new()));
                            groups.len() - 1
                        }
                    };
                    let g = &mut groups[i];
                    g.2 = g.2.max(ts);
                    match kind.as_str() {
                        "input" => g.3 += v,
                        "output" => g.4 += v,
                        other => {
                            g.5.insert(other.to_owned(), v.into());
                        }
                    }
                }
            }
            let signal = with_origin(
                Signal::new("otel.metric", self.source.as_str(), payload),
                resource,
                scope,
            );
            out.push(self.finish(&ctx, signal, meta));
        }
        for (agent, model, ts, prompt, completion, others) in groups {
            if self.claims.contains_key(&agent) || (prompt == 0 && completion == 0) {
                continue;
            }
            if !self.metric_sources.contains_key(&agent)
                && self.metric_sources.len() >= MAX_SESSIONS
            {
                self.metric_sources.clear();
            }
            let source = self
                .metric_sources
                .entry(agent.clone())
                .or_insert_with(|| metric.name.clone());
            if *source != metric.name {
                continue;
            }
            // A session still without token-bearing events: what it held from an earlier
            // export is its own (a whole export interval passed without events).
            self.release(&agent, out);
            let mut meta = object! { "metric" => metric.name.clone() };
            if !others.is_empty() {
                meta.insert("otherTokens".into(), Value::Object(others));
            }
            let signal = TokenUsage {
                agent_id: agent.clone(),
                prompt_tokens: prompt,
                completion_tokens: completion,
                model,
                cost: None,
            }
            .into_signal(self.source.as_str());
            let ctx = Ctx {
                agent: agent.clone(),
                correlation: None,
                ts,
            };
            let Decoded::Signal(signal) = self.finish(&ctx, signal, meta) else {
                continue;
            };
            if self.pending.len() >= MAX_PENDING
                && let Some(oldest) = self.pending.pop_front()
            {
                out.push(Decoded::Signal(oldest.signal));
            }
            self.pending.push_back(PendingTokens { agent, signal });
        }
    }

    /// The increment of a cumulative series since its last value (the whole value the
    /// first time, or after a reset).
    fn increment(&mut self, metric: &str, agent: &str, attrs: &[KeyValue], value: f64) -> f64 {
        let key = format!(
            "{metric}\u{1}{agent}\u{1}{}",
            Value::Object(attrs_json(attrs, &[]))
        );
        if !self.series.contains_key(&key) && self.series.len() >= MAX_SERIES {
            self.series.clear();
        }
        let previous = self.series.insert(key, value);
        match previous {
            Some(p) if value >= p => value - p,
            _ => value,
        }
    }

    /// Emits the token counts held for `agent`.
    fn release(&mut self, agent: &str, out: &mut Vec<Decoded>) {
        let mut kept = VecDeque::with_capacity(self.pending.len());
        for p in self.pending.drain(..) {
            if p.agent == agent {
                out.push(Decoded::Signal(p.signal));
            } else {
                kept.push_back(p);
            }
        }
        self.pending = kept;
    }

    // ---- state -----------------------------------------------------------------------

    /// Notes in `meta` which kind gives `agent`'s `token_usage`, where another one carried
    /// token counts too (see [`claim`](Self::claim)).
    fn note_claimed(&self, agent: &str, meta: &mut Object) {
        let claimed = self.claims.get(agent).cloned().unwrap_or_default();
        meta.insert("tokensCountedBy".into(), claimed.into());
    }

    /// Whether `kind` (`event:NAME`, `span`) gives `agent`'s `token_usage`: the first kind
    /// that carried its token counts does, and no other. Token counts held from metrics
    /// for the agent are dropped (its events carry them).
    fn claim(&mut self, agent: &str, kind: &str) -> bool {
        self.pending.retain(|p| p.agent != agent);
        match self.claims.get(agent) {
            Some(k) => k == kind,
            None => {
                if self.claims.len() >= MAX_SESSIONS
                    && let Some(oldest) = self.claim_order.pop_front()
                {
                    self.claims.remove(&oldest);
                }
                self.claims.insert(agent.to_owned(), kind.to_owned());
                self.claim_order.push_back(agent.to_owned());
                true
            }
        }
    }

    /// The agent a record is about: its session (`session.id`, `gen_ai.agent.id`,
    /// `gen_ai.conversation.id`, `conversation.id`; the record's attributes first, then
    /// the resource's), else the resource's `service.name`, else the source.
    fn agent_of(&self, attrs: &[KeyValue], resource: &Scope) -> String {
        const KEYS: [&str; 4] = [
            "session.id",
            "gen_ai.agent.id",
            "gen_ai.conversation.id",
            "conversation.id",
        ];
        first_str(attrs, &KEYS)
            .or_else(|| first_str(&resource.attributes, &KEYS))
            .or_else(|| str_attr(&resource.attributes, "service.name"))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| self.source.clone())
    }

    fn finish(&mut self, ctx: &Ctx, signal: Signal, meta: Object) -> Decoded {
        let mut signal = signal.at(ctx.ts);
        if let Some(c) = &ctx.correlation {
            signal = signal.correlated(c.as_str());
        }
        if !meta.is_empty() {
            match signal.metadata.as_mut() {
                Some(existing) => {
                    for (k, v) in meta {
                        existing.entry(k).or_insert(v);
                    }
                }
                None => signal.set_metadata(meta),
            }
        }
        well_known::repair(&mut signal);
        self.last_timestamp = ctx.ts;
        Decoded::Signal(signal)
    }

    /// The counted bad-input `error` signal for `raw`.
    pub fn bad(&self, raw: &str, message: &str) -> Decoded {
        Decoded::BadInput(bad_input_signal(
            &self.source,
            self.last_timestamp,
            raw,
            message,
        ))
    }

    /// Decodes one JSON body whose kind is read from its top-level field (as `patchbay
    /// parse` does); a body of none of the three kinds, or of the wrong shape, is a
    /// counted bad input.
    pub fn decode_text(&mut self, text: &str, out: &mut Vec<Decoded>) {
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                out.push(self.bad(text, &format!("not an OTLP/JSON body: {e}")));
                return;
            }
        };
        let Some(kind) = SignalKind::of_json(&value) else {
            out.push(self.bad(
                text,
                "not an OTLP export: no resourceLogs, resourceSpans or resourceMetrics",
            ));
            return;
        };
        match Model::from_value(kind, &value, &self.limits) {
            Ok(model) => self.decode(&model, out),
            Err(e) => out.push(self.bad(text, &e.to_string())),
        }
    }
}

/// The byte-stream form of [`OtlpDecoder`] for `patchbay parse --protocol otlp`: a file
/// of OTLP/JSON bodies, one per line or each written over several lines (a pretty-printed
/// capture), each up to [`DEFAULT_MAX_LINE`] bytes. Text between bodies that is not one
/// is a counted bad input; at the end, the token counts still held are emitted.
#[derive(Debug, Clone)]
pub struct OtlpStream {
    decoder: OtlpDecoder,
    bodies: Bodies,
}

impl OtlpStream {
    /// Drives `decoder` over a stream of JSON bodies.
    pub fn new(decoder: OtlpDecoder) -> Self {
        OtlpStream {
            decoder,
            bodies: Bodies::new(DEFAULT_MAX_LINE),
        }
    }

    /// The decoder inside.
    pub fn decoder(&self) -> &OtlpDecoder {
        &self.decoder
    }
}

impl StreamDecoder for OtlpStream {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let decoder = &mut self.decoder;
        self.bodies
            .feed(bytes, |piece| take_piece(decoder, piece, out));
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let decoder = &mut self.decoder;
        self.bodies.finish(|piece| take_piece(decoder, piece, out));
        decoder.flush(out);
    }
}

fn take_piece(decoder: &mut OtlpDecoder, piece: Piece<'_>, out: &mut Vec<Decoded>) {
    match piece {
        Piece::Body(bytes) => decoder.decode_text(&String::from_utf8_lossy(bytes), out),
        Piece::Junk(bytes) => {
            let text = String::from_utf8_lossy(bytes);
            out.push(decoder.bad(&text, "not an OTLP/JSON body"));
        }
        Piece::TooLong(head) => {
            let text = String::from_utf8_lossy(head);
            out.push(decoder.bad(
                &text,
                &format!("a body longer than {DEFAULT_MAX_LINE} bytes: skipped"),
            ));
        }
    }
}

/// What [`Bodies`] hands on.
enum Piece<'a> {
    /// A whole JSON object or array (by its brackets).
    Body(&'a [u8]),
    /// A line of something else between bodies.
    Junk(&'a [u8]),
    /// The first bytes of a body over the limit (the rest is skipped).
    TooLong(&'a [u8]),
}

/// Splits a byte stream into JSON bodies by counting brackets outside strings, in one
/// pass: a body may span lines or share one with others. At most `max` bytes are kept.
#[derive(Debug, Clone)]
struct Bodies {
    max: usize,
    buf: Vec<u8>,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Inside a line of junk (outside any body, not whitespace).
    junk: bool,
    /// Skipping the rest of a body over the limit.
    skipping: bool,
}

impl Bodies {
    fn new(max: usize) -> Self {
        Bodies {
            max,
            buf: Vec::new(),
            depth: 0,
            in_string: false,
            escaped: false,
            junk: false,
            skipping: false,
        }
    }

    fn feed(&mut self, bytes: &[u8], mut emit: impl FnMut(Piece<'_>)) {
        for &b in bytes {
            if self.depth == 0 && !self.junk {
                match b {
                    b'{' | b'[' => {
                        self.depth = 1;
                        self.buf.clear();
                        self.buf.push(b);
                    }
                    b' ' | b'\t' | b'\r' | b'\n' => {}
                    _ => {
                        self.junk = true;
                        self.buf.clear();
                        self.buf.push(b);
                    }
                }
                continue;
            }
            if self.junk {
                if b == b'\n' {
                    self.junk = false;
                    emit(Piece::Junk(&self.buf));
                    self.buf.clear();
                } else if self.buf.len() < 256 {
                    self.buf.push(b);
                }
                continue;
            }
            if !self.skipping {
                if self.buf.len() >= self.max {
                    self.skipping = true;
                    self.buf.truncate(256);
                    emit(Piece::TooLong(&self.buf));
                    self.buf = Vec::new();
                } else {
                    self.buf.push(b);
                }
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        if !std::mem::take(&mut self.skipping) {
                            emit(Piece::Body(&self.buf));
                        }
                        self.buf.clear();
                    }
                }
                _ => {}
            }
        }
    }

    fn finish(&mut self, mut emit: impl FnMut(Piece<'_>)) {
        if (self.depth > 0 && !self.skipping) || self.junk {
            // An unfinished body: its reader reports what is wrong.
            emit(if self.junk {
                Piece::Junk(&self.buf)
            } else {
                Piece::Body(&self.buf)
            });
        }
        *self = Bodies::new(self.max);
    }
}

// ---- helpers -----------------------------------------------------------------------

/// The name of a log record's event: its `event.name` attribute (Claude Code's lacks the
/// `claude_code.` prefix its body and scope have: it is added back), else the record's
/// `eventName` when it is a name (Codex puts a source location there).
fn event_name(record: &LogRecord, scope: &Scope) -> Option<String> {
    let name = str_attr(&record.attributes, "event.name")
        .or_else(|| {
            let n = record.event_name.trim();
            (!n.is_empty() && !n.contains(' ')).then(|| n.to_owned())
        })
        .filter(|n| !n.is_empty())?;
    if name.contains('.') {
        return Some(name);
    }
    if let Some(AnyValue::Str(body)) = &record.body
        && body.ends_with(&format!(".{name}"))
        && !body.contains(' ')
    {
        return Some(body.clone());
    }
    if scope.name.contains("claude_code") {
        return Some(format!("claude_code.{name}"));
    }
    Some(name)
}

/// A request's token counts from an event's or a span's attributes.
fn tokens_of(attrs: &[KeyValue]) -> Option<(u64, u64)> {
    let input = first_count(
        attrs,
        &[
            "input_tokens",
            "input_token_count",
            "gen_ai.usage.input_tokens",
        ],
    )?;
    let output = first_count(
        attrs,
        &[
            "output_tokens",
            "output_token_count",
            "gen_ai.usage.output_tokens",
        ],
    )?;
    Some((input, output))
}

/// Codex's, Claude Code's and Gemini CLI's decision words as the common verdict.
fn verdict_of(decision: &str) -> Option<Verdict> {
    match decision.to_ascii_lowercase().as_str() {
        "approved_for_session" | "always" | "accept_always" => Some(Verdict::Always),
        "denied" | "reject" | "rejected" => Some(Verdict::Deny),
        "abort" => Some(Verdict::Cancel),
        "auto_accept" | "accept" | "approved" => Some(Verdict::Allow),
        other => Verdict::parse(&Value::from(other)),
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attrs.iter().find(|kv| kv.key == key).map(|kv| &kv.value)
}

/// A string attribute (numbers and booleans written out; `None` for anything else).
fn str_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    match attr(attrs, key)? {
        AnyValue::Str(s) => Some(s.clone()),
        AnyValue::Int(i) => Some(i.to_string()),
        AnyValue::Double(d) => Some(d.to_string()),
        AnyValue::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn first_str(attrs: &[KeyValue], keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| str_attr(attrs, k).filter(|s| !s.is_empty()))
}

/// A count: an integer ≥ 0, a whole double, or a decimal string of one.
fn count(value: &AnyValue) -> Option<u64> {
    match value {
        AnyValue::Int(i) => u64::try_from(*i).ok(),
        AnyValue::Double(d) if *d >= 0.0 && d.fract() == 0.0 && d.is_finite() => Some(*d as u64),
        AnyValue::Str(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn first_count(attrs: &[KeyValue], keys: &[&str]) -> Option<u64> {
    keys.iter().find_map(|k| attr(attrs, k).and_then(count))
}

fn first_f64(attrs: &[KeyValue], keys: &[&str]) -> Option<f64> {
    keys.iter().find_map(|k| match attr(attrs, k)? {
        AnyValue::Int(i) => Some(*i as f64),
        AnyValue::Double(d) => Some(*d),
        AnyValue::Str(s) => s.trim().parse().ok(),
        _ => None,
    })
}

/// Whether a flag attribute says yes (`true`, `"true"`, `"True"`, `1`).
fn truthy(value: &AnyValue) -> bool {
    match value {
        AnyValue::Bool(b) => *b,
        AnyValue::Str(s) => s.eq_ignore_ascii_case("true") || s == "1",
        AnyValue::Int(i) => *i != 0,
        _ => false,
    }
}

/// A double as JSON: a number when finite, else its name (`NaN`, `Infinity`).
fn number(d: f64) -> Value {
    serde_json::Number::from_f64(d).map_or_else(
        || {
            Value::String(if d.is_nan() {
                "NaN".into()
            } else if d > 0.0 {
                "Infinity".into()
            } else {
                "-Infinity".into()
            })
        },
        Value::Number,
    )
}

/// An attribute value as JSON: bytes as base64, a kvlist as an object.
pub(crate) fn json_of(value: &AnyValue) -> Value {
    match value {
        AnyValue::Empty => Value::Null,
        AnyValue::Str(s) => Value::String(s.clone()),
        AnyValue::Bool(b) => Value::Bool(*b),
        AnyValue::Int(i) => Value::from(*i),
        AnyValue::Double(d) => number(*d),
        AnyValue::Bytes(b) => Value::String(base64_encode(b)),
        AnyValue::Array(items) => Value::Array(items.iter().map(json_of).collect()),
        AnyValue::KvList(kvs) => Value::Object(attrs_json(kvs, &[])),
    }
}

/// Attributes as a JSON object, without the keys in `skip`.
fn attrs_json(attrs: &[KeyValue], skip: &[&str]) -> Object {
    attrs
        .iter()
        .filter(|kv| !skip.contains(&kv.key.as_str()))
        .map(|kv| (kv.key.clone(), json_of(&kv.value)))
        .collect()
}

/// The identity attributes (see [`IDENTITY`]) as a JSON object.
fn identity_json(attrs: &[KeyValue]) -> Object {
    attrs
        .iter()
        .filter(|kv| IDENTITY.contains(&kv.key.as_str()))
        .map(|kv| (kv.key.clone(), json_of(&kv.value)))
        .collect()
}

/// A generic signal with its resource and scope in metadata.
fn with_origin(signal: Signal, resource: &Scope, scope: &Scope) -> Signal {
    let mut s = object! {"name" => scope.name.clone()};
    if !scope.version.is_empty() {
        s.insert("version".into(), scope.version.clone().into());
    }
    if !scope.attributes.is_empty() {
        s.insert(
            "attributes".into(),
            Value::Object(attrs_json(&scope.attributes, &[])),
        );
    }
    signal
        .with_meta(
            "resource",
            Value::Object(attrs_json(&resource.attributes, &[])),
        )
        .with_meta("scope", Value::Object(s))
}

/// Unix nanoseconds to milliseconds (`None` for 0: unknown).
fn nanos_to_ms(nanos: u64) -> Option<i64> {
    (nanos != 0).then(|| i64::try_from(nanos / 1_000_000).unwrap_or(i64::MAX))
}

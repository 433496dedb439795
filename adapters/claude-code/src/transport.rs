//! The hook endpoint: `type = "claude_code"` as a source (listen only) and as a two-way
//! output (`control.answer` in for the gate, the hook signals out of `NAME.inbound`).

use std::path::Path;

use patchbay_graph::approvals;
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, LinkEnds, Options, Output, OutputContext, Source,
    SourceContext,
};
use patchbay_hooks::{Call, EndpointOptions, HookAgent, Settings, defaults};
use patchbay_server::Secret;
use patchbay_signal::Signal;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::well_known::AgentState;
use serde::Deserialize;
use serde_json::Value;

use crate::decode::{HookDecoder, agent_of};
use crate::gate::{self, CallKey, Decided, GateConfig, Verdict};
use crate::transcript::TranscriptReader;

/// The address the component listens on when the config names none.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7879";

/// `[outputs.NAME]` (two-way: takes `control.answer` for the gate) or `[sources.NAME]`
/// (listen only) with `type = "claude_code"`: the endpoint Claude Code's http hooks post
/// to (`http://LISTEN/hook`; `patchbay hooks install` writes them).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaudeCodeConfig {
    /// `IP:PORT` to listen on (`localhost:PORT` means `127.0.0.1:PORT`). Default
    /// `127.0.0.1:7879`. Not on loopback, a `token` is required.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Bearer token the hooks must send (`Authorization: Bearer …`). `patchbay hooks
    /// install` makes them send `$PATCHBAY_HOOK_TOKEN`, so it is never written in clear.
    #[serde(default)]
    pub token: Option<Secret>,
    /// Hold the calls of some tools until a `control.answer` decides them (outputs only).
    #[serde(default)]
    pub gate: Option<GateConfig>,
    /// Largest hook body accepted, in bytes (a `Write` carries the whole file). Default
    /// 8 MiB.
    #[serde(default = "defaults::max_body")]
    pub max_body: usize,
    /// Host names the endpoint answers to besides `localhost`, `127.0.0.1` and `[::1]`
    /// (any port); `["*"]` for any. Absent: a loopback `listen` answers only to the
    /// loopback names (the hooks post to `http://127.0.0.1:PORT/hook`), any other `listen`
    /// to any host. A request naming another host gets 403; one with an `Origin` (a web
    /// page) always does.
    #[serde(default)]
    pub allowed_hosts: Option<Vec<String>>,
    /// How long a client may take to send a request's head, in ms (from the connection's
    /// start, then from the first byte of each next request); past it the connection is
    /// closed. From 1 to 86400000 (one day). Default 10000.
    #[serde(default = "defaults::header_timeout_ms")]
    pub header_timeout_ms: u64,
    /// How long a keep-alive connection may wait for its next request, in ms, before it is
    /// closed (a call held by the gate is not idle). From 1 to 86400000. Default 60000.
    #[serde(default = "defaults::idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// How many connections may be open at once; beyond it a new one gets 503 and is
    /// closed at once, counted as `too_many_connections`. From 1 to 1000000. Default 1024.
    #[serde(default = "defaults::max_connections")]
    pub max_connections: usize,
}

fn default_listen() -> String {
    DEFAULT_LISTEN.into()
}

impl ClaudeCodeConfig {
    /// Checks parsed options; an error names the offending key and what is wrong.
    pub fn check(self) -> Result<Settings, (&'static str, String)> {
        Settings::check(self.into(), DEFAULT_LISTEN)
    }
}

impl From<ClaudeCodeConfig> for EndpointOptions {
    fn from(c: ClaudeCodeConfig) -> Self {
        EndpointOptions {
            listen: c.listen,
            token: c.token,
            gate: c.gate,
            max_body: c.max_body,
            allowed_hosts: c.allowed_hosts,
            header_timeout_ms: c.header_timeout_ms,
            idle_timeout_ms: c.idle_timeout_ms,
            max_connections: c.max_connections,
        }
    }
}

fn parse_options(options: &Options<'_>) -> Result<Settings, Diagnostic> {
    let config: ClaudeCodeConfig = options.parse()?;
    config
        .check()
        .map_err(|(key, msg)| options.error_at(key, msg))
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let settings = parse_options(options)?;
    GateConfig::refuse_on_a_source(settings.gate.as_ref(), options)?;
    Ok(Box::new(ClaudeCode { settings }))
}

pub(crate) fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(Box::new(ClaudeCode {
        settings: parse_options(options)?,
    }))
}

/// One hook endpoint; the same value runs as a source or as an output.
struct ClaudeCode {
    settings: Settings,
}

impl Source for ClaudeCode {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let agent = Claude::new(format!("claude_code:{}", cx.name()));
            patchbay_hooks::serve(agent, self.settings, LinkEnds::source(&cx)).await
        })
    }
}

impl Output for ClaudeCode {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let agent = Claude::new(format!("claude_code:{}", cx.name()));
            patchbay_hooks::serve(agent, self.settings, LinkEnds::output(&cx)).await
        })
    }
}

/// Claude Code's side of the shared endpoint: its decoder, its transcripts (the usage a
/// `Stop` reports), and the decisions given at a call's `PreToolUse` (its
/// `PermissionRequest` gets the same).
struct Claude {
    decoder: HookDecoder,
    transcripts: TranscriptReader,
    decided: Decided,
}

impl Claude {
    fn new(source: String) -> Self {
        Claude {
            decoder: HookDecoder::new(source),
            transcripts: TranscriptReader::new(),
            decided: Decided::default(),
        }
    }
}

fn event_of(hook: &Value) -> &str {
    hook.get("hook_event_name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

impl HookAgent for Claude {
    fn name(&self) -> &'static str {
        "claude_code"
    }

    fn decode(&mut self, hook: &Value, out: &mut Vec<Decoded>) {
        self.decoder.decode(hook, out);
    }

    fn decode_bytes(&mut self, body: &[u8], out: &mut Vec<Decoded>) {
        self.decoder.decode_bytes(body, out);
    }

    /// `PreToolUse` and `PermissionRequest`; the `promptId` is the `tool_use_id` (a
    /// `PermissionRequest` has none: one is made up).
    fn call(&mut self, hook: &Value) -> Option<Call> {
        if !matches!(event_of(hook), "PreToolUse" | "PermissionRequest") {
            return None;
        }
        let tool = hook
            .get("tool_name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let prompt_id = hook
            .get("tool_use_id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("permission-{}", patchbay_signal::next_id()));
        let input = hook
            .get("tool_input")
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()));
        Some(Call {
            prompt_id,
            tool,
            input,
        })
    }

    /// The same call held at its `PreToolUse`: one call, one approval.
    fn decided_before(&mut self, hook: &Value, _call: &Call) -> Option<Value> {
        let event = event_of(hook);
        if event != "PermissionRequest" {
            return None;
        }
        let (decision, reason) = self.decided.take(&CallKey::of(hook))?;
        Some(gate::hook_answer(event, decision, &reason))
    }

    fn state_change(&mut self, hook: &Value, to: AgentState, reason: String) -> Signal {
        self.decoder.state_change(hook, to, reason)
    }

    fn requested(&mut self, hook: &Value, call: &Call, gate: &GateConfig) -> Signal {
        let choices = ["allow", "deny", "ask"].map(String::from);
        let payload = approvals::request_payload(
            &call.prompt_id,
            &agent_of(hook),
            &call.tool,
            call.input.clone(),
            &choices,
        );
        let mut request = self.decoder.signal_for(hook, approvals::REQUESTED, payload);
        let meta = request.metadata_mut();
        meta.insert("hookEvent".into(), event_of(hook).into());
        meta.insert("timeoutMs".into(), gate.timeout_ms.into());
        meta.insert("default".into(), gate.default.as_str().into());
        request
    }

    fn verdict(&self, verdict: Verdict) -> Verdict {
        gate::decision(verdict)
    }

    fn decided(
        &mut self,
        hook: &Value,
        call: &Call,
        verdict: Verdict,
        by: &str,
        reason: &str,
    ) -> Signal {
        let mut decided = self.decoder.signal_for(
            hook,
            approvals::DECIDED,
            approvals::decided_payload(&call.prompt_id, verdict, by),
        );
        let meta = decided.metadata_mut();
        meta.insert("toolName".into(), call.tool.clone().into());
        meta.insert("reason".into(), reason.into());
        decided
    }

    fn state_after(&self, verdict: Verdict) -> AgentState {
        match verdict {
            Verdict::Allow | Verdict::Always => AgentState::Acting,
            Verdict::Deny | Verdict::Cancel => AgentState::Thinking,
            Verdict::Ask => AgentState::Waiting,
        }
    }

    /// Remembers a `PreToolUse`'s decision for the call's `PermissionRequest`.
    fn answer(&mut self, hook: &Value, _call: &Call, verdict: Verdict, reason: &str) -> Value {
        let event = event_of(hook);
        if event == "PreToolUse" {
            self.decided
                .record(CallKey::of(hook), verdict, reason.to_owned());
        }
        gate::hook_answer(event, verdict, reason)
    }

    /// On `Stop`/`SubagentStop`: the `token_usage` of what the transcript gained.
    fn after(&mut self, hook: &Value) -> Vec<Decoded> {
        if !matches!(event_of(hook), "Stop" | "SubagentStop") {
            return Vec::new();
        }
        let key = if hook.get("agent_transcript_path").is_some() {
            "agent_transcript_path"
        } else {
            "transcript_path"
        };
        let Some(path) = hook.get(key).and_then(Value::as_str) else {
            return Vec::new();
        };
        let signals =
            self.transcripts
                .usage(Path::new(path), self.decoder.source(), &agent_of(hook));
        signals.into_iter().map(Decoded::Signal).collect()
    }
}

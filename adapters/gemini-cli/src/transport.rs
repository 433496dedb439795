//! The hook endpoint: `type = "gemini_cli"` as a source (listen only) and as a two-way
//! output (`control.answer` in for the gate, the hook signals out of `NAME.inbound`). The
//! endpoint itself is every hook agent's (`patchbay_hooks`); this module gives it Gemini
//! CLI's decoder and answers. Gemini CLI runs command hooks, not HTTP ones: each runs
//! `patchbay hooks emit --agent gemini --url URL`, which posts the event's JSON here and
//! prints the answer.

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

use crate::decode::HookDecoder;
use crate::gate::{self, GateConfig, Verdict};

/// The address the component listens on when the config names none.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7880";

/// `[outputs.NAME]` (two-way: takes `control.answer` for the gate) or `[sources.NAME]`
/// (listen only) with `type = "gemini_cli"`: the endpoint Gemini CLI's command hooks post
/// to through `patchbay hooks emit --agent gemini` (`http://LISTEN/hook`; `patchbay hooks
/// install --agent gemini` writes them).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GeminiCliConfig {
    /// `IP:PORT` to listen on (`localhost:PORT` means `127.0.0.1:PORT`). Default
    /// `127.0.0.1:7880`. Not on loopback, a `token` is required.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Bearer token the hooks must send (`Authorization: Bearer …`): `patchbay hooks emit`
    /// sends `$PATCHBAY_HOOK_TOKEN`, so it is never written in the settings.
    #[serde(default)]
    pub token: Option<Secret>,
    /// Hold the calls of some tools (Gemini CLI's names: `run_shell_command`,
    /// `write_file`, `replace`, …) at their `BeforeTool` until a `control.answer` decides
    /// them (outputs only).
    #[serde(default)]
    pub gate: Option<GateConfig>,
    /// Largest hook body accepted, in bytes (`BeforeModel` carries the whole
    /// conversation). Default 8 MiB.
    #[serde(default = "defaults::max_body")]
    pub max_body: usize,
    /// Host names the endpoint answers to besides `localhost`, `127.0.0.1` and `[::1]`
    /// (any port); `["*"]` for any. Absent: a loopback `listen` answers only to the
    /// loopback names, any other `listen` to any host. A request naming another host gets
    /// 403; one with an `Origin` (a web page) always does.
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

impl GeminiCliConfig {
    /// Checks parsed options; an error names the offending key and what is wrong.
    pub fn check(self) -> Result<Settings, (&'static str, String)> {
        Settings::check(self.into(), DEFAULT_LISTEN)
    }
}

impl From<GeminiCliConfig> for EndpointOptions {
    fn from(c: GeminiCliConfig) -> Self {
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
    let config: GeminiCliConfig = options.parse()?;
    config
        .check()
        .map_err(|(key, msg)| options.error_at(key, msg))
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let settings = parse_options(options)?;
    GateConfig::refuse_on_a_source(settings.gate.as_ref(), options)?;
    Ok(Box::new(GeminiCli { settings }))
}

pub(crate) fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(Box::new(GeminiCli {
        settings: parse_options(options)?,
    }))
}

/// One hook endpoint; the same value runs as a source or as an output.
struct GeminiCli {
    settings: Settings,
}

impl Source for GeminiCli {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let agent = Gemini::new(format!("gemini_cli:{}", cx.name()));
            patchbay_hooks::serve(agent, self.settings, LinkEnds::source(&cx)).await
        })
    }
}

impl Output for GeminiCli {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let agent = Gemini::new(format!("gemini_cli:{}", cx.name()));
            patchbay_hooks::serve(agent, self.settings, LinkEnds::output(&cx)).await
        })
    }
}

/// Gemini CLI's side of the shared endpoint.
struct Gemini {
    decoder: HookDecoder,
}

impl Gemini {
    fn new(source: String) -> Self {
        Gemini {
            decoder: HookDecoder::new(source),
        }
    }
}

impl HookAgent for Gemini {
    fn name(&self) -> &'static str {
        "gemini_cli"
    }

    fn decode(&mut self, hook: &Value, out: &mut Vec<Decoded>) {
        self.decoder.decode(hook, out);
    }

    fn decode_bytes(&mut self, body: &[u8], out: &mut Vec<Decoded>) {
        self.decoder.decode_bytes(body, out);
    }

    /// `BeforeTool`; the `promptId` is the call's `callId` ([`gate::prompt_id`]).
    fn call(&mut self, hook: &Value) -> Option<Call> {
        if hook.get("hook_event_name").and_then(Value::as_str) != Some("BeforeTool") {
            return None;
        }
        let tool = hook
            .get("tool_name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let input = hook
            .get("tool_input")
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()));
        Some(Call {
            prompt_id: gate::prompt_id(hook),
            tool,
            input,
        })
    }

    fn state_change(&mut self, hook: &Value, to: AgentState, reason: String) -> Signal {
        self.decoder.state_change(hook, to, reason)
    }

    fn requested(&mut self, hook: &Value, call: &Call, gate: &GateConfig) -> Signal {
        gate::approval_requested(&self.decoder, hook, &call.prompt_id, gate)
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
        gate::approval_decided(&self.decoder, hook, &call.prompt_id, verdict, by, reason)
    }

    fn state_after(&self, verdict: Verdict) -> AgentState {
        gate::state_after(verdict)
    }

    fn answer(&mut self, _hook: &Value, _call: &Call, verdict: Verdict, reason: &str) -> Value {
        gate::hook_answer(verdict, reason).0
    }
}

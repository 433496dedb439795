//! `type = "codex"`: patchbay starts `codex app-server` and is its client over NDJSON on
//! the child's stdio: `initialize`, `initialized`, `thread/start`, then a `turn/start`
//! for each `prompt`, `turn/interrupt` for `control.interrupt` / `control.cancel`, and the
//! answer to an approval request for `control.answer` (or the gate's default).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use patchbay_graph::approvals::{self, GateConfig, Verdict};
use patchbay_graph::{ComponentError, Diagnostic, HealthState, LinkEnds, Options, Output, Source};
use patchbay_signal::decode::{DEFAULT_MAX_LINE, LineSplitter, line_too_long};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::{Signal, control, now_ms};
use patchbay_transport::child::{
    ChildConfig, ChildDefaults, ChildOptions, StdioChild, finish, parse_child_options, write_line,
};
use patchbay_transport::two_way::{TwoWay, TwoWayComponent};
use patchbay_transport::{Backoff, retry_detail};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::process::ChildStdin;
use tokio::time::Instant;

use crate::CodexDecoder;

/// `[outputs.NAME]` (two-way: prompts, controls and answers in, its events out of
/// `NAME.inbound`) or `[sources.NAME]` (listen only) with `type = "codex"`: a `codex
/// app-server` patchbay starts and drives as its client.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct CodexConfig {
    /// The program (`command`, default `["codex", "app-server"]`; `cwd`: the thread's
    /// working directory too; `env`, e.g. `CODEX_HOME`).
    #[serde(flatten)]
    pub program: ChildOptions<AppServer>,
    /// When Codex asks before running a command or changing a file (`thread/start`'s
    /// `approvalPolicy`): `untrusted`, `on-request`, `on-failure` or `never`. Default: what
    /// Codex's own config says.
    #[serde(default)]
    pub approval_policy: Option<String>,
    /// What commands may touch (`thread/start`'s `sandbox`): `read-only`,
    /// `workspace-write` or `danger-full-access`. Default: Codex's own config.
    #[serde(default)]
    pub sandbox: Option<String>,
    /// The model (`thread/start`'s `model`). Default: Codex's own config.
    #[serde(default)]
    pub model: Option<String>,
    /// Which approvals wait for a person (outputs only): `tools` are `commandExecution`
    /// and `fileChange` (or `"*"`); an approval of another tool is accepted at once. No
    /// answer within `timeout_ms`: the `default` (`ask`, with no one else to ask, is
    /// `deny`). Without a gate every approval Codex asks for waits for a `control.answer`.
    #[serde(default)]
    pub gate: Option<GateConfig>,
}

/// `codex app-server` by default.
#[derive(Debug, Clone, schemars::JsonSchema)]
pub struct AppServer;

impl ChildDefaults for AppServer {
    fn command() -> Vec<String> {
        vec!["codex".into(), "app-server".into()]
    }
}

impl ChildConfig for CodexConfig {
    type Defaults = AppServer;
    fn child_mut(&mut self) -> &mut ChildOptions<AppServer> {
        &mut self.program
    }
}

fn parse_config(options: &Options<'_>) -> Result<CodexConfig, Diagnostic> {
    let config: CodexConfig = parse_child_options(options)?;
    if let Some(gate) = &config.gate {
        gate.check()
            .map_err(|message| options.error_at("gate", message))?;
    }
    Ok(config)
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let config = parse_config(options)?;
    GateConfig::refuse_on_a_source(config.gate.as_ref(), options)?;
    Ok(TwoWayComponent::source(config))
}

pub(crate) fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(TwoWayComponent::output(parse_config(options)?))
}

impl TwoWay for CodexConfig {
    const TYPE: &'static str = "codex";

    /// Runs `codex app-server` until the graph ends; when Codex cannot be started or dies,
    /// the component is `failed` with the reason, and Codex is started again with backoff
    /// (its pending approvals are decided `cancel`: they died with it).
    async fn run(self, source: String, side: LinkEnds<'_>) -> Result<(), ComponentError> {
        let mut backoff = Backoff::new(RESTART_FIRST, RESTART_MAX, None);
        loop {
            let started = Instant::now();
            let why = match run(&self, &source, &side).await {
                RunEnd::GraphEnded => return Ok(()),
                RunEnd::Exited(why) => why,
            };
            if started.elapsed() >= RESTART_STABLE {
                backoff.reset();
            }
            let delay = backoff.next_jittered().unwrap_or(RESTART_MAX);
            tracing::warn!(component = %source, "{why}: starting it again in {} ms", delay.as_millis());
            side.record_error(&why);
            side.set_state(HealthState::Failed, Some(retry_detail(delay, &why)));
            if !wait_refusing(&side, delay, &why).await {
                return Ok(());
            }
        }
    }
}

/// Prompts that wait for the thread to start, at most this many (beyond: refused).
const QUEUED_PROMPTS: usize = 64;

/// The client side of one app-server session.
struct Client {
    decoder: CodexDecoder,
    next_id: u64,
    /// What our own requests were, by id (their answers are matched to them).
    sent: BTreeMap<u64, &'static str>,
    thread: Option<String>,
    prompts: VecDeque<String>,
    /// Approvals held by the gate, with the moment its default applies.
    deadlines: BTreeMap<String, Instant>,
}

impl Client {
    /// A request line, remembered by id.
    fn request(&mut self, method: &'static str, params: Value) -> String {
        self.next_id += 1;
        self.sent.insert(self.next_id, method);
        json!({"id": self.next_id, "method": method, "params": params}).to_string()
    }

    fn turn(&mut self, text: &str) -> Option<String> {
        let thread = self.thread.clone()?;
        Some(self.request(
            "turn/start",
            json!({"threadId": thread, "input": [{"type": "text", "text": text}]}),
        ))
    }

    /// The answer to the approval `prompt_id` (`None`: Codex is not waiting on it).
    fn answer(&mut self, prompt_id: &str, verdict: Verdict, by: &str) -> Option<String> {
        let id = self
            .decoder
            .pending()
            .find(|p| p.prompt_id == prompt_id)?
            .id
            .clone();
        let decision = match verdict {
            Verdict::Allow => "accept",
            Verdict::Always => "acceptForSession",
            Verdict::Cancel => "cancel",
            // No one else is there to ask.
            Verdict::Deny | Verdict::Ask => "decline",
        };
        self.deadlines.remove(prompt_id);
        self.decoder.answered(prompt_id, decision, by);
        Some(json!({"id": id, "result": {"decision": decision}}).to_string())
    }
}

/// The first wait before Codex is started again after it died (or could not be started);
/// doubled each time, up to [`RESTART_MAX`].
const RESTART_FIRST: Duration = Duration::from_secs(1);
/// The longest wait before Codex is started again.
const RESTART_MAX: Duration = Duration::from_secs(30);
/// A run this long counts as working: the next death starts the waits over.
const RESTART_STABLE: Duration = Duration::from_secs(60);

/// How a run of `codex app-server` ended.
enum RunEnd {
    /// The graph ended (or, for a source, shutdown): patchbay is done with it.
    GraphEnded,
    /// Codex could not be started, or exited: why.
    Exited(String),
}

/// Waits `delay`, refusing the controls that come meanwhile (Codex is not there to take
/// them); `false` when the graph ended first.
async fn wait_refusing(side: &LinkEnds<'_>, delay: Duration, why: &str) -> bool {
    let until = Instant::now() + delay;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(until) => return true,
            signal = side.next_control(), if side.controls.is_some() => match (signal, side.controls) {
                (Some(signal), Some(cx)) => cx.refused(format!("{}: {why}; it is being started again", signal.kind)),
                _ => return false,
            },
            () = side.shutdown(), if side.controls.is_none() => return false,
        }
    }
}

/// One run of `codex app-server`, from its start to its end or the graph's.
async fn run(config: &CodexConfig, source: &str, side: &LinkEnds<'_>) -> RunEnd {
    side.set_state(
        HealthState::Starting,
        Some(format!("starting {}", config.program.describe())),
    );
    let StdioChild {
        mut child,
        stdin,
        mut stdout,
    } = match config.program.spawn(source) {
        Ok(child) => child,
        Err(why) => return RunEnd::Exited(why),
    };
    let gate = config.gate.clone().filter(|_| side.controls.is_some());
    let mut client = Client {
        decoder: CodexDecoder::new(source),
        next_id: 0,
        sent: BTreeMap::new(),
        thread: None,
        prompts: VecDeque::new(),
        deadlines: BTreeMap::new(),
    };
    let init = client.request(
        "initialize",
        json!({"clientInfo": {"name": "patchbay", "title": "patchbay", "version": env!("CARGO_PKG_VERSION")}}),
    );
    let mut stdin = Some(stdin);
    if let Err(e) = send(&mut stdin, &[init]).await {
        let _ = child.kill().await;
        return RunEnd::Exited(format!("cannot talk to codex: {e}"));
    }

    let mut splitter = LineSplitter::new(DEFAULT_MAX_LINE);
    let mut buf = vec![0u8; 64 * 1024];
    let mut out: Vec<Decoded> = Vec::new();
    let mut replies: Vec<String> = Vec::new();
    // Whether the graph is still open when the loop ends (Codex ended by itself).
    let graph_open = loop {
        let deadline = client.deadlines.values().min().copied();
        tokio::select! {
            n = stdout.read(&mut buf) => {
                let n = n.unwrap_or(0);
                let mut line = |line: Result<&str, &str>| {
                    decode_line(&mut client, config, gate.as_ref(), side, line, &mut out, &mut replies);
                };
                if n == 0 {
                    splitter.finish(&mut line);
                } else {
                    splitter.feed(&buf[..n], &mut line);
                }
                if let Err(e) = send(&mut stdin, &replies).await {
                    side.record_error(&format!("codex: cannot answer: {e}"));
                }
                replies.clear();
                if side.emit_all(&mut out).await.is_err() {
                    break false;
                }
                if n == 0 {
                    break true;
                }
            }
            signal = side.next_control(), if stdin.is_some() => {
                let Some(signal) = signal else {
                    // The graph ended: closing stdin asks Codex to exit.
                    break false;
                };
                let Some(cx) = side.controls else { continue };
                match control_lines(&mut client, &signal) {
                    Ok(lines) => match send(&mut stdin, &lines).await {
                        Ok(()) => cx.delivered(1),
                        Err(e) => cx.refused(format!("{}: codex is not reading: {e}", signal.kind)),
                    },
                    Err(why) => cx.refused(format!("{}: {why}", signal.kind)),
                }
            }
            () = sleep_until(deadline) => {
                let now = Instant::now();
                let due: Vec<String> = client
                    .deadlines
                    .iter()
                    .filter(|(_, at)| **at <= now)
                    .map(|(prompt, _)| prompt.clone())
                    .collect();
                let verdict = gate.as_ref().map_or(Verdict::Ask, |g| g.default);
                let lines: Vec<String> = due
                    .iter()
                    .filter_map(|prompt| client.answer(prompt, verdict, "timeout"))
                    .collect();
                for prompt in &due {
                    client.deadlines.remove(prompt);
                }
                if let Err(e) = send(&mut stdin, &lines).await {
                    side.record_error(&format!("codex: cannot answer: {e}"));
                }
            }
            () = side.shutdown(), if side.controls.is_none() => break false,
        }
    };
    let status = finish(&mut child, stdin, graph_open).await;
    if !graph_open {
        return RunEnd::GraphEnded;
    }
    // The approvals Codex waited on died with it.
    let gone: Vec<_> = client
        .decoder
        .pending()
        .filter(|p| p.approval.is_some())
        .map(|p| p.prompt_id.clone())
        .collect();
    for prompt in gone {
        let decided = approvals::decided(source, &prompt, Verdict::Cancel, "codex")
            .with_meta("reason", "codex exited");
        out.push(Decoded::Signal(decided));
    }
    if side.emit_all(&mut out).await.is_err() {
        return RunEnd::GraphEnded;
    }
    RunEnd::Exited(match status {
        Some(s) if s.success() => "codex exited".to_owned(),
        Some(s) => format!("codex exited with {s}"),
        None => "lost codex".to_owned(),
    })
}

/// Resolves at `deadline`, or never.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Writes `lines` to Codex (an error once its input is gone).
async fn send(stdin: &mut Option<ChildStdin>, lines: &[String]) -> std::io::Result<()> {
    let Some(stdin) = stdin.as_mut() else {
        return Err(std::io::Error::other("its input is closed"));
    };
    for line in lines {
        write_line(stdin, line).await?;
    }
    Ok(())
}

/// What a control signal sends to Codex.
fn control_lines(client: &mut Client, signal: &Signal) -> Result<Vec<String>, String> {
    match signal.kind.as_str() {
        "prompt" => {
            let text = signal
                .payload
                .get("text")
                .and_then(Value::as_str)
                .ok_or("a `prompt` needs a `text` string")?;
            match client.turn(text) {
                Some(line) => Ok(vec![line]),
                None if client.prompts.len() < QUEUED_PROMPTS => {
                    client.prompts.push_back(text.to_owned());
                    Ok(Vec::new())
                }
                None => Err("the thread has not started, and enough prompts wait for it".into()),
            }
        }
        control::INTERRUPT | control::CANCEL => {
            let thread = client.thread.clone().ok_or("no thread yet")?;
            let turn = client
                .decoder
                .current_turn(&thread)
                .ok_or("no turn is running")?
                .to_owned();
            Ok(vec![client.request(
                "turn/interrupt",
                json!({"threadId": thread, "turnId": turn}),
            )])
        }
        control::ANSWER => {
            let answer = approvals::parse_answer(signal).map_err(|e| e.to_string())?;
            let prompt = answer.prompt_id.ok_or("no approval of codex is waiting")?;
            let verdict = answer.verdict.unwrap_or(Verdict::Ask);
            let line = client
                .answer(&prompt, verdict, &answer.by)
                .ok_or_else(|| format!("codex is not waiting on `{prompt}`"))?;
            Ok(vec![line])
        }
        other => Err(format!(
            "codex takes `prompt`, `control.interrupt`, `control.cancel` and `control.answer`, not `{other}`"
        )),
    }
}

/// Decodes one line from Codex, and answers what needs answering: our requests' answers
/// move the session on (`initialize` → `initialized` and `thread/start`; `thread/start` →
/// the prompts that waited), an approval the gate does not hold is accepted at once, one
/// it holds gets its deadline.
fn decode_line(
    client: &mut Client,
    config: &CodexConfig,
    gate: Option<&GateConfig>,
    side: &LinkEnds<'_>,
    line: Result<&str, &str>,
    out: &mut Vec<Decoded>,
    replies: &mut Vec<String>,
) {
    let source = client.decoder.source().to_owned();
    let text = match line {
        Ok(text) => text.trim(),
        Err(cut) => {
            let why = line_too_long(DEFAULT_MAX_LINE);
            out.push(Decoded::BadInput(bad_input_signal(
                &source,
                now_ms(),
                cut,
                &why,
            )));
            return;
        }
    };
    if text.is_empty() {
        return;
    }
    let msg: Value = match serde_json::from_str(text) {
        Ok(msg) => msg,
        Err(e) => {
            let why = format!("not JSON: {e}");
            out.push(Decoded::BadInput(bad_input_signal(
                &source,
                now_ms(),
                text,
                &why,
            )));
            return;
        }
    };
    let ours = match (msg.get("method"), msg.get("id").and_then(Value::as_u64)) {
        (None, Some(id)) => client.sent.remove(&id),
        _ => None,
    };
    match (ours, msg.get("error")) {
        (Some("initialize"), None) => {
            let mut params = serde_json::Map::new();
            if let Some(cwd) = &config.program.cwd {
                params.insert("cwd".into(), cwd.display().to_string().into());
            }
            for (key, value) in [
                ("approvalPolicy", &config.approval_policy),
                ("sandbox", &config.sandbox),
                ("model", &config.model),
            ] {
                if let Some(value) = value {
                    params.insert(key.into(), value.clone().into());
                }
            }
            replies.push(json!({"method": "initialized"}).to_string());
            let start = client.request("thread/start", Value::Object(params));
            replies.push(start);
        }
        (Some("thread/start"), None) => {
            let thread = msg
                .pointer("/result/thread/id")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if let Some(thread) = &thread {
                side.set_state(HealthState::Ok, Some(format!("thread {thread}")));
            }
            client.thread = thread;
            while let Some(text) = client.prompts.pop_front() {
                replies.extend(client.turn(&text));
            }
        }
        (Some(method @ ("initialize" | "thread/start")), Some(error)) => {
            side.set_state(
                HealthState::Failed,
                Some(format!("codex refused {method}: {error}")),
            );
        }
        _ => {}
    }
    let before = out.len();
    client.decoder.message(&msg, out);
    // The approvals this line asked for: held by the gate, or let through.
    for decoded in &out[before..] {
        let Decoded::Signal(signal) = decoded else {
            continue;
        };
        if signal.kind != approvals::REQUESTED {
            continue;
        }
        let prompt = signal.payload.get("promptId").and_then(Value::as_str);
        let tool = signal.payload.get("toolName").and_then(Value::as_str);
        let (Some(prompt), Some(tool)) = (prompt, tool) else {
            continue;
        };
        match gate {
            Some(gate) if gate.holds(tool) => {
                let at = Instant::now() + Duration::from_millis(gate.timeout_ms);
                client.deadlines.insert(prompt.to_owned(), at);
            }
            Some(_) => replies.extend(client.answer(prompt, Verdict::Allow, "gate")),
            None => {}
        }
    }
}

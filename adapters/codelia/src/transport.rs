//! `type = "codelia"`: patchbay runs a Codelia runtime as a child and speaks to it as its
//! UI, over NDJSON on the child's stdin/stdout.

use patchbay_graph::{ComponentError, Diagnostic, HealthState, LinkEnds, Options, Output, Source};
use patchbay_signal::decode::{DEFAULT_MAX_LINE, LineSplitter};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::now_ms;
use patchbay_transport::child::{
    ChildConfig, ChildOptions, NoDefaultCommand, StdioChild, finish, parse_child_options,
    write_line,
};
use patchbay_transport::two_way::{TwoWay, TwoWayComponent};
use serde::Deserialize;
use serde_json::Value;
use tokio::io::AsyncReadExt;

use crate::client::UiClient;
use crate::decode::line_text;

/// `[outputs.NAME]` (two-way) or `[sources.NAME]` (listen only) with `type = "codelia"`:
/// a Codelia runtime patchbay starts and talks to as its UI.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct CodeliaConfig {
    /// The runtime to run (`command`, e.g. `["node", "packages/runtime/dist/index.js"]`,
    /// `cwd`, `env`).
    #[serde(flatten)]
    pub runtime: ChildOptions<NoDefaultCommand>,
}

impl ChildConfig for CodeliaConfig {
    type Defaults = NoDefaultCommand;
    fn child_mut(&mut self) -> &mut ChildOptions<NoDefaultCommand> {
        &mut self.runtime
    }
}

fn parse_config(options: &Options<'_>) -> Result<CodeliaConfig, Diagnostic> {
    parse_child_options(options)
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    Ok(TwoWayComponent::source(parse_config(options)?))
}

pub(crate) fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(TwoWayComponent::output(parse_config(options)?))
}

impl TwoWay for CodeliaConfig {
    const TYPE: &'static str = "codelia";

    /// Runs the runtime until it exits, the graph ends or shutdown.
    async fn run(self, source: String, side: LinkEnds<'_>) -> Result<(), ComponentError> {
        side.set_state(
            HealthState::Starting,
            Some(format!("starting {}", self.runtime.describe())),
        );
        let StdioChild {
            mut child,
            stdin,
            stdout,
        } = match self.runtime.spawn(&source) {
            Ok(child) => child,
            Err(why) => return Err(fail(&side, why).await),
        };

        let mut client = UiClient::new(source.clone());
        let init = client.initialize();
        let init_id = init.get("id").cloned();
        let mut stdin = stdin;
        if let Err(e) = write_line(&mut stdin, &init.to_string()).await {
            return Err(fail(&side, format!("cannot talk to the runtime: {e}")).await);
        }

        let mut stdout = stdout;
        let mut stdin = Some(stdin);
        let mut splitter = LineSplitter::new(DEFAULT_MAX_LINE);
        let mut buf = vec![0u8; 64 * 1024];
        let mut out: Vec<Decoded> = Vec::new();
        // Whether the graph is still open when the loop ends (the runtime ended by itself).
        let graph_open = loop {
            tokio::select! {
                n = stdout.read(&mut buf) => {
                    let n = n.unwrap_or(0);
                    if n == 0 {
                        splitter.finish(|line| decode_line(&mut client, &source, line, init_id.as_ref(), &side, &mut out));
                        let _ = side.emit_all(&mut out).await;
                        break true;
                    }
                    splitter.feed(&buf[..n], |line| decode_line(&mut client, &source, line, init_id.as_ref(), &side, &mut out));
                    if side.emit_all(&mut out).await.is_err() {
                        break false;
                    }
                }
                signal = side.next_control(), if stdin.is_some() => match signal {
                    Some(signal) => {
                        let Some(cx) = side.controls else { continue };
                        match client.encode(&signal).map(|msg| msg.to_string()) {
                            Ok(line) => match stdin.as_mut().map(|s| write_line(s, &line)) {
                                Some(write) => match write.await {
                                    Ok(()) => cx.delivered(1),
                                    Err(e) => cx.refused(format!("{}: the runtime is not reading: {e}", signal.kind)),
                                },
                                None => cx.refused(format!("{}: the runtime's input is closed", signal.kind)),
                            },
                            Err(e) => cx.refused(format!("{}: {e}", signal.kind)),
                        }
                    }
                    // The graph ended: closing stdin asks the runtime to exit.
                    None => break false,
                },
                () = side.shutdown(), if side.controls.is_none() => break false,
            }
        };
        let status = finish(&mut child, stdin, graph_open).await;
        if !graph_open {
            return Ok(());
        }
        match status {
            Some(s) if s.success() => {
                side.set_state(HealthState::Stopped, Some("the runtime exited".into()));
                side.drain_refusing("the runtime has exited").await;
                Ok(())
            }
            Some(s) => Err(fail(&side, format!("the runtime exited with {s}")).await),
            None => Err(fail(&side, "lost the runtime".into()).await),
        }
    }
}

/// Decodes one line from the runtime; the answer to `initialize` makes the link `ok`.
fn decode_line(
    client: &mut UiClient,
    source: &str,
    line: Result<&str, &str>,
    init_id: Option<&Value>,
    side: &LinkEnds<'_>,
    out: &mut Vec<Decoded>,
) {
    let Some(text) = line_text(line, source, out) else {
        return;
    };
    match serde_json::from_str::<Value>(text) {
        Ok(msg) => {
            if msg.get("method").is_none() && init_id.is_some_and(|id| msg.get("id") == Some(id)) {
                match msg.get("error") {
                    Some(error) => side.set_state(
                        HealthState::Failed,
                        Some(format!("initialize refused: {error}")),
                    ),
                    None => side.set_state(HealthState::Ok, None),
                }
            }
            client.decode(msg, None, out);
        }
        Err(e) => out.push(Decoded::BadInput(bad_input_signal(
            source,
            now_ms(),
            text,
            &format!("not JSON: {e}"),
        ))),
    }
}

/// Logs the failure and [fails](LinkEnds::fail) the link with it.
async fn fail(side: &LinkEnds<'_>, why: String) -> ComponentError {
    tracing::warn!("{why}");
    side.fail(&why).await;
    why.into()
}

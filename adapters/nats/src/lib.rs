//! The `nats` source and output: signals over a NATS bus, optionally through JetStream so
//! that nothing is lost across a restart of either side.
//!
//! The output publishes each signal's JSON envelope on a subject made from a template
//! (default `patchbay.{source}.{type}`: each `{path}` is the signal's value at that path,
//! sanitized into one subject token). The source subscribes to a subject (wildcards
//! allowed), in a queue group if given, and decodes each message as an envelope.
//!
//! With `jetstream`, the output publishes through the stream (creating it when it does
//! not exist) and waits for the server's acknowledgement, with the signal's `id` as the
//! message id (the server drops a duplicate publish); the source reads a durable consumer
//! and acknowledges each message only after the graph took the signal. A subscriber
//! stopped (SIGINT/SIGTERM) and restarted gets every message once; one killed outright
//! may get the message it was handling again (a `dedupe` on `id` removes it).
//!
//! Tokens, passwords and credentials files never appear in logs or health details.

mod subject;

use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream;
use futures_util::StreamExt;
use patchbay_graph::{
    Adapter, BoxFuture, ComponentError, ComponentType, Diagnostic, HealthState, Options, Output,
    OutputContext, OutputKind, Role, Source, SourceContext, WhenFull, options_of,
};
use patchbay_signal::normalize::Normalizer;
use patchbay_transport::backoff::Backoff;
use serde::Deserialize;

pub use subject::{SubjectTemplate, sanitize_token};

/// The NATS source and output, described for the registry and `patchbay components`.
pub const ADAPTER: Adapter = Adapter {
    name: "nats",
    protocol: "nats",
    summary: "a NATS bus (optionally JetStream): signals to and from other machines",
    components: &[
        ComponentType {
            name: "nats",
            summary: "subscribe to a NATS subject (wildcards, queue groups, JetStream)",
            role: Role::Source(build_source),
            options: options_of::<NatsSourceConfig>,
        },
        ComponentType {
            name: "nats",
            summary: "publish signals on NATS subjects from a template (JetStream: acked)",
            role: Role::Output(OutputKind {
                build: build_output,
                inbound: false,
                when_full: WhenFull::Block,
            }),
            options: options_of::<NatsOutputConfig>,
        },
    ],
    parse: None,
    wrap: None,
    probes: &[],
};

/// How to reach the server and who to be: shared by the source and the output.
#[derive(Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    /// The server (default `nats://127.0.0.1:4222`); `tls://` for TLS.
    #[serde(default = "default_url")]
    pub url: String,
    /// A token (write `${NATS_TOKEN}`).
    #[serde(default)]
    pub token: Option<String>,
    /// A user name, with `password`.
    #[serde(default)]
    pub user: Option<String>,
    /// The user's password (write `${NATS_PASSWORD}`).
    #[serde(default)]
    pub password: Option<String>,
    /// A credentials file (`.creds`: a JWT and an NKey seed).
    #[serde(default)]
    pub credentials: Option<PathBuf>,
}

fn default_url() -> String {
    "nats://127.0.0.1:4222".into()
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("credentials", &self.credentials)
            .finish()
    }
}

/// `[sources.NAME] type = "nats"`.
///
/// ```toml
/// [sources.bus]
/// type = "nats"
/// url = "nats://10.0.0.2:4222"
/// subject = "patchbay.*.error"
/// jetstream = { stream = "PATCHBAY", durable = "ui-machine" }
/// ```
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsSourceConfig {
    /// The server and credentials.
    #[serde(flatten)]
    pub connection: Connection,
    /// The subject to read; `*` matches one token, `>` the rest (default `patchbay.>`).
    #[serde(default = "default_source_subject")]
    pub subject: String,
    /// Share the messages with the other subscribers of this queue group (each message
    /// goes to one of them). Core NATS only.
    #[serde(default)]
    pub queue_group: Option<String>,
    /// Read through a JetStream durable consumer.
    #[serde(default)]
    pub jetstream: Option<SourceJetStream>,
}

/// `jetstream = { stream, durable }` of a source.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceJetStream {
    /// The stream (created with `subject` when it does not exist).
    pub stream: String,
    /// The durable consumer's name: it remembers what was acknowledged across restarts.
    pub durable: String,
}

fn default_source_subject() -> String {
    "patchbay.>".into()
}

/// `[outputs.NAME] type = "nats"`.
///
/// ```toml
/// [outputs.bus]
/// type = "nats"
/// inputs = ["agent"]
/// subject = "patchbay.{source}.{type}"
/// jetstream = { stream = "PATCHBAY" }
/// ```
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsOutputConfig {
    /// The server and credentials.
    #[serde(flatten)]
    pub connection: Connection,
    /// The subject template: `{path}` is the signal's value at that path (`{type}`,
    /// `{source}`, `{agentId}`), with `.`, `*`, `>` and spaces made `_` (default
    /// `patchbay.{source}.{type}`).
    #[serde(default = "default_output_subject")]
    pub subject: SubjectTemplate,
    /// Publish through JetStream and wait for each acknowledgement.
    #[serde(default)]
    pub jetstream: Option<OutputJetStream>,
}

/// `jetstream = { stream }` of an output.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputJetStream {
    /// The stream (created when it does not exist).
    pub stream: String,
    /// The subjects it is created with (default: the template's fixed start then `>`,
    /// `patchbay.>` for the default template).
    #[serde(default)]
    pub subjects: Option<Vec<String>>,
}

fn default_output_subject() -> SubjectTemplate {
    SubjectTemplate::parse("patchbay.{source}.{type}").unwrap_or_else(|_| unreachable!())
}

/// Why a NATS component stopped.
#[derive(Debug, thiserror::Error)]
enum NatsError {
    #[error("cannot connect to {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("JetStream stream `{stream}`: {reason}")]
    Stream { stream: String, reason: String },
    #[error("JetStream consumer `{durable}`: {reason}")]
    Consumer { durable: String, reason: String },
    #[error("subscribing to `{subject}`: {reason}")]
    Subscribe { subject: String, reason: String },
}

/// Checks the combination of connection options (FILE:LINE:COL at the key).
fn check_connection(options: &Options<'_>, c: &Connection) -> Result<(), Diagnostic> {
    if !["nats://", "tls://", "ws://", "wss://"]
        .iter()
        .any(|p| c.url.starts_with(p))
    {
        return Err(options.error_at("url", "expected a nats:// or tls:// URL"));
    }
    let ways = [
        c.token.is_some(),
        c.user.is_some() || c.password.is_some(),
        c.credentials.is_some(),
    ];
    if ways.iter().filter(|w| **w).count() > 1 {
        return Err(options
            .error("use one way to authenticate: `token`, `user` + `password`, or `credentials`"));
    }
    if c.user.is_some() != c.password.is_some() {
        let key = if c.user.is_some() { "user" } else { "password" };
        return Err(options.error_at(key, "`user` and `password` go together"));
    }
    Ok(())
}

fn check_subject(options: &Options<'_>, subject: &str, wildcards: bool) -> Result<(), Diagnostic> {
    let bad = subject.is_empty()
        || subject.split('.').enumerate().any(|(i, t)| {
            let last = i == subject.split('.').count() - 1;
            t.is_empty()
                || t.chars().any(char::is_whitespace)
                || (t.contains(['*', '>']) && !(wildcards && (t == "*" || (t == ">" && last))))
        });
    if bad {
        return Err(options.error_at(
            "subject",
            format!("`{subject}` is not a valid NATS subject"),
        ));
    }
    Ok(())
}

/// Connects, with the configured credentials; errors name the server, never a secret.
/// Runs `setup` (creating a stream or a consumer) until it succeeds: the client connects
/// in the background and JetStream may not answer yet, so a first failure is retried with
/// backoff, health `recovering` meanwhile. `None`: shutdown came first.
async fn until_ready<T, Fut>(
    mut setup: impl FnMut() -> Fut,
    shutdown: &patchbay_graph::Shutdown,
    set_state: impl Fn(HealthState, Option<String>),
) -> Option<T>
where
    Fut: std::future::Future<Output = Result<T, NatsError>>,
{
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10), None);
    loop {
        match setup().await {
            Ok(ready) => return Some(ready),
            Err(e) => {
                let delay = backoff.next_jittered().unwrap_or(Duration::from_secs(10));
                tracing::warn!("{e}; retrying");
                set_state(
                    HealthState::Recovering,
                    Some(patchbay_transport::backoff::retry_detail(
                        delay,
                        &e.to_string(),
                    )),
                );
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = shutdown.wait() => return None,
                }
            }
        }
    }
}

async fn connect(c: &Connection, name: &str) -> Result<async_nats::Client, NatsError> {
    let fail = |reason: String| NatsError::Connect {
        url: shown_url(&c.url),
        reason,
    };
    let mut options = async_nats::ConnectOptions::new()
        .name(format!("patchbay {name}"))
        .retry_on_initial_connect();
    if let Some(token) = &c.token {
        options = options.token(token.clone());
    }
    if let (Some(user), Some(password)) = (&c.user, &c.password) {
        options = options.user_and_password(user.clone(), password.clone());
    }
    if let Some(path) = &c.credentials {
        options = options
            .credentials_file(path)
            .await
            .map_err(|e| fail(format!("credentials file {}: {}", path.display(), e.kind())))?;
    }
    // `retry_on_initial_connect` makes this return at once; the client connects (and
    // reconnects) in the background, and publishing waits for it.
    options
        .connect(c.url.as_str())
        .await
        .map_err(|e| fail(e.kind().to_string()))
}

/// The URL without credentials (`nats://user:pw@host` → `nats://host`).
fn shown_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
            format!("{scheme}://{host}")
        }
        None => url.to_owned(),
    }
}

fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let config: NatsSourceConfig = options.parse()?;
    check_connection(options, &config.connection)?;
    check_subject(options, &config.subject, true)?;
    if config.queue_group.is_some() && config.jetstream.is_some() {
        return Err(options.error_at(
            "queue_group",
            "with `jetstream`, subscribers share a `durable` consumer instead of a queue group",
        ));
    }
    Ok(Box::new(NatsSource { config }))
}

fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    let config: NatsOutputConfig = options.parse()?;
    check_connection(options, &config.connection)?;
    if let Some(js) = &config.jetstream
        && let Some(subjects) = &js.subjects
    {
        for s in subjects {
            check_subject(options, s, true).map_err(|_| {
                options.error_at(
                    "jetstream.subjects",
                    format!("`{s}` is not a valid NATS subject"),
                )
            })?;
        }
    }
    Ok(Box::new(NatsOutput { config }))
}

struct NatsSource {
    config: NatsSourceConfig,
}

impl Source for NatsSource {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let c = &self.config;
            let client = connect(&c.connection, cx.name()).await?;
            let mut normalizer = Normalizer::new(format!("nats:{}", cx.name()));
            cx.set_state(HealthState::Ok, None);
            match &c.jetstream {
                None => {
                    let subscribe = match &c.queue_group {
                        Some(group) => {
                            client
                                .queue_subscribe(c.subject.clone(), group.clone())
                                .await
                        }
                        None => client.subscribe(c.subject.clone()).await,
                    };
                    let mut messages = subscribe.map_err(|e| NatsError::Subscribe {
                        subject: c.subject.clone(),
                        reason: e.to_string(),
                    })?;
                    loop {
                        let message = tokio::select! {
                            m = messages.next() => m,
                            () = cx.shutdown().wait() => None,
                        };
                        let Some(message) = message else { break };
                        let text = String::from_utf8_lossy(&message.payload);
                        if let Some(decoded) = normalizer.decode_text(&text)
                            && cx.emit_decoded(decoded).await.is_err()
                        {
                            break;
                        }
                    }
                }
                Some(js) => {
                    let context = jetstream::new(client);
                    let consumer_error = |e: &dyn std::fmt::Display| NatsError::Consumer {
                        durable: js.durable.clone(),
                        reason: e.to_string(),
                    };
                    let setup = || async {
                        let stream = context
                            .get_or_create_stream(jetstream::stream::Config {
                                name: js.stream.clone(),
                                subjects: vec![c.subject.clone()],
                                ..Default::default()
                            })
                            .await
                            .map_err(|e| NatsError::Stream {
                                stream: js.stream.clone(),
                                reason: e.to_string(),
                            })?;
                        let consumer = stream
                            .get_or_create_consumer(
                                &js.durable,
                                jetstream::consumer::pull::Config {
                                    durable_name: Some(js.durable.clone()),
                                    filter_subject: c.subject.clone(),
                                    ack_policy: jetstream::consumer::AckPolicy::Explicit,
                                    ..Default::default()
                                },
                            )
                            .await
                            .map_err(|e| consumer_error(&e))?;
                        consumer.messages().await.map_err(|e| consumer_error(&e))
                    };
                    let Some(mut messages) =
                        until_ready(setup, cx.shutdown(), |s, d| cx.set_state(s, d)).await
                    else {
                        return Ok(());
                    };
                    cx.set_state(HealthState::Ok, None);
                    loop {
                        // Shutdown is only looked at between messages: a message taken is
                        // handed to the graph and acknowledged before stopping.
                        let message = tokio::select! {
                            m = messages.next() => m,
                            () = cx.shutdown().wait() => None,
                        };
                        let message = match message {
                            Some(Ok(m)) => m,
                            Some(Err(e)) => {
                                tracing::warn!(source = cx.name(), "JetStream: {e}");
                                continue;
                            }
                            None => break,
                        };
                        let text = String::from_utf8_lossy(&message.payload);
                        if let Some(decoded) = normalizer.decode_text(&text)
                            && cx.emit_decoded(decoded).await.is_err()
                        {
                            // The graph is gone: not acknowledged, so redelivered later.
                            break;
                        }
                        // Confirmed by the server: a restart right after does not see the
                        // message again.
                        if let Err(e) = message.double_ack().await {
                            tracing::warn!(source = cx.name(), "JetStream ack: {e}");
                        }
                    }
                }
            }
            cx.set_state(HealthState::Stopped, None);
            Ok(())
        })
    }
}

struct NatsOutput {
    config: NatsOutputConfig,
}

impl Output for NatsOutput {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let c = &self.config;
            let client = connect(&c.connection, cx.name()).await?;
            let context = match &c.jetstream {
                Some(js) => {
                    let context = jetstream::new(client.clone());
                    let subjects = js
                        .subjects
                        .clone()
                        .unwrap_or_else(|| vec![c.subject.stream_subject()]);
                    let setup = || async {
                        context
                            .get_or_create_stream(jetstream::stream::Config {
                                name: js.stream.clone(),
                                subjects: subjects.clone(),
                                ..Default::default()
                            })
                            .await
                            .map_err(|e| NatsError::Stream {
                                stream: js.stream.clone(),
                                reason: e.to_string(),
                            })
                    };
                    if until_ready(setup, cx.shutdown(), |s, d| cx.set_state(s, d))
                        .await
                        .is_none()
                    {
                        return Ok(());
                    }
                    Some(context)
                }
                None => None,
            };
            cx.set_state(HealthState::Ok, None);
            let mut subject = String::new();
            while let Some(signal) = cx.next().await {
                subject.clear();
                c.subject.render(&signal, &mut subject);
                let payload = bytes::Bytes::from(signal.to_json());
                match &context {
                    None => {
                        if let Err(e) = client.publish(subject.clone(), payload).await {
                            tracing::warn!(output = cx.name(), "NATS publish: {e}");
                            cx.refused(e);
                            continue;
                        }
                    }
                    Some(context) => {
                        let mut headers = async_nats::HeaderMap::new();
                        headers.insert("Nats-Msg-Id", signal.id.as_str());
                        if let Err(e) =
                            publish_acked(context, &subject, headers, payload, &cx).await
                        {
                            tracing::warn!(output = cx.name(), "JetStream publish: {e}");
                            patchbay_graph::ComponentStats::add(&cx.stats().dropped, 1);
                            continue;
                        }
                    }
                }
                cx.delivered(1);
            }
            // Core NATS buffers: what was published reaches the server before we stop.
            let _ = client.flush().await;
            cx.set_state(HealthState::Stopped, None);
            Ok(())
        })
    }
}

/// Publishes through JetStream and waits for the acknowledgement, retrying with backoff
/// (the same message id each time, so the server keeps one copy).
async fn publish_acked(
    context: &jetstream::Context,
    subject: &str,
    headers: async_nats::HeaderMap,
    payload: bytes::Bytes,
    cx: &OutputContext,
) -> Result<(), String> {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5), Some(10));
    loop {
        let attempt = async {
            context
                .publish_with_headers(subject.to_owned(), headers.clone(), payload.clone())
                .await
                .map_err(|e| e.to_string())?
                .await
                .map_err(|e| e.to_string())
        };
        match attempt.await {
            Ok(_) => return Ok(()),
            Err(reason) => match backoff.next_jittered() {
                Some(delay) => {
                    cx.set_state(
                        HealthState::Recovering,
                        Some(patchbay_transport::backoff::retry_detail(delay, &reason)),
                    );
                    tokio::time::sleep(delay).await;
                }
                None => return Err(reason),
            },
        }
    }
}

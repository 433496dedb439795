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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream;
use futures_util::{FutureExt as _, StreamExt};
use patchbay_graph::{
    Adapter, BoxFuture, ComponentError, ComponentStats, ComponentType, Diagnostic, HealthState,
    Options, Output, OutputContext, Source, SourceContext, options_of,
};
use patchbay_signal::SharedSignal;
use patchbay_signal::normalize::Normalizer;
use patchbay_transport::backoff::Backoff;
use serde::Deserialize;

pub use subject::{SubjectTemplate, sanitize_token};

/// The NATS source and output, described for the registry and `patchbay components`.
pub const ADAPTER: Adapter = Adapter::new(
    "nats",
    "a NATS bus (optionally JetStream): signals to and from other machines",
    &[
        ComponentType::source(
            "nats",
            "subscribe to a NATS subject (wildcards, queue groups, JetStream)",
            build_source,
            options_of::<NatsSourceConfig>,
        ),
        ComponentType::output(
            "nats",
            "publish signals on NATS subjects from a template (JetStream: acked)",
            build_output,
            options_of::<NatsOutputConfig>,
        ),
    ],
);

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
            .field("url", &shown_url(&self.url))
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
    /// The server refused the credentials: retrying cannot help.
    #[error("{url} refused the credentials ({reason}); not retrying")]
    Refused { url: String, reason: String },
    #[error("JetStream stream `{stream}`: {reason}")]
    Stream { stream: String, reason: String },
    #[error("JetStream consumer `{durable}`: {reason}")]
    Consumer { durable: String, reason: String },
    #[error("subscribing to `{subject}`: {reason}")]
    Subscribe { subject: String, reason: String },
}

/// Checks the combination of connection options (FILE:LINE:COL at the key).
fn check_connection(options: &Options<'_>, c: &Connection) -> Result<(), Diagnostic> {
    // The client is built without WebSocket support: `ws://` would fail at run time.
    if !["nats://", "tls://"].iter().any(|p| c.url.starts_with(p)) {
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

/// Runs `setup` (connecting, creating a stream or a consumer) until it succeeds: the
/// server may not be up yet and JetStream may not answer yet, so a failure is retried
/// with backoff, health `recovering` meanwhile. `Ok(None)`: shutdown came first; `Err`:
/// the server refused the credentials.
async fn until_ready<T, Fut>(
    mut setup: impl FnMut() -> Fut,
    shutdown: &patchbay_graph::Shutdown,
    set_state: impl Fn(HealthState, Option<String>),
) -> Result<Option<T>, NatsError>
where
    Fut: std::future::Future<Output = Result<T, NatsError>>,
{
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10), None);
    loop {
        match setup().await {
            Ok(ready) => return Ok(Some(ready)),
            Err(e @ NatsError::Refused { .. }) => return Err(e),
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
                    () = shutdown.wait() => return Ok(None),
                }
            }
        }
    }
}

/// The health and counters of a component, kept up to date from the client's events
/// (it reconnects on its own once connected).
struct Events {
    stats: Arc<ComponentStats>,
    url: String,
    /// Set when the component ends: later events (the connection closing) say nothing.
    done: AtomicBool,
    /// Lost the connection; the client is reconnecting.
    disconnected: AtomicBool,
    /// Times the server refused the credentials (the `nats_auth_failures` gauge).
    auth_failures: AtomicU64,
    slow_consumer_warned: AtomicBool,
    /// Messages the client dropped as a slow consumer, as counted from its events (which
    /// it may drop too when they come faster than they are read: a floor).
    slow_consumer_drops: AtomicU64,
}

/// What the gauges of a NATS component measure.
const GAUGES: &[(&str, &str)] = &[(
    "nats_auth_failures",
    "Connection attempts whose credentials the NATS server refused.",
)];

impl Events {
    fn new(stats: &Arc<ComponentStats>, url: &str) -> Arc<Events> {
        stats.describe_gauges(GAUGES);
        stats.set_gauge("nats_auth_failures", 0.0);
        Arc::new(Events {
            stats: Arc::clone(stats),
            url: shown_url(url),
            done: AtomicBool::new(false),
            disconnected: AtomicBool::new(false),
            auth_failures: AtomicU64::new(0),
            slow_consumer_warned: AtomicBool::new(false),
            slow_consumer_drops: AtomicU64::new(0),
        })
    }

    fn auth_failed(&self) {
        let n = self.auth_failures.fetch_add(1, Ordering::Relaxed) + 1;
        #[allow(clippy::cast_precision_loss)]
        self.stats.set_gauge("nats_auth_failures", n as f64);
    }

    fn on(&self, event: async_nats::Event) {
        use async_nats::Event;
        if self.done.load(Ordering::Relaxed) {
            return;
        }
        let url = &self.url;
        match event {
            // Also sent for the first connection, which `connect` reports.
            Event::Connected => {
                if self.disconnected.swap(false, Ordering::Relaxed) {
                    tracing::info!(component = self.stats.name(), "NATS: reconnected to {url}");
                    self.stats
                        .set_state(HealthState::Ok, Some(format!("connected to {url}")));
                }
            }
            Event::Disconnected => {
                self.disconnected.store(true, Ordering::Relaxed);
                self.stats.record_error(format!("NATS: lost {url}"));
                self.stats.set_state(
                    HealthState::Recovering,
                    Some(format!("disconnected from {url}; reconnecting")),
                );
            }
            // A reconnection attempt failed; the client tries again by itself.
            Event::ClientError(async_nats::ClientError::Other(reason)) => {
                if reason.contains("authorization violation") {
                    self.auth_failed();
                }
                self.stats
                    .record_error(format!("NATS: reconnecting to {url}: {reason}"));
            }
            // A message arrived while the subscription's buffer was full: the client
            // dropped it.
            Event::SlowConsumer(_) => {
                ComponentStats::add(&self.stats.dropped, 1);
                self.slow_consumer_drops.fetch_add(1, Ordering::Relaxed);
                if !self.slow_consumer_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        component = self.stats.name(),
                        "NATS: the graph does not keep up with {url}; messages are dropped \
                         (counted in `dropped`)"
                    );
                }
            }
            Event::ServerError(e) => {
                if matches!(e, async_nats::ServerError::AuthorizationViolation) {
                    self.auth_failed();
                }
                self.stats.record_error(format!("NATS server {url}: {e}"));
            }
            Event::LameDuckMode => {
                tracing::info!(
                    component = self.stats.name(),
                    "NATS: {url} is shutting down"
                );
            }
            other => tracing::debug!(component = self.stats.name(), "NATS: {other}"),
        }
    }

    /// The component ends: what the client says from now on is not news.
    fn finish(&self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

/// One connection attempt with the configured credentials; errors name the server, never
/// a secret. A refusal of the credentials is [`NatsError::Refused`].
async fn connect_once(
    c: &Connection,
    name: &str,
    events: &Arc<Events>,
) -> Result<async_nats::Client, NatsError> {
    let url = shown_url(&c.url);
    let fail = |reason: String| NatsError::Connect {
        url: url.clone(),
        reason,
    };
    let on_event = Arc::clone(events);
    let mut options = async_nats::ConnectOptions::new()
        .name(format!("patchbay {name}"))
        .event_callback(move |event| {
            on_event.on(event);
            std::future::ready(())
        });
    if let Some(token) = &c.token {
        options = options.token(token.clone());
    }
    if let (Some(user), Some(password)) = (&c.user, &c.password) {
        options = options.user_and_password(user.clone(), password.clone());
    }
    if let Some(path) = &c.credentials {
        // The file's content is never shown: only its path and what was wrong.
        options = options.credentials_file(path).await.map_err(|e| {
            let reason = match e.kind() {
                std::io::ErrorKind::InvalidData => "not a valid credentials file".to_owned(),
                kind => kind.to_string(),
            };
            NatsError::Refused {
                url: url.clone(),
                reason: format!("credentials file {}: {reason}", path.display()),
            }
        })?;
    }
    match options.connect(c.url.as_str()).await {
        Ok(client) => Ok(client),
        Err(e) => match e.kind() {
            async_nats::ConnectErrorKind::AuthorizationViolation => {
                events.auth_failed();
                Err(NatsError::Refused {
                    url,
                    reason: "authorization violation".into(),
                })
            }
            async_nats::ConnectErrorKind::Authentication => {
                events.auth_failed();
                Err(NatsError::Refused {
                    url,
                    reason: "could not sign the server's challenge with the credentials".into(),
                })
            }
            kind => Err(fail(kind.to_string())),
        },
    }
}

/// Connects, retrying with backoff while the server cannot be reached (health
/// `recovering`); once connected the client reconnects by itself, and `events` keeps the
/// health up to date. `Ok(None)`: shutdown came first.
async fn connect(
    c: &Connection,
    name: &str,
    events: &Arc<Events>,
    shutdown: &patchbay_graph::Shutdown,
) -> Result<Option<async_nats::Client>, NatsError> {
    events.stats.set_state(
        HealthState::Starting,
        Some(format!("connecting to {}", events.url)),
    );
    let client = until_ready(
        || connect_once(c, name, events),
        shutdown,
        |s, d| events.stats.set_state(s, d),
    )
    .await?;
    if client.is_some() {
        tracing::info!(component = name, "NATS: connected to {}", events.url);
        events.stats.set_state(
            HealthState::Ok,
            Some(format!("connected to {}", events.url)),
        );
    }
    Ok(client)
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
            let events = Events::new(cx.stats(), &self.config.connection.url);
            let ended = read(&self.config, &cx, &events).await;
            events.finish();
            ended?;
            cx.set_state(HealthState::Stopped, None);
            Ok(())
        })
    }
}

/// The source's work: connect, subscribe, and hand each message to the graph until
/// shutdown.
async fn read(
    c: &NatsSourceConfig,
    cx: &SourceContext,
    events: &Arc<Events>,
) -> Result<(), NatsError> {
    let Some(client) = connect(&c.connection, cx.name(), events, cx.shutdown()).await? else {
        return Ok(());
    };
    let mut normalizer = Normalizer::new(format!("nats:{}", cx.name()));
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
            // Every message already received is decoded and handed to the graph in one
            // go (one reservation of its queue, one wake-up of the engine), not one by one.
            let mut batch: Vec<SharedSignal> = Vec::with_capacity(BATCH);
            let mut taken: u64 = 0;
            loop {
                let message = tokio::select! {
                    m = messages.next() => m,
                    () = cx.shutdown().wait() => None,
                };
                let Some(message) = message else { break };
                decode_into(&mut normalizer, &message.payload, cx, &mut batch);
                taken += 1;
                while batch.len() < BATCH {
                    match messages.next().now_or_never() {
                        Some(Some(message)) => {
                            decode_into(&mut normalizer, &message.payload, cx, &mut batch);
                            taken += 1;
                        }
                        _ => break,
                    }
                }
                // Waits for room as long as it takes, as `emit` does: on core NATS the
                // client's buffer takes what arrives meanwhile (and counts what it drops).
                let emitted = cx.emit_batch_within(&mut batch, Duration::MAX).await;
                // A batch that found room went to the graph with its vector.
                batch.reserve(BATCH);
                if emitted.refused.is_some() {
                    break;
                }
            }
            // Every message this connection received and the graph did not take was
            // dropped (as a slow consumer, or left in the client's buffer at shutdown):
            // the exact count, where the events gave a floor.
            let arrived = client.statistics().in_messages.load(Ordering::Relaxed);
            let counted = events.slow_consumer_drops.load(Ordering::Relaxed);
            let lost = arrived.saturating_sub(taken);
            if lost > counted {
                ComponentStats::add(&cx.stats().dropped, lost - counted);
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
                Ok::<_, NatsError>(consumer)
            };
            let Some(consumer) =
                until_ready(setup, cx.shutdown(), |s, d| cx.set_state(s, d)).await?
            else {
                return Ok(());
            };
            cx.set_state(
                HealthState::Ok,
                Some(format!("connected to {}", events.url)),
            );
            // One pull request at a time, each finished before the next (or before
            // stopping): every message it delivers is taken and acknowledged. A request
            // left open at exit would go on taking messages for nobody, and the server
            // would send them again only after the consumer's ack wait (30 s by
            // default), after the messages that came later.
            while !cx.shutdown().is_requested() {
                let request = consumer
                    .batch()
                    .max_messages(BATCH)
                    .expires(PULL_EXPIRES)
                    .messages()
                    .await;
                let mut messages = match request {
                    Ok(messages) => messages,
                    Err(e) => {
                        tracing::warn!(source = cx.name(), "JetStream pull: {e}");
                        // The client reconnects on its own: ask again in a moment.
                        tokio::select! {
                            () = tokio::time::sleep(PULL_EXPIRES) => continue,
                            () = cx.shutdown().wait() => break,
                        }
                    }
                };
                while let Some(message) = messages.next().await {
                    let message = match message {
                        Ok(m) => m,
                        Err(e) => {
                            tracing::warn!(source = cx.name(), "JetStream: {e}");
                            continue;
                        }
                    };
                    let text = String::from_utf8_lossy(&message.payload);
                    if let Some(decoded) = normalizer.decode_text(&text)
                        && cx.emit_decoded(decoded).await.is_err()
                    {
                        // The graph is gone: not acknowledged, so redelivered later.
                        return Ok(());
                    }
                    // Confirmed by the server: a restart right after does not see the
                    // message again.
                    if let Err(e) = message.double_ack().await {
                        tracing::warn!(source = cx.name(), "JetStream ack: {e}");
                    }
                }
            }
        }
    }
    Ok(())
}

/// How long a JetStream pull request waits for messages: also the longest a stopping
/// subscriber waits for its last request to end.
const PULL_EXPIRES: Duration = Duration::from_secs(1);

/// At most this many messages or signals are handled in one go.
const BATCH: usize = 256;

/// Decodes one message's envelope into `batch`; bad input is counted (and becomes an
/// `error` signal, as everywhere).
fn decode_into(
    normalizer: &mut Normalizer,
    payload: &[u8],
    cx: &SourceContext,
    batch: &mut Vec<SharedSignal>,
) {
    let text = String::from_utf8_lossy(payload);
    if let Some(decoded) = normalizer.decode_text(&text) {
        batch.push(Arc::new(cx.counted(decoded)));
    }
}

struct NatsOutput {
    config: NatsOutputConfig,
}

impl Output for NatsOutput {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let events = Events::new(cx.stats(), &self.config.connection.url);
            let ended = publish(&self.config, &cx, &events).await;
            events.finish();
            match ended {
                Ok(()) => {
                    cx.set_state(HealthState::Stopped, None);
                    Ok(())
                }
                Err(e) => {
                    // Like any output that gave up: it still takes what the graph sends
                    // (refused and counted) so that its blocking queue never stalls the
                    // rest of the graph.
                    let why = e.to_string();
                    tracing::error!(output = cx.name(), "NATS: {why}");
                    cx.set_state(HealthState::Failed, Some(why.clone()));
                    while let Some(signal) = cx.next().await {
                        cx.refused(format!("{} not sent: {why}", signal.kind));
                    }
                    Err(e.into())
                }
            }
        })
    }
}

/// The output's work: connect (and make the stream), then publish each signal until the
/// graph ends.
async fn publish(
    c: &NatsOutputConfig,
    cx: &OutputContext,
    events: &Arc<Events>,
) -> Result<(), NatsError> {
    let Some(client) = connect(&c.connection, cx.name(), events, cx.shutdown()).await? else {
        return Ok(());
    };
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
                .await?
                .is_none()
            {
                return Ok(());
            }
            cx.set_state(
                HealthState::Ok,
                Some(format!("connected to {}", events.url)),
            );
            Some(context)
        }
        None => None,
    };
    let mut subject = String::new();
    // Every signal waiting is taken at once (one wake-up for a burst); each is still
    // published on its own subject.
    let mut batch = Vec::with_capacity(BATCH);
    while cx.next_batch(BATCH, &mut batch).await {
        for signal in batch.drain(..) {
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
                        publish_acked(context, &subject, headers, payload, cx, events).await
                    {
                        tracing::warn!(output = cx.name(), "JetStream publish: {e}");
                        ComponentStats::add(&cx.stats().dropped, 1);
                        continue;
                    }
                }
            }
            cx.delivered(1);
        }
    }
    // Core NATS buffers: what was published reaches the server before we stop.
    let _ = client.flush().await;
    Ok(())
}

/// Publishes through JetStream and waits for the acknowledgement, retrying with backoff
/// (the same message id each time, so the server keeps one copy).
async fn publish_acked(
    context: &jetstream::Context,
    subject: &str,
    headers: async_nats::HeaderMap,
    payload: bytes::Bytes,
    cx: &OutputContext,
    events: &Events,
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
            Ok(_) => {
                if backoff.attempts() > 0 {
                    cx.set_state(
                        HealthState::Ok,
                        Some(format!("connected to {}", events.url)),
                    );
                }
                return Ok(());
            }
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

//! The graph components: the proxy-mode source and the prompt-mode output.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, HealthState, Options, Output, OutputContext, Source,
    SourceContext,
};
use patchbay_signal::normalize::Decoded;
use patchbay_signal::well_known::{Payload, TaskDispatch};
use patchbay_signal::{SharedSignal, next_id, truncate};
use tokio::net::TcpListener;

use crate::api::Api;
use crate::config::{LlmConfig, PromptConfig, ProxyConfig};
use crate::proxy::{DESCRIPTION_MAX, ProxyState, door, http_client, poll_models, serve_with};
use crate::tap::{Emitter, TapRequest};

/// The longest a health poll waits for `/v1/models`.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn build_openai_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    build_source(Api::OpenAi, options)
}
pub(crate) fn build_anthropic_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    build_source(Api::Anthropic, options)
}
pub(crate) fn build_openai_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    build_output(Api::OpenAi, options)
}
pub(crate) fn build_anthropic_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    build_output(Api::Anthropic, options)
}

fn build_source(api: Api, options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    Ok(Box::new(ProxySource {
        api,
        config: LlmConfig::proxy_from_options(options)?,
    }))
}

fn build_output(api: Api, options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(Box::new(PromptOutput {
        api,
        config: LlmConfig::prompt_from_options(options)?,
    }))
}

/// `[sources.NAME] type = "openai" | "anthropic"`, `mode = "proxy"`.
pub struct ProxySource {
    api: Api,
    config: ProxyConfig,
}

impl ProxySource {
    /// A proxy-mode source of `api` with a checked config.
    pub fn new(api: Api, config: ProxyConfig) -> ProxySource {
        ProxySource { api, config }
    }
}

impl Source for ProxySource {
    fn reports_started(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let ProxySource { api, config } = *self;
            let listen = config.listen;
            cx.set_state(
                HealthState::Starting,
                Some(format!("listening on {listen}")),
            );
            let listener = TcpListener::bind(listen).await.map_err(|e| {
                let message = format!("cannot listen on {listen}: {e}");
                cx.set_state(HealthState::Failed, Some(message.clone()));
                ComponentError::from(message)
            })?;
            cx.started();
            let client = http_client()?;
            let source = format!("{}:{}", api.type_name(), cx.name());
            let (emitter, emit_task) = Emitter::new(cx.clone());
            let emit_task = tokio::spawn(emit_task);
            let state = Arc::new(ProxyState {
                api,
                client: client.clone(),
                upstream: config.upstream.clone(),
                source,
                timeout: Duration::from_millis(config.timeout_ms),
                emitter,
            });
            tracing::info!(listen = %listen, upstream = config.upstream, "{} proxy listening", api.type_name());
            let door = door(
                cx.name(),
                listen,
                config.allowed_hosts.clone(),
                config.limits,
                Arc::clone(cx.stats()),
            );
            let health = health_loop(api, &config, client, &cx);
            let result = tokio::select! {
                () = serve_with(listener, state, door) => Ok(()),
                () = health => Ok(()),
                () = cx.shutdown().wait() => Ok(()),
            };
            // Let the signals already decoded reach the graph (bounded: a stream still
            // being relayed keeps an emitter alive).
            let _ = tokio::time::timeout(Duration::from_secs(1), emit_task).await;
            cx.set_state(HealthState::Stopped, None);
            result
        })
    }
}

/// Polls the upstream's models at start and every `health_interval_ms`: `Ok` with the
/// model count, or `Recovering` with the error. Never returns.
async fn health_loop(api: Api, config: &ProxyConfig, client: reqwest::Client, cx: &SourceContext) {
    if config.health_interval_ms == 0 {
        cx.set_state(
            HealthState::Ok,
            Some(format!("listening on {}", config.listen)),
        );
        return std::future::pending().await;
    }
    let key = config.api_key.as_ref().map(|k| k.0.clone());
    let interval = Duration::from_millis(config.health_interval_ms);
    loop {
        let timeout = HEALTH_TIMEOUT.min(interval.max(Duration::from_millis(100)));
        match poll_models(&client, api, &config.upstream, key.as_deref(), timeout).await {
            Ok(n) => cx.set_state(
                HealthState::Ok,
                Some(format!(
                    "{n} model{} at {}",
                    if n == 1 { "" } else { "s" },
                    config.upstream
                )),
            ),
            Err(e) => cx.set_state(HealthState::Recovering, Some(e)),
        }
        tokio::time::sleep(interval).await;
    }
}

/// `[outputs.NAME] type = "openai" | "anthropic"`, `mode = "prompt"`: each `prompt
/// {text[, model]}` signal it receives starts one streaming request, announced by a
/// `task_dispatch`; the response's signals share a new `correlationId` and come out of
/// `NAME.inbound`. Prompts run one at a time, in order.
pub struct PromptOutput {
    api: Api,
    config: PromptConfig,
}

impl PromptOutput {
    /// A prompt-mode output of `api` with a checked config.
    pub fn new(api: Api, config: PromptConfig) -> PromptOutput {
        PromptOutput { api, config }
    }
}

impl Output for PromptOutput {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let PromptOutput { api, config } = *self;
            let Some(inbound) = cx.inbound().cloned() else {
                return Err(ComponentError::from(
                    "prompt mode needs its NAME.inbound side (registered with inbound: true)",
                ));
            };
            let client = http_client()?;
            let source = format!("{}:{}", api.type_name(), cx.name());
            let (emitter, emit_task) = Emitter::new(inbound.clone());
            let emit_task = tokio::spawn(emit_task);
            let ready = format!("ready to prompt {}", api.endpoint(&config.url));
            cx.set_state(HealthState::Ok, Some(ready.clone()));
            inbound.set_state(HealthState::Ok, Some(ready.clone()));
            loop {
                let signal = tokio::select! {
                    s = cx.next() => s,
                    () = cx.shutdown().wait() => None,
                };
                let Some(signal) = signal else { break };
                let Some(text) = prompt_text(&signal) else {
                    cx.refused(format!(
                        "`{}` takes `prompt` signals with a `text`, not `{}`",
                        cx.name(),
                        signal.kind
                    ));
                    continue;
                };
                let run = prompt(api, &config, &client, &source, &signal, text, &emitter);
                let outcome = tokio::select! {
                    r = run => r,
                    () = cx.shutdown().wait() => break,
                };
                cx.delivered(1);
                match outcome {
                    Ok(()) => cx.set_state(HealthState::Ok, Some(ready.clone())),
                    Err(e) => cx.set_state(HealthState::Recovering, Some(e)),
                }
            }
            // Let what is queued reach the graph before the inbound side closes.
            drop(emitter);
            let _ = tokio::time::timeout(Duration::from_secs(2), emit_task).await;
            cx.set_state(HealthState::Stopped, None);
            Ok(())
        })
    }
}

fn prompt_text(signal: &SharedSignal) -> Option<&str> {
    if signal.kind != "prompt" {
        return None;
    }
    signal.payload.get("text").and_then(|t| t.as_str())
}

/// Runs one prompt: the `task_dispatch`, then the streamed response through a [`Tap`](crate::Tap)
/// whose signals carry the prompt's new correlation id. Returns the failure, if any (it is
/// also emitted as an `error` signal).
async fn prompt(
    api: Api,
    config: &PromptConfig,
    client: &reqwest::Client,
    source: &str,
    signal: &SharedSignal,
    text: &str,
    emitter: &Emitter,
) -> Result<(), String> {
    let correlation: String = next_id().into();
    let model = signal
        .payload
        .get("model")
        .and_then(|m| m.as_str())
        .filter(|m| !m.is_empty())
        .unwrap_or(&config.model)
        .to_owned();
    let endpoint = api.endpoint(&config.url);
    let dispatch = TaskDispatch {
        task_id: correlation.clone(),
        from: signal.source.to_string(),
        to: model.clone(),
        description: Some(truncate(text, DESCRIPTION_MAX)),
    }
    .into_signal(source.to_owned())
    .correlated(correlation.clone())
    .with_meta("requestId", correlation.clone())
    .with_meta("promptId", signal.id.clone())
    .with_meta("endpoint", endpoint.clone());
    emitter.send(Decoded::Signal(dispatch));

    let body = api.prompt_body(&model, text, config.system.as_deref(), config.max_tokens);
    let mut request = client
        .post(&endpoint)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(body.to_string());
    if let Some(key) = config.api_key.as_ref().filter(|k| !k.0.is_empty()) {
        for (name, value) in api.auth_headers(&key.0) {
            request = request.header(name, value);
        }
    } else if api == Api::Anthropic {
        request = request.header("anthropic-version", crate::api::ANTHROPIC_VERSION);
    }
    let timeout = Duration::from_millis(config.timeout_ms);
    let tapped = TapRequest {
        api,
        source,
        request_id: &correlation,
        model: Some(model.clone()),
        decode: true,
        emitter: emitter.clone(),
    };
    let tap_for = |status: u16, content_type: &str| {
        tapped
            .tap(status, content_type)
            .correlate(correlation.clone())
    };
    let response = match tokio::time::timeout(timeout, request.send()).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => {
            let message = format!("{endpoint} did not answer: {e}");
            tap_for(502, "").error("upstream_unreachable", message.clone(), None);
            return Err(message);
        }
        Err(_) => {
            let message = format!(
                "{endpoint} did not answer within {} ms",
                timeout.as_millis()
            );
            tap_for(504, "").error("upstream_timeout", message.clone(), None);
            return Err(message);
        }
    };
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut tap = tap_for(status, &content_type);
    let mut body = response.bytes_stream();
    loop {
        match tokio::time::timeout(timeout, body.next()).await {
            Ok(Some(Ok(chunk))) => tap.feed(&chunk),
            Ok(None) => {
                tap.finish();
                break;
            }
            Ok(Some(Err(e))) => {
                let message = format!("the stream from {endpoint} failed: {e}");
                tap.abort("upstream_error", message.clone());
                return Err(message);
            }
            Err(_) => {
                let message = format!("no data from {endpoint} for {} ms", timeout.as_millis());
                tap.abort("upstream_timeout", message.clone());
                return Err(message);
            }
        }
    }
    if status >= 400 {
        return Err(format!("{endpoint} answered HTTP {status}"));
    }
    Ok(())
}

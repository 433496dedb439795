//! `[sources.NAME]` / `[outputs.NAME]` `type = "openai" | "anthropic"`: the options.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use patchbay_graph::config::MAX_DURATION_MS;
use patchbay_graph::{Diagnostic, Options};
use patchbay_transport::listen::{Limits, ListenerOptions};
use patchbay_transport::parse_flattened;
use serde::Deserialize;

pub use patchbay_graph::config::Secret;

/// How an `openai`/`anthropic` component gets its streams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A transparent tap proxy (a source): clients point their base URL at `listen`.
    #[default]
    Proxy,
    /// sajou's prompt mode (an output with `inbound`): each `prompt` signal starts one
    /// streaming request.
    Prompt,
}

/// The options of an `openai` or `anthropic` component.
///
/// Proxy mode (under `[sources]`): `listen`, `upstream`, `health_interval_ms`,
/// `timeout_ms`, `api_key` (used only for the health poll of `/v1/models`; clients send
/// their own keys, which pass through), and the listener's `allowed_hosts`,
/// `header_timeout_ms`, `idle_timeout_ms`, `max_connections`. Prompt mode (under `[outputs]`): `url`,
/// `model`, `api_key`, `max_tokens`, `system`, `timeout_ms`.
// Not `deny_unknown_fields`: it does not work through `flatten`; `LlmConfig::parse`
// refuses unknown keys.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct LlmConfig {
    /// `"proxy"` (default) or `"prompt"`.
    #[serde(default)]
    pub mode: Mode,
    /// Proxy: the loopback address to listen on (`127.0.0.1:8080`, `localhost:8080`).
    #[serde(default)]
    pub listen: Option<String>,
    /// Proxy: the upstream base URL (`http://127.0.0.1:11434`, `https://api.anthropic.com`).
    #[serde(default)]
    pub upstream: Option<String>,
    /// Proxy: how often the upstream's `/v1/models` is polled for health, in ms (0: never;
    /// at most 86400000, one day).
    #[serde(default = "default_health_interval_ms")]
    pub health_interval_ms: u64,
    /// How long the upstream may take to answer, and at most between two chunks of a
    /// stream, in ms. Past it the client gets a 504 (or the stream is cut) and an `error`
    /// signal is emitted. At most 86400000 (one day).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Prompt: the API key (write `${ENV_VAR}`); proxy: the key of the health poll only.
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// Prompt: the API base URL or the full generation endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// Prompt: the model (a prompt signal's `model` overrides it).
    #[serde(default)]
    pub model: Option<String>,
    /// Prompt: `max_tokens` of each request (Anthropic requires one).
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// Prompt: an optional system prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// Proxy: `allowed_hosts`, `header_timeout_ms`, `idle_timeout_ms`,
    /// `max_connections`, as every listener's (a stream being relayed is never idle).
    #[serde(flatten)]
    pub listener: ListenerOptions,
}

/// The options only proxy mode has (prompt mode refuses them).
const PROXY_KEYS: [&str; 7] = [
    "listen",
    "upstream",
    "health_interval_ms",
    "allowed_hosts",
    "header_timeout_ms",
    "idle_timeout_ms",
    "max_connections",
];

fn default_health_interval_ms() -> u64 {
    30_000
}
fn default_timeout_ms() -> u64 {
    300_000
}
fn default_max_tokens() -> u32 {
    1024
}

impl LlmConfig {
    /// Parses and checks the options of a proxy-mode source (no I/O).
    pub fn proxy_from_options(options: &Options<'_>) -> Result<ProxyConfig, Diagnostic> {
        let config = parse_flattened::<LlmConfig>(options)?;
        if config.mode != Mode::Proxy {
            return Err(options.error_at(
                "mode",
                "prompt mode talks both ways: declare it under [outputs] (its signals come out of NAME.inbound)",
            ));
        }
        for key in ["url", "model", "system"] {
            if options.has(key) {
                return Err(options.error_at(key, format!("`{key}` is a prompt-mode option")));
            }
        }
        let listen = config.listen.as_deref().ok_or_else(|| {
            options.error_at(
                "listen",
                "proxy mode needs `listen` (e.g. \"127.0.0.1:8080\")",
            )
        })?;
        let listen = parse_loopback(listen).map_err(|msg| options.error_at("listen", msg))?;
        let upstream = config.upstream.as_deref().ok_or_else(|| {
            options.error_at(
                "upstream",
                "proxy mode needs `upstream` (e.g. \"http://127.0.0.1:11434\")",
            )
        })?;
        let upstream = parse_base_url(upstream).map_err(|msg| options.error_at("upstream", msg))?;
        options.check_range(
            "health_interval_ms",
            config.health_interval_ms,
            0..=MAX_DURATION_MS,
        )?;
        if config.timeout_ms == 0 {
            return Err(options.error_at("timeout_ms", "must be positive"));
        }
        options.check_range("timeout_ms", config.timeout_ms, 1..=MAX_DURATION_MS)?;
        let limits = config
            .listener
            .check()
            .map_err(|(key, message)| options.error_at(key, message))?;
        Ok(ProxyConfig {
            listen,
            upstream,
            health_interval_ms: config.health_interval_ms,
            timeout_ms: config.timeout_ms,
            api_key: config.api_key,
            allowed_hosts: config.listener.allowed_hosts,
            limits,
        })
    }

    /// Parses and checks the options of a prompt-mode output (no I/O).
    pub fn prompt_from_options(options: &Options<'_>) -> Result<PromptConfig, Diagnostic> {
        let config = parse_flattened::<LlmConfig>(options)?;
        if config.mode != Mode::Prompt {
            return Err(options.error_at(
                "mode",
                "as an output, this component needs `mode = \"prompt\"` (the proxy is a source)",
            ));
        }
        for key in PROXY_KEYS {
            if options.has(key) {
                return Err(options.error_at(key, format!("`{key}` is a proxy-mode option")));
            }
        }
        let url = config
            .url
            .as_deref()
            .ok_or_else(|| options.error_at("url", "prompt mode needs `url`"))?;
        let url = parse_base_url(url).map_err(|msg| options.error_at("url", msg))?;
        let model = config
            .model
            .filter(|m| !m.is_empty())
            .ok_or_else(|| options.error_at("model", "prompt mode needs `model`"))?;
        if config.timeout_ms == 0 {
            return Err(options.error_at("timeout_ms", "must be positive"));
        }
        options.check_range("timeout_ms", config.timeout_ms, 1..=MAX_DURATION_MS)?;
        if config.max_tokens == 0 {
            return Err(options.error_at("max_tokens", "must be positive"));
        }
        Ok(PromptConfig {
            url,
            model,
            api_key: config.api_key,
            max_tokens: config.max_tokens,
            system: config.system,
            timeout_ms: config.timeout_ms,
        })
    }
}

/// A checked proxy-mode config.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The loopback address to listen on.
    pub listen: SocketAddr,
    /// The upstream base URL, without a trailing `/`.
    pub upstream: String,
    /// Health poll interval in ms (0: never).
    pub health_interval_ms: u64,
    /// Answer and inter-chunk timeout in ms.
    pub timeout_ms: u64,
    /// The health poll's API key.
    pub api_key: Option<Secret>,
    /// Host names answered besides the loopback ones.
    pub allowed_hosts: Option<Vec<String>>,
    /// The listener's header and idle timeouts and connection cap.
    pub limits: Limits,
}

/// A checked prompt-mode config.
#[derive(Debug, Clone)]
pub struct PromptConfig {
    /// The API base URL (or the endpoint), without a trailing `/`.
    pub url: String,
    /// The default model.
    pub model: String,
    /// The API key.
    pub api_key: Option<Secret>,
    /// `max_tokens` of each request.
    pub max_tokens: u32,
    /// The system prompt.
    pub system: Option<String>,
    /// Answer and inter-chunk timeout in ms.
    pub timeout_ms: u64,
}

/// A loopback socket address (`localhost:N` is `127.0.0.1:N`); anything else is refused:
/// the proxy sees API keys and must not be reachable from the network.
pub fn parse_loopback(listen: &str) -> Result<SocketAddr, String> {
    let listen = listen.trim();
    let addr = if let Some(port) = listen.strip_prefix("localhost:") {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("`{listen}` has no valid port"))?;
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
    } else {
        listen
            .parse::<SocketAddr>()
            .map_err(|_| format!("`{listen}` is not an address like 127.0.0.1:8080"))?
    };
    if !addr.ip().is_loopback() {
        return Err(format!(
            "`{listen}` is not a loopback address: the proxy carries API keys and only listens on 127.0.0.1 or [::1]"
        ));
    }
    Ok(addr)
}

/// An `http://` or `https://` base URL with a host, without its trailing `/`.
pub fn parse_base_url(url: &str) -> Result<String, String> {
    let url = url.trim().trim_end_matches('/');
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("`{url}` is not an http:// or https:// URL"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("`{url}` has no host"));
    }
    Ok(url.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_must_be_loopback() {
        assert_eq!(
            parse_loopback("127.0.0.1:8080").ok(),
            "127.0.0.1:8080".parse().ok()
        );
        assert_eq!(
            parse_loopback("localhost:9").ok(),
            "127.0.0.1:9".parse().ok()
        );
        assert!(parse_loopback("[::1]:80").is_ok());
        assert!(parse_loopback("0.0.0.0:8080").is_err());
        assert!(parse_loopback("192.168.1.2:8080").is_err());
        assert!(parse_loopback("nonsense").is_err());
    }

    #[test]
    fn base_urls() {
        assert_eq!(
            parse_base_url("https://api.anthropic.com/").as_deref(),
            Ok("https://api.anthropic.com")
        );
        assert!(parse_base_url("ftp://x").is_err());
        assert!(parse_base_url("http://").is_err());
    }
}

//! The options of the `mqtt` source and output, and their checks (no I/O: a config is
//! checked without connecting).

use std::path::PathBuf;
use std::time::Duration;

use patchbay_graph::config::Secret;
use patchbay_graph::{Diagnostic, Options};
use patchbay_signal::path::Path;
use patchbay_transport::{Defaults, RedactedUrl, Scheme, TransportOptions};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::codec::Version;
use crate::decode::PayloadMode;
use crate::topic::{TopicFilter, TopicTemplate};

/// How to reach the broker, who to be, and how to retry: shared by the source and the
/// output.
#[derive(Clone, Deserialize, schemars::JsonSchema)]
pub struct Connection {
    /// The broker: `mqtt://HOST[:PORT]` (port 1883 by default) or `mqtts://HOST[:PORT]`
    /// (TLS, port 8883 by default; the system's roots plus `ca_file` are trusted). Default
    /// `mqtt://127.0.0.1:1883`.
    #[serde(default = "default_url")]
    pub url: String,
    /// The protocol version: `"3.1.1"` (the default: what every broker and device library
    /// speaks) or `"5"`.
    #[serde(default = "default_version")]
    pub version: Version,
    /// The client identifier, the name of the session at the broker (default
    /// `patchbay-HOSTNAME-NAME`, with NAME the component's name: the same across restarts,
    /// so that a source's persistent session is found again). Two clients with one id
    /// push each other off the broker: give each patchbay its own.
    #[serde(default)]
    pub client_id: Option<String>,
    /// The user name.
    #[serde(default)]
    pub user: Option<String>,
    /// The user's password (write `${MQTT_PASSWORD}`): never logged or shown.
    #[serde(default)]
    pub password: Option<Secret>,
    /// An access token, sent as the password (write `${MQTT_TOKEN}`; with `user` when
    /// the broker wants one, and MQTT 3.1.1 always does): never logged or shown. Brokers
    /// that take the token as the user name instead want `user = "${MQTT_TOKEN}"`.
    #[serde(default)]
    pub token: Option<Secret>,
    /// A PEM file of CA certificates to trust for `mqtts://`, besides the system's roots
    /// (a private CA, a self-signed broker).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// The quality of service: `1` (the default: every message acknowledged, none lost
    /// across reconnects; one whose acknowledgement was cut by a lost connection may come
    /// twice) or `0` (at most once: what is in flight when a connection breaks is lost).
    #[serde(default = "default_qos")]
    pub qos: u8,
    /// The keep-alive, in seconds (from 0, off, to 65535; default 30): a ping goes to the
    /// broker this often, and a broker silent for a whole period means a dead connection.
    #[serde(default = "default_keep_alive")]
    pub keep_alive_s: u16,
    /// How many QoS 1 messages may wait for their acknowledgement at once (from 1 to
    /// 65535; default 64): an output's send window, and (MQTT 5) how many a source lets
    /// the broker send ahead of the graph.
    #[serde(default = "default_inflight")]
    pub inflight: u16,
    /// The largest MQTT packet accepted from the broker, in bytes (from 1024 to
    /// 268435456; default 1048576, 1 MiB). A larger message is skipped as it arrives,
    /// counted as bad input and acknowledged; MQTT 5 tells the broker the limit.
    #[serde(default = "default_max_packet")]
    pub max_packet_size: u32,
    /// The first reconnect delay, in ms (from 1 to 86400000; default 500); it doubles per
    /// failed attempt in a row, plus up to a quarter of jitter.
    #[serde(default = "default_backoff_initial_ms")]
    pub backoff_initial_ms: u64,
    /// The longest reconnect delay, in ms (from `backoff_initial_ms` to 86400000; default
    /// 30000).
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// Reconnect attempts after failures in a row before giving up (health `failed`);
    /// unset (the default): retry forever.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// The longest one connection attempt (TCP, TLS, CONNECT and its answer) may take,
    /// in ms (from 1 to 86400000; default 10000).
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
}

fn default_url() -> String {
    "mqtt://127.0.0.1:1883".into()
}
fn default_version() -> Version {
    Version::V311
}
fn default_payload() -> PayloadMode {
    PayloadMode::Envelope
}
fn default_qos() -> u8 {
    1
}
fn default_keep_alive() -> u16 {
    30
}
fn default_inflight() -> u16 {
    64
}
fn default_max_packet() -> u32 {
    1 << 20
}
fn default_backoff_initial_ms() -> u64 {
    500
}
fn default_backoff_max_ms() -> u64 {
    30_000
}
fn default_connect_timeout_ms() -> u64 {
    10_000
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("url", &RedactedUrl(&self.url))
            .field("version", &self.version)
            .field("client_id", &self.client_id)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ca_file", &self.ca_file)
            .field("qos", &self.qos)
            .field("keep_alive_s", &self.keep_alive_s)
            .field("inflight", &self.inflight)
            .field("max_packet_size", &self.max_packet_size)
            .finish_non_exhaustive()
    }
}

/// Where the broker is, from `url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    /// The host name or address (IPv6 without its brackets).
    pub host: String,
    /// The port.
    pub port: u16,
    /// `mqtts://`.
    pub tls: bool,
}

impl Connection {
    /// The broker's address, or why `url` is not one.
    pub fn broker(&self) -> Result<Broker, String> {
        let url = self.url.trim();
        let (tls, rest) = if let Some(rest) = url.strip_prefix("mqtt://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("mqtts://") {
            (true, rest)
        } else {
            return Err(
                "`url` must be an mqtt:// or mqtts:// URL (e.g. mqtt://127.0.0.1:1883)".into(),
            );
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains('@') {
            return Err("put the credentials in `user` and `password`, not in `url`".into());
        }
        if authority.contains(['/', '?', '#']) {
            return Err("an MQTT `url` has no path or query: mqtt://HOST[:PORT]".into());
        }
        let default_port = if tls { 8883 } else { 1883 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let Some((host, after)) = v6.split_once(']') else {
                return Err("`url` has an unclosed `[`".into());
            };
            match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None if after.is_empty() => (host, None),
                None => return Err("`url`: expected `:PORT` after `]`".into()),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err("`url` has no host".into());
        }
        let port = match port {
            None => default_port,
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(format!("`url`: `{p}` is not a port")),
            },
        };
        Ok(Broker {
            host: host.to_owned(),
            port,
            tls,
        })
    }

    /// The password sent (the `password`, else the `token`).
    pub fn secret(&self) -> Option<&str> {
        self.password
            .as_ref()
            .or(self.token.as_ref())
            .map(|s| s.0.as_str())
    }

    /// The reconnect options the transport's driver runs with.
    pub(crate) fn transport(&self) -> TransportOptions<MqttDefaults> {
        let mut t = TransportOptions::new(self.url.trim());
        t.backoff_initial_ms = self.backoff_initial_ms;
        t.backoff_max_ms = self.backoff_max_ms;
        t.max_attempts = self.max_attempts;
        t.connect_timeout_ms = self.connect_timeout_ms;
        t.ca_file = self.ca_file.clone();
        t
    }

    /// The keep-alive period (`None`: off).
    pub fn keep_alive(&self) -> Option<Duration> {
        (self.keep_alive_s > 0).then(|| Duration::from_secs(u64::from(self.keep_alive_s)))
    }

    /// Checks the values; an error points at the key at fault.
    fn check(&self, options: &Options<'_>) -> Result<(), Diagnostic> {
        self.broker().map_err(|e| options.error_at("url", e))?;
        if self.qos > 1 {
            return Err(options.error_at("qos", "must be 0 or 1 (QoS 2 is not supported)"));
        }
        if self.password.is_some() && self.token.is_some() {
            return Err(options.error_at("token", "use `password` or `token`, not both"));
        }
        if self.version == Version::V311 && self.user.is_none() && self.secret().is_some() {
            let key = if self.password.is_some() {
                "password"
            } else {
                "token"
            };
            return Err(options.error_at(
                key,
                "MQTT 3.1.1 sends a password only with a user name: set `user`",
            ));
        }
        if let Some(id) = &self.client_id
            && (id.is_empty() || id.len() > 65_535)
        {
            return Err(options.error_at("client_id", "must be 1 to 65535 bytes"));
        }
        if self.user.as_ref().is_some_and(|u| u.len() > 65_535)
            || self.secret().is_some_and(|s| s.len() > 65_535)
        {
            return Err(options.error("`user` and `password` are at most 65535 bytes"));
        }
        options.check_range("inflight", self.inflight, 1..=u16::MAX)?;
        options.check_range("max_packet_size", self.max_packet_size, 1024..=268_435_456)?;
        patchbay_transport::check_delays(options, self.backoff_initial_ms, self.backoff_max_ms)?;
        if self.max_attempts == Some(0) {
            return Err(options.error_at(
                "max_attempts",
                "must be at least 1 (omit it to retry forever)",
            ));
        }
        options.check_range(
            "connect_timeout_ms",
            self.connect_timeout_ms,
            1..=patchbay_graph::config::MAX_DURATION_MS,
        )?;
        Ok(())
    }
}

/// The transport driver's view of an MQTT connection (its URL is shown redacted; the
/// scheme is checked here, not by the transport crate).
#[derive(Debug, Clone, Copy, schemars::JsonSchema)]
pub struct MqttDefaults;

impl Defaults for MqttDefaults {
    const SCHEME: Scheme = Scheme::Http;
    const URL_EXAMPLE: &'static str = "mqtt://127.0.0.1:1883";
}

/// `[sources.NAME] type = "mqtt"`: subscribes to topic filters and hands each message to
/// the graph, acknowledging it (QoS 1) only once the graph took its signal.
///
/// ```toml
/// [sources.buttons]
/// type = "mqtt"
/// url = "mqtt://127.0.0.1:1883"
/// topics = ["home/+/button", "esp32/#"]
/// payload = "raw"
/// ```
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct MqttSourceConfig {
    /// The broker, the credentials and the reconnect policy.
    #[serde(flatten)]
    pub connection: Connection,
    /// The topic filters to subscribe to: `+` matches one level, `#` every level below
    /// (`home/+/button`, `esp32/#`); `$share/GROUP/FILTER` shares the messages with the
    /// group's other subscribers. Default `["patchbay/#"]` (what an `mqtt` output
    /// publishes by default).
    #[serde(default = "default_topics")]
    pub topics: Vec<TopicFilter>,
    /// `"envelope"` (the default: each message is a JSON signal) or `"raw"` (each message,
    /// whatever its bytes, becomes `mqtt.message {topic, payload}`: the text when UTF-8,
    /// else base64 with `encoding: "base64"`).
    #[serde(default = "default_payload")]
    pub payload: PayloadMode,
    /// Start a new session on every connection (`true`), or keep one at the broker
    /// (`false`, the default): QoS 1 messages published while patchbay is away (a broker
    /// restart, a network cut, patchbay itself restarted) are kept for it and delivered
    /// when it is back. Needs a `client_id` of its own per patchbay (the default is).
    #[serde(default)]
    pub clean_session: bool,
    /// MQTT 5: how long the broker keeps the session once patchbay is gone, in seconds
    /// (default 86400, one day; MQTT 3.1.1 sessions last until the broker drops them).
    #[serde(default = "default_session_expiry")]
    pub session_expiry_s: u32,
}

fn default_topics() -> Vec<TopicFilter> {
    vec![TopicFilter::parse("patchbay/#").unwrap_or_else(|_| unreachable!())]
}

fn default_session_expiry() -> u32 {
    86_400
}

/// `[outputs.NAME] type = "mqtt"`: publishes each signal on a topic made from a
/// template; at QoS 1 a signal counts as sent once the broker acknowledged it.
///
/// ```toml
/// [outputs.lamp]
/// type = "mqtt"
/// inputs = ["states"]
/// topic = "agents/{payload.agentId}/state"
/// payload = "raw"
/// value = "payload.to"
/// retain = true
/// ```
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct MqttOutputConfig {
    /// The broker, the credentials and the reconnect policy.
    #[serde(flatten)]
    pub connection: Connection,
    /// The topic template: `{path}` is the signal's value at that path (`{type}`,
    /// `{source}`, `{payload.agentId}`, or `{agentId}` for short) made into one level (`/`,
    /// `+`, `#` and control characters become `_`; nothing is `_`). Default
    /// `patchbay/{source}/{type}`.
    #[serde(default = "default_output_topic")]
    pub topic: TopicTemplate,
    /// `"envelope"` (the default: each message is the signal's JSON) or `"raw"` (each
    /// message is one value of the signal, see `value`).
    #[serde(default = "default_payload")]
    pub payload: PayloadMode,
    /// With `payload = "raw"`: the path of the value published (default
    /// `payload.payload`, so that an `mqtt.message` goes out as the bytes it came with): a
    /// string as its UTF-8 bytes, anything else as compact JSON. A signal without it is
    /// refused and counted.
    #[serde(default)]
    pub value: Option<String>,
    /// Publish retained: the broker keeps each topic's last message and gives it to every
    /// new subscriber at once (a lamp shows the state as soon as it connects).
    #[serde(default)]
    pub retain: bool,
}

fn default_output_topic() -> TopicTemplate {
    TopicTemplate::parse("patchbay/{source}/{type}").unwrap_or_else(|_| unreachable!())
}

/// Parses a struct that flattens [`Connection`]: unknown keys are refused over both
/// parts (serde's `deny_unknown_fields` does not work through `flatten`).
fn parse_flat<T: DeserializeOwned + schemars::JsonSchema>(
    options: &Options<'_>,
) -> Result<T, Diagnostic> {
    let known = patchbay_transport::known_keys::<T>();
    options.refuse_unknown_keys(known.iter().map(String::as_str))?;
    options.parse()
}

/// Parses and checks a source's options.
pub fn parse_source(options: &Options<'_>) -> Result<MqttSourceConfig, Diagnostic> {
    let config: MqttSourceConfig = parse_flat(options)?;
    config.connection.check(options)?;
    if config.topics.is_empty() {
        return Err(options.error_at("topics", "subscribe to at least one topic filter"));
    }
    Ok(config)
}

/// Parses and checks an output's options, with the raw value's path.
pub fn parse_output(options: &Options<'_>) -> Result<(MqttOutputConfig, Option<Path>), Diagnostic> {
    let config: MqttOutputConfig = parse_flat(options)?;
    config.connection.check(options)?;
    let value = match &config.value {
        None => None,
        Some(_) if config.payload != PayloadMode::Raw => {
            return Err(options.error_at("value", "`value` goes with `payload = \"raw\"`"));
        }
        Some(text) => {
            Some(Path::parse(text).map_err(|e| options.error_at("value", e.to_string()))?)
        }
    };
    Ok((config, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(text: &str) -> Result<MqttSourceConfig, Diagnostic> {
        Options::parse_snippet_with(text, parse_source)
    }

    fn output(text: &str) -> Result<(MqttOutputConfig, Option<Path>), Diagnostic> {
        Options::parse_snippet_with(text, parse_output)
    }

    #[test]
    fn defaults() {
        let c = source("").unwrap();
        assert_eq!(c.connection.url, "mqtt://127.0.0.1:1883");
        assert_eq!(c.connection.qos, 1);
        assert_eq!(c.connection.version, Version::V311);
        assert_eq!(c.topics[0].as_str(), "patchbay/#");
        assert_eq!(c.payload, PayloadMode::Envelope);
        assert!(!c.clean_session);
        let (o, value) = output("").unwrap();
        assert!(!o.retain && value.is_none());
        assert_eq!(o.connection.keep_alive(), Some(Duration::from_secs(30)));
    }

    #[test]
    fn urls() {
        let broker = |url: &str| {
            source(&format!("url = \"{url}\""))
                .map(|c| c.connection.broker().unwrap())
                .map_err(|e| e.message)
        };
        assert_eq!(
            broker("mqtt://h").unwrap(),
            Broker {
                host: "h".into(),
                port: 1883,
                tls: false
            }
        );
        assert_eq!(
            broker("mqtts://h:9").unwrap(),
            Broker {
                host: "h".into(),
                port: 9,
                tls: true
            }
        );
        assert_eq!(
            broker("mqtts://h/").unwrap(),
            Broker {
                host: "h".into(),
                port: 8883,
                tls: true
            }
        );
        assert_eq!(
            broker("mqtt://[::1]:1884").unwrap(),
            Broker {
                host: "::1".into(),
                port: 1884,
                tls: false
            }
        );
        for (bad, why) in [
            ("tcp://h", "mqtt:// or mqtts://"),
            ("mqtt://", "no host"),
            ("mqtt://h:0", "not a port"),
            ("mqtt://h:x", "not a port"),
            ("mqtt://u:pw@h", "not in `url`"),
            ("mqtt://h/x", "no path"),
            ("mqtt://[::1", "unclosed"),
        ] {
            let err = broker(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(!err.contains("pw"), "{err}");
        }
    }

    #[test]
    fn bad_values_point_at_their_key() {
        let err = source("qos = 2").unwrap_err();
        assert!(err.message.contains("0 or 1"), "{err}");
        assert_eq!((err.line, err.col), (1, 7));
        let err = source("topics = [\"a/#/b\"]").unwrap_err();
        assert!(err.message.contains("whole last level"), "{err}");
        let err = source("topics = []").unwrap_err();
        assert!(err.message.contains("at least one"), "{err}");
        let err = source("tpoics = [\"a\"]").unwrap_err();
        assert!(err.message.contains("did you mean `topics`"), "{err}");
        let err = source("password = \"pw\"").unwrap_err();
        assert!(err.message.contains("set `user`"), "{err}");
        assert!(source("version = \"5\"\npassword = \"pw\"").is_ok());
        let err = source("user = \"u\"\npassword = \"a\"\ntoken = \"b\"").unwrap_err();
        assert!(err.message.contains("not both"), "{err}");
        let err = source("version = \"4\"").unwrap_err();
        assert!(err.message.contains("3.1.1"), "{err}");
        let err = source("inflight = 0").unwrap_err();
        assert!(err.message.contains("inflight") || err.col > 0, "{err}");
        let err = source("max_packet_size = 10").unwrap_err();
        assert_eq!((err.line, err.col), (1, 19), "{err}");
        let err = source("backoff_initial_ms = 10\nbackoff_max_ms = 5").unwrap_err();
        assert!(err.message.contains("at least"), "{err}");
        let err = output("value = \"payload.x\"").unwrap_err();
        assert!(
            err.message.contains("payload = \\\"raw\\\"") || err.message.contains("raw"),
            "{err}"
        );
        let err = output("topic = \"a/+\"").unwrap_err();
        assert!(err.message.contains("no `+` or `#`"), "{err}");
        let err = output("retian = true").unwrap_err();
        assert!(err.message.contains("did you mean `retain`"), "{err}");
        let (_, value) = output("payload = \"raw\"\nvalue = \"payload.to\"").unwrap();
        assert_eq!(
            value.map(|p| p.as_str().to_owned()),
            Some("payload.to".into())
        );
    }

    #[test]
    fn secrets_stay_out_of_debug() {
        let c = source("user = \"me\"\npassword = \"hunter2\"").unwrap();
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("me"),
            "{shown}"
        );
        let c = source("user = \"me\"\ntoken = \"tok-123\"").unwrap();
        assert!(!format!("{c:?}").contains("tok-123"));
        assert_eq!(c.connection.secret(), Some("tok-123"));
    }
}

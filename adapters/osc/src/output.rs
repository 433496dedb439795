//! The `osc` output: signals sent as OSC messages over UDP to one or more targets (a
//! phone's TouchOSC layout, Open Stage Control, a lighting desk, a patch).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use patchbay_graph::{
    BoxFuture, ComponentError, ComponentStats, Diagnostic, HealthState, Options, Output,
    OutputContext,
};
use patchbay_signal::path::{Found, Path};
use patchbay_signal::template::{Template, TemplatePart};
use patchbay_signal::{SharedSignal, Signal};
use patchbay_transport::backoff::Backoff;
use serde::Deserialize;
use serde::de::{Deserializer, Error as _};
use serde_json::Value;
use tokio::net::UdpSocket;
use tokio::time::Instant;

use crate::encode::{ArgType, BUNDLE_HEADER, EncodeError, args_of, encode_bundle, encode_message};
use crate::packet::{Arg, Message, TimeTag};
use crate::source::{DEFAULT_MAX_PACKET, MIN_PACKET};

/// The largest `max_packet` of an output: the largest UDP payload over IPv4.
pub const MAX_SEND_PACKET: usize = 65_507;

/// `[outputs.NAME] type = "osc"`: each signal sent as one OSC message, to an address made
/// from a template, with arguments taken from the signal.
///
/// ```toml
/// [outputs.phone]
/// type = "osc"
/// inputs = ["states"]
/// target = "192.168.1.50:9000"
/// address = "/agents/{payload.agentId}/state"
/// args = ["payload.to", { value = 1, type = "f" }]
/// ```
///
/// With the defaults (`address = "{payload.address}"`, `args = [{ path = "payload.args",
/// default = [] }]`), an `osc.message` signal, as the source emits it or as a `map` makes
/// it, is sent as it reads.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OscOutputConfig {
    /// Where to send: `host:port`, or a list of them (each gets every packet). TouchOSC's
    /// default incoming port is 9000: `"192.168.1.50:9000"`. A host name is resolved when
    /// sending, again every minute and after a failure.
    pub target: Targets,
    /// The OSC address: literal text and `{path}` placeholders, each replaced by the
    /// signal's value there (`/agents/{payload.agentId}/state`; a string as it is, with
    /// spaces and the OSC pattern characters `#*,?[]{}` made `_`, and `/` kept). A signal
    /// without a value for a placeholder is refused (counted in `bad_input`). Default
    /// `{payload.address}`.
    #[serde(default = "default_address")]
    pub address: AddressTemplate,
    /// The arguments, in order. Each is a dot path (`"payload.to"`), a literal number or
    /// boolean (`1`, `true`), or a table: `{ path = "payload.level", type = "f", default =
    /// 0 }` or `{ value = "text", type = "s" }`. `type` is an OSC type tag (`i`, `h`, `f`,
    /// `d`, `s`, `b` from base64 text) or `bool` (`T`/`F`); without it an integer is `i`
    /// (`h` past 32 bits), another number `f`, a string `s`, `true`/`false` `T`/`F`,
    /// `null` `N`, an object its JSON text. A path whose value is an array gives one
    /// argument per element (nested arrays are OSC arrays). A path with no value and no
    /// `default` refuses the signal. Default `[{ path = "payload.args", default = [] }]`.
    #[serde(default = "default_args")]
    pub args: Vec<ArgEntry>,
    /// Send the signals that arrive together (one batch of the queue) as OSC bundles, one
    /// packet per target for as many messages as fit in `max_packet`, time tag
    /// "immediately". Default false: one packet per signal.
    #[serde(default)]
    pub bundle: bool,
    /// The largest packet sent, in bytes; a signal whose message is larger is refused
    /// (counted in `bad_input`). From 16 to 65507. Default 8192.
    #[serde(default = "default_max_packet")]
    pub max_packet: usize,
}

fn default_max_packet() -> usize {
    DEFAULT_MAX_PACKET
}

fn default_address() -> AddressTemplate {
    AddressTemplate::parse("{payload.address}").unwrap_or_else(|_| unreachable!())
}

fn default_args() -> Vec<ArgEntry> {
    vec![ArgEntry {
        source: ArgSource::Path(Path::parse("payload.args").unwrap_or_else(|_| unreachable!())),
        forced: None,
        default: Some(Value::Array(Vec::new())),
    }]
}

/// One target or several.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Targets {
    /// `"host:port"`.
    One(String),
    /// `["host:port", …]`.
    Many(Vec<String>),
}

impl Targets {
    fn list(&self) -> Vec<&str> {
        match self {
            Targets::One(t) => vec![t.as_str()],
            Targets::Many(ts) => ts.iter().map(String::as_str).collect(),
        }
    }
}

/// Characters an OSC address cannot hold outside patterns: replaced by `_` in a
/// placeholder's value, refused in the template's text.
fn forbidden_in_address(c: char) -> bool {
    c.is_whitespace()
        || c.is_control()
        || matches!(c, '#' | '*' | ',' | '?' | '[' | ']' | '{' | '}')
}

/// A parsed address template.
#[derive(Debug, Clone)]
pub struct AddressTemplate {
    template: Template,
}

patchbay_graph::described_as!(AddressTemplate, {"type": "string"});

impl AddressTemplate {
    /// Parses `/text/{path}/text`: it must start with `/` or a placeholder, and its text
    /// may not hold spaces or `#*,?[]`.
    pub fn parse(text: &str) -> Result<AddressTemplate, String> {
        let template = Template::parse(text).map_err(|e| format!("`{text}`: {e}"))?;
        match template.parts().first() {
            None => return Err("the address is empty".into()),
            Some(TemplatePart::Text(t)) if !t.starts_with('/') => {
                return Err(format!("`{text}`: an OSC address starts with `/`"));
            }
            _ => {}
        }
        if let Some(c) = template
            .texts()
            .find_map(|t| t.chars().find(|c| forbidden_in_address(*c)))
        {
            return Err(format!(
                "`{text}`: `{}` has no place in an OSC address",
                c.escape_default()
            ));
        }
        Ok(AddressTemplate { template })
    }

    /// The address of `signal`, into `out`.
    pub fn render(&self, signal: &Signal, out: &mut String) -> Result<(), RenderError> {
        out.clear();
        self.template.try_render(signal, out, |path, value, out| {
            let Some(text) = value else {
                return Err(RenderError::Missing {
                    path: path.as_str().to_owned(),
                    role: "the address",
                });
            };
            if text.is_empty() {
                out.push('_');
            }
            out.extend(
                text.chars()
                    .map(|c| if forbidden_in_address(c) { '_' } else { c }),
            );
            Ok(())
        })?;
        if !out.starts_with('/') {
            return Err(RenderError::Encode(EncodeError::BadAddress(out.clone())));
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for AddressTemplate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        AddressTemplate::parse(&text).map_err(D::Error::custom)
    }
}

/// One entry of `args`.
#[derive(Debug, Clone)]
pub struct ArgEntry {
    source: ArgSource,
    forced: Option<ArgType>,
    default: Option<Value>,
}

#[derive(Debug, Clone)]
enum ArgSource {
    Path(Path),
    Literal(Value),
}

patchbay_graph::described_as!(ArgEntry, {
    "anyOf": [
        {"type": "string", "description": "a dot path: the signal's value there"},
        {"type": ["number", "boolean"], "description": "a literal"},
        {"type": "object", "description": "{ path | value, type, default }"}
    ]
});

const ARG_KEYS: &str = "`path`, `value`, `type`, `default`";

impl<'de> Deserialize<'de> for ArgEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        ArgEntry::from_value(value).map_err(D::Error::custom)
    }
}

impl ArgEntry {
    fn from_value(value: Value) -> Result<ArgEntry, String> {
        let path = |text: &str| Path::parse(text).map_err(|e| e.to_string());
        match value {
            Value::String(text) => Ok(ArgEntry {
                source: ArgSource::Path(path(&text)?),
                forced: None,
                default: None,
            }),
            v @ (Value::Number(_) | Value::Bool(_)) => Ok(ArgEntry {
                source: ArgSource::Literal(v),
                forced: None,
                default: None,
            }),
            Value::Object(mut table) => {
                let source = match (table.remove("path"), table.remove("value")) {
                    (Some(Value::String(p)), None) => ArgSource::Path(path(&p)?),
                    (Some(_), None) => return Err("`path` is a dot path, a string".into()),
                    (None, Some(v)) => ArgSource::Literal(v),
                    (Some(_), Some(_)) => {
                        return Err("an argument has a `path` or a `value`, not both".into());
                    }
                    (None, None) => {
                        return Err("an argument table needs a `path` or a `value`".into());
                    }
                };
                let forced = match table.remove("type") {
                    None => None,
                    Some(t) => Some(ArgType::deserialize(t).map_err(|_| {
                        "`type` is one of \"i\", \"h\", \"f\", \"d\", \"s\", \"b\", \"bool\""
                            .to_owned()
                    })?),
                };
                let default = table.remove("default");
                if let Some(key) = table.keys().next() {
                    return Err(format!(
                        "unknown key `{key}` in an argument (expected {ARG_KEYS})"
                    ));
                }
                if default.is_some() && matches!(source, ArgSource::Literal(_)) {
                    return Err("`default` goes with a `path`, not a `value`".into());
                }
                Ok(ArgEntry {
                    source,
                    forced,
                    default,
                })
            }
            _ => Err(format!(
                "an argument is a dot path, a number, a boolean or a table ({ARG_KEYS})"
            )),
        }
    }

    /// Appends this entry's arguments for `signal`.
    fn render(&self, signal: &Signal, out: &mut Vec<Arg>) -> Result<(), RenderError> {
        match &self.source {
            ArgSource::Literal(v) => args_of(v, self.forced, out).map_err(RenderError::Encode),
            ArgSource::Path(path) => {
                let found = path.get(signal).filter(|f| !f.is_null());
                match (found, &self.default) {
                    (Some(Found::Json(v)), _) => args_of(v, self.forced, out),
                    (Some(other), _) => args_of(&other.to_value(), self.forced, out),
                    (None, Some(default)) => args_of(default, self.forced, out),
                    (None, None) => {
                        return Err(RenderError::Missing {
                            path: path.as_str().to_owned(),
                            role: "an argument",
                        });
                    }
                }
                .map_err(RenderError::Encode)
            }
        }
    }
}

/// Why a signal cannot become a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A path the address or an argument needs has no value.
    #[error("no value at `{path}` for {role}")]
    Missing {
        /// The path.
        path: String,
        /// `the address` or `an argument`.
        role: &'static str,
    },
    /// The values cannot be written as OSC.
    #[error("{0}")]
    Encode(EncodeError),
    /// The message is larger than `max_packet`.
    #[error("its message is {len} bytes, more than `max_packet` ({max})")]
    TooLarge {
        /// The message's size (with a bundle's element overhead, when bundling).
        len: usize,
        /// `max_packet`.
        max: usize,
    },
}

/// The rendering of signals into OSC messages, as configured.
#[derive(Debug, Clone)]
pub struct MessageTemplate {
    address: AddressTemplate,
    args: Vec<ArgEntry>,
}

impl MessageTemplate {
    /// The message of `signal`, written into `message` (its buffers reused).
    pub fn render(&self, signal: &Signal, message: &mut Message) -> Result<(), RenderError> {
        self.address.render(signal, &mut message.address)?;
        message.args.clear();
        for entry in &self.args {
            entry.render(signal, &mut message.args)?;
        }
        Ok(())
    }
}

/// Builds an `osc` output (no I/O).
pub(crate) fn build(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    let config: OscOutputConfig = options.parse()?;
    options.check_range(
        "max_packet",
        config.max_packet,
        MIN_PACKET..=MAX_SEND_PACKET,
    )?;
    let list = config.target.list();
    if list.is_empty() {
        return Err(options.error_at("target", "name at least one `host:port` to send to"));
    }
    let targets = list
        .iter()
        .map(|t| Target::parse(t))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| options.error_at("target", e))?;
    // Literal arguments are checked now: a wrong one would refuse every signal.
    for entry in &config.args {
        if let ArgSource::Literal(v) = &entry.source {
            args_of(v, entry.forced, &mut Vec::new())
                .map_err(|e| options.error_at("args", e.to_string()))?;
        }
    }
    Ok(Box::new(OscOut {
        template: MessageTemplate {
            address: config.address,
            args: config.args,
        },
        targets,
        bundle: config.bundle,
        max_packet: config.max_packet,
    }))
}

struct OscOut {
    template: MessageTemplate,
    targets: Vec<Target>,
    bundle: bool,
    max_packet: usize,
}

/// How long a host name's address is used before it is looked up again.
const RESOLVED_FOR: Duration = Duration::from_secs(60);
/// How long one lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// At most this many signals are taken from the queue at once.
const BATCH: usize = 256;

/// One `target`.
#[derive(Debug)]
struct Target {
    text: String,
    /// An IP address given as such: never looked up.
    fixed: Option<SocketAddr>,
    /// The address of a host name, and until when it is used.
    resolved: Option<(SocketAddr, Instant)>,
    /// No lookup before this (after a failure).
    retry_at: Option<Instant>,
    backoff: Backoff,
    /// Why the last send or lookup failed, while it does (logged once per failure run).
    failing: Option<String>,
}

impl Target {
    fn parse(text: &str) -> Result<Target, String> {
        let shown = text.trim();
        let fixed = match shown.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                let Some((host, port)) = shown.rsplit_once(':') else {
                    return Err(format!("`{shown}` is not `host:port`"));
                };
                let port: u16 = port
                    .parse()
                    .map_err(|_| format!("`{shown}`: `{port}` is not a port number"))?;
                if host.is_empty() || host.contains(['/', ' ', '[', ']']) {
                    return Err(format!("`{shown}` is not `host:port`"));
                }
                // Loopback by definition: no lookup (which might answer `::1` first).
                host.eq_ignore_ascii_case("localhost")
                    .then(|| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port))
            }
        };
        if fixed.is_some_and(|a| a.port() == 0) {
            return Err(format!("`{shown}`: port 0 cannot be sent to"));
        }
        Ok(Target {
            text: shown.to_owned(),
            fixed,
            resolved: None,
            retry_at: None,
            backoff: Backoff::new(Duration::from_millis(500), Duration::from_secs(30), None),
            failing: None,
        })
    }

    /// The address to send to now, looking the host name up when needed.
    async fn address(&mut self) -> Result<SocketAddr, String> {
        if let Some(addr) = self.fixed {
            return Ok(addr);
        }
        let now = Instant::now();
        if let Some((addr, until)) = self.resolved
            && now < until
        {
            return Ok(addr);
        }
        if let Some(at) = self.retry_at
            && now < at
        {
            return Err(self
                .failing
                .clone()
                .unwrap_or_else(|| format!("cannot resolve `{}`", self.text)));
        }
        let lookup =
            tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host(&self.text)).await;
        let found = match lookup {
            Ok(Ok(addrs)) => {
                let addrs: Vec<SocketAddr> = addrs.collect();
                // IPv4 first: a phone on the LAN is reached over IPv4.
                addrs
                    .iter()
                    .find(|a| a.is_ipv4())
                    .or(addrs.first())
                    .copied()
                    .ok_or_else(|| format!("`{}` has no address", self.text))
            }
            Ok(Err(e)) => Err(format!("cannot resolve `{}`: {e}", self.text)),
            Err(_) => Err(format!("cannot resolve `{}`: no answer in time", self.text)),
        };
        match found {
            Ok(addr) => {
                self.resolved = Some((addr, now + RESOLVED_FOR));
                self.retry_at = None;
                self.backoff.reset();
                Ok(addr)
            }
            Err(e) => {
                let delay = self
                    .backoff
                    .next_jittered()
                    .unwrap_or(Duration::from_secs(30));
                self.retry_at = Some(now + delay);
                Err(e)
            }
        }
    }

    /// Whether every address it can have is loopback (an IP literal or `localhost`).
    fn is_loopback(&self) -> bool {
        self.fixed.is_some_and(|a| a.ip().is_loopback())
    }
}

/// The sockets an output sends from, one per address family, bound on first use.
struct Sockets {
    /// Bind loopback addresses (every target is loopback): nothing can reach them from
    /// elsewhere.
    loopback: bool,
    v4: Option<UdpSocket>,
    v6: Option<UdpSocket>,
}

impl Sockets {
    async fn for_target(&mut self, addr: SocketAddr) -> std::io::Result<&UdpSocket> {
        let (slot, bind) = if addr.is_ipv4() {
            let ip = if self.loopback {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            } else {
                IpAddr::V4(Ipv4Addr::UNSPECIFIED)
            };
            (&mut self.v4, SocketAddr::new(ip, 0))
        } else {
            let ip = if self.loopback {
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            } else {
                IpAddr::V6(Ipv6Addr::UNSPECIFIED)
            };
            (&mut self.v6, SocketAddr::new(ip, 0))
        };
        if slot.is_none() {
            *slot = Some(UdpSocket::bind(bind).await?);
        }
        slot.as_ref()
            .ok_or_else(|| std::io::Error::other("no socket"))
    }
}

/// One packet to send and how many signals it carries.
struct Datagram {
    range: std::ops::Range<usize>,
    signals: u64,
}

impl Output for OscOut {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let OscOut {
                template,
                mut targets,
                bundle,
                max_packet,
            } = *self;
            let mut sockets = Sockets {
                loopback: targets.iter().all(Target::is_loopback),
                v4: None,
                v6: None,
            };
            let names: Vec<&str> = targets.iter().map(|t| t.text.as_str()).collect();
            let sending_to = format!("sending to {}", names.join(", "));
            cx.set_state(HealthState::Ok, Some(sending_to.clone()));
            let mut batch: Vec<SharedSignal> = Vec::with_capacity(BATCH);
            let mut message = Message {
                address: String::new(),
                args: Vec::new(),
            };
            // The batch's messages, encoded one after the other, and their ends.
            let mut encoded: Vec<u8> = Vec::new();
            let mut ends: Vec<usize> = Vec::new();
            let mut bundles: Vec<u8> = Vec::new();
            let mut datagrams: Vec<Datagram> = Vec::new();
            let element_overhead = if bundle { BUNDLE_HEADER + 4 } else { 0 };
            while cx.next_batch(BATCH, &mut batch).await {
                encoded.clear();
                ends.clear();
                for signal in batch.drain(..) {
                    let start = encoded.len();
                    let rendered = template
                        .render(&signal, &mut message)
                        .and_then(|()| {
                            encode_message(&message, &mut encoded).map_err(RenderError::Encode)
                        })
                        .and_then(|()| {
                            let len = encoded.len() - start + element_overhead;
                            if len > max_packet {
                                Err(RenderError::TooLarge {
                                    len,
                                    max: max_packet,
                                })
                            } else {
                                Ok(())
                            }
                        });
                    match rendered {
                        Ok(()) => ends.push(encoded.len()),
                        Err(e) => {
                            encoded.truncate(start);
                            cx.refused(format!("{} not sent: {e}", signal.kind));
                        }
                    }
                }
                datagrams.clear();
                let packets: &[u8] = if bundle {
                    bundle_up(&encoded, &ends, max_packet, &mut bundles, &mut datagrams);
                    &bundles
                } else {
                    let mut start = 0;
                    for &end in &ends {
                        datagrams.push(Datagram {
                            range: start..end,
                            signals: 1,
                        });
                        start = end;
                    }
                    &encoded
                };
                for datagram in &datagrams {
                    let bytes = &packets[datagram.range.clone()];
                    let mut all = true;
                    for target in &mut targets {
                        if !send(target, &mut sockets, bytes, &cx).await {
                            all = false;
                        }
                    }
                    if all {
                        cx.delivered(datagram.signals);
                    } else {
                        ComponentStats::add(&cx.stats().dropped, datagram.signals);
                    }
                }
                if targets.iter().all(|t| t.failing.is_none())
                    && cx.stats().state() != HealthState::Ok
                {
                    cx.set_state(HealthState::Ok, Some(sending_to.clone()));
                }
            }
            cx.set_state(HealthState::Stopped, None);
            Ok(())
        })
    }
}

/// Groups the encoded messages (ending at `ends` in `encoded`) into bundles of at most
/// `max_packet` bytes, in order, written to `out`.
fn bundle_up(
    encoded: &[u8],
    ends: &[usize],
    max_packet: usize,
    out: &mut Vec<u8>,
    datagrams: &mut Vec<Datagram>,
) {
    out.clear();
    let mut start = 0;
    let mut i = 0;
    while i < ends.len() {
        // Messages from `i` while they fit (each was checked to fit alone).
        let mut size = BUNDLE_HEADER;
        let mut j = i;
        let mut element_start = start;
        while j < ends.len() {
            let len = ends[j] - element_start;
            if j > i && size + 4 + len > max_packet {
                break;
            }
            size += 4 + len;
            element_start = ends[j];
            j += 1;
        }
        let begin = out.len();
        let mut from = start;
        let elements = ends[i..j].iter().map(|&end| {
            let element = &encoded[from..end];
            from = end;
            element
        });
        encode_bundle(TimeTag::IMMEDIATELY, elements, out);
        datagrams.push(Datagram {
            range: begin..out.len(),
            signals: (j - i) as u64,
        });
        start = ends[j - 1];
        i = j;
    }
}

/// Sends one packet to one target; `false` when it could not be sent (said once per run of
/// failures, health `recovering` meanwhile).
async fn send(
    target: &mut Target,
    sockets: &mut Sockets,
    bytes: &[u8],
    cx: &OutputContext,
) -> bool {
    let sent = match target.address().await {
        Ok(addr) => match sockets.for_target(addr).await {
            Ok(socket) => socket
                .send_to(bytes, addr)
                .await
                .map(|_| ())
                .map_err(|e| format!("sending to {} ({addr}): {e}", target.text)),
            Err(e) => Err(format!("cannot open a UDP socket for {addr}: {e}")),
        },
        Err(e) => Err(e),
    };
    match sent {
        Ok(()) => {
            if target.failing.take().is_some() {
                tracing::info!(output = cx.name(), "OSC: sending to {} again", target.text);
            }
            true
        }
        Err(e) => {
            if target.failing.is_none() {
                cx.stats().record_error(format!("OSC: {e}"));
            }
            // The next packet looks the name up again.
            target.resolved = None;
            cx.set_state(HealthState::Recovering, Some(e.clone()));
            target.failing = Some(e);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_signal::object;
    use serde_json::json;

    fn template(toml: &str) -> MessageTemplate {
        let config: OscOutputConfig =
            Options::parse_snippet(&format!("target = \"127.0.0.1:9000\"\n{toml}"))
                .unwrap_or_else(|e| panic!("{}", e.message));
        MessageTemplate {
            address: config.address,
            args: config.args,
        }
    }

    fn rendered(t: &MessageTemplate, signal: &Signal) -> Result<Message, RenderError> {
        let mut m = Message {
            address: String::new(),
            args: Vec::new(),
        };
        t.render(signal, &mut m).map(|()| m)
    }

    #[test]
    fn an_osc_message_is_sent_as_it_reads() {
        let t = template("");
        let signal = Signal::new(
            "osc.message",
            "osc:phone",
            object! {"address" => "/agent/pause", "args" => json!([1, 0.5, "x", [true]])},
        );
        assert_eq!(
            rendered(&t, &signal),
            Ok(Message {
                address: "/agent/pause".into(),
                args: vec![
                    Arg::Int(1),
                    Arg::Float(0.5),
                    Arg::String("x".into()),
                    Arg::Array(vec![Arg::True])
                ],
            })
        );
        let bare = Signal::new("osc.message", "t", object! {"address" => "/go"});
        assert_eq!(rendered(&t, &bare).unwrap().args, vec![]);
        let none = Signal::new("control.pause", "t", object! {});
        assert_eq!(
            rendered(&t, &none),
            Err(RenderError::Missing {
                path: "payload.address".into(),
                role: "the address"
            })
        );
    }

    #[test]
    fn templates_and_typed_arguments() {
        let t = template(
            "address = \"/agents/{payload.agentId}/state\"\n\
             args = [\"payload.to\", 1, true, { value = \"on\", type = \"s\" }, { path = \"payload.level\", type = \"f\", default = 0 }, { path = \"metadata.n\", type = \"i\" }]",
        );
        let signal = Signal::new(
            "agent_state_change",
            "t",
            object! {"agentId" => "claude code/1*", "from" => "idle", "to" => "acting"},
        )
        .with_meta("n", 2.6);
        assert_eq!(
            rendered(&t, &signal),
            Ok(Message {
                address: "/agents/claude_code/1_/state".into(),
                args: vec![
                    Arg::String("acting".into()),
                    Arg::Int(1),
                    Arg::True,
                    Arg::String("on".into()),
                    Arg::Float(0.0),
                    Arg::Int(3),
                ],
            })
        );
        let no_n = Signal::new(
            "agent_state_change",
            "t",
            object! {"agentId" => "a", "to" => "idle"},
        );
        assert_eq!(
            rendered(&t, &no_n).unwrap_err().to_string(),
            "no value at `metadata.n` for an argument"
        );
        let numbered = template("address = \"/n/{payload.i}\"\nargs = []");
        let signal = Signal::new("x", "t", object! {"i" => 7});
        assert_eq!(rendered(&numbered, &signal).unwrap().address, "/n/7");
    }

    #[test]
    fn bad_options_are_refused() {
        let parse = |toml: &str| {
            Options::parse_snippet::<OscOutputConfig>(toml)
                .map(|_| ())
                .map_err(|e| e.message)
        };
        assert!(parse("").unwrap_err().contains("target"));
        assert!(
            parse("target = \"h:1\"\naddress = \"agent\"")
                .unwrap_err()
                .contains("starts with `/`")
        );
        assert!(
            parse("target = \"h:1\"\naddress = \"/a b\"")
                .unwrap_err()
                .contains("no place")
        );
        assert!(
            parse("target = \"h:1\"\naddress = \"/a/{x\"")
                .unwrap_err()
                .contains("not closed")
        );
        assert!(
            parse("target = \"h:1\"\nargs = [{ path = \"a\", value = 1 }]")
                .unwrap_err()
                .contains("not both")
        );
        assert!(
            parse("target = \"h:1\"\nargs = [{ path = \"a\", kind = 1 }]")
                .unwrap_err()
                .contains("unknown key `kind`")
        );
        assert!(
            parse("target = \"h:1\"\nargs = [{ path = \"a\", type = \"q\" }]")
                .unwrap_err()
                .contains("`type` is one of")
        );
        assert!(
            parse("target = \"h:1\"\nargs = [[1]]")
                .unwrap_err()
                .contains("a dot path")
        );
        assert_eq!(
            Target::parse("phone").unwrap_err(),
            "`phone` is not `host:port`"
        );
        assert!(Target::parse("phone:x").unwrap_err().contains("not a port"));
        assert!(Target::parse("127.0.0.1:0").is_err());
        assert_eq!(
            Target::parse("localhost:9000").unwrap().fixed,
            Some("127.0.0.1:9000".parse().unwrap())
        );
        assert!(Target::parse("phone.local:9000").unwrap().fixed.is_none());
    }

    #[test]
    fn bundles_take_what_fits() {
        // Three messages of 8 bytes: bundles of at most 16 + 2·12 = 40 bytes hold two.
        let encoded = b"/a\0\0,\0\0\0/b\0\0,\0\0\0/c\0\0,\0\0\0".to_vec();
        let ends = [8, 16, 24];
        let mut out = Vec::new();
        let mut datagrams = Vec::new();
        bundle_up(&encoded, &ends, 40, &mut out, &mut datagrams);
        let counts: Vec<u64> = datagrams.iter().map(|d| d.signals).collect();
        assert_eq!(counts, [2, 1]);
        let first = crate::decode::parse_packet(&out[datagrams[0].range.clone()]).unwrap();
        let crate::packet::Packet::Bundle(b) = first else {
            panic!("a bundle")
        };
        assert_eq!(b.timetag, TimeTag::IMMEDIATELY);
        assert_eq!(b.elements.len(), 2);
        let second = crate::decode::parse_packet(&out[datagrams[1].range.clone()]).unwrap();
        assert!(matches!(second, crate::packet::Packet::Bundle(b) if b.elements.len() == 1));
    }
}

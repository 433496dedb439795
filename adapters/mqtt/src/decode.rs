//! What an MQTT message's bytes mean, both ways. Pure: no I/O.
//!
//! - `payload = "envelope"` (the default): a message is one JSON signal envelope (or any
//!   JSON, normalized as everywhere: an object without `type` is an `event`); an output
//!   publishes each signal's envelope.
//! - `payload = "raw"`: a source makes each message `mqtt.message {topic, payload}`,
//!   whatever its bytes (an ESP32 button's `pressed`, a sensor's `21.5`). The payload is the
//!   text when the bytes are UTF-8, else their standard base64 with `encoding: "base64"`
//!   beside it: a signal is JSON, and this keeps text readable (and matchable by `when`)
//!   while no byte is lost. An output publishes one value of each signal (`value`, default
//!   `payload.payload`): a string as its UTF-8 bytes, anything else as compact JSON; an
//!   `mqtt.message` marked `encoding: "base64"` is published as the bytes it came with, so
//!   a raw source bridged to a raw output passes messages through unchanged.
//!
//! A retained message (the broker's last value of a topic, sent on subscribing) is marked
//! `metadata.mqtt.retained = true`, and one the broker sends again after a reconnect (its
//! DUP flag: the acknowledgement may have been lost) `metadata.mqtt.redelivered = true`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use patchbay_signal::normalize::{Decoded, Normalizer};
use patchbay_signal::path::{Found, Path};
use patchbay_signal::{Signal, object};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The signal type of a message decoded raw.
pub const RAW_TYPE: &str = "mqtt.message";

/// How message bytes and signals map onto each other.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PayloadMode {
    /// A message is a JSON signal envelope.
    #[default]
    Envelope,
    /// A message is bytes: `mqtt.message {topic, payload}` in, one value out.
    Raw,
}

/// One message as the broker delivered it.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// The topic it was published on.
    pub topic: &'a str,
    /// Its bytes.
    pub payload: &'a [u8],
    /// The broker's retained value of the topic (sent on subscribing).
    pub retained: bool,
    /// Sent again after a reconnect (MQTT's DUP flag).
    pub redelivered: bool,
}

/// Decodes the messages of one source into signals.
#[derive(Debug, Clone)]
pub struct MessageDecoder {
    normalizer: Normalizer,
    mode: PayloadMode,
}

impl MessageDecoder {
    /// A decoder whose signals, when they name no `source`, get `source`
    /// (`mqtt:NAME`).
    pub fn new(source: &str, mode: PayloadMode) -> Self {
        MessageDecoder {
            normalizer: Normalizer::new(source),
            mode,
        }
    }

    /// Lets the signals decoded until [`end_batch`](MessageDecoder::end_batch) share one
    /// reading of the clock (messages that arrived in one read).
    pub fn start_batch(&mut self) {
        self.normalizer.start_batch();
    }

    /// Ends a batch (see [`start_batch`](MessageDecoder::start_batch)).
    pub fn end_batch(&mut self) {
        self.normalizer.end_batch();
    }

    /// The signal of one message: `None` for an empty message in envelope mode (MQTT's
    /// way of clearing a retained value: nothing to decode), [`Decoded::BadInput`] (an
    /// `error` signal naming the topic) for bytes that are not an envelope.
    pub fn decode(&mut self, message: &Message<'_>) -> Option<Decoded> {
        let decoded = match self.mode {
            PayloadMode::Raw => Decoded::Signal(self.raw(message)),
            PayloadMode::Envelope => match std::str::from_utf8(message.payload) {
                Ok(text) => self.normalizer.decode_text(text)?,
                Err(e) => Decoded::BadInput(self.normalizer.bad_input(
                    &String::from_utf8_lossy(message.payload),
                    &format!("not UTF-8 (byte {})", e.valid_up_to()),
                )),
            },
        };
        Some(match decoded {
            Decoded::Signal(signal) => Decoded::Signal(marked(signal, message)),
            Decoded::BadInput(mut signal) => {
                // Which topic sent it is what a user needs to find the device at fault.
                if let Some(Value::String(text)) = signal.payload.get_mut("message") {
                    *text = format!("message on `{}`: {text}", message.topic);
                }
                let signal = signal.with_meta("topic", message.topic);
                Decoded::BadInput(marked(signal, message))
            }
        })
    }

    fn raw(&mut self, message: &Message<'_>) -> Signal {
        let payload = match std::str::from_utf8(message.payload) {
            Ok(text) => object! {"topic" => message.topic, "payload" => text},
            Err(_) => object! {
                "topic" => message.topic,
                "payload" => STANDARD.encode(message.payload),
                "encoding" => "base64",
            },
        };
        Signal::new(RAW_TYPE, self.normalizer.source(), payload)
    }
}

/// Marks a retained or redelivered message's signal (nothing otherwise: an ordinary
/// message's signal is exactly what was sent).
fn marked(signal: Signal, message: &Message<'_>) -> Signal {
    if !message.retained && !message.redelivered {
        return signal;
    }
    let mut mqtt = serde_json::Map::new();
    if message.retained {
        mqtt.insert("retained".into(), json!(true));
    }
    if message.redelivered {
        mqtt.insert("redelivered".into(), json!(true));
    }
    signal.with_meta("mqtt", Value::Object(mqtt))
}

/// What an output publishes of a signal (see the module's documentation).
#[derive(Debug, Clone)]
pub struct MessageEncoder {
    mode: PayloadMode,
    /// Raw mode: the value published; `None`: `payload.payload`, base64 understood.
    value: Option<Path>,
}

/// Why a signal cannot be published raw.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The signal has nothing at the configured path.
    #[error("{kind} has no value at `{path}` to publish")]
    NoValue {
        /// The signal's type.
        kind: String,
        /// The path.
        path: String,
    },
    /// An `mqtt.message` marked base64 whose payload is not base64.
    #[error("{kind}: `payload.payload` is marked base64 but is not")]
    NotBase64 {
        /// The signal's type.
        kind: String,
    },
}

/// The default value path of a raw output.
pub const DEFAULT_VALUE: &str = "payload.payload";

impl MessageEncoder {
    /// An encoder for `mode`; `value` is the path published in raw mode (default
    /// `payload.payload`).
    pub fn new(mode: PayloadMode, value: Option<Path>) -> Self {
        MessageEncoder { mode, value }
    }

    /// The bytes to publish for `signal`.
    pub fn encode(&self, signal: &Signal) -> Result<Vec<u8>, EncodeError> {
        match self.mode {
            PayloadMode::Envelope => Ok(signal.to_json().into_bytes()),
            PayloadMode::Raw => {
                let found = match &self.value {
                    Some(path) => path.get(signal),
                    None => signal.payload.get("payload").map(Found::Json),
                };
                let no_value = || EncodeError::NoValue {
                    kind: signal.kind.to_string(),
                    path: self
                        .value
                        .as_ref()
                        .map_or(DEFAULT_VALUE, Path::as_str)
                        .to_owned(),
                };
                let text = match found {
                    None => return Err(no_value()),
                    Some(found) if found.is_null() => return Err(no_value()),
                    Some(Found::Str(s)) => s.to_owned(),
                    Some(Found::Json(Value::String(s))) => s.clone(),
                    Some(other) => return Ok(other.to_value().to_string().into_bytes()),
                };
                let base64 = self.value.is_none()
                    && signal.payload.get("encoding").and_then(Value::as_str) == Some("base64");
                if base64 {
                    return STANDARD
                        .decode(text.as_bytes())
                        .map_err(|_| EncodeError::NotBase64 {
                            kind: signal.kind.to_string(),
                        });
                }
                Ok(text.into_bytes())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_testkit::validity::assert_valid;

    fn message<'a>(topic: &'a str, payload: &'a [u8]) -> Message<'a> {
        Message {
            topic,
            payload,
            retained: false,
            redelivered: false,
        }
    }

    fn decode(mode: PayloadMode, m: &Message<'_>) -> Option<Decoded> {
        let out = MessageDecoder::new("mqtt:test", mode).decode(m);
        if let Some(d) = &out {
            assert_valid(&d.clone().into_signal());
        }
        out
    }

    #[test]
    fn an_envelope_is_the_signal_it_carries() {
        let text = br#"{"type":"agent_state_change","id":"x1","timestamp":5,"source":"a:b","payload":{"agentId":"a","from":"idle","to":"waiting"}}"#;
        let Some(Decoded::Signal(s)) = decode(PayloadMode::Envelope, &message("t", text)) else {
            panic!("a signal");
        };
        assert_eq!(s.kind, "agent_state_change");
        assert_eq!(s.id, "x1");
        assert_eq!(s.timestamp, 5);
        assert_eq!(s.source, "a:b");
        assert_eq!(s.payload["to"], "waiting");
        assert!(s.metadata.is_none(), "nothing added to an ordinary message");
    }

    #[test]
    fn other_json_is_normalized_and_a_source_is_given() {
        let Some(Decoded::Signal(s)) = decode(PayloadMode::Envelope, &message("t", b"{\"x\":1}"))
        else {
            panic!("a signal");
        };
        assert_eq!(s.kind, "event");
        assert_eq!(s.source, "mqtt:test");
        assert_eq!(s.payload["x"], 1);
        let Some(Decoded::Signal(s)) = decode(PayloadMode::Envelope, &message("t", b"21.5")) else {
            panic!("a signal");
        };
        assert_eq!(s.payload["value"], 21.5);
    }

    #[test]
    fn malformed_payloads_are_bad_input_naming_the_topic() {
        for bad in [
            &b"not json"[..],
            b"{\"type\":",
            b"{\"type\": 5}",
            b"\xff\xfe{}",
        ] {
            let Some(Decoded::BadInput(s)) =
                decode(PayloadMode::Envelope, &message("home/esp32/1", bad))
            else {
                panic!("bad input for {bad:?}");
            };
            assert_eq!(s.kind, "error");
            let text = s.payload["message"].as_str().unwrap().to_owned();
            assert!(text.starts_with("message on `home/esp32/1`: "), "{text}");
            assert_eq!(s.meta("topic"), Some(&json!("home/esp32/1")));
        }
        let Some(Decoded::BadInput(s)) = decode(PayloadMode::Envelope, &message("t", b"ab\xffcd"))
        else {
            panic!("bad input");
        };
        assert!(
            s.payload["message"]
                .as_str()
                .unwrap()
                .contains("not UTF-8 (byte 2)")
        );
    }

    #[test]
    fn an_empty_message_clears_a_retained_value_and_is_no_signal() {
        assert!(decode(PayloadMode::Envelope, &message("t", b"")).is_none());
        assert!(decode(PayloadMode::Envelope, &message("t", b"  \n")).is_none());
        // Raw mode keeps it: the clearing itself may matter to a flow.
        let Some(Decoded::Signal(s)) = decode(PayloadMode::Raw, &message("t", b"")) else {
            panic!("a signal");
        };
        assert_eq!(s.payload["payload"], "");
    }

    #[test]
    fn raw_text_and_raw_bytes() {
        let Some(Decoded::Signal(s)) = decode(PayloadMode::Raw, &message("btn/1", b"pressed"))
        else {
            panic!("a signal");
        };
        assert_eq!(s.kind, RAW_TYPE);
        assert_eq!(s.source, "mqtt:test");
        assert_eq!(s.payload["topic"], "btn/1");
        assert_eq!(s.payload["payload"], "pressed");
        assert!(s.payload.get("encoding").is_none());
        // JSON stays text in raw mode: raw is raw.
        let Some(Decoded::Signal(s)) = decode(PayloadMode::Raw, &message("t", b"{\"a\":1}")) else {
            panic!("a signal");
        };
        assert_eq!(s.payload["payload"], "{\"a\":1}");
        let bytes = [0u8, 159, 146, 150, 255];
        let Some(Decoded::Signal(s)) = decode(PayloadMode::Raw, &message("bin", &bytes)) else {
            panic!("a signal");
        };
        assert_eq!(s.payload["encoding"], "base64");
        assert_eq!(s.payload["payload"], STANDARD.encode(bytes));
    }

    #[test]
    fn retained_and_redelivered_are_marked() {
        let m = Message {
            topic: "t",
            payload: b"on",
            retained: true,
            redelivered: true,
        };
        for mode in [PayloadMode::Raw, PayloadMode::Envelope] {
            let s = decode(mode, &m).unwrap().into_signal();
            assert_eq!(
                s.meta("mqtt"),
                Some(&json!({"retained": true, "redelivered": true})),
                "{mode:?}"
            );
        }
        let only = Message {
            retained: false,
            ..m
        };
        let s = decode(PayloadMode::Raw, &only).unwrap().into_signal();
        assert_eq!(s.meta("mqtt"), Some(&json!({"redelivered": true})));
    }

    #[test]
    fn a_raw_round_trip_keeps_every_byte() {
        let encoder = MessageEncoder::new(PayloadMode::Raw, None);
        let mut decoder = MessageDecoder::new("mqtt:test", PayloadMode::Raw);
        let cases: [&[u8]; 5] = [
            b"pressed",
            b"",
            b"\xff\x00\x01",
            "ünï".as_bytes(),
            b"{\"a\":1}",
        ];
        for bytes in cases {
            let s = decoder.decode(&message("t", bytes)).unwrap().into_signal();
            assert_eq!(encoder.encode(&s).unwrap(), bytes, "{bytes:?}");
        }
    }

    #[test]
    fn arbitrary_bytes_make_valid_signals_and_raw_ones_go_back_unchanged() {
        let mut rng = patchbay_testkit::prng::Rng(0x6d71_7474);
        let encoder = MessageEncoder::new(PayloadMode::Raw, None);
        for round in 0..3000 {
            let len = rng.below(64);
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            if round % 2 == 0 {
                // Mostly text, so that the JSON paths are reached too.
                bytes
                    .iter_mut()
                    .for_each(|b| *b = b"{}[]\":,0a \\"[usize::from(*b) % 11]);
            }
            let m = Message {
                topic: "t/x",
                payload: &bytes,
                retained: round % 3 == 0,
                redelivered: round % 5 == 0,
            };
            for mode in [PayloadMode::Envelope, PayloadMode::Raw] {
                let Some(d) = decode(mode, &m) else { continue };
                if mode == PayloadMode::Raw {
                    assert_eq!(encoder.encode(&d.into_signal()).unwrap(), bytes);
                }
            }
        }
    }

    #[test]
    fn envelope_output_is_the_signal_json() {
        let s = Signal::new("tick", "x:y", object! {"i" => 1});
        let bytes = MessageEncoder::new(PayloadMode::Envelope, None)
            .encode(&s)
            .unwrap();
        assert_eq!(bytes, s.to_json().into_bytes());
        let back = decode(PayloadMode::Envelope, &message("t", &bytes))
            .unwrap()
            .into_signal();
        assert_eq!(back.id, s.id);
        assert_eq!(back.payload["i"], 1);
    }

    #[test]
    fn raw_output_publishes_one_value() {
        let s = Signal::new(
            "agent_state_change",
            "a:b",
            object! {"agentId" => "a", "to" => "waiting", "n" => 3, "o" => json!({"k": true})},
        );
        let at = |path: &str| {
            MessageEncoder::new(PayloadMode::Raw, Some(Path::parse(path).unwrap())).encode(&s)
        };
        assert_eq!(at("payload.to").unwrap(), b"waiting");
        assert_eq!(at("to").unwrap(), b"waiting");
        assert_eq!(at("n").unwrap(), b"3");
        assert_eq!(at("o").unwrap(), b"{\"k\":true}");
        assert_eq!(at("type").unwrap(), b"agent_state_change");
        assert_eq!(
            at("missing").unwrap_err().to_string(),
            "agent_state_change has no value at `missing` to publish"
        );
        // An explicit path never base64-decodes.
        let marked = Signal::new(
            RAW_TYPE,
            "a:b",
            object! {"topic" => "t", "payload" => "AAE=", "encoding" => "base64"},
        );
        let explicit = MessageEncoder::new(
            PayloadMode::Raw,
            Some(Path::parse("payload.payload").unwrap()),
        );
        assert_eq!(explicit.encode(&marked).unwrap(), b"AAE=");
        let default = MessageEncoder::new(PayloadMode::Raw, None);
        assert_eq!(default.encode(&marked).unwrap(), [0, 1]);
        assert_eq!(
            default.encode(&s).unwrap_err().to_string(),
            "agent_state_change has no value at `payload.payload` to publish"
        );
        let broken = Signal::new(
            RAW_TYPE,
            "a:b",
            object! {"payload" => "%%%", "encoding" => "base64"},
        );
        assert!(matches!(
            default.encode(&broken),
            Err(EncodeError::NotBase64 { .. })
        ));
    }
}

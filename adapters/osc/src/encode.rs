//! The OSC encoder: the [`Packet`] model to bytes, and a signal's JSON values to arguments.

use base64::Engine as _;
use serde_json::Value;

use crate::packet::{Arg, Message, Packet, TimeTag};

/// Why a message cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The address does not start with `/`.
    #[error("the address `{0}` does not start with `/`")]
    BadAddress(String),
    /// A string holds a NUL byte, which would end it early on the wire.
    #[error("{0} holds a NUL character, which OSC strings cannot carry")]
    Nul(&'static str),
    /// A value does not fit the argument type asked for.
    #[error("{value} is not {expected}")]
    Mismatch {
        /// The value, as JSON (shortened).
        value: String,
        /// What the type needs.
        expected: &'static str,
    },
    /// Arrays nested too deep to send.
    #[error("arrays nested more than {0} deep")]
    TooDeep(usize),
    /// A blob too large for its size word.
    #[error("a blob of {0} bytes is too large")]
    BlobTooLarge(usize),
}

/// Appends `text` as an OSC string: its bytes, a NUL, and NULs up to a word.
fn push_string(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(text.as_bytes());
    out.push(0);
    pad(out);
}

/// NULs up to the next word.
fn pad(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// Appends one message. Offsets are relative to `out`'s start, so `out` must start on a
/// word (empty, or a bundle being built).
pub fn encode_message(message: &Message, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    if !message.address.starts_with('/') {
        return Err(EncodeError::BadAddress(message.address.clone()));
    }
    if message.address.contains('\0') {
        return Err(EncodeError::Nul("the address"));
    }
    let start = out.len();
    push_string(out, &message.address);
    out.push(b',');
    for arg in &message.args {
        push_tags(arg, out);
    }
    out.push(0);
    pad(out);
    for arg in &message.args {
        if let Err(e) = push_arg(arg, out) {
            out.truncate(start);
            return Err(e);
        }
    }
    Ok(())
}

fn push_tags(arg: &Arg, out: &mut Vec<u8>) {
    let mut tags = String::new();
    arg.push_tags(&mut tags);
    out.extend_from_slice(tags.as_bytes());
}

fn push_arg(arg: &Arg, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    match arg {
        Arg::Int(i) => out.extend_from_slice(&i.to_be_bytes()),
        Arg::Long(i) => out.extend_from_slice(&i.to_be_bytes()),
        Arg::Float(f) => out.extend_from_slice(&f.to_be_bytes()),
        Arg::Double(f) => out.extend_from_slice(&f.to_be_bytes()),
        Arg::String(s) | Arg::Symbol(s) => {
            if s.contains('\0') {
                return Err(EncodeError::Nul("a string argument"));
            }
            push_string(out, s);
        }
        Arg::Blob(bytes) => {
            let size =
                i32::try_from(bytes.len()).map_err(|_| EncodeError::BlobTooLarge(bytes.len()))?;
            out.extend_from_slice(&size.to_be_bytes());
            out.extend_from_slice(bytes);
            pad(out);
        }
        Arg::Time(t) => out.extend_from_slice(&t.to_bits().to_be_bytes()),
        Arg::Char(c) => out.extend_from_slice(&u32::from(*c).to_be_bytes()),
        Arg::Color(word) | Arg::Midi(word) => out.extend_from_slice(word),
        Arg::True | Arg::False | Arg::Nil | Arg::Impulse => {}
        Arg::Array(items) => {
            for item in items {
                push_arg(item, out)?;
            }
        }
    }
    Ok(())
}

/// Appends a bundle of already encoded elements (messages or bundles, each a whole number
/// of words).
pub fn encode_bundle<'e>(
    timetag: TimeTag,
    elements: impl IntoIterator<Item = &'e [u8]>,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(b"#bundle\0");
    out.extend_from_slice(&timetag.to_bits().to_be_bytes());
    for element in elements {
        // An element is at most a datagram: its length fits.
        out.extend_from_slice(&(element.len() as u32).to_be_bytes());
        out.extend_from_slice(element);
    }
}

/// The bytes a bundle adds around its elements: `#bundle`, the time tag.
pub const BUNDLE_HEADER: usize = 16;

/// Appends a packet.
pub fn encode_packet(packet: &Packet, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    match packet {
        Packet::Message(m) => encode_message(m, out),
        Packet::Bundle(b) => {
            let mut elements = Vec::with_capacity(b.elements.len());
            for element in &b.elements {
                let mut bytes = Vec::new();
                encode_packet(element, &mut bytes)?;
                elements.push(bytes);
            }
            encode_bundle(b.timetag, elements.iter().map(Vec::as_slice), out);
            Ok(())
        }
    }
}

/// The argument type an output's `args` entry asks for (`type = "f"`); without one, the
/// JSON value decides (see [`args_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
pub enum ArgType {
    /// `i`: a 32-bit integer (numbers are rounded; `true`/`false` are 1/0).
    #[serde(rename = "i")]
    Int,
    /// `h`: a 64-bit integer.
    #[serde(rename = "h")]
    Long,
    /// `f`: a 32-bit float (`true`/`false` are 1/0).
    #[serde(rename = "f")]
    Float,
    /// `d`: a 64-bit float.
    #[serde(rename = "d")]
    Double,
    /// `s`: a string (any other value as its JSON text).
    #[serde(rename = "s")]
    String,
    /// `b`: a blob, from base64 text.
    #[serde(rename = "b")]
    Blob,
    /// `T` or `F`: `false`, `null`, `0` and `""` are `F`, anything else `T`.
    #[serde(rename = "bool")]
    Bool,
}

/// How deep arrays may nest in what an output sends.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// Appends the arguments one `args` entry makes of `value`: an array is spread into one
/// argument per element (so that an `osc.message`'s `args` are sent as they came), other
/// values are one argument. With `forced`, each is converted to that type.
pub fn args_of(
    value: &Value,
    forced: Option<ArgType>,
    out: &mut Vec<Arg>,
) -> Result<(), EncodeError> {
    match value {
        Value::Array(items) => {
            for item in items {
                out.push(arg_of(item, forced, 1)?);
            }
            Ok(())
        }
        other => {
            out.push(arg_of(other, forced, 0)?);
            Ok(())
        }
    }
}

/// One JSON value as one argument: with `forced`, converted to it; otherwise an integer is
/// `i` (or `h` beyond 32 bits), another number `f`, a string `s`, `true`/`false` `T`/`F`,
/// `null` `N`, an array an OSC array, an object its JSON text as `s`.
pub fn arg_of(value: &Value, forced: Option<ArgType>, depth: usize) -> Result<Arg, EncodeError> {
    let Some(kind) = forced else {
        return Ok(match value {
            Value::Null => Arg::Nil,
            Value::Bool(true) => Arg::True,
            Value::Bool(false) => Arg::False,
            Value::Number(n) => match n.as_i64() {
                Some(i) => i32::try_from(i).map_or(Arg::Long(i), Arg::Int),
                None => match n.as_u64() {
                    // Past i64: only a double holds it (approximately).
                    Some(u) => Arg::Double(u as f64),
                    None => Arg::Float(n.as_f64().unwrap_or(0.0) as f32),
                },
            },
            Value::String(s) => Arg::String(s.clone()),
            Value::Array(items) => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(EncodeError::TooDeep(MAX_ARRAY_DEPTH));
                }
                let mut args = Vec::with_capacity(items.len());
                for item in items {
                    args.push(arg_of(item, None, depth + 1)?);
                }
                Arg::Array(args)
            }
            Value::Object(_) => Arg::String(value.to_string()),
        });
    };
    let mismatch = |expected| EncodeError::Mismatch {
        value: patchbay_signal::truncate(&value.to_string(), 64),
        expected,
    };
    let number = || match value {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    };
    Ok(match kind {
        ArgType::Int => {
            let x = number().ok_or_else(|| mismatch("a number"))?.round();
            if !(f64::from(i32::MIN)..=f64::from(i32::MAX)).contains(&x) {
                return Err(mismatch("a 32-bit integer"));
            }
            Arg::Int(x as i32)
        }
        ArgType::Long => match value {
            Value::Number(n) if n.as_i64().is_some() => Arg::Long(n.as_i64().unwrap_or(0)),
            _ => {
                let x = number().ok_or_else(|| mismatch("a number"))?.round();
                // 2⁶³ is the first f64 past i64::MAX.
                if !(-(2f64.powi(63))..2f64.powi(63)).contains(&x) {
                    return Err(mismatch("a 64-bit integer"));
                }
                Arg::Long(x as i64)
            }
        },
        ArgType::Float => Arg::Float(number().ok_or_else(|| mismatch("a number"))? as f32),
        ArgType::Double => Arg::Double(number().ok_or_else(|| mismatch("a number"))?),
        ArgType::String => match value {
            Value::String(s) => Arg::String(s.clone()),
            other => Arg::String(other.to_string()),
        },
        ArgType::Blob => match value {
            Value::String(s) => Arg::Blob(
                base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map_err(|_| mismatch("base64 text"))?,
            ),
            _ => return Err(mismatch("base64 text")),
        },
        ArgType::Bool => {
            let truth = match value {
                Value::Null | Value::Bool(false) => false,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truth { Arg::True } else { Arg::False }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::parse_packet;
    use serde_json::json;

    fn every_arg() -> Vec<Arg> {
        vec![
            Arg::Int(-7),
            Arg::Long(-(1 << 40)),
            Arg::Float(1.5),
            Arg::Double(-0.125),
            Arg::String("abc".into()),
            Arg::String(String::new()),
            Arg::Symbol("four".into()),
            Arg::Blob(vec![1, 2, 3, 4, 5]),
            Arg::Blob(vec![]),
            Arg::Time(TimeTag::from_unix_ms(1_700_000_000_000)),
            Arg::Char('é'),
            Arg::Color([1, 2, 3, 4]),
            Arg::Midi([0, 0x90, 64, 127]),
            Arg::True,
            Arg::False,
            Arg::Nil,
            Arg::Impulse,
            Arg::Array(vec![Arg::Int(1), Arg::Array(vec![Arg::String("x".into())])]),
        ]
    }

    #[test]
    fn what_is_encoded_decodes_to_the_same() {
        let message = Message {
            address: "/all/types".into(),
            args: every_arg(),
        };
        let mut bytes = Vec::new();
        encode_message(&message, &mut bytes).unwrap();
        assert_eq!(bytes.len() % 4, 0);
        assert_eq!(parse_packet(&bytes), Ok(Packet::Message(message.clone())));

        let nested = Packet::Bundle(crate::packet::Bundle {
            timetag: TimeTag::IMMEDIATELY,
            elements: vec![
                Packet::Message(message.clone()),
                Packet::Bundle(crate::packet::Bundle {
                    timetag: TimeTag::from_unix_ms(5),
                    elements: vec![Packet::Message(Message {
                        address: "/b".into(),
                        args: vec![],
                    })],
                }),
            ],
        });
        let mut bytes = Vec::new();
        encode_packet(&nested, &mut bytes).unwrap();
        assert_eq!(parse_packet(&bytes), Ok(nested));
    }

    #[test]
    fn the_bytes_are_osc_1_0() {
        let mut bytes = Vec::new();
        let message = Message {
            address: "/oscillator/4/frequency".into(),
            args: vec![Arg::Float(440.0)],
        };
        encode_message(&message, &mut bytes).unwrap();
        // The example of the OSC 1.0 specification.
        assert_eq!(
            bytes,
            b"/oscillator/4/frequency\0,f\0\0\x43\xdc\x00\x00".to_vec()
        );
    }

    #[test]
    fn bad_messages_are_refused() {
        let mut out = Vec::new();
        let no_slash = Message {
            address: "agent".into(),
            args: vec![],
        };
        assert_eq!(
            encode_message(&no_slash, &mut out),
            Err(EncodeError::BadAddress("agent".into()))
        );
        let nul = Message {
            address: "/a".into(),
            args: vec![Arg::String("a\0b".into())],
        };
        assert_eq!(
            encode_message(&nul, &mut out),
            Err(EncodeError::Nul("a string argument"))
        );
        assert!(out.is_empty(), "nothing half-written is left");
    }

    #[test]
    fn json_values_become_arguments() {
        let mut args = Vec::new();
        let value = json!([1, 3_000_000_000i64, 0.5, "s", true, false, null, [1, [2]], {"a": 1}]);
        args_of(&value, None, &mut args).unwrap();
        assert_eq!(
            args,
            vec![
                Arg::Int(1),
                Arg::Long(3_000_000_000),
                Arg::Float(0.5),
                Arg::String("s".into()),
                Arg::True,
                Arg::False,
                Arg::Nil,
                Arg::Array(vec![Arg::Int(1), Arg::Array(vec![Arg::Int(2)])]),
                Arg::String("{\"a\":1}".into()),
            ]
        );
        let one = |v: Value, t: ArgType| arg_of(&v, Some(t), 0);
        assert_eq!(one(json!(1.6), ArgType::Int), Ok(Arg::Int(2)));
        assert_eq!(one(json!(true), ArgType::Int), Ok(Arg::Int(1)));
        assert_eq!(one(json!(1), ArgType::Float), Ok(Arg::Float(1.0)));
        assert_eq!(one(json!(1), ArgType::Double), Ok(Arg::Double(1.0)));
        assert_eq!(one(json!(9), ArgType::Long), Ok(Arg::Long(9)));
        assert_eq!(one(json!(3), ArgType::String), Ok(Arg::String("3".into())));
        assert_eq!(one(json!("AQI="), ArgType::Blob), Ok(Arg::Blob(vec![1, 2])));
        assert_eq!(one(json!(0), ArgType::Bool), Ok(Arg::False));
        assert_eq!(one(json!("on"), ArgType::Bool), Ok(Arg::True));
        assert_eq!(
            one(json!("x"), ArgType::Int).unwrap_err().to_string(),
            "\"x\" is not a number"
        );
        assert_eq!(
            one(json!(1e10), ArgType::Int).unwrap_err().to_string(),
            "10000000000.0 is not a 32-bit integer"
        );
        assert_eq!(
            one(json!("no base64!"), ArgType::Blob)
                .unwrap_err()
                .to_string(),
            "\"no base64!\" is not base64 text"
        );
        let mut deep = json!(1);
        for _ in 0..20 {
            deep = json!([deep]);
        }
        assert_eq!(
            args_of(&deep, None, &mut Vec::new()),
            Err(EncodeError::TooDeep(MAX_ARRAY_DEPTH))
        );
    }
}

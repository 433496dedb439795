//! The OSC 1.0 data model: packets, messages, arguments and time tags, and how an argument
//! reads as JSON in a signal.

use base64::Engine as _;
use serde_json::{Number, Value};

use patchbay_signal::{Object, object};

/// One OSC packet: what one UDP datagram holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Packet {
    /// A message: an address and its arguments.
    Message(Message),
    /// A bundle: a time tag and elements (messages or bundles), in order.
    Bundle(Bundle),
}

/// An OSC message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The address (`/agent/pause`); always starts with `/`.
    pub address: String,
    /// The arguments, in order.
    pub args: Vec<Arg>,
}

/// An OSC bundle.
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    /// When its messages are meant to take effect.
    pub timetag: TimeTag,
    /// Its elements, in order.
    pub elements: Vec<Packet>,
}

/// An OSC time tag: NTP time, seconds since 1900-01-01 and a binary fraction of a second.
/// The value 1 (`0` seconds, fraction `1`) means "immediately".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeTag {
    /// Seconds since 1900-01-01 00:00 UTC.
    pub seconds: u32,
    /// Fraction of a second, in units of 2⁻³² s.
    pub fraction: u32,
}

/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
const NTP_TO_UNIX: i64 = 2_208_988_800;

impl TimeTag {
    /// "Immediately": the time tag of a bundle that is not scheduled.
    pub const IMMEDIATELY: TimeTag = TimeTag {
        seconds: 0,
        fraction: 1,
    };

    /// Whether this is the "immediately" time tag.
    pub fn is_immediate(self) -> bool {
        self == TimeTag::IMMEDIATELY
    }

    /// The time as Unix epoch milliseconds (rounded down); `None` for "immediately".
    pub fn unix_ms(self) -> Option<i64> {
        if self.is_immediate() {
            return None;
        }
        let whole = (i64::from(self.seconds) - NTP_TO_UNIX) * 1000;
        let part = (i64::from(self.fraction) * 1000) >> 32;
        Some(whole + part)
    }

    /// The time tag of Unix epoch milliseconds `ms` (NTP era 0: 1900 to 2036).
    pub fn from_unix_ms(ms: i64) -> TimeTag {
        let seconds = ms.div_euclid(1000) + NTP_TO_UNIX;
        let millis = ms.rem_euclid(1000);
        TimeTag {
            seconds: u32::try_from(seconds.clamp(0, i64::from(u32::MAX))).unwrap_or(0),
            // ms · 2³² / 1000, rounded up so that `unix_ms` reads the same ms back.
            fraction: u32::try_from(((millis << 32) + 999) / 1000).unwrap_or(u32::MAX),
        }
    }

    /// The time tag as 64 bits (seconds in the high half).
    pub fn to_bits(self) -> u64 {
        (u64::from(self.seconds) << 32) | u64::from(self.fraction)
    }

    /// The time tag of 64 bits.
    pub fn from_bits(bits: u64) -> TimeTag {
        TimeTag {
            seconds: (bits >> 32) as u32,
            fraction: bits as u32,
        }
    }

    /// As it reads in a signal: `{"seconds", "fraction"}` (exact), plus `"unixMs"` (the
    /// time as epoch milliseconds) or `"immediate": true`.
    pub fn to_json(self) -> Value {
        let mut o = object! {"seconds" => self.seconds, "fraction" => self.fraction};
        match self.unix_ms() {
            Some(ms) => o.insert("unixMs".into(), ms.into()),
            None => o.insert("immediate".into(), true.into()),
        };
        Value::Object(o)
    }
}

/// One argument of a message, by its type tag.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// `i`: 32-bit integer.
    Int(i32),
    /// `h`: 64-bit integer.
    Long(i64),
    /// `f`: 32-bit float.
    Float(f32),
    /// `d`: 64-bit float.
    Double(f64),
    /// `s`: string.
    String(String),
    /// `S`: symbol (a string, to the receiver a name).
    Symbol(String),
    /// `b`: blob, bytes.
    Blob(Vec<u8>),
    /// `t`: a time tag.
    Time(TimeTag),
    /// `c`: one character (32 bits).
    Char(char),
    /// `r`: an RGBA color, one byte each.
    Color([u8; 4]),
    /// `m`: a MIDI message: port, status, data 1, data 2.
    Midi([u8; 4]),
    /// `T`.
    True,
    /// `F`.
    False,
    /// `N`: nil.
    Nil,
    /// `I`: impulse (OSC 1.1; "infinitum" in 1.0): a bang, no value.
    Impulse,
    /// `[` … `]`: an array of arguments.
    Array(Vec<Arg>),
}

impl Arg {
    /// The type tag (`[` for an array, whose tags continue with its elements and `]`).
    pub fn tag(&self) -> char {
        match self {
            Arg::Int(_) => 'i',
            Arg::Long(_) => 'h',
            Arg::Float(_) => 'f',
            Arg::Double(_) => 'd',
            Arg::String(_) => 's',
            Arg::Symbol(_) => 'S',
            Arg::Blob(_) => 'b',
            Arg::Time(_) => 't',
            Arg::Char(_) => 'c',
            Arg::Color(_) => 'r',
            Arg::Midi(_) => 'm',
            Arg::True => 'T',
            Arg::False => 'F',
            Arg::Nil => 'N',
            Arg::Impulse => 'I',
            Arg::Array(_) => '[',
        }
    }

    /// Appends the type tags of this argument (an array's with its brackets).
    pub fn push_tags(&self, tags: &mut String) {
        tags.push(self.tag());
        if let Arg::Array(items) = self {
            for item in items {
                item.push_tags(tags);
            }
            tags.push(']');
        }
    }

    /// The argument as JSON (see the crate docs for the table).
    pub fn to_json(&self) -> Value {
        match self {
            Arg::Int(i) => (*i).into(),
            Arg::Long(i) => (*i).into(),
            Arg::Float(f) => float32(*f),
            Arg::Double(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Arg::String(s) | Arg::Symbol(s) => Value::String(s.clone()),
            Arg::Blob(bytes) => {
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
            Arg::Time(t) => t.to_json(),
            Arg::Char(c) => Value::String(c.to_string()),
            Arg::Color([r, g, b, a]) => {
                Value::Object(object! {"r" => *r, "g" => *g, "b" => *b, "a" => *a})
            }
            Arg::Midi([port, status, data1, data2]) => Value::Object(
                object! {"port" => *port, "status" => *status, "data1" => *data1, "data2" => *data2},
            ),
            Arg::True => Value::Bool(true),
            Arg::False => Value::Bool(false),
            Arg::Nil | Arg::Impulse => Value::Null,
            Arg::Array(items) => Value::Array(items.iter().map(Arg::to_json).collect()),
        }
    }
}

/// A 32-bit float as the JSON number with the fewest digits that reads back as the same
/// float (`0.3`, not `0.30000001192092896`); not finite: `null`.
fn float32(f: f32) -> Value {
    if !f.is_finite() {
        return Value::Null;
    }
    // Rust prints the shortest text that round-trips the f32; read as f64 it is the number
    // a person would write.
    let shortest: f64 = f.to_string().parse().unwrap_or(f64::from(f));
    Number::from_f64(shortest).map_or(Value::Null, Value::Number)
}

impl Message {
    /// The type tags of the arguments, without the leading comma (`ifs[ii]`).
    pub fn tags(&self) -> String {
        let mut tags = String::with_capacity(self.args.len());
        for arg in &self.args {
            arg.push_tags(&mut tags);
        }
        tags
    }

    /// The payload of its `osc.message` signal: `{address, args, tags}`, plus `timetag`
    /// when it came in a bundle.
    pub fn payload(&self, timetag: Option<TimeTag>) -> Object {
        let mut payload = Object::new();
        payload.insert("address".into(), Value::String(self.address.clone()));
        payload.insert(
            "args".into(),
            Value::Array(self.args.iter().map(Arg::to_json).collect()),
        );
        payload.insert("tags".into(), Value::String(self.tags()));
        if let Some(t) = timetag {
            payload.insert("timetag".into(), t.to_json());
        }
        payload
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn time_tags_read_as_unix_time() {
        assert_eq!(TimeTag::IMMEDIATELY.unix_ms(), None);
        assert!(TimeTag::from_bits(1).is_immediate());
        let t = TimeTag {
            seconds: 2_208_988_800 + 1_700_000_000,
            fraction: 1 << 31,
        };
        assert_eq!(t.unix_ms(), Some(1_700_000_000_500));
        for ms in [0, 1, 999, 1_700_000_000_123, 1_700_000_000_999] {
            assert_eq!(TimeTag::from_unix_ms(ms).unix_ms(), Some(ms), "{ms}");
        }
        assert_eq!(TimeTag::from_bits(t.to_bits()), t);
        assert_eq!(
            t.to_json(),
            json!({"seconds": 3_908_988_800u32, "fraction": 2_147_483_648u32, "unixMs": 1_700_000_000_500i64})
        );
        assert_eq!(
            TimeTag::IMMEDIATELY.to_json(),
            json!({"seconds": 0, "fraction": 1, "immediate": true})
        );
    }

    #[test]
    fn every_argument_as_json() {
        let message = Message {
            address: "/a".into(),
            args: vec![
                Arg::Int(-3),
                Arg::Long(1 << 40),
                Arg::Float(0.3),
                Arg::Float(f32::NAN),
                Arg::Double(0.25),
                Arg::String("héllo".into()),
                Arg::Symbol("sym".into()),
                Arg::Blob(vec![0, 1, 2, 255]),
                Arg::Time(TimeTag::IMMEDIATELY),
                Arg::Char('x'),
                Arg::Color([255, 0, 16, 128]),
                Arg::Midi([0, 0x90, 60, 100]),
                Arg::True,
                Arg::False,
                Arg::Nil,
                Arg::Impulse,
                Arg::Array(vec![Arg::Int(1), Arg::Array(vec![])]),
            ],
        };
        assert_eq!(message.tags(), "ihffdsSbtcrmTFNI[i[]]");
        let payload = Value::Object(message.payload(Some(TimeTag::from_bits(1))));
        assert_eq!(
            payload,
            json!({
                "address": "/a",
                "args": [-3, 1_099_511_627_776i64, 0.3, null, 0.25, "héllo", "sym", "AAEC/w==",
                         {"seconds": 0, "fraction": 1, "immediate": true}, "x",
                         {"r": 255, "g": 0, "b": 16, "a": 128},
                         {"port": 0, "status": 144, "data1": 60, "data2": 100},
                         true, false, null, null, [1, []]],
                "tags": "ihffdsSbtcrmTFNI[i[]]",
                "timetag": {"seconds": 0, "fraction": 1, "immediate": true}
            })
        );
    }
}

//! `map`: moves, sets and scales values, changes the type, or rewrites signals with jq.

use std::fmt;
use std::sync::Arc;

use patchbay_graph::{Diagnostic, Emit, Filter, FilterSpec, Options};
use patchbay_signal::normalize::{Normalizer, RAW_KEEP};
use patchbay_signal::path::Path;
use patchbay_signal::well_known::{self, ErrorPayload, Payload, Severity};
use patchbay_signal::{Object, SharedSignal, Signal, SmallString, next_id, truncate};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, Error as _, MapAccess, Visitor};
use serde_json::{Number, Value};

use crate::ConfigError;
use crate::condition::Condition;
use crate::jq::JqExpr;
use crate::options::{DotPath, parse_path};

/// At most this many outputs of a jq `expr` are kept per input signal; an expression that
/// produces more is cut there and reported with an `error` signal.
pub const MAX_OUTPUTS: usize = 1000;

/// Options of a `map` filter. The steps run in this order, each on the result of the
/// previous one: `mappings`, `set`, `set_type`, `scale`, `expr`.
///
/// ```toml
/// when = { type = "midi.control_change", "payload.controller" = 7 }
/// mappings = [{ from = "payload.value", to = "payload.volume" }]
/// set = { "payload.unit" = "ratio" }
/// set_type = "mixer.volume"
/// scale = { path = "payload.volume", fn = "clamp", in = [0, 127], out = [0.0, 1.0] }
/// ```
///
/// - `when` (optional guard): a signal that does not match passes through unchanged.
/// - `mappings` move the value at `from` to `to`, in order; a missing `from` does nothing.
///   Envelope fields every signal has (`id`, `type`, `timestamp`, `source`) are copied.
/// - `set` writes values at paths. Keys are dot paths (quote them: `"payload.x" = 1`); a
///   table value is walked into, so `payload.x = 1` (TOML for `payload = { x = 1 }`) also
///   writes `payload.x` and keeps the rest of the payload; an empty table writes `{}`.
/// - `set_type` changes the `type`.
/// - `scale` maps a number from the range `in` to the range `out` (see [`ScaleFn`]); a
///   value that is not a number is left alone. A result without a fractional part is
///   written as an integer.
/// - `expr` (jq) replaces the signal by each of its outputs (at most [`MAX_OUTPUTS`]).
///   Each output must be an object: it is read as an envelope (like the generic JSON
///   decoder), the required fields it lacks (`id`, `type`, `timestamp`, `source`) are
///   taken from the input signal, while `correlationId` and `metadata` are only what the
///   output has. The first output keeps the input's id; later outputs that would repeat
///   an id get fresh ones. An output that is not an object, or a runtime error, becomes an
///   `error` signal (`code: "jq_output"` or `"jq_error"`, with the filter name and the
///   input's id in `metadata`) on the main output. When no signal comes out (zero outputs,
///   or only errors), the input leaves by `NAME.dropped`.
///
/// A mapped signal is a new signal with the same id. When a step cannot write its value
/// (a `to` path through a value that is not an object, a `timestamp` that is not a
/// number), the step is skipped, a moved value is put back, and the reason is recorded in
/// `metadata.mapError`. A signal of a well-known type is repaired to stay valid (fields the
/// schema does not allow move to `metadata.extra`).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MapConfig {
    /// Only signals matching this condition are mapped (an operator table, an array of
    /// them, or a jq expression as a string); the others pass unchanged.
    #[serde(default)]
    pub when: Option<Condition>,
    /// Values to move, in order.
    #[serde(default)]
    pub mappings: Vec<Mapping>,
    /// Values to write, by dot path.
    #[serde(default)]
    pub set: SetValues,
    /// The new `type`.
    #[serde(default, deserialize_with = "signal_type")]
    pub set_type: Option<String>,
    /// A number to rescale.
    #[serde(default)]
    pub scale: Option<ScaleConfig>,
    /// A jq expression whose outputs replace the signal.
    #[serde(default)]
    pub expr: Option<JqExpr>,
}

/// One move of `mappings`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Mapping {
    /// Where the value is taken from.
    pub from: DotPath,
    /// Where it is written.
    pub to: DotPath,
}

/// The `set` table: dot paths and the values written there, in the order written.
#[derive(Debug, Clone, Default)]
pub struct SetValues(pub Vec<(Path, Value)>);

/// Options of `scale`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScaleConfig {
    /// The number to rescale.
    pub path: DotPath,
    /// The function (default `lerp`).
    #[serde(rename = "fn", default)]
    pub function: ScaleFn,
    /// The input range `[a, b]` (two different numbers; `b < a` reverses the direction).
    #[serde(rename = "in", deserialize_with = "input_range")]
    pub input: [f64; 2],
    /// The output range `[c, d]`.
    #[serde(deserialize_with = "output_range")]
    pub out: [f64; 2],
}

/// How `scale` maps its input range to its output range. With `t = (x − a) / (b − a)`
/// (the input normalized, 0 at `a`, 1 at `b`):
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScaleFn {
    /// `c + t·(d − c)`, without clamping: inputs outside `in` extrapolate.
    #[default]
    Lerp,
    /// Like `lerp` with `t` clamped to `[0, 1]`: the output stays within `out`.
    Clamp,
    /// `d` when `t >= 0.5`, else `c`.
    Step,
    /// `t` clamped to `[0, 1]`, eased as `t²(3 − 2t)`, then mapped to `out`.
    Smoothstep,
}

impl ScaleConfig {
    /// The scaled value of `x`, if finite.
    pub fn apply(&self, x: f64) -> Option<f64> {
        let [a, b] = self.input;
        let [c, d] = self.out;
        let t = (x - a) / (b - a);
        let mix = |t: f64| {
            // Exact at both ends: t = 0 gives c, t = 1 gives d.
            c * (1.0 - t) + d * t
        };
        let y = match self.function {
            ScaleFn::Lerp => mix(t),
            ScaleFn::Clamp => mix(t.clamp(0.0, 1.0)),
            ScaleFn::Step => {
                if t >= 0.5 {
                    d
                } else {
                    c
                }
            }
            ScaleFn::Smoothstep => {
                let t = t.clamp(0.0, 1.0);
                mix(t * t * (3.0 - 2.0 * t))
            }
        };
        y.is_finite().then_some(y)
    }
}

fn range<'de, D: Deserializer<'de>>(deserializer: D) -> Result<[f64; 2], D::Error> {
    let values = Vec::<f64>::deserialize(deserializer)?;
    match values.as_slice() {
        [a, b] if a.is_finite() && b.is_finite() => Ok([*a, *b]),
        _ => Err(D::Error::custom(
            "must be a range of two finite numbers, [from, to]",
        )),
    }
}

fn input_range<'de, D: Deserializer<'de>>(deserializer: D) -> Result<[f64; 2], D::Error> {
    let [a, b] = range(deserializer)?;
    if a == b {
        return Err(D::Error::custom(format!(
            "the input range must have two different ends, got [{a}, {b}]"
        )));
    }
    Ok([a, b])
}

fn output_range<'de, D: Deserializer<'de>>(deserializer: D) -> Result<[f64; 2], D::Error> {
    range(deserializer)
}

fn signal_type<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    let kind = String::deserialize(deserializer)?;
    if kind.is_empty() {
        return Err(D::Error::custom("the type must not be empty"));
    }
    Ok(Some(kind))
}

patchbay_graph::described_as!(SetValues, {"type": "object"});

impl<'de> Deserialize<'de> for SetValues {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut values = Vec::new();
        deserializer.deserialize_map(SetTable {
            prefix: String::new(),
            out: &mut values,
        })?;
        Ok(SetValues(values))
    }
}

/// A table of `set`, under the path `prefix` (empty at the top).
struct SetTable<'a> {
    prefix: String,
    out: &'a mut Vec<(Path, Value)>,
}

impl<'de> Visitor<'de> for SetTable<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of path = value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(SetKey {
            prefix: &self.prefix,
        })? {
            map.next_value_seed(SetEntry {
                path: key,
                out: &mut *self.out,
            })?;
        }
        Ok(())
    }
}

/// A key of `set`: the full path text, checked (errors point at the key).
struct SetKey<'a> {
    prefix: &'a str,
}

impl<'de> DeserializeSeed<'de> for SetKey<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        let key = String::deserialize(deserializer)?;
        let full = if self.prefix.is_empty() {
            key
        } else {
            format!("{}.{key}", self.prefix)
        };
        parse_path(&full).map_err(D::Error::custom)?;
        Ok(full)
    }
}

/// The value of one `set` key: a table is walked into, anything else is written.
struct SetEntry<'a> {
    path: String,
    out: &'a mut Vec<(Path, Value)>,
}

impl<'de> DeserializeSeed<'de> for SetEntry<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl SetEntry<'_> {
    fn leaf<E: de::Error>(self, value: Value) -> Result<(), E> {
        let path = parse_path(&self.path).map_err(E::custom)?;
        // Values that can never be written (a `timestamp` that is not a number, a `type`
        // that is not a string, a path below `type`) are refused at load.
        let mut probe = Signal::new("probe", "probe", Object::new());
        path.set(&mut probe, value.clone())
            .map_err(|e| E::custom(format!("cannot set `{path}`: {e}")))?;
        self.out.push((path, value));
        Ok(())
    }
}

impl<'de> Visitor<'de> for SetEntry<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value to write")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.leaf(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.leaf(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.leaf(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        match Number::from_f64(v) {
            Some(n) => self.leaf(Value::Number(n)),
            None => Err(E::custom(format!("{v} is not a JSON number"))),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.leaf(Value::String(v.to_owned()))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        let value = Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        self.leaf(value)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut any = false;
        while let Some(key) = map.next_key_seed(SetKey { prefix: &self.path })? {
            any = true;
            map.next_value_seed(SetEntry {
                path: key,
                out: &mut *self.out,
            })?;
        }
        if any {
            return Ok(());
        }
        self.leaf(Value::Object(Object::new()))
    }
}

/// Builds a `map` from its options.
pub fn build(options: &Options<'_>) -> Result<FilterSpec, Diagnostic> {
    let config: MapConfig = options.parse()?;
    config
        .into_spec(options.name())
        .map_err(|e| e.locate(options))
}

impl MapConfig {
    /// Checks the combination of options and makes the spec of the filter called `name`
    /// (the name is quoted in the reports it emits).
    pub fn into_spec(self, name: &str) -> Result<FilterSpec, ConfigError> {
        if self.mappings.is_empty()
            && self.set.0.is_empty()
            && self.set_type.is_none()
            && self.scale.is_none()
            && self.expr.is_none()
        {
            return Err(ConfigError::whole(
                "map needs at least one of `mappings`, `set`, `set_type`, `scale` or `expr`",
            ));
        }
        let settings = Arc::new(Settings {
            name: name.to_owned(),
            guard: self.when,
            mappings: self
                .mappings
                .into_iter()
                .map(|m| (m.from.0, m.to.0))
                .collect(),
            set: self.set.0,
            set_type: self.set_type,
            scale: self.scale,
            expr: self.expr,
        });
        Ok(FilterSpec::new(None, move || {
            Box::new(Map {
                settings: settings.clone(),
            })
        }))
    }
}

#[derive(Debug)]
struct Settings {
    name: String,
    guard: Option<Condition>,
    mappings: Vec<(Path, Path)>,
    set: Vec<(Path, Value)>,
    set_type: Option<String>,
    scale: Option<ScaleConfig>,
    expr: Option<JqExpr>,
}

impl Settings {
    fn has_steps(&self) -> bool {
        !self.mappings.is_empty()
            || !self.set.is_empty()
            || self.set_type.is_some()
            || self.scale.is_some()
    }

    /// Runs `mappings`, `set`, `set_type` and `scale` on `signal`.
    fn apply_steps(&self, signal: &mut Signal) {
        let mut problems: Vec<String> = Vec::new();
        for (from, to) in &self.mappings {
            let Some(value) = from.take(signal) else {
                continue;
            };
            if let Err(e) = to.set(signal, value.clone()) {
                // Put the value back where it was: a failed move loses nothing.
                let _ = from.set(signal, value);
                problems.push(format!("cannot move `{from}` to `{to}`: {e}"));
            }
        }
        for (path, value) in &self.set {
            if let Err(e) = path.set(signal, value.clone()) {
                problems.push(format!("cannot set `{path}`: {e}"));
            }
        }
        if let Some(kind) = &self.set_type {
            signal.kind = kind.into();
        }
        if let Some(scale) = &self.scale {
            let scaled = scale
                .path
                .0
                .get(signal)
                .and_then(|f| f.as_f64())
                .and_then(|x| scale.apply(x));
            if let Some(y) = scaled {
                // The path holds a number, so writing a number there cannot fail.
                let _ = scale.path.0.set(signal, number(y));
            }
        }
        if !problems.is_empty() {
            let text = format!("{}: {}", self.name, problems.join("; "));
            signal
                .metadata_mut()
                .insert("mapError".into(), Value::String(text));
        }
    }

    /// An `error` signal reporting a problem with the jq outputs for `input`.
    fn report(&self, input: &Signal, code: &str, message: &str, raw: Option<&Value>) -> Signal {
        let mut signal = ErrorPayload {
            agent_id: None,
            code: Some(code.to_owned()),
            message: format!("{}: {message}", self.name),
            severity: Severity::Warning,
        }
        .into_signal(input.source.clone())
        .at(input.timestamp)
        .with_meta("filter", self.name.clone())
        .with_meta("input", input.id.clone());
        signal.correlation_id.clone_from(&input.correlation_id);
        if let Some(raw) = raw {
            signal = signal.with_meta("raw", truncate(&raw.to_string(), RAW_KEEP));
        }
        signal
    }

    /// Replaces `input` by the outputs of `expr`.
    fn run_expr(&self, expr: &JqExpr, input: &Signal, original: SharedSignal, emit: &mut Emit) {
        let outputs = expr.outputs(input, MAX_OUTPUTS + 1);
        let mut ids: Vec<SmallString> = Vec::new();
        let mut produced = 0usize;
        for (i, output) in outputs.into_iter().enumerate() {
            if i == MAX_OUTPUTS {
                let message = format!("jq expression produced more than {MAX_OUTPUTS} outputs");
                emit.pass(Arc::new(self.report(input, "jq_output", &message, None)));
                break;
            }
            match output {
                Ok(Value::Object(object)) => {
                    let mut signal = envelope(object, input);
                    if ids.contains(&signal.id) {
                        signal.id = next_id();
                    }
                    ids.push(signal.id.clone());
                    produced += 1;
                    emit.pass(Arc::new(signal));
                }
                Ok(other) => {
                    let message = "jq output is not an object (an envelope)";
                    emit.pass(Arc::new(self.report(
                        input,
                        "jq_output",
                        message,
                        Some(&other),
                    )));
                }
                Err(error) => {
                    let message = format!("jq error: {error}");
                    emit.pass(Arc::new(self.report(input, "jq_error", &message, None)));
                }
            }
        }
        if produced == 0 {
            emit.drop(original);
        }
    }
}

/// A jq output object as a signal: required envelope fields it lacks come from `input`.
fn envelope(mut object: Object, input: &Signal) -> Signal {
    let defaults = [
        ("id", Value::from(&input.id)),
        ("type", Value::from(&input.kind)),
        ("timestamp", Value::from(input.timestamp)),
        ("source", Value::from(&input.source)),
    ];
    for (field, value) in defaults {
        if !object.contains_key(field) {
            object.insert(field.into(), value);
        }
    }
    Normalizer::new(input.source.clone())
        .from_value(Value::Object(object))
        .into_signal()
}

/// A JSON number, integral values as integers.
fn number(y: f64) -> Value {
    if y.fract() == 0.0 && y.abs() < 9.0e15 {
        Value::from(y as i64)
    } else {
        Number::from_f64(y).map_or(Value::Null, Value::Number)
    }
}

/// A running `map`.
pub struct Map {
    settings: Arc<Settings>,
}

impl Filter for Map {
    fn on_signal(&mut self, signal: SharedSignal, _now: i64, emit: &mut Emit) {
        let settings = &self.settings;
        if settings.guard.as_ref().is_some_and(|g| !g.matches(&signal)) {
            emit.pass(signal);
            return;
        }
        if !settings.has_steps() {
            if let Some(expr) = &settings.expr {
                settings.run_expr(expr, &signal, signal.clone(), emit);
            }
            return;
        }
        match &settings.expr {
            Some(expr) => {
                let mut mapped = (*signal).clone();
                settings.apply_steps(&mut mapped);
                settings.run_expr(expr, &mapped, signal, emit);
            }
            None => {
                // Copies the envelope only when another consumer still holds it.
                let mut mapped = Arc::unwrap_or_clone(signal);
                settings.apply_steps(&mut mapped);
                well_known::repair(&mut mapped);
                emit.pass(Arc::new(mapped));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{config, config_error};
    use patchbay_graph::Port;
    use patchbay_signal::object;
    use serde_json::json;

    fn spec(toml: &str) -> FilterSpec {
        config::<MapConfig>(toml).into_spec("m").unwrap()
    }

    fn map_all(toml: &str, signal: Signal) -> Vec<(Port, SharedSignal)> {
        let spec = spec(toml);
        assert_eq!(spec.clock, None);
        let mut filter = spec.instantiate();
        let mut emit = Emit::new();
        filter.on_signal(Arc::new(signal), 0, &mut emit);
        emit.take()
    }

    /// The single main output.
    fn map_one(toml: &str, signal: Signal) -> Signal {
        let out = map_all(toml, signal);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0, Port::Main);
        (*out[0].1).clone()
    }

    fn note() -> Signal {
        Signal::new(
            "midi.note_on",
            "midi:pads",
            object! {"channel" => 1, "note" => 36, "velocity" => 100},
        )
        .at(5000)
        .correlated("c1")
    }

    fn with_value(v: Value) -> Signal {
        Signal::new("x", "test:m", object! {"v" => v}).at(1)
    }

    #[test]
    fn mappings_move_values_in_order() {
        let s = map_one(
            r#"mappings = [
                { from = "payload.note", to = "payload.pitch" },
                { from = "payload.pitch", to = "metadata.key" },
                { from = "payload.missing", to = "payload.nothing" },
                { from = "type", to = "payload.kind" },
            ]"#,
            note(),
        );
        assert_eq!(s.payload.get("note"), None);
        assert_eq!(
            s.payload.get("pitch"),
            None,
            "moved on by the second mapping"
        );
        assert_eq!(s.meta("key"), Some(&json!(36)));
        assert!(
            !s.payload.contains_key("nothing"),
            "a missing from does nothing"
        );
        assert_eq!(
            s.payload["kind"], "midi.note_on",
            "envelope fields are copied"
        );
        assert_eq!(s.kind, "midi.note_on");
    }

    #[test]
    fn mapped_signals_keep_their_id_and_are_new() {
        let input = Arc::new(note());
        let mut filter = spec("set_type = \"control.pause\"").instantiate();
        let mut emit = Emit::new();
        filter.on_signal(input.clone(), 0, &mut emit);
        let out = emit.take();
        assert_eq!(out.len(), 1);
        assert!(!Arc::ptr_eq(&out[0].1, &input));
        assert_eq!(out[0].1.id, input.id);
        assert_eq!(out[0].1.kind, "control.pause");
        assert_eq!(input.kind, "midi.note_on", "the input is untouched");
        assert_eq!(out[0].1.correlation_id.as_deref(), Some("c1"));
        assert_eq!(out[0].1.timestamp, 5000);
    }

    #[test]
    fn a_failed_move_is_put_back_and_reported() {
        let s = map_one(
            r#"mappings = [{ from = "payload.note", to = "payload.velocity.x" }]"#,
            note(),
        );
        assert_eq!(s.payload["note"], 36);
        assert_eq!(s.payload["velocity"], 100);
        let why = s
            .meta("mapError")
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(why.starts_with("m: cannot move `payload.note`"), "{why}");
        let s = map_one(
            r#"mappings = [{ from = "payload.note", to = "timestamp" }]"#,
            note(),
        );
        assert_eq!(s.timestamp, 36);
        assert!(!s.payload.contains_key("note"));
        let s = map_one(
            r#"mappings = [{ from = "type", to = "timestamp" }]"#,
            note(),
        );
        assert_eq!(s.timestamp, 5000);
        assert!(s.meta("mapError").is_some());
    }

    #[test]
    fn set_writes_paths() {
        let s = map_one(
            r#"set = { "payload.velocity" = 0, "metadata.tag" = "x", "payload.list" = [1, "a"], "payload.obj" = {}, "payload.deep.er" = true }"#,
            note(),
        );
        assert_eq!(s.payload["velocity"], 0);
        assert_eq!(s.meta("tag"), Some(&json!("x")));
        assert_eq!(s.payload["list"], json!([1, "a"]));
        assert_eq!(s.payload["obj"], json!({}));
        assert_eq!(s.payload["deep"], json!({"er": true}));
        // Tables are walked into: an unquoted dotted key is a path too.
        let s = map_one(
            "[set]\npayload.velocity = 1\npayload.extra.a = 2.5\ncorrelationId = \"c2\"",
            note(),
        );
        assert_eq!(s.payload["velocity"], 1);
        assert_eq!(s.payload["note"], 36, "the rest of the payload is kept");
        assert_eq!(s.payload["extra"], json!({"a": 2.5}));
        assert_eq!(s.correlation_id.as_deref(), Some("c2"));
        let s = map_one(
            r#"set = { "type" = "control.step", "payload.n" = 2 }"#,
            note(),
        );
        assert_eq!(s.kind, "control.step");
        assert_eq!(s.payload["n"], 2);
    }

    #[test]
    fn steps_run_in_order() {
        // mappings → set → set_type → scale → expr, each seeing the previous result.
        let toml = r#"
            mappings = [{ from = "payload.velocity", to = "payload.level" }]
            set = { "payload.level" = 127, "payload.kind" = "x" }
            set_type = "mixer.level"
            scale = { path = "payload.level", fn = "lerp", in = [0, 127], out = [0, 1] }
            expr = '.payload.seen = .type | .payload.sum = .payload.level + 1'
        "#;
        let s = map_one(toml, note());
        assert_eq!(s.kind, "mixer.level");
        assert_eq!(s.payload["level"], 1);
        assert_eq!(s.payload["seen"], "mixer.level");
        assert_eq!(s.payload["sum"], 2);
        assert!(!s.payload.contains_key("velocity"));
    }

    fn scaled(function: &str, input: &str, x: Value) -> Value {
        let toml = format!(
            "scale = {{ path = \"payload.v\", fn = \"{function}\", in = {input}, out = [10, 20] }}"
        );
        map_one(&toml, with_value(x)).payload["v"].clone()
    }

    #[test]
    fn scale_functions_at_their_edges() {
        let r = "[0, 100]";
        assert_eq!(scaled("lerp", r, json!(0)), json!(10));
        assert_eq!(scaled("lerp", r, json!(100)), json!(20));
        assert_eq!(scaled("lerp", r, json!(25)), json!(12.5));
        assert_eq!(
            scaled("lerp", r, json!(200)),
            json!(30),
            "lerp does not clamp"
        );
        assert_eq!(scaled("lerp", r, json!(-100)), json!(0));
        assert_eq!(scaled("clamp", r, json!(200)), json!(20));
        assert_eq!(scaled("clamp", r, json!(-1)), json!(10));
        assert_eq!(scaled("clamp", r, json!(100)), json!(20));
        assert_eq!(scaled("clamp", r, json!(50)), json!(15));
        assert_eq!(scaled("step", r, json!(50)), json!(20), "0.5 gives out[1]");
        assert_eq!(scaled("step", r, json!(49.999)), json!(10));
        assert_eq!(scaled("step", r, json!(-5)), json!(10));
        assert_eq!(scaled("step", r, json!(500)), json!(20));
        assert_eq!(scaled("smoothstep", r, json!(0)), json!(10));
        assert_eq!(scaled("smoothstep", r, json!(100)), json!(20));
        assert_eq!(scaled("smoothstep", r, json!(50)), json!(15));
        assert_eq!(scaled("smoothstep", r, json!(25)), json!(11.5625));
        assert_eq!(scaled("smoothstep", r, json!(-50)), json!(10));
        assert_eq!(scaled("smoothstep", r, json!(150)), json!(20));
        // A reversed input range.
        assert_eq!(scaled("lerp", "[100, 0]", json!(100)), json!(10));
        assert_eq!(scaled("lerp", "[100, 0]", json!(0)), json!(20));
        assert_eq!(scaled("step", "[100, 0]", json!(50)), json!(20));
        assert_eq!(scaled("step", "[100, 0]", json!(51)), json!(10));
        // Non-numbers and missing values are left alone.
        assert_eq!(scaled("lerp", r, json!("50")), json!("50"));
        let s = map_one(
            "scale = { path = \"payload.w\", in = [0, 1], out = [0, 2] }",
            with_value(json!(1)),
        );
        assert!(!s.payload.contains_key("w"));
        // Default fn is lerp; MIDI 0..127 to 0..1.
        let s = map_one(
            "scale = { path = \"v\", in = [0, 127], out = [0.0, 1.0] }",
            with_value(json!(127)),
        );
        assert_eq!(s.payload["v"], json!(1));
    }

    #[test]
    fn guard_lets_other_signals_through_unchanged() {
        let toml = "when = { \"payload.note\" = 37 }\nset_type = \"control.pause\"";
        let input = Arc::new(note());
        let mut filter = spec(toml).instantiate();
        let mut emit = Emit::new();
        filter.on_signal(input.clone(), 0, &mut emit);
        let out = emit.take();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, Port::Main);
        assert!(Arc::ptr_eq(&out[0].1, &input));
        let s = map_one(
            "when = { \"payload.note\" = 36 }\nset_type = \"control.pause\"",
            note(),
        );
        assert_eq!(s.kind, "control.pause");
        let s = map_one(
            "when = '.payload.note == 36'\nset_type = \"control.pause\"",
            note(),
        );
        assert_eq!(s.kind, "control.pause");
        let s = map_one(
            "when = '.payload.note == 35'\nset_type = \"control.pause\"",
            note(),
        );
        assert_eq!(s.kind, "midi.note_on");
    }

    #[test]
    fn expr_outputs_replace_the_signal() {
        let input = note();
        let out = map_all(
            r#"expr = '{type: "a", payload: {i: 1}}, {type: "b", payload: {i: 2}}, {id: "mine", payload: {i: 3}}'"#,
            input.clone(),
        );
        assert_eq!(out.len(), 3);
        assert!(out.iter().all(|(p, _)| *p == Port::Main));
        let (a, b, c) = (&out[0].1, &out[1].1, &out[2].1);
        assert_eq!(
            (a.kind.as_str(), b.kind.as_str(), c.kind.as_str()),
            ("a", "b", "midi.note_on")
        );
        assert_eq!(a.id, input.id, "the first output keeps the id");
        assert_ne!(b.id, input.id, "later outputs get fresh ids");
        assert_eq!(c.id, "mine");
        assert_eq!(a.timestamp, 5000);
        assert_eq!(a.source, "midi:pads");
        assert_eq!(
            a.correlation_id, None,
            "optional fields are what the output has"
        );
        assert_eq!(b.payload["i"], 2);
        // The whole envelope in, the whole envelope out.
        let s = map_one("expr = '.payload.velocity = 0'", input.clone());
        assert_eq!(s.id, input.id);
        assert_eq!(s.correlation_id.as_deref(), Some("c1"));
        assert_eq!(s.payload["velocity"], 0);
        assert_eq!(s.timestamp, 5000);
        let s = map_one(
            "expr = '.timestamp = 42 | .source = \"x:y\"'",
            input.clone(),
        );
        assert_eq!((s.timestamp, s.source.as_str()), (42, "x:y"));
    }

    #[test]
    fn expr_without_outputs_drops_and_bad_outputs_are_reported() {
        let input = note();
        let out = map_all("expr = 'empty'", input.clone());
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, Port::Dropped);
        assert_eq!(out[0].1.id, input.id);
        assert_eq!(out[0].1.kind, "midi.note_on");

        let out = map_all("expr = '.payload.note, .'", input.clone());
        assert_eq!(out.len(), 2);
        let report = &out[0].1;
        assert_eq!(report.kind, "error");
        assert_eq!(report.payload["code"], "jq_output");
        assert_eq!(report.payload["severity"], "warning");
        assert_eq!(report.meta("raw"), Some(&json!("36")));
        assert_eq!(report.meta("filter"), Some(&json!("m")));
        assert_eq!(report.meta("input"), Some(&json!(input.id)));
        patchbay_testkit::assert_schema_valid(&report.to_value());
        assert_eq!(out[1].1.kind, "midi.note_on");

        let out = map_all("expr = 'error(\"boom\")'", input.clone());
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].0, Port::Main);
        assert_eq!(out[0].1.payload["code"], "jq_error");
        let message = out[0].1.payload["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains("boom"), "{message}");
        assert_eq!(
            out[1].0,
            Port::Dropped,
            "nothing came out: the input is dropped"
        );

        let out = map_all("expr = 'range(2000) | {payload: {i: .}}'", input);
        assert_eq!(out.len(), MAX_OUTPUTS + 1);
        assert_eq!(out[MAX_OUTPUTS].1.kind, "error");
    }

    #[test]
    fn well_known_results_stay_schema_valid() {
        let s = map_one(
            "set_type = \"text_delta\"\nmappings = [{ from = \"payload.note\", to = \"payload.content\" }]\nset = { \"payload.content\" = \"hi\" }",
            note(),
        );
        assert_eq!(s.kind, "text_delta");
        assert_eq!(s.payload["agentId"], "midi:pads", "repaired from source");
        assert!(
            s.meta("extra").is_some(),
            "fields the schema refuses move to extra"
        );
        patchbay_testkit::assert_schema_valid(&s.to_value());
        let s = map_one(
            r#"expr = '{type: "text_delta", payload: {content: "x", foo: 1}}'"#,
            note(),
        );
        assert_eq!(s.kind, "text_delta");
        patchbay_testkit::assert_schema_valid(&s.to_value());
    }

    #[test]
    fn config_errors() {
        let err = |toml: &str| config_error::<MapConfig>(toml);
        let (l, c, m) = err("scale = { path = \"v\", in = [1, 1], out = [0, 1] }");
        assert_eq!((l, c), (1, 28), "{m}");
        assert!(m.contains("two different ends"), "{m}");
        let (l, c, m) =
            err("scale = { path = \"v\", fn = \"smoothstp\", in = [0, 1], out = [0, 1] }");
        assert_eq!((l, c), (1, 28), "{m}");
        assert!(m.contains("did you mean `smoothstep`"), "{m}");
        let (l, c, m) = err("scale = { path = \"v\", in = [0, 1, 2], out = [0, 1] }");
        assert_eq!((l, c), (1, 28), "{m}");
        let (l, c, m) = err("scale = { path = \"v\", in = [0, 1], out = [\"a\", 1] }");
        assert_eq!(l, 1, "{m}");
        assert!(c >= 42, "{c} {m}");
        let (l, c, m) = err("mappings = [{ from = \"a..b\", to = \"c\" }]");
        assert_eq!((l, c), (1, 22), "{m}");
        let (l, c, m) = err("mappings = [{ from = \"a\", too = \"c\" }]");
        assert_eq!((l, c), (1, 27), "{m}");
        let (l, c, m) = err("\nexpr = '.a | foo'");
        assert_eq!((l, c), (2, 8), "{m}");
        assert!(m.contains("undefined filter `foo/0`"), "{m}");
        let (l, c, m) = err("set = { timestamp = \"soon\" }");
        assert_eq!((l, c), (1, 21), "{m}");
        assert!(m.contains("cannot set `timestamp`"), "{m}");
        let (l, c, m) = err("set = { \"type.x\" = 1 }");
        assert_eq!((l, c), (1, 20), "{m}");
        let (l, c, m) = err("set = { \"payload..x\" = 1 }");
        assert_eq!((l, c), (1, 9), "{m}");
        let (l, c, m) = err("set_type = \"\"");
        assert_eq!((l, c), (1, 12), "{m}");
        let (l, c, m) = err("set_type = \"x\"\nwhen = { n = { nope = 1, gt = 2 } }");
        assert_eq!((l, c), (2, 26), "{m}");
        let e = config::<MapConfig>("when = { n = 1 }")
            .into_spec("m")
            .unwrap_err();
        assert_eq!(e.key, None);
        assert!(e.message.contains("at least one of"), "{}", e.message);
    }
}

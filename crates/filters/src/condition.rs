//! Conditions on signals, shared by the `when` filter and `map`'s `when` guard: sajou's
//! operator tables, or a jq expression.
//!
//! An operator table maps paths to conditions and passes when all of them hold (AND); an
//! array of tables passes when any table does (OR):
//!
//! ```toml
//! when = { type = "midi.note_on", "payload.velocity" = { gt = 0 } }
//! when = [{ type = "control.pause" }, { type = "control.step" }]
//! ```
//!
//! A condition is a bare value (JSON equality, as `equals`) or an operator table whose keys
//! are among `exists`, `equals`, `contains`, `matches`, `gt`, `lt`, `not`; several
//! operators in one table must all hold. A table with no operator keys is a bare value
//! (object equality); a table that mixes operators and other keys is an error.
//!
//! - `equals`: JSON equality (`"5"` is not `5`; `1` equals `1.0`).
//! - `contains`: the value is a string containing the (string) operand, or an array with an
//!   element equal to the operand.
//! - `matches`: the value is a string matching the regex (Rust `regex` syntax).
//! - `gt`, `lt`: the value is a number above / below the operand.
//! - `exists = true`: there is a value and it is not `null`; `exists = false`: the path is
//!   missing or `null`.
//! - `not`: negates an operator table or a bare value.
//!
//! A missing path fails every operator but `exists = false`; `not` negates the result, so
//! `not = { equals = 5 }` holds when the path is missing.
//!
//! A string where a table is expected (`when = '.payload.n > 3'`) is a jq expression: it
//! holds when its first output is neither `false` nor `null` (no output or a runtime error:
//! it does not hold).
//!
//! Keys are paths, so TOML dotted keys need quotes: `"payload.note" = 36` tests the path
//! `payload.note`, while an unquoted `payload.note = 36` is TOML for
//! `payload = { note = 36 }`, a test that the whole payload equals `{"note": 36}`.

use std::fmt;

use patchbay_graph::config::suggestion;
use patchbay_signal::Signal;
use patchbay_signal::path::{Found, Path, json_eq};
use regex::Regex;
use serde::Deserialize;
use serde::de::value::SeqAccessDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};

use crate::jq::JqExpr;
use crate::options::parse_path;

/// The operator names of an operator table.
pub const OPERATORS: [&str; 7] = ["exists", "equals", "contains", "matches", "gt", "lt", "not"];

/// A condition on a signal: an operator table (or array of them), or a jq expression.
#[derive(Debug, Clone)]
pub enum Condition {
    /// Operator tables: any alternative whose tests all hold.
    Table(Table),
    /// A jq expression: holds when its first output is neither `false` nor `null`.
    Jq(JqExpr),
}

impl Condition {
    /// Whether `signal` satisfies the condition.
    pub fn matches(&self, signal: &Signal) -> bool {
        match self {
            Condition::Table(table) => table.matches(signal),
            Condition::Jq(expr) => expr.is_truthy(signal),
        }
    }
}

/// Compiled operator tables: holds when any alternative holds; an alternative holds when
/// all its tests hold.
#[derive(Debug, Clone)]
pub struct Table {
    alternatives: Vec<Vec<Test>>,
}

impl Table {
    /// Whether `signal` satisfies the table.
    pub fn matches(&self, signal: &Signal) -> bool {
        self.alternatives
            .iter()
            .any(|tests| tests.iter().all(|t| t.holds(signal)))
    }
}

/// The operators applied to the value at one path.
#[derive(Debug, Clone)]
struct Test {
    path: Path,
    ops: Vec<Op>,
}

impl Test {
    fn holds(&self, signal: &Signal) -> bool {
        all_hold(&self.ops, self.path.get(signal))
    }
}

/// One operator with its operand (compiled: regexes built, numbers read).
#[derive(Debug, Clone)]
enum Op {
    Exists(bool),
    Equals(Value),
    Contains(Value),
    Matches(Regex),
    Gt(f64),
    Lt(f64),
    Not(Vec<Op>),
}

fn all_hold(ops: &[Op], found: Option<Found<'_>>) -> bool {
    ops.iter().all(|op| op.holds(found))
}

impl Op {
    fn holds(&self, found: Option<Found<'_>>) -> bool {
        match self {
            Op::Exists(wanted) => found.is_some_and(|f| !f.is_null()) == *wanted,
            Op::Not(ops) => !all_hold(ops, found),
            _ => {
                let Some(found) = found else {
                    return false;
                };
                match self {
                    Op::Equals(v) => found.equals(v),
                    Op::Contains(needle) => contains(found, needle),
                    Op::Matches(re) => found.as_str().is_some_and(|s| re.is_match(s)),
                    Op::Gt(n) => found.as_f64().is_some_and(|v| v > *n),
                    Op::Lt(n) => found.as_f64().is_some_and(|v| v < *n),
                    Op::Exists(_) | Op::Not(_) => false,
                }
            }
        }
    }
}

fn contains(found: Found<'_>, needle: &Value) -> bool {
    if let (Some(hay), Value::String(needle)) = (found.as_str(), needle) {
        return hay.contains(needle.as_str());
    }
    match found {
        Found::Json(Value::Array(items)) => items.iter().any(|item| json_eq(item, needle)),
        _ => false,
    }
}

// A table of `path = condition`, an array of such tables (alternatives), or jq.
patchbay_graph::described_as!(Condition, {"type": ["object", "array", "string"]});

impl<'de> Deserialize<'de> for Condition {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ConditionVisitor)
    }
}

struct ConditionVisitor;

impl<'de> Visitor<'de> for ConditionVisitor {
    type Value = Condition;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of path = condition, an array of such tables, or a jq expression")
    }

    fn visit_str<E: de::Error>(self, code: &str) -> Result<Condition, E> {
        JqExpr::compile(code).map(Condition::Jq).map_err(E::custom)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Condition, A::Error> {
        let tests = read_tests(map)?;
        Ok(Condition::Table(Table {
            alternatives: vec![tests],
        }))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Condition, A::Error> {
        let mut alternatives = Vec::new();
        while let Some(tests) = seq.next_element_seed(AlternativeSeed)? {
            alternatives.push(tests);
        }
        Ok(Condition::Table(Table { alternatives }))
    }
}

/// One table of an array of alternatives.
struct AlternativeSeed;

impl<'de> DeserializeSeed<'de> for AlternativeSeed {
    type Value = Vec<Test>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<Test>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AlternativeSeed {
    type Value = Vec<Test>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of path = condition (each element of the array is one alternative)")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Vec<Test>, A::Error> {
        read_tests(map)
    }
}

fn read_tests<'de, A: MapAccess<'de>>(mut map: A) -> Result<Vec<Test>, A::Error> {
    let mut tests = Vec::new();
    while let Some(path) = map.next_key_seed(PathKey)? {
        let ops = map.next_value_seed(OpsSeed)?;
        tests.push(Test { path, ops });
    }
    Ok(tests)
}

/// A key that is a dot path (errors point at the key).
pub(crate) struct PathKey;

impl<'de> DeserializeSeed<'de> for PathKey {
    type Value = Path;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Path, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_path(&text).map_err(D::Error::custom)
    }
}

/// The condition on one path: a bare value or an operator table.
struct OpsSeed;

impl<'de> DeserializeSeed<'de> for OpsSeed {
    type Value = Vec<Op>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<Op>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

fn equals(value: Value) -> Vec<Op> {
    vec![Op::Equals(value)]
}

impl<'de> Visitor<'de> for OpsSeed {
    type Value = Vec<Op>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value to compare with, or a table of operators")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Vec<Op>, E> {
        Ok(equals(Value::Bool(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Vec<Op>, E> {
        Ok(equals(Value::from(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Vec<Op>, E> {
        Ok(equals(Value::from(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Vec<Op>, E> {
        Number::from_f64(v)
            .map(|n| equals(Value::Number(n)))
            .ok_or_else(|| E::custom(format!("cannot compare with {v}: not a JSON number")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<Op>, E> {
        Ok(equals(Value::String(v.to_owned())))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Vec<Op>, A::Error> {
        Value::deserialize(SeqAccessDeserializer::new(seq)).map(equals)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<Op>, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return Ok(equals(Value::Object(Default::default())));
        };
        if OPERATORS.contains(&first.as_str()) {
            let mut ops = vec![read_op(&first, &mut map)?];
            while let Some(name) = map.next_key_seed(OperatorKey)? {
                ops.push(read_op(&name, &mut map)?);
            }
            return Ok(ops);
        }
        let mut object = patchbay_signal::Object::new();
        let value = map.next_value::<Value>()?;
        object.insert(first.clone(), value);
        while let Some(name) = map.next_key_seed(FieldKey { first: &first })? {
            let value = map.next_value::<Value>()?;
            object.insert(name, value);
        }
        Ok(equals(Value::Object(object)))
    }
}

fn read_op<'de, A: MapAccess<'de>>(name: &str, map: &mut A) -> Result<Op, A::Error> {
    Ok(match name {
        "exists" => Op::Exists(map.next_value::<bool>()?),
        "equals" => Op::Equals(map.next_value::<Value>()?),
        "contains" => Op::Contains(map.next_value::<Value>()?),
        "matches" => Op::Matches(map.next_value::<RegexOperand>()?.0),
        "gt" => Op::Gt(map.next_value::<f64>()?),
        "lt" => Op::Lt(map.next_value::<f64>()?),
        _ => Op::Not(map.next_value_seed(OpsSeed)?),
    })
}

/// A key of an operator table: must be an operator.
struct OperatorKey;

impl<'de> DeserializeSeed<'de> for OperatorKey {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        let name = String::deserialize(deserializer)?;
        if OPERATORS.contains(&name.as_str()) {
            return Ok(name);
        }
        Err(D::Error::custom(format!(
            "unknown operator `{name}`{}; operators are {}",
            suggestion(&name, OPERATORS),
            OPERATORS.join(", ")
        )))
    }
}

/// A key of a table compared as a value: must not be an operator.
struct FieldKey<'a> {
    first: &'a str,
}

impl<'de> DeserializeSeed<'de> for FieldKey<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        let name = String::deserialize(deserializer)?;
        if OPERATORS.contains(&name.as_str()) {
            return Err(D::Error::custom(format!(
                "`{name}` is an operator but `{}` is not: a table is either operators or a \
                 value to compare with (write `equals = {{ … }}` to compare with an object)",
                self.first
            )));
        }
        Ok(name)
    }
}

/// The operand of `matches`: a regex compiled at load.
struct RegexOperand(Regex);

impl<'de> Deserialize<'de> for RegexOperand {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Regex::new(&text).map(RegexOperand).map_err(|e| {
            // The syntax error's last line says what is wrong; the lines above draw the
            // regex with a caret, which does not fit a one-line diagnostic.
            let full = e.to_string();
            let reason = full
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("error: "))
                .unwrap_or(&full);
            D::Error::custom(format!("bad regex `{text}`: {reason}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_graph::Options;
    use patchbay_signal::object;
    use serde_json::json;

    #[derive(Deserialize)]
    struct Holder {
        when: Condition,
    }

    fn cond(toml: &str) -> Condition {
        match Options::parse_snippet::<Holder>(toml) {
            Ok(h) => h.when,
            Err(e) => panic!("{e}"),
        }
    }

    fn err(toml: &str) -> (usize, usize, String) {
        match Options::parse_snippet::<Holder>(toml) {
            Ok(_) => panic!("{toml} should not load"),
            Err(e) => (e.line, e.col, e.message),
        }
    }

    fn note(n: Value) -> Signal {
        let mut s = Signal::new("midi.note_on", "midi:pads", object! {"velocity" => 100})
            .with_meta("seq", 7);
        s.payload.insert("note".into(), n);
        s
    }

    fn m(toml: &str, signal: &Signal) -> bool {
        cond(toml).matches(signal)
    }

    #[test]
    fn bare_values_are_json_equality() {
        let s = note(json!(36));
        assert!(m(
            r#"when = { type = "midi.note_on", "payload.note" = 36 }"#,
            &s
        ));
        assert!(m(r#"when = { "payload.note" = 36.0 }"#, &s), "1 == 1.0");
        assert!(
            !m(r#"when = { "payload.note" = "36" }"#, &s),
            "\"36\" is not 36"
        );
        assert!(!m(r#"when = { "payload.note" = 37 }"#, &s));
        assert!(m(r#"when = { "signal.payload.note" = 36 }"#, &s));
        assert!(
            m(r#"when = { note = 36, "signal.note" = 36 }"#, &s),
            "bare paths are payload"
        );
        assert!(m(
            r#"when = { "metadata.seq" = 7, source = "midi:pads" }"#,
            &s
        ));
        let s = note(json!("36"));
        assert!(m(r#"when = { "payload.note" = "36" }"#, &s));
        assert!(!m(r#"when = { "payload.note" = 36 }"#, &s));
        let s = note(json!({"a": 1, "b": [1, 2]}));
        assert!(
            m(r#"when = { note = { a = 1, b = [1, 2] } }"#, &s),
            "object equality"
        );
        assert!(
            !m(r#"when = { note = { a = 1 } }"#, &s),
            "object equality is exact"
        );
        assert!(m(r#"when = { "note.b" = [1, 2.0] }"#, &s), "array equality");
        assert!(!m(r#"when = { note = {} }"#, &s));
        assert!(m(r#"when = { note = {} }"#, &note(json!({}))));
        assert!(m(r#"when = { note = true }"#, &note(json!(true))));
        assert!(!m(r#"when = { note = true }"#, &note(json!(1))));
    }

    #[test]
    fn and_or() {
        let s = note(json!(36));
        assert!(m(r#"when = {}"#, &s), "an empty table holds");
        assert!(
            !m(r#"when = []"#, &s),
            "an empty array of alternatives never holds"
        );
        assert!(
            !m(r#"when = { type = "midi.note_on", note = 37 }"#, &s),
            "AND"
        );
        assert!(m(r#"when = [{ note = 37 }, { note = 36 }]"#, &s), "OR");
        assert!(!m(r#"when = [{ note = 37 }, { type = "x" }]"#, &s));
        assert!(m(
            r#"when = [{ note = 37 }, { type = "midi.note_on", note = 36 }]"#,
            &s
        ));
        assert!(!m(r#"when = [{ note = 36, type = "x" }]"#, &s));
    }

    #[test]
    fn each_operator() {
        let s = note(json!(36));
        assert!(m(r#"when = { note = { equals = 36 } }"#, &s));
        assert!(!m(r#"when = { note = { equals = "36" } }"#, &s));
        assert!(
            m(r#"when = { note = { gt = 35, lt = 37 } }"#, &s),
            "operators AND"
        );
        assert!(!m(r#"when = { note = { gt = 36 } }"#, &s), "gt is strict");
        assert!(!m(r#"when = { note = { lt = 36 } }"#, &s), "lt is strict");
        assert!(m(r#"when = { note = { gt = 35.5 } }"#, &s));
        assert!(
            !m(r#"when = { note = { gt = 1 } }"#, &note(json!("36"))),
            "numbers only"
        );
        assert!(
            m(r#"when = { timestamp = { gt = 0 } }"#, &s),
            "envelope numbers"
        );
        assert!(m(r#"when = { note = { exists = true } }"#, &s));
        assert!(!m(r#"when = { note = { exists = false } }"#, &s));
        assert!(!m(
            r#"when = { note = { exists = true } }"#,
            &note(Value::Null)
        ));
        assert!(m(
            r#"when = { note = { exists = false } }"#,
            &note(Value::Null)
        ));
        assert!(m(r#"when = { nope = { exists = false } }"#, &s));
        assert!(!m(r#"when = { nope = { exists = true } }"#, &s));
        assert!(m(r#"when = { correlationId = { exists = false } }"#, &s));
        assert!(
            m(r#"when = { note = { not = 37 } }"#, &s),
            "not of a bare value"
        );
        assert!(!m(r#"when = { note = { not = 36 } }"#, &s));
        assert!(m(r#"when = { note = { not = { gt = 40 } } }"#, &s));
        assert!(
            !m(r#"when = { note = { not = { gt = 30, lt = 40 } } }"#, &s),
            "not of AND"
        );
        assert!(m(r#"when = { note = { not = { not = 36 } } }"#, &s));

        let text = note(json!("hello world"));
        assert!(m(r#"when = { note = { contains = "lo w" } }"#, &text));
        assert!(!m(r#"when = { note = { contains = "xyz" } }"#, &text));
        assert!(m(r#"when = { note = { matches = "^hel+o" } }"#, &text));
        assert!(!m(r#"when = { note = { matches = "^world" } }"#, &text));
        assert!(
            !m(r#"when = { note = { matches = "3" } }"#, &s),
            "regex on strings only"
        );
        assert!(
            m(r#"when = { type = { matches = "^midi\\." } }"#, &s),
            "on envelope fields"
        );
        assert!(m(r#"when = { source = { contains = "pads" } }"#, &s));
        let list = note(json!(["a", 1, {"k": 2}]));
        assert!(
            m(r#"when = { note = { contains = "a" } }"#, &list),
            "array element"
        );
        assert!(m(r#"when = { note = { contains = 1.0 } }"#, &list));
        assert!(m(r#"when = { note = { contains = { k = 2 } } }"#, &list));
        assert!(!m(r#"when = { note = { contains = "1" } }"#, &list));
        assert!(
            !m(r#"when = { note = { contains = 3 } }"#, &s),
            "not a string or array"
        );
    }

    #[test]
    fn missing_path_fails_every_operator_but_exists_false_and_not() {
        let s = note(json!(36));
        for op in [
            "equals = 1",
            "contains = \"a\"",
            "matches = \".*\"",
            "gt = -1e300",
            "lt = 1e300",
            "exists = true",
        ] {
            assert!(!m(&format!("when = {{ nope = {{ {op} }} }}"), &s), "{op}");
            assert!(
                m(&format!("when = {{ nope = {{ not = {{ {op} }} }} }}"), &s),
                "not {op}"
            );
        }
        assert!(!m(r#"when = { nope = 1 }"#, &s));
        assert!(!m(r#"when = { "payload.note.x" = { exists = true } }"#, &s));
    }

    #[test]
    fn jq_conditions() {
        let s = note(json!(36));
        assert!(m(
            r#"when = '.type == "midi.note_on" and .payload.velocity > 0'"#,
            &s
        ));
        assert!(!m(r#"when = '.payload.velocity > 100'"#, &s));
        assert!(!m(r#"when = '.payload.velocity | error'"#, &s));
    }

    #[test]
    fn errors_point_at_the_offending_spot() {
        let (line, col, msg) = err("when = { note = { matches = \"[a\" } }");
        assert_eq!((line, col), (1, 29), "{msg}");
        assert!(msg.contains("bad regex"), "{msg}");
        let (line, col, msg) = err("when = { note = { gt = 1, equls = 3 } }");
        assert_eq!((line, col), (1, 27), "{msg}");
        assert!(
            msg.contains("unknown operator `equls` (did you mean `equals`?)"),
            "{msg}"
        );
        let (line, col, msg) = err("when = { note = { a = 1, gt = 3 } }");
        assert_eq!((line, col), (1, 26), "{msg}");
        assert!(msg.contains("`gt` is an operator"), "{msg}");
        let (line, col, msg) = err("when = { \"a..b\" = 1 }");
        assert_eq!((line, col), (1, 10), "{msg}");
        assert!(msg.contains("bad path"), "{msg}");
        let (line, col, msg) = err("when = { note = { gt = \"x\" } }");
        assert_eq!((line, col), (1, 24), "{msg}");
        let (line, col, _) = err("when = { note = { exists = 1 } }");
        assert_eq!((line, col), (1, 28));
        let (line, col, msg) = err("when = [{ note = 1 }, 3]");
        assert_eq!((line, col), (1, 23), "{msg}");
        let (line, col, msg) = err("\nwhen = '.a | '");
        assert_eq!((line, col), (2, 8), "{msg}");
        assert!(msg.contains("bad jq expression"), "{msg}");
        let (line, col, msg) = err("when = { note = { not = { matches = \"(\" } } }");
        assert_eq!((line, col), (1, 37), "{msg}");
    }
}

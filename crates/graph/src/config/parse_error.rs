//! Why a component's options did not parse, told at the value and in the user's words.
//!
//! serde reports a wrong value in Rust's terms (`invalid type: string "fast", expected
//! u64`), and through `#[serde(flatten)]` (every network adapter flattens its connection
//! options) without a place at all: the value passes through serde's buffer, which keeps no
//! span, so the error fell back to the section's header. Here, every option error of every
//! component is first tied to the value it is about: by the span the TOML deserializer
//! gave, or, without one, by finding the value whose removal makes the error go away (the
//! options are parsed again without it: the error path only, so the cost does not matter).
//! Then the message is worded for the user: `backoff_initial_ms: expected a whole number of
//! milliseconds, found the string "fast"`.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeArray, DeFloat, DeInteger, DeTable, DeValue};

use super::diagnostic::suggestion;
use super::env::Secrets;

/// Parses the options again from another value: `None` when they parse, else serde's
/// message.
pub(super) type Attempt<'a, 'i> = &'a dyn Fn(&Spanned<DeValue<'i>>) -> Option<String>;

/// A parse error of a component's options, explained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Explained {
    /// What the error points at: the value at fault (a key for an unknown key, the
    /// section when nothing in it is at fault: a missing key).
    pub(super) span: Range<usize>,
    /// The message, without the component's name.
    pub(super) message: String,
}

/// One step of the way to a value from the options table.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// A key of a table.
    Key(String),
    /// An item of an array (from 0).
    Item(usize),
}

/// Explains `message` (serde's, with the deserializer's `span` if it had one) about the
/// options `root`; `attempt` parses them again from a changed value. A value shown is
/// scrubbed of `secrets` before it is cut short.
pub(super) fn explain<'i>(
    root: &Spanned<DeValue<'i>>,
    message: &str,
    span: Option<Range<usize>>,
    attempt: Attempt<'_, 'i>,
    secrets: &Secrets,
) -> Explained {
    let message = message.trim_end();
    let whole = root.span();
    let kept = |span: Option<Range<usize>>| Explained {
        span: span.unwrap_or_else(|| whole.clone()),
        message: message.to_owned(),
    };
    // An unknown key is shown at the key, with the closest known one.
    if message.starts_with("unknown field `") {
        let at = match &span {
            Some(s) if *s != whole => Some(s.clone()),
            _ => unknown_key_span(root, message),
        };
        return Explained {
            span: at.unwrap_or(whole),
            message: with_suggestion(message),
        };
    }
    let path = match &span {
        Some(s) if *s != whole => match path_at(root, s) {
            Some(Place::Value(path)) => Some(path),
            // Inside a value (a custom deserializer's place: a key of a nested table):
            // that place, named.
            Some(Place::Within(path)) => {
                return Explained {
                    span: s.clone(),
                    message: named(&shown_path(&path), message),
                };
            }
            None => None,
        },
        _ => culprit(root, message, attempt),
    };
    let Some(path) = path else {
        return kept(span);
    };
    let Some(node) = node_at(root, &path) else {
        return kept(span);
    };
    Explained {
        span: node.span(),
        message: reworded(root, &path, node.get_ref(), message, attempt, secrets),
    }
}

/// The message about the value at `path` (`value`), in the user's words: the option's name,
/// what is wanted, what was found.
fn reworded<'i>(
    root: &Spanned<DeValue<'i>>,
    path: &[Step],
    value: &DeValue<'_>,
    message: &str,
    attempt: Attempt<'_, 'i>,
    secrets: &Secrets,
) -> String {
    let name = shown_path(path);
    let option = path.iter().rev().find_map(|s| match s {
        Step::Key(k) => Some(k.as_str()),
        Step::Item(_) => None,
    });
    let mut found = found(value, secrets);
    let names = || enum_names(root, path, attempt);
    let wanted = if let Some(rest) = message.strip_prefix("invalid type: ") {
        rest.split_once(", expected ")
            .map(|(_, expected)| match expected {
                "string or map" => names().unwrap_or_else(|| "a string or a table".into()),
                e if e.starts_with("enum ") => names().unwrap_or_else(|| "one of its names".into()),
                _ => wanted(expected, option, None),
            })
    } else if let Some(rest) = message.strip_prefix("invalid value: ") {
        rest.split_once(", expected ")
            .map(|(unexpected, expected)| {
                let integer = unexpected.starts_with("integer `");
                wanted(expected, option, Some(integer))
            })
    } else if let Some(rest) = message.strip_prefix("invalid length ") {
        rest.split_once(", expected ").map(|(length, expected)| {
            let items = |n: &str| match n {
                "1" => "a list of 1 item".to_owned(),
                n => format!("a list of {n} items"),
            };
            found = items(length);
            match expected.strip_prefix("a tuple of size ") {
                Some(size) => items(size),
                None => wanted(expected, option, None),
            }
        })
    } else if message == "wanted string or table" {
        // An enum given neither a name nor a table (said by the TOML deserializer; serde's
        // buffer of a flattened part says "expected string or map"): its names.
        Some(enum_names(root, path, attempt).unwrap_or_else(|| "a string or a table".into()))
    } else if message.starts_with("data did not match any variant of untagged enum") {
        kinds_taken(root, path, message, attempt)
    } else if let Some((written, expected)) = message
        .strip_prefix("unknown variant `")
        .and_then(|rest| rest.split_once("`, expected "))
    {
        let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        return format!(
            "{name}: expected {expected}, found {found}{}",
            suggestion(written, names)
        );
    } else {
        None
    };
    if let Some(wanted) = wanted {
        return format!("{name}: expected {wanted}, found {found}");
    }
    if message.starts_with("data did not match any variant") {
        return format!("{name}: {found} is not a value it takes");
    }
    // A message of the option's own (a custom deserializer's), named and completed.
    let mut out = named(&name, message);
    if message.starts_with("expected ") && !message.contains(", found ") {
        out.push_str(&format!(", found {found}"));
    }
    out
}

/// `message` about the value `name`, prefixed with it unless it names it already.
fn named(name: &str, message: &str) -> String {
    if message.contains(&format!("`{name}`")) || message.starts_with(&format!("{name}: ")) {
        message.to_owned()
    } else {
        format!("{name}: {message}")
    }
}

/// What serde's `expected` says, in the user's words (`u64` → a whole number, with the
/// unit the option's name gives: `_ms` → of milliseconds). `integer_value`: the value was
/// an integer out of range (so the range is told).
fn wanted(expected: &str, option: Option<&str>, integer_value: Option<bool>) -> String {
    let unit = option.map(unit).unwrap_or_default();
    if let Some((min, max)) = integer_range(expected) {
        return match integer_value {
            Some(true) => format!("a whole number{unit} from {min} to {max}"),
            _ => format!("a whole number{unit}"),
        };
    }
    if let Some(primitive) = expected.strip_prefix("a nonzero ")
        && integer_range(primitive).is_some()
    {
        return format!("a whole number{unit} other than 0");
    }
    match expected {
        "f32" | "f64" => format!("a number{unit}"),
        "a boolean" => "true or false".into(),
        "a string" | "a borrowed string" | "string" => "a string".into(),
        "path string" | "a borrowed path" | "os string" => "a path".into(),
        "a character" | "char" => "a single character".into(),
        "a sequence" => "a list".into(),
        "a map" => "a table".into(),
        "option" => "a value".into(),
        "unit" => "nothing".into(),
        e if e.starts_with("struct ") || e.starts_with("struct variant ") => "a table".into(),
        e if e.starts_with("a tuple of size ") || e.starts_with("tuple struct ") => "a list".into(),
        other => serde_words_replaced(other),
    }
}

/// A custom `expected` text with serde's names of TOML's kinds replaced by TOML's (a map
/// is a table, a sequence a list); names in backquotes are left as they are.
fn serde_words_replaced(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let mut quoted = false;
    let flush = |word: &mut String, out: &mut String, quoted: bool| {
        out.push_str(match word.as_str() {
            _ if quoted => word.as_str(),
            "map" => "table",
            "maps" => "tables",
            "seq" | "sequence" => "list",
            "sequences" => "lists",
            other => other,
        });
        word.clear();
    };
    for c in text.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out, quoted);
            quoted ^= c == '`';
            out.push(c);
        }
    }
    flush(&mut word, &mut out, quoted);
    out
}

/// The bounds of a Rust integer type named as serde names it (`u32`).
fn integer_range(name: &str) -> Option<(i128, u128)> {
    Some(match name {
        "u8" => (0, u128::from(u8::MAX)),
        "u16" => (0, u128::from(u16::MAX)),
        "u32" => (0, u128::from(u32::MAX)),
        "u64" | "usize" => (0, u128::from(u64::MAX)),
        "u128" => (0, u128::MAX),
        "i8" => (i128::from(i8::MIN), u128::from(i8::MAX.unsigned_abs())),
        "i16" => (i128::from(i16::MIN), u128::from(i16::MAX.unsigned_abs())),
        "i32" => (i128::from(i32::MIN), u128::from(i32::MAX.unsigned_abs())),
        "i64" | "isize" => (i128::from(i64::MIN), u128::from(i64::MAX.unsigned_abs())),
        "i128" => (i128::MIN, i128::MAX.unsigned_abs()),
        _ => return None,
    })
}

/// ` of milliseconds` for an option whose name ends in `_ms`, and so on; else nothing.
fn unit(option: &str) -> String {
    let unit = [
        ("_ms", "milliseconds"),
        ("_bytes", "bytes"),
        ("_s", "seconds"),
        ("_secs", "seconds"),
        ("_seconds", "seconds"),
    ]
    .into_iter()
    .find(|(suffix, _)| option.ends_with(suffix));
    unit.map(|(_, u)| format!(" of {u}")).unwrap_or_default()
}

/// What the user wrote, in words: `the string "fast"`, `the number 5`, `true`, `a list`.
/// A long string is cut short, after any secret in it is replaced by its `${NAME}`.
fn found(value: &DeValue<'_>, secrets: &Secrets) -> String {
    match value {
        DeValue::String(s) => {
            const SHOWN: usize = 40;
            let s = secrets.scrub(s);
            let shown: String = s.chars().take(SHOWN).collect();
            if shown.len() < s.len() {
                format!("the string {:?}…", shown)
            } else {
                format!("the string {shown:?}")
            }
        }
        DeValue::Integer(i) => format!("the number {i}"),
        DeValue::Float(f) => format!("the number {f}"),
        DeValue::Boolean(b) => b.to_string(),
        DeValue::Datetime(d) => format!("the date-time {d}"),
        DeValue::Array(a) if a.is_empty() => "an empty list".into(),
        DeValue::Array(_) => "a list".into(),
        DeValue::Table(_) => "a table".into(),
    }
}

/// The names an enum takes: the options parsed again with a name it cannot have at
/// `path`, serde lists them (`one of `a`, `b``).
fn enum_names<'i>(
    root: &Spanned<DeValue<'i>>,
    path: &[Step],
    attempt: Attempt<'_, 'i>,
) -> Option<String> {
    const PROBE: &str = "\u{1}";
    let message = attempt(&replaced(root, path, Some(DeValue::String(PROBE.into()))))?;
    let expected = message
        .strip_prefix(&format!("unknown variant `{PROBE}`, expected "))?
        .trim_end();
    Some(expected.to_owned())
}

/// What kinds of value an untagged enum takes at `path`: the options parsed again with a
/// value of each kind there, the kinds that do not fail as `message` does.
fn kinds_taken<'i>(
    root: &Spanned<DeValue<'i>>,
    path: &[Step],
    message: &str,
    attempt: Attempt<'_, 'i>,
) -> Option<String> {
    let samples: [(&str, DeValue<'i>); 6] = [
        ("a string", DeValue::String("".into())),
        ("a whole number", DeValue::Integer(DeInteger::default())),
        ("a number", DeValue::Float(DeFloat::default())),
        ("true or false", DeValue::Boolean(false)),
        ("a list", DeValue::Array(DeArray::new())),
        ("a table", DeValue::Table(DeTable::new())),
    ];
    let mut taken: Vec<&str> = samples
        .into_iter()
        .filter(|(_, sample)| {
            attempt(&replaced(root, path, Some(sample.clone()))).as_deref() != Some(message)
        })
        .map(|(kind, _)| kind)
        .collect();
    // A number that may be fractional takes whole ones too.
    if taken.contains(&"a number") {
        taken.retain(|k| *k != "a whole number");
    }
    match taken.as_slice() {
        [] => None,
        [one] => Some((*one).to_owned()),
        [init @ .., last] => Some(format!("{} or {last}", init.join(", "))),
    }
}

/// The value whose removal makes the error `failing` go away, going down into tables and
/// arrays as far as that holds; `None` when no value is to blame. Removing a required key
/// makes the error "missing" it: such a key is blamed only if nothing else is (it may be
/// the value at fault, or only required before the part at fault is parsed), and never
/// for a missing key (the table that lacks it is the one whose removal parses).
fn culprit<'i>(
    root: &Spanned<DeValue<'i>>,
    failing: &str,
    attempt: Attempt<'_, 'i>,
) -> Option<Vec<Step>> {
    let missing = failing.starts_with("missing field `");
    let mut path = Vec::new();
    loop {
        let node = node_at(root, &path)?;
        let mut required = None;
        let mut blamed = None;
        let steps = match node.get_ref() {
            DeValue::Array(a) if a.len() > ITEMS_LOOKED_INTO => Vec::new(),
            other => children(other),
        };
        for step in steps {
            let mut candidate = path.clone();
            candidate.push(step.clone());
            match attempt(&replaced(root, &candidate, None)) {
                Some(m) if m.trim_end() == failing => {}
                Some(m) if missing && m.starts_with("missing field `") => {}
                Some(m) if matches!(&step, Step::Key(k) if m.trim_end() == format!("missing field `{k}`")) =>
                {
                    required.get_or_insert(candidate);
                }
                _ => {
                    blamed = Some(candidate);
                    break;
                }
            }
        }
        match blamed.or(required) {
            Some(deeper) => path = deeper,
            None => break,
        }
    }
    (!path.is_empty()).then_some(path)
}

/// The most items of an array [`culprit`] looks into one by one (each is a parse of the
/// whole options): past it, the array itself is blamed.
const ITEMS_LOOKED_INTO: usize = 64;

/// The steps to a table's keys or an array's items, in the order they are written.
fn children(value: &DeValue<'_>) -> Vec<Step> {
    match value {
        DeValue::Table(t) => {
            let mut keys: Vec<_> = t.iter().map(|(k, _)| (k.span().start, k)).collect();
            keys.sort_by_key(|(start, _)| *start);
            keys.into_iter()
                .map(|(_, k)| Step::Key(k.get_ref().to_string()))
                .collect()
        }
        DeValue::Array(a) => (0..a.len()).map(Step::Item).collect(),
        _ => Vec::new(),
    }
}

/// The value at `path`.
fn node_at<'a, 'i>(
    root: &'a Spanned<DeValue<'i>>,
    path: &[Step],
) -> Option<&'a Spanned<DeValue<'i>>> {
    let mut node = root;
    for step in path {
        node = match (node.get_ref(), step) {
            (DeValue::Table(t), Step::Key(k)) => t.get(k.as_str())?,
            (DeValue::Array(a), Step::Item(i)) => a.get(*i)?,
            _ => return None,
        };
    }
    Some(node)
}

/// A copy of `root` with the value at `path` replaced by `with`, or removed.
fn replaced<'i>(
    root: &Spanned<DeValue<'i>>,
    path: &[Step],
    with: Option<DeValue<'i>>,
) -> Spanned<DeValue<'i>> {
    let mut copy = root.clone();
    let Some((last, parents)) = path.split_last() else {
        return copy;
    };
    let mut node = &mut copy;
    for step in parents {
        let next = match (node.get_mut(), step) {
            (DeValue::Table(t), Step::Key(k)) => t.get_mut(k.as_str()),
            (DeValue::Array(a), Step::Item(i)) => a.get_mut(*i),
            _ => None,
        };
        match next {
            Some(n) => node = n,
            None => return copy,
        }
    }
    match (node.get_mut(), last, with) {
        (DeValue::Table(t), Step::Key(k), None) => {
            t.remove(k.as_str());
        }
        (DeValue::Table(t), Step::Key(k), Some(value)) => {
            if let Some(v) = t.get_mut(k.as_str()) {
                *v = Spanned::new(v.span(), value);
            }
        }
        (DeValue::Array(a), Step::Item(i), None) => {
            let mut kept = DeArray::new();
            for (j, item) in a.iter().enumerate() {
                if j != *i {
                    kept.push(item.clone());
                }
            }
            *a = kept;
        }
        (DeValue::Array(a), Step::Item(i), Some(value)) => {
            if let Some(v) = a.get_mut(*i) {
                *v = Spanned::new(v.span(), value);
            }
        }
        _ => {}
    }
    copy
}

/// Where a deserializer's span is, among the options' values.
enum Place {
    /// It is this value's.
    Value(Vec<Step>),
    /// It is inside this value (a key of a nested table, say).
    Within(Vec<Step>),
}

/// The value the deserializer's `span` is about: the deepest value with that span, else
/// the deepest one holding its start; `None` when it is in no value (a key of the table
/// itself). Every value is visited: a table under a `[header]` spans its header only, not
/// its keys.
fn path_at(root: &Spanned<DeValue<'_>>, span: &Range<usize>) -> Option<Place> {
    fn walk(
        node: &Spanned<DeValue<'_>>,
        span: &Range<usize>,
        path: &mut Vec<Step>,
        exact: &mut Option<Vec<Step>>,
        holding: &mut Option<Vec<Step>>,
    ) {
        for step in children(node.get_ref()) {
            let Some(child) = node_at(node, std::slice::from_ref(&step)) else {
                continue;
            };
            let s = child.span();
            path.push(step);
            if s == *span && exact.as_ref().is_none_or(|e| e.len() < path.len()) {
                *exact = Some(path.clone());
            }
            if s.start <= span.start
                && span.start < s.end
                && holding.as_ref().is_none_or(|h| h.len() < path.len())
            {
                *holding = Some(path.clone());
            }
            walk(child, span, path, exact, holding);
            path.pop();
        }
    }
    let (mut exact, mut holding) = (None, None);
    walk(root, span, &mut Vec::new(), &mut exact, &mut holding);
    exact.map(Place::Value).or(holding.map(Place::Within))
}

/// Where the key an "unknown field `KEY`" message names is written (the first such key,
/// the options' own keys before nested ones).
fn unknown_key_span(root: &Spanned<DeValue<'_>>, message: &str) -> Option<Range<usize>> {
    let name = message.strip_prefix("unknown field `")?.split('`').next()?;
    fn find(value: &DeValue<'_>, name: &str) -> Option<Range<usize>> {
        let DeValue::Table(t) = value else {
            return None;
        };
        if let Some((key, _)) = t.iter().find(|(k, _)| k.get_ref().as_ref() == name) {
            return Some(key.span());
        }
        t.iter().find_map(|(_, v)| find(v.get_ref(), name))
    }
    find(root.get_ref(), name)
}

/// The way to a value as the user reads it: `jetstream.stream`, `command, item 2`.
fn shown_path(path: &[Step]) -> String {
    let mut out = String::new();
    for (i, step) in path.iter().enumerate() {
        match step {
            Step::Key(k) => {
                if i > 0 {
                    out.push_str(if matches!(path[i - 1], Step::Key(_)) {
                        "."
                    } else {
                        ", "
                    });
                }
                out.push_str(k);
            }
            Step::Item(n) => out.push_str(&format!(", item {}", n + 1)),
        }
    }
    out
}

/// Adds "did you mean" to serde's unknown-field message.
fn with_suggestion(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_owned();
    };
    let Some((name, expected)) = rest.split_once('`') else {
        return message.to_owned();
    };
    if !expected.contains("expected") {
        return message.to_owned();
    }
    let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    format!("{message}{}", suggestion(name, candidates))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde::Deserialize;
    use toml::Spanned;
    use toml::de::{DeTable, DeValue};

    use crate::config::env::{Secrets, substitute};
    use crate::config::{Diagnostic, Options, SourceText};

    /// Connection options, flattened into [`Outer`] as the network adapters do.
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Connection {
        #[serde(default)]
        url: String,
        #[serde(default)]
        backoff_initial_ms: Option<u64>,
        #[serde(default)]
        retries: Option<u32>,
        #[serde(default)]
        mode: Option<Mode>,
        #[serde(default)]
        tls: Option<Tls>,
        #[serde(default)]
        hosts: Vec<String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        Fast,
        Slow,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Tls {
        ca: PathBuf,
        #[serde(default)]
        verify: bool,
    }

    #[derive(Debug, Deserialize)]
    #[serde(untagged)]
    #[allow(dead_code)]
    enum Targets {
        One(String),
        Many(Vec<String>),
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        #[serde(flatten)]
        connection: Connection,
        #[serde(default)]
        subject: Option<String>,
        #[serde(default)]
        target: Option<Targets>,
        #[serde(default)]
        port: Option<u16>,
        #[serde(default)]
        rate: Option<f64>,
        #[serde(default)]
        workers: Option<std::num::NonZeroU32>,
        #[serde(default)]
        limits: Option<Limits>,
    }

    /// Not flattened: the TOML deserializer's spans reach it.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Limits {
        interval_ms: u64,
        #[serde(default)]
        names: Vec<String>,
    }

    fn error(text: &str) -> Diagnostic {
        match Options::parse_snippet::<Outer>(text) {
            Ok(o) => panic!("{text:?} parsed: {o:?}"),
            Err(e) => e,
        }
    }

    /// `text` is refused at `line:col` with `message` (after the component's name).
    #[track_caller]
    fn refused(text: &str, (line, col): (usize, usize), message: &str) {
        let e = error(text);
        assert_eq!(
            (e.line, e.col, e.message.as_str()),
            (line, col, format!("snippet: {message}").as_str()),
            "{text:?}"
        );
    }

    #[test]
    fn a_flattened_option_of_the_wrong_type_is_shown_at_its_value_in_the_users_words() {
        refused(
            "subject = \"s\"\nbackoff_initial_ms = \"fast\"\n",
            (2, 22),
            "backoff_initial_ms: expected a whole number of milliseconds, found the string \"fast\"",
        );
        refused(
            "url = 5\n",
            (1, 7),
            "url: expected a string, found the number 5",
        );
        refused(
            "  retries = 1.5\n",
            (1, 13),
            "retries: expected a whole number, found the number 1.5",
        );
        refused(
            "retries = -1\n",
            (1, 11),
            "retries: expected a whole number from 0 to 4294967295, found the number -1",
        );
        refused(
            "hosts = [\"a\", 5, \"c\"]\n",
            (1, 15),
            "hosts, item 2: expected a string, found the number 5",
        );
        refused(
            "hosts = \"a\"\n",
            (1, 9),
            "hosts: expected a list, found the string \"a\"",
        );
    }

    #[test]
    fn nested_tables_are_followed_down_to_the_value() {
        // Through the flattened part: found by taking values away.
        refused(
            "tls = { verify = true, ca = 5 }\n",
            (1, 29),
            "tls.ca: expected a path, found the number 5",
        );
        refused(
            "tls = { verify = true }\n",
            (1, 7),
            "tls: missing field `ca`",
        );
        refused(
            "tls = 5\n",
            (1, 7),
            "tls: expected a table, found the number 5",
        );
        // Outside it: where the deserializer said.
        refused(
            "[limits]\ninterval_ms = 5\nnames = [true]\n",
            (3, 10),
            "limits.names, item 1: expected a string, found true",
        );
        refused(
            "[limits]\ninterval_ms = \"soon\"\n",
            (2, 15),
            "limits.interval_ms: expected a whole number of milliseconds, found the string \"soon\"",
        );
        refused("[limits]\n", (1, 1), "limits: missing field `interval_ms`");
    }

    #[test]
    fn enums_list_their_names() {
        refused(
            "mode = true\n",
            (1, 8),
            "mode: expected `fast` or `slow`, found true",
        );
        refused(
            "mode = \"fsat\"\n",
            (1, 8),
            "mode: expected `fast` or `slow`, found the string \"fsat\" (did you mean `fast`?)",
        );
        refused(
            "target = 5\n",
            (1, 10),
            "target: expected a string or a list, found the number 5",
        );
    }

    #[test]
    fn a_list_of_the_wrong_length_says_both_lengths() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Range {
            #[serde(default)]
            name: Option<String>,
            bounds: (u8, u8),
        }
        let e = Options::parse_snippet::<Range>("bounds = [1]\n").unwrap_err();
        assert_eq!((e.line, e.col), (1, 10), "{e}");
        assert_eq!(
            e.message,
            "snippet: bounds: expected a list of 2 items, found a list of 1 item"
        );
    }

    #[test]
    fn numbers_say_their_range_when_out_of_it() {
        refused(
            "port = 70000\n",
            (1, 8),
            "port: expected a whole number from 0 to 65535, found the number 70000",
        );
        refused(
            "port = \"http\"\n",
            (1, 8),
            "port: expected a whole number, found the string \"http\"",
        );
        refused(
            "rate = \"fast\"\n",
            (1, 8),
            "rate: expected a number, found the string \"fast\"",
        );
        refused(
            "workers = 0\n",
            (1, 11),
            "workers: expected a whole number other than 0, found the number 0",
        );
    }

    #[test]
    fn unknown_and_missing_keys_are_shown_where_they_are() {
        // An unknown key beside a flattened part: at the key, though serde gives no place.
        let e = error("url = \"u\"\n  sbject = \"s\"\n");
        assert_eq!((e.line, e.col), (2, 3), "{e}");
        assert!(e.message.contains("unknown field `sbject`"), "{e}");
        // Nothing wrong to point at: the section.
        let e = Options::parse_snippet::<Limits>("names = []\n").unwrap_err();
        assert_eq!((e.line, e.col), (1, 1), "{e}");
        assert_eq!(e.message, "snippet: missing field `interval_ms`");
    }

    #[test]
    fn a_message_of_the_options_own_is_named_and_completed() {
        fn paths<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
            #[derive(Deserialize)]
            #[serde(untagged)]
            enum OneOrMany {
                One(String),
                Many(Vec<String>),
            }
            match OneOrMany::deserialize(d)
                .map_err(|_| serde::de::Error::custom("expected a path or an array of paths"))?
            {
                OneOrMany::One(p) => Ok(vec![p]),
                OneOrMany::Many(p) => Ok(p),
            }
        }
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Keyed {
            #[serde(deserialize_with = "paths")]
            key: Vec<String>,
            #[serde(default)]
            extra: Option<String>,
        }
        let e = Options::parse_snippet::<Keyed>("key = true\n").unwrap_err();
        assert_eq!((e.line, e.col), (1, 7), "{e}");
        assert_eq!(
            e.message,
            "snippet: key: expected a path or an array of paths, found true"
        );
        // serde's names in a custom expectation are TOML's.
        #[derive(Debug)]
        struct Version;
        impl<'de> Deserialize<'de> for Version {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = Version;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("string or map of `major` and `minor`")
                    }
                    fn visit_str<E>(self, _: &str) -> Result<Version, E> {
                        Ok(Version)
                    }
                }
                d.deserialize_any(V)
            }
        }
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Versioned {
            version: Version,
        }
        let e = Options::parse_snippet::<Versioned>("version = 3\n").unwrap_err();
        assert_eq!(
            e.message,
            "snippet: version: expected string or table of `major` and `minor`, found the number 3"
        );
    }

    #[test]
    fn a_secret_in_a_value_shown_is_scrubbed_before_it_is_cut_short() {
        let secret = "s3cr3t-".repeat(10);
        let mut secrets = Secrets::default();
        let substituted = substitute("${TOKEN}", &|_| Some(secret.clone()), &mut secrets)
            .expect("substitutes")
            .expect("changed");
        let file = SourceText::new("s.toml", "backoff_initial_ms = \"${TOKEN}\"\n");
        let mut table = DeTable::parse(&file.text).expect("TOML").into_inner();
        let value = table.get_mut("backoff_initial_ms").expect("the key");
        *value = Spanned::new(value.span(), DeValue::String(substituted.into()));
        let span = 0..file.text.len();
        let options = Options::new(
            &file,
            &secrets,
            "c".into(),
            Spanned::new(span, DeValue::Table(table)),
        );
        let e = options.parse::<Outer>().unwrap_err();
        assert_eq!((e.line, e.col), (1, 22), "{e}");
        assert!(!e.message.contains("s3cr3t"), "{e}");
        assert!(e.message.contains("the string \"${TOKEN}\""), "{e}");
    }
}

//! `patchbay components [TYPE] [--json | --markdown]`: the component types of this build,
//! and the options of one, read from the adapters' descriptors. `--markdown` without a
//! type is the component reference, docs/reference/components.md.

use std::fmt::Write as _;
use std::process::ExitCode;

use patchbay_graph::config::suggestion;
use patchbay_graph::{Adapter, ComponentType, OutputKind, Role, WhenFull};
use serde_json::{Map, Value};

use crate::pipeline::ADAPTERS;

/// How `patchbay components` prints what it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns and indented docs, for a terminal.
    Text,
    /// JSON: a type's options as a JSON schema, for editors and tools.
    Json,
    /// Markdown: the component reference (docs/reference/components.md).
    Markdown,
}

/// Where the generated reference is kept, and how it is regenerated (named in the file
/// itself and by the test that compares it with the build).
const REFERENCE_PATH: &str = "docs/reference/components.md";

/// Lists every component type, or prints the options of `type_name`.
pub fn run(type_name: Option<&str>, format: Format) -> anyhow::Result<ExitCode> {
    let Some(type_name) = type_name else {
        match format {
            Format::Json => {
                let list: Vec<Value> = all()
                    .map(|(adapter, c)| Value::Object(described(adapter, c)))
                    .collect();
                emit(&format!("{}\n", serde_json::to_string_pretty(&list)?));
            }
            Format::Markdown => emit(&render_reference()),
            Format::Text => emit(&render_list()),
        }
        return Ok(ExitCode::SUCCESS);
    };
    let matching: Vec<_> = all().filter(|(_, c)| c.name == type_name).collect();
    if matching.is_empty() {
        let mut names: Vec<&str> = all().map(|(_, c)| c.name).collect();
        names.dedup();
        anyhow::bail!(
            "unknown component type `{type_name}`{}; `patchbay components` lists them",
            suggestion(type_name, names.iter().copied())
        );
    }
    match format {
        Format::Json => {
            let list: Vec<Value> = matching
                .iter()
                .map(|(adapter, c)| {
                    let mut described = described(adapter, c);
                    described.insert("options".into(), (c.options)().into());
                    Value::Object(described)
                })
                .collect();
            emit(&format!("{}\n", serde_json::to_string_pretty(&list)?));
        }
        Format::Markdown => {
            for (i, (_, c)) in matching.iter().enumerate() {
                if i > 0 {
                    emit("\n");
                }
                emit(&render_markdown_type(c));
            }
        }
        Format::Text => {
            for (i, (adapter, c)) in matching.iter().enumerate() {
                if i > 0 {
                    emit("\n");
                }
                emit(&render_one(adapter, c));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes to standard output; a reader that went away (`| head`) ends the output quietly
/// instead of a panic.
fn emit(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// A component type as `--json` lists it: its type, role, adapter and summary.
fn described(adapter: &Adapter, c: &ComponentType) -> Map<String, Value> {
    let mut described = Map::new();
    described.insert("type".into(), c.name.into());
    described.insert("role".into(), c.role.sections().into());
    described.insert("adapter".into(), adapter.name.into());
    described.insert("summary".into(), c.summary.into());
    described
}

/// Every component type with its adapter, in the adapters' order.
fn all() -> impl Iterator<Item = (&'static Adapter, &'static ComponentType)> {
    ADAPTERS
        .iter()
        .flat_map(|a| a.components.iter().map(move |c| (*a, c)))
}

/// Every component type, sorted by name then role (the order of the listings).
fn sorted() -> Vec<(&'static Adapter, &'static ComponentType)> {
    let mut rows: Vec<_> = all().collect();
    rows.sort_by_key(|(_, c)| (c.name, c.role.sections()));
    rows
}

/// One line per component type: name, where it goes, adapter, summary.
fn render_list() -> String {
    let rows: Vec<(&str, &str, &str, &str)> = sorted()
        .into_iter()
        .map(|(a, c)| (c.name, c.role.sections(), a.name, c.summary))
        .collect();
    let width = |f: fn(&(&str, &str, &str, &str)) -> usize| rows.iter().map(f).max().unwrap_or(0);
    let (w0, w1, w2) = (
        width(|r| r.0.len()).max(4),
        width(|r| r.1.len()).max(4),
        width(|r| r.2.len()).max(7),
    );
    let mut out = format!(
        "{:w0$}  {:w1$}  {:w2$}  SUMMARY\n",
        "TYPE", "ROLE", "ADAPTER"
    );
    for (name, role, adapter, summary) in rows {
        let _ = writeln!(out, "{name:w0$}  {role:w1$}  {adapter:w2$}  {summary}");
    }
    out.push_str("\n`patchbay components TYPE` shows a type's options.\n");
    out
}

/// A type's summary and its options: name, type, required or default, description.
fn render_one(adapter: &Adapter, c: &ComponentType) -> String {
    let mut out = format!(
        "{} ({}, adapter `{}`): {}\n",
        c.name,
        c.role.sections(),
        adapter.name,
        c.summary
    );
    let options = options(c);
    if options.is_empty() {
        out.push_str("\n  (no options)\n");
        return out;
    }
    out.push('\n');
    for option in options {
        let _ = writeln!(
            out,
            "  {}  {}  {}",
            option.name,
            option.kind,
            option.presence.text()
        );
        for line in option.doc.lines() {
            let _ = writeln!(out, "      {line}");
        }
    }
    out
}

/// The whole component reference in Markdown: an index of the types, then each adapter
/// with its types and every option. What docs/reference/components.md holds.
fn render_reference() -> String {
    let mut out = format!(
        "<!-- Generated by `patchbay components --markdown` from the adapters' descriptors: \
         do not edit.\n     Regenerate: cargo run --quiet -- components --markdown > \
         {REFERENCE_PATH}\n     (tests/docs.rs fails when this file and the build differ.) -->\n\n"
    );
    out.push_str("# Component reference\n\n");
    out.push_str(&wrap(
        "Every component type of this build: what it does, where a config declares it, and \
         each of its options with its type, its default (or *required*) and its \
         documentation, taken from the config structs that parse them. `patchbay components \
         TYPE` prints the same in a terminal, and `--json` gives a type's options as a JSON \
         schema. How components are wired together, and what every output's `queue` and \
         `when_full` do: [pipelines](../pipelines.md#queues).",
    ));
    out.push_str("\n\n");
    out.push_str("| type | role | adapter | summary |\n|---|---|---|---|\n");
    for (adapter, c) in sorted() {
        let _ = writeln!(
            out,
            "| [`{}`](#{}) | {} | [`{}`](#{}) | {} |",
            c.name,
            slug(&type_heading(c)),
            c.role.sections(),
            adapter.name,
            slug(&adapter_heading(adapter)),
            table_cell(c.summary)
        );
    }
    for adapter in ADAPTERS {
        if adapter.components.is_empty() {
            continue;
        }
        let _ = write!(
            out,
            "\n## {}\n\n{}\n",
            adapter_heading(adapter),
            wrap(&sentence(adapter.summary))
        );
        for c in adapter.components {
            out.push('\n');
            out.push_str(&render_markdown_type(c));
        }
    }
    out
}

/// One component type in Markdown: its heading, summary, where it is declared and its
/// options.
fn render_markdown_type(c: &ComponentType) -> String {
    let mut out = format!(
        "### {}\n\n{}\n\n{}\n",
        type_heading(c),
        wrap(&sentence(c.summary)),
        wrap(&declared(c))
    );
    let options = options(c);
    if options.is_empty() {
        out.push_str("\nNo options of its own.\n");
        return out;
    }
    for option in options {
        let presence = match &option.presence {
            Presence::Required => "required".to_owned(),
            Presence::Default(value) => format!("default {}", code(value)),
            Presence::Optional => "optional".to_owned(),
        };
        let _ = writeln!(
            out,
            "\n- {}: {}, {presence}",
            code(&option.name),
            code(&option.kind)
        );
        if !option.doc.is_empty() {
            out.push('\n');
            for line in option.doc.lines() {
                if line.trim().is_empty() {
                    out.push('\n');
                } else {
                    let _ = writeln!(out, "  {line}");
                }
            }
        }
    }
    out
}

/// The heading of an adapter's section.
fn adapter_heading(adapter: &Adapter) -> String {
    format!("Adapter `{}`", adapter.name)
}

/// The heading of a component type's section: its name and role, unique across the
/// reference (`file` is a source and an output).
fn type_heading(c: &ComponentType) -> String {
    format!("`{}` ({})", c.name, c.role.sections())
}

/// Where a config declares a type, and what the graph gives it besides its own options.
fn declared(c: &ComponentType) -> String {
    let name = c.name;
    match c.role {
        Role::Source(_) => format!("Declared as `[sources.NAME]` with `type = \"{name}\"`."),
        Role::Filter(_) => format!(
            "Declared as `[filters.NAME]` with `type = \"{name}\"` and `inputs`; what it \
             drops or replaces comes out of `NAME.dropped`."
        ),
        Role::Output(OutputKind {
            inbound, when_full, ..
        }) => {
            let mut text = format!(
                "Declared as `[outputs.NAME]` with `type = \"{name}\"` and `inputs`; its queue: \
                 `queue`, `when_full` (default `{}`).",
                when_full_name(when_full)
            );
            if inbound {
                text.push_str(" What it receives comes out of `NAME.inbound`.");
            }
            text
        }
        Role::Link { .. } => format!(
            "A two-way link. Declared as `[outputs.NAME]` with `type = \"{name}\"` and \
             `inputs`, it sends what it is given and what the peer sends comes out of \
             `NAME.inbound`; its queue: `queue`, `when_full` (default `{}`). Declared as \
             `[sources.NAME]`, it only listens.",
            when_full_name(WhenFull::DropOldest)
        ),
    }
}

/// `when_full`'s value as a config writes it.
fn when_full_name(when_full: WhenFull) -> &'static str {
    match when_full {
        WhenFull::Block => "block",
        WhenFull::DropOldest => "drop_oldest",
        WhenFull::DropNewest => "drop_newest",
    }
}

/// A summary as a sentence: capitalized, with a full stop.
fn sentence(text: &str) -> String {
    let mut chars = text.chars();
    let mut out: String = match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    };
    if !out.ends_with(['.', '!', '?']) {
        out.push('.');
    }
    out
}

/// The width generated prose is wrapped at, as the hand-written docs are.
const WRAP_WIDTH: usize = 90;

/// A paragraph wrapped at [`WRAP_WIDTH`] on spaces (a word longer than the width keeps a
/// line of its own). Inside a code span a line break reads as a space, so any space may
/// break, but not before a word that would start a list, a heading or a quote.
fn wrap(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / WRAP_WIDTH);
    let mut line_len = 0;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let len = word.chars().count();
        if line_len > 0 && line_len + 1 + len > WRAP_WIDTH && !starts_a_block(word) {
            out.push('\n');
            line_len = 0;
        } else if line_len > 0 {
            out.push(' ');
            line_len += 1;
        }
        out.push_str(word);
        line_len += len;
    }
    out
}

/// Whether a line starting with `word` would be read as a list item, a heading, a quote
/// or a table row instead of the paragraph's text.
fn starts_a_block(word: &str) -> bool {
    let digits = word.bytes().take_while(u8::is_ascii_digit).count();
    matches!(word, "-" | "+" | "*" | ">" | "|")
        || word.chars().all(|c| c == '#')
        || word.starts_with(['>', '|'])
        || (digits > 0 && matches!(&word[digits..], "." | ")"))
}

/// Text as a Markdown code span, with enough backticks to hold any it contains.
fn code(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    // A span that starts or ends with a backtick needs a space inside its fence.
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// Text for a table cell: a `|` would end the cell.
fn table_cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// GitHub's anchor for a heading: lowercase, punctuation dropped but `-` and `_`, spaces
/// to `-`.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// One option of a component, as shown by `patchbay components TYPE`.
#[derive(Debug, PartialEq)]
struct OptionDoc {
    /// Its key; a key of a table option is written `table.key`.
    name: String,
    kind: String,
    presence: Presence,
    doc: String,
}

/// Whether an option must be given, and what it is when it is not.
#[derive(Debug, PartialEq)]
enum Presence {
    /// It must be given (in its table, for a key of a table option).
    Required,
    /// Its default, as JSON text.
    Default(String),
    /// It may be left out, and has no single default value.
    Optional,
}

impl Presence {
    /// `required`, `default …` or `optional`.
    fn text(&self) -> String {
        match self {
            Presence::Required => "required".to_owned(),
            Presence::Default(value) => format!("default {value}"),
            Presence::Optional => "optional".to_owned(),
        }
    }
}

/// The options of a component type, in declaration order.
fn options(c: &ComponentType) -> Vec<OptionDoc> {
    properties((c.options)().as_value())
}

/// How deep the keys of table options are listed (`gate.tools` is one level): deep enough
/// for every option struct, and a bound for a schema that refers to itself.
const MAX_TABLE_DEPTH: usize = 3;

/// The options of an options schema, in declaration order (flattened parts included, and
/// the keys of table options after the table, as `table.key`).
fn properties(schema: &Value) -> Vec<OptionDoc> {
    let mut out = Vec::new();
    collect(schema, "", 0, &mut out);
    out
}

fn collect(schema: &Value, prefix: &str, depth: usize, out: &mut Vec<OptionDoc>) {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            let presence = match prop.get("default") {
                Some(v) if !v.is_null() => Presence::Default(v.to_string()),
                _ if required.contains(&name.as_str()) => Presence::Required,
                _ => Presence::Optional,
            };
            out.push(OptionDoc {
                name: format!("{prefix}{name}"),
                kind: kind(prop),
                presence,
                doc: prop
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            });
            if depth < MAX_TABLE_DEPTH {
                for table in tables(prop) {
                    collect(table, &format!("{prefix}{name}."), depth + 1, out);
                }
            }
        }
    }
    // Flattened structs and tagged variants carry their keys in sub-schemas.
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(parts) = schema.get(key).and_then(Value::as_array) {
            for part in parts {
                if part.get("properties").is_some() {
                    collect(part, prefix, depth, out);
                }
            }
        }
    }
}

/// The schemas of an option that is a table with keys of its own (`gate = { tools, … }`):
/// itself, or the variants of its `anyOf`/`oneOf` that have keys.
fn tables(prop: &Value) -> Vec<&Value> {
    if prop.get("properties").is_some() {
        return vec![prop];
    }
    ["anyOf", "oneOf"]
        .iter()
        .filter_map(|key| prop.get(*key).and_then(Value::as_array))
        .flatten()
        .filter(|part| part.get("properties").is_some())
        .collect()
}

/// A short type: `string`, `integer`, `"a" | "b"`, `array of string`, `table of string`.
fn kind(schema: &Value) -> String {
    let object = |s: &Value| s.as_object().cloned().unwrap_or_else(Map::new);
    let s = object(schema);
    if let Some(values) = s.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .filter(|v| !v.is_null())
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(" | ");
    }
    if let Some(value) = s.get("const") {
        return value.to_string();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(parts) = s.get(key).and_then(Value::as_array) {
            let kinds: Vec<String> = parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) != Some("null"))
                .map(kind)
                .collect();
            return kinds.join(" | ");
        }
    }
    let types: Vec<&str> = match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return "any".to_owned(),
    };
    types
        .into_iter()
        .filter(|t| *t != "null")
        .map(|t| match t {
            "array" => format!(
                "array of {}",
                s.get("items").map(kind).unwrap_or_else(|| "any".into())
            ),
            "object" => match s.get("additionalProperties") {
                Some(v) if v.is_object() => format!("table of {}", kind(v)),
                _ => "table".to_owned(),
            },
            other => other.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_has_a_summary_and_documented_options() {
        for (adapter, c) in all() {
            assert!(!c.summary.is_empty(), "{}: no summary", c.name);
            for option in options(c) {
                assert!(
                    !option.doc.is_empty(),
                    "{} ({}): option `{}` has no doc comment",
                    c.name,
                    adapter.name,
                    option.name
                );
            }
        }
    }

    #[test]
    fn kinds_read_as_a_user_writes_them() {
        let schema = serde_json::json!({
            "properties": {
                "a": {"type": "integer", "default": 5, "description": "A."},
                "b": {"type": ["string", "null"], "default": null},
                "c": {"type": "array", "items": {"type": "string"}},
                "d": {"enum": ["x", "y"]},
                "e": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "required": ["c"],
        });
        let got: Vec<(String, String, String)> = properties(&schema)
            .into_iter()
            .map(|o| (o.name, o.kind, o.presence.text()))
            .collect();
        let want = [
            ("a", "integer", "default 5"),
            ("b", "string", "optional"),
            ("c", "array of string", "required"),
            ("d", "\"x\" | \"y\"", "optional"),
            ("e", "table of string", "optional"),
        ];
        let want: Vec<(String, String, String)> = want
            .iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn the_keys_of_a_table_option_follow_it() {
        let schema = serde_json::json!({
            "properties": {
                "gate": {
                    "type": ["object", "null"],
                    "description": "The gate.",
                    "properties": {
                        "tools": {"type": "array", "items": {"type": "string"}, "description": "T."},
                        "timeout_ms": {"type": "integer", "default": 30000, "description": "W."},
                    },
                    "required": ["tools"],
                },
                "batch": {
                    "anyOf": [
                        {"type": "object", "properties": {"max": {"type": "integer"}}},
                        {"type": "null"},
                    ],
                },
                "after": {"type": "string"},
            },
        });
        let got: Vec<(String, String)> = properties(&schema)
            .into_iter()
            .map(|o| (o.name, o.presence.text()))
            .collect();
        let want = [
            ("gate", "optional"),
            ("gate.tools", "required"),
            ("gate.timeout_ms", "default 30000"),
            ("batch", "optional"),
            ("batch.max", "optional"),
            ("after", "optional"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_schema_that_refers_to_itself_stops_at_the_depth_bound() {
        // A table whose key is the same table, MAX_TABLE_DEPTH + 2 levels deep.
        let mut schema =
            serde_json::json!({"type": "object", "properties": {"leaf": {"type": "string"}}});
        for _ in 0..MAX_TABLE_DEPTH + 2 {
            schema = serde_json::json!({"type": "object", "properties": {"t": schema}});
        }
        let names: Vec<String> = properties(&schema).into_iter().map(|o| o.name).collect();
        let deepest = names.iter().map(|n| n.matches('.').count()).max();
        assert_eq!(deepest, Some(MAX_TABLE_DEPTH), "{names:?}");
    }

    #[test]
    fn prose_wraps_at_the_width_on_spaces() {
        let text = "word ".repeat(40);
        let wrapped = wrap(text.trim_end());
        assert!(
            wrapped.lines().all(|l| l.chars().count() <= WRAP_WIDTH),
            "{wrapped}"
        );
        assert_eq!(wrapped.replace('\n', " "), text.trim_end());
        let long = "x".repeat(WRAP_WIDTH + 5);
        assert_eq!(wrap(&format!("a {long} b")), format!("a\n{long}\nb"));
        // A word that would start a list or a heading stays on the line before.
        for marker in ["-", "#", "1.", "+"] {
            let text = format!("{} {marker} end", "y".repeat(WRAP_WIDTH - 1));
            assert_eq!(
                wrap(&text),
                format!("{} {marker}\nend", "y".repeat(WRAP_WIDTH - 1))
            );
        }
    }

    #[test]
    fn code_spans_hold_backticks_and_slugs_follow_github() {
        assert_eq!(code("a"), "`a`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`a`"), "`` `a` ``");
        assert_eq!(slug("`file` (source)"), "file-source");
        assert_eq!(
            slug("`claude_code` (source, output)"),
            "claude_code-source-output"
        );
        assert_eq!(slug("Adapter `ndjson`"), "adapter-ndjson");
    }

    #[test]
    fn the_reference_has_a_section_for_every_type_and_option() {
        let reference = render_reference();
        for (_, c) in all() {
            let heading = format!("### {}\n", type_heading(c));
            let at = reference
                .find(&heading)
                .unwrap_or_else(|| panic!("no section `{heading}`"));
            let section = &reference[at..];
            let section = &section[..section[4..].find("\n##").map_or(section.len(), |e| e + 4)];
            for option in options(c) {
                assert!(
                    section.contains(&format!("- {}: ", code(&option.name))),
                    "{}: option `{}` missing from its section",
                    c.name,
                    option.name
                );
            }
            assert!(
                reference.contains(&format!("(#{})", slug(&type_heading(c)))),
                "{}: not in the index",
                c.name
            );
        }
    }
}

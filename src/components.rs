//! `patchbay components [TYPE] [--json]`: the component types of this build, and the
//! options of one, read from the adapters' descriptors.

use std::fmt::Write as _;
use std::process::ExitCode;

use patchbay_graph::config::suggestion;
use patchbay_graph::{Adapter, ComponentType};
use serde_json::{Map, Value};

use crate::pipeline::ADAPTERS;

/// Lists every component type, or prints the options of `type_name`.
pub fn run(type_name: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let Some(type_name) = type_name else {
        if json {
            let list: Vec<Value> = all()
                .map(|(adapter, c)| {
                    serde_json::json!({
                        "type": c.name,
                        "role": c.role.sections(),
                        "adapter": adapter.name,
                        "summary": c.summary,
                    })
                })
                .collect();
            emit(&format!("{}\n", serde_json::to_string_pretty(&list)?));
        } else {
            emit(&render_list());
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
    if json {
        let list: Vec<Value> = matching
            .iter()
            .map(|(adapter, c)| {
                serde_json::json!({
                    "type": c.name,
                    "role": c.role.sections(),
                    "adapter": adapter.name,
                    "summary": c.summary,
                    "options": (c.options)(),
                })
            })
            .collect();
        emit(&format!("{}\n", serde_json::to_string_pretty(&list)?));
    } else {
        for (i, (adapter, c)) in matching.iter().enumerate() {
            if i > 0 {
                emit("\n");
            }
            emit(&render_one(adapter, c));
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

/// Every component type with its adapter, in the adapters' order.
fn all() -> impl Iterator<Item = (&'static Adapter, &'static ComponentType)> {
    ADAPTERS
        .iter()
        .flat_map(|a| a.components.iter().map(move |c| (*a, c)))
}

/// One line per component type: name, where it goes, adapter, summary.
fn render_list() -> String {
    let mut rows: Vec<(&str, &str, &str, &str)> = all()
        .map(|(a, c)| (c.name, c.role.sections(), a.name, c.summary))
        .collect();
    rows.sort_by_key(|r| (r.0, r.1));
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
    let schema = (c.options)();
    let options = properties(schema.as_value());
    if options.is_empty() {
        out.push_str("\n  (no options)\n");
        return out;
    }
    out.push('\n');
    for option in options {
        let _ = writeln!(
            out,
            "  {}  {}  {}",
            option.name, option.kind, option.default
        );
        for line in option.doc.lines() {
            let _ = writeln!(out, "      {line}");
        }
    }
    out
}

/// One option of a component, as shown by `patchbay components TYPE`.
#[derive(Debug, PartialEq)]
struct OptionDoc {
    name: String,
    kind: String,
    /// `required`, `default …`, or `optional`.
    default: String,
    doc: String,
}

/// The options of an options schema, in declaration order (flattened parts included).
fn properties(schema: &Value) -> Vec<OptionDoc> {
    let mut out = Vec::new();
    collect(schema, &mut out);
    out
}

fn collect(schema: &Value, out: &mut Vec<OptionDoc>) {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            let default = match prop.get("default") {
                Some(v) if !v.is_null() => format!("default {v}"),
                _ if required.contains(&name.as_str()) => "required".to_owned(),
                _ => "optional".to_owned(),
            };
            out.push(OptionDoc {
                name: name.clone(),
                kind: kind(prop),
                default,
                doc: prop
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            });
        }
    }
    // Flattened structs and tagged variants carry their keys in sub-schemas.
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(parts) = schema.get(key).and_then(Value::as_array) {
            for part in parts {
                if part.get("properties").is_some() {
                    collect(part, out);
                }
            }
        }
    }
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
            for option in properties((c.options)().as_value()) {
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
            .map(|o| (o.name, o.kind, o.default))
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
}

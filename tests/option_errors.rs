//! Every option error points at the value, in the user's words: for every component type
//! of this build (the adapters' descriptors, as `patchbay components` lists them) and every
//! option in its schema, a config with a value of a type the option does not take, on its
//! own line, must be refused with an error at `FILE:LINE:COL` of that value (not at the
//! section's header), naming the option and saying what is wanted and what was found,
//! without Rust's words (`u64`, `struct`, …). The `discovery` source type, which the binary
//! registers beside the adapters and which has no descriptor, is not walked.

use patchbay_graph::{Role, SourceText, compile};
use serde_json::Value;

/// Words of Rust's and serde's that a user should never read in a config error (whole
/// words; the phrases anywhere).
const RUST_WORDS: &[&str] = &[
    "u8",
    "u16",
    "u32",
    "u64",
    "u128",
    "usize",
    "i8",
    "i16",
    "i32",
    "i64",
    "i128",
    "isize",
    "f32",
    "f64",
    "struct",
    "enum",
    "variant",
    "sequence",
    "newtype",
    "Option",
    "map",
    "identifier",
    "invalid type",
    "invalid value",
    "untagged",
];

/// The JSON types a schema accepts (`None`: anything).
fn accepted(schema: &Value) -> Option<Vec<&'static str>> {
    let mut out = Vec::new();
    let Value::Object(map) = schema else {
        // `true`: anything.
        return None;
    };
    let mut constrained = false;
    if let Some(t) = map.get("type") {
        constrained = true;
        let names: Vec<&Value> = match t {
            Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        for name in names {
            out.push(json_type(name.as_str().unwrap_or("")));
        }
    }
    for values in ["enum"] {
        if let Some(Value::Array(items)) = map.get(values) {
            constrained = true;
            out.extend(items.iter().map(type_of_value));
        }
    }
    if let Some(v) = map.get("const") {
        constrained = true;
        out.push(type_of_value(v));
    }
    for branches in ["anyOf", "oneOf"] {
        if let Some(Value::Array(items)) = map.get(branches) {
            constrained = true;
            for item in items {
                out.extend(accepted(item)?);
            }
        }
    }
    if let Some(Value::Array(items)) = map.get("allOf") {
        for item in items {
            if let Some(types) = accepted(item) {
                constrained = true;
                out.extend(types);
            }
        }
    }
    constrained.then_some(out)
}

fn json_type(name: &str) -> &'static str {
    match name {
        "string" => "string",
        "integer" => "integer",
        "number" => "number",
        "boolean" => "boolean",
        "array" => "array",
        "object" => "object",
        "null" => "null",
        other => panic!("unknown JSON type {other}"),
    }
}

fn type_of_value(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A TOML value the schema does not take, if there is one, and how the error must say it
/// was found.
fn wrong_value(schema: &Value) -> Option<(&'static str, &'static str)> {
    let types = accepted(schema)?;
    let takes = |t: &str| types.contains(&t) || (t == "integer" && types.contains(&"number"));
    [
        ("string", "\"fast\"", "found the string \"fast\""),
        ("boolean", "true", "found true"),
        ("integer", "5", "found the number 5"),
        ("array", "[1]", "found a list"),
    ]
    .into_iter()
    .find(|(t, _, _)| !takes(t))
    .map(|(_, v, found)| (v, found))
}

/// A TOML value the schema takes (for a required option beside the one under test).
fn right_value(schema: &Value) -> String {
    if let Some(Value::Array(values)) = schema.get("enum")
        && let Some(first) = values.first()
    {
        return toml_literal(first);
    }
    if let Some(v) = schema.get("const") {
        return toml_literal(v);
    }
    for branches in ["anyOf", "oneOf"] {
        if let Some(Value::Array(items)) = schema.get(branches)
            && let Some(first) = items.first()
        {
            return right_value(first);
        }
    }
    let t = match schema.get("type") {
        Some(Value::Array(items)) => items.first().and_then(Value::as_str),
        Some(one) => one.as_str(),
        None => None,
    };
    match t {
        Some("integer") | Some("number") => "1".into(),
        Some("boolean") => "false".into(),
        Some("array") => "[]".into(),
        Some("object") => "{}".into(),
        _ => "\"x\"".into(),
    }
}

fn toml_literal(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

#[test]
fn every_option_error_points_at_the_value_in_user_words() {
    let registry = patchbay::registry();
    let mut failures = Vec::new();
    let mut checked = 0;
    let mut skipped = Vec::new();
    for adapter in patchbay::ADAPTERS {
        for component in adapter.components {
            let sections: &[&str] = match component.role {
                Role::Source(_) => &["sources"],
                Role::Filter(_) => &["filters"],
                Role::Output(_) => &["outputs"],
                Role::Link { .. } => &["sources", "outputs"],
            };
            let schema = (component.options)();
            let empty = serde_json::Map::new();
            let properties = schema
                .get("properties")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for (option, option_schema) in properties {
                let Some((wrong, found)) = wrong_value(option_schema) else {
                    skipped.push(format!("{}.{option}", component.name));
                    continue;
                };
                for section in sections {
                    // The other required options, right; then the one under test, wrong.
                    let mut text = format!("[{section}.bus]\ntype = \"{}\"\n", component.name);
                    for other in required.iter().filter(|r| **r != option) {
                        let value = right_value(&properties[*other]);
                        text.push_str(&format!("{other} = {value}\n"));
                    }
                    let line = text.lines().count() + 1;
                    let col = option.chars().count() + 4;
                    text.push_str(&format!("{option} = {wrong}\n"));
                    checked += 1;
                    let what = format!("[{section}] type {}, {option} = {wrong}", component.name);
                    let file = SourceText::new("bus.toml", text.clone());
                    let errors = match compile(&[file], &registry) {
                        Ok(_) => {
                            failures.push(format!("{what}: accepted:\n{text}"));
                            continue;
                        }
                        Err(errors) => errors,
                    };
                    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
                    if errors.iter().any(|d| (d.line, d.col) == (1, 1)) {
                        failures.push(format!(
                            "{what}: an error at the section's header: {shown:?}"
                        ));
                    }
                    let Some(error) = errors
                        .iter()
                        .find(|d| d.file == "bus.toml" && (d.line, d.col) == (line, col))
                    else {
                        failures.push(format!(
                            "{what}: no error at bus.toml:{line}:{col}: {shown:?}"
                        ));
                        continue;
                    };
                    let message = &error.message;
                    if !message.starts_with(&format!("bus: {option}: ")) {
                        failures.push(format!("{what}: the option is not named first: {error}"));
                    }
                    if !message.contains("expected ") || !message.contains(found) {
                        failures.push(format!("{what}: not what is wanted and `{found}`: {error}"));
                    }
                    let words: Vec<&str> = message
                        .split(|c: char| !c.is_alphanumeric() && c != '_')
                        .collect();
                    for rust in RUST_WORDS {
                        let said = if rust.contains(' ') {
                            message.contains(rust)
                        } else {
                            words.contains(rust)
                        };
                        if said {
                            failures.push(format!("{what}: Rust's word `{rust}`: {error}"));
                        }
                    }
                }
            }
        }
    }
    // Options that take any value have no wrong one: listed, so that a reader sees them.
    if !skipped.is_empty() {
        println!("options that take any value (not walked): {skipped:?}");
    }
    assert!(
        checked >= 100,
        "only {checked} options walked: is the registry empty?"
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} options:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

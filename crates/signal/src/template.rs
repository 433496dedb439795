//! Text templates with `{path}` placeholders: `patchbay.{source}.{type}`,
//! `/agents/{payload.agentId}/state`. An output makes a subject, a topic or an address
//! from each signal with one.
//!
//! The syntax and the lookup of each placeholder's value are here; what a rendered value
//! may hold (which characters a NATS token, an MQTT level or an OSC address refuses) is
//! the protocol's, so each adapter checks the literal text and writes each value itself.

use std::borrow::Cow;
use std::convert::Infallible;

use serde_json::Value;

use crate::Signal;
use crate::path::{Found, Path, PathError};

/// A parsed template: literal text and `{path}` placeholders, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<TemplatePart>,
}

/// One piece of a [`Template`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplatePart {
    /// Literal text, never empty, holding neither `{` nor `}`.
    Text(String),
    /// A `{path}` placeholder: the signal's value at that path.
    Value(Path),
}

/// Why a template's text is not a template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `{` with no `}` after it.
    #[error("a `{{` is not closed")]
    Unclosed,
    /// A `}` that closes nothing.
    #[error("a `}}` without its `{{`")]
    Unopened,
    /// What stands between `{` and `}` is not a dot path.
    #[error(transparent)]
    Path(#[from] PathError),
}

impl Template {
    /// Parses `text`: each `{path}` is a placeholder, everything else literal text.
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else {
                return Err(TemplateError::Unclosed);
            };
            push_text(&rest[..open], &mut parts)?;
            let path = Path::parse(&rest[open + 1..open + close])?;
            parts.push(TemplatePart::Value(path));
            rest = &rest[open + close + 1..];
        }
        push_text(rest, &mut parts)?;
        Ok(Template { parts })
    }

    /// The pieces, in order (none for an empty template).
    pub fn parts(&self) -> &[TemplatePart] {
        &self.parts
    }

    /// The literal pieces, in order: what an adapter checks against its protocol.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            TemplatePart::Text(t) => Some(t.as_str()),
            TemplatePart::Value(_) => None,
        })
    }

    /// Whether the template has no placeholder (it renders the same for every signal).
    pub fn is_fixed(&self) -> bool {
        self.parts
            .iter()
            .all(|part| matches!(part, TemplatePart::Text(_)))
    }

    /// Appends the template for `signal` to `out`: literal text as written, and for each
    /// placeholder `push(path, value, out)`, where `value` is the signal's value at the
    /// path as text (a string as it is, another value as its JSON text), or `None` where
    /// the signal has none there or null. The first error of `push` stops the rendering.
    pub fn try_render<E>(
        &self,
        signal: &Signal,
        out: &mut String,
        mut push: impl FnMut(&Path, Option<&str>, &mut String) -> Result<(), E>,
    ) -> Result<(), E> {
        for part in &self.parts {
            match part {
                TemplatePart::Text(t) => out.push_str(t),
                TemplatePart::Value(path) => {
                    let value = match path.get(signal) {
                        None | Some(Found::Json(Value::Null)) => None,
                        Some(Found::Str(s)) => Some(Cow::Borrowed(s)),
                        Some(Found::Json(Value::String(s))) => Some(Cow::Borrowed(s.as_str())),
                        Some(found) => Some(Cow::Owned(found.to_value().to_string())),
                    };
                    push(path, value.as_deref(), out)?;
                }
            }
        }
        Ok(())
    }

    /// [`try_render`](Template::try_render) for a `push` that always succeeds: it gets
    /// each placeholder's value as text, or `None`.
    pub fn render(
        &self,
        signal: &Signal,
        out: &mut String,
        mut push: impl FnMut(Option<&str>, &mut String),
    ) {
        let rendered: Result<(), Infallible> = self.try_render(signal, out, |_, value, out| {
            push(value, out);
            Ok(())
        });
        let Ok(()) = rendered;
    }
}

/// Adds literal text to `parts`, refusing a `}` in it (it would close nothing).
fn push_text(text: &str, parts: &mut Vec<TemplatePart>) -> Result<(), TemplateError> {
    if text.contains('}') {
        return Err(TemplateError::Unopened);
    }
    if !text.is_empty() {
        parts.push(TemplatePart::Text(text.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::object;

    fn parse(text: &str) -> Template {
        Template::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn text(t: &str) -> TemplatePart {
        TemplatePart::Text(t.into())
    }

    fn value(p: &str) -> TemplatePart {
        TemplatePart::Value(Path::parse(p).unwrap())
    }

    /// Renders with each value in `<>`, `-` for none.
    fn render(template: &str, signal: &Signal) -> String {
        let mut out = String::new();
        parse(template).render(signal, &mut out, |v, out| {
            out.push('<');
            out.push_str(v.unwrap_or("-"));
            out.push('>');
        });
        out
    }

    #[test]
    fn text_and_placeholders_in_order() {
        assert_eq!(parse("").parts(), &[]);
        assert_eq!(parse("a.b").parts(), &[text("a.b")]);
        assert_eq!(parse("{type}").parts(), &[value("type")]);
        assert_eq!(
            parse("patchbay.{source}.{type}").parts(),
            &[text("patchbay."), value("source"), text("."), value("type")]
        );
        assert_eq!(
            parse("{a}{payload.b}c").parts(),
            &[value("a"), value("payload.b"), text("c")]
        );
        assert_eq!(
            parse("/x/{signal.metadata.n}").parts(),
            &[text("/x/"), value("signal.metadata.n")]
        );
        let t = parse("a{x}b{y}");
        assert_eq!(t.texts().collect::<Vec<_>>(), ["a", "b"]);
        assert!(!t.is_fixed());
        assert!(parse("a/b").is_fixed());
        assert!(parse("").is_fixed());
    }

    #[test]
    fn bad_templates() {
        for (bad, want) in [
            ("a.{type", TemplateError::Unclosed),
            ("{", TemplateError::Unclosed),
            ("{a}{", TemplateError::Unclosed),
            ("a}", TemplateError::Unopened),
            ("}", TemplateError::Unopened),
            ("{a}}", TemplateError::Unopened),
            ("a.{}", TemplateError::Path(PathError::Empty(String::new()))),
            (
                "{a..b}",
                TemplateError::Path(PathError::Empty("a..b".into())),
            ),
        ] {
            assert_eq!(Template::parse(bad), Err(want), "{bad}");
        }
        assert_eq!(TemplateError::Unclosed.to_string(), "a `{` is not closed");
        assert_eq!(TemplateError::Unopened.to_string(), "a `}` without its `{`");
    }

    #[test]
    fn values_as_text() {
        let s = Signal::new(
            "tool.error",
            "openai:ollama",
            object! {"s" => "a b", "n" => 3, "f" => 1.5, "t" => true, "e" => "", "z" => Value::Null, "o" => json!({"k": [1]})},
        )
        .with_meta("m", "meta");
        assert_eq!(
            render("{type}.{source}", &s),
            "<tool.error>.<openai:ollama>"
        );
        assert_eq!(
            render("{s}|{payload.n}|{f}|{t}|{e}", &s),
            "<a b>|<3>|<1.5>|<true>|<>"
        );
        assert_eq!(render("{z}|{missing}|{o.k.5}", &s), "<->|<->|<->");
        assert_eq!(render("{o}|{o.k}|{o.k.0}", &s), "<{\"k\":[1]}>|<[1]>|<1>");
        assert_eq!(render("{metadata.m}", &s), "<meta>");
        assert_eq!(render("{timestamp}", &s), format!("<{}>", s.timestamp));
        assert_eq!(render("fixed", &s), "fixed");
        let mut out = String::from("kept:");
        parse("{s}").render(&s, &mut out, |v, out| out.push_str(v.unwrap_or("")));
        assert_eq!(out, "kept:a b");
    }

    #[test]
    fn the_first_error_stops_the_rendering() {
        let s = Signal::new("t", "src", object! {"a" => 1});
        let mut seen = Vec::new();
        let mut out = String::new();
        let result = parse("x{a}y{b}z{c}").try_render(&s, &mut out, |path, v, out| {
            seen.push(path.as_str().to_owned());
            match v {
                Some(v) => {
                    out.push_str(v);
                    Ok(())
                }
                None => Err(path.as_str().to_owned()),
            }
        });
        assert_eq!(result, Err("b".to_owned()));
        assert_eq!(seen, ["a", "b"]);
        assert_eq!(out, "x1y");
    }
}

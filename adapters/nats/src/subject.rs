//! Subjects from a template: `patchbay.{source}.{type}` with each `{path}` replaced by the
//! signal's value at that path, made into one valid subject token.

use patchbay_signal::Signal;
use patchbay_signal::template::{Template, TemplatePart};
use serde::Deserialize;
use serde::de::{Deserializer, Error as _};

/// A parsed subject template.
#[derive(Debug, Clone)]
pub struct SubjectTemplate {
    template: Template,
}

patchbay_graph::described_as!(SubjectTemplate, {"type": "string"});

impl SubjectTemplate {
    /// Parses a template: literal text, and `{path}` placeholders. Literal text may not
    /// hold wildcards (`*`, `>`) or spaces: an output publishes on one subject.
    pub fn parse(text: &str) -> Result<SubjectTemplate, String> {
        let template = Template::parse(text).map_err(|e| format!("`{text}`: {e}"))?;
        if template
            .texts()
            .any(|t| t.contains(['*', '>']) || t.chars().any(char::is_whitespace))
        {
            return Err(format!(
                "`{text}`: no wildcards or spaces in an output's subject"
            ));
        }
        // Placeholders render as a non-empty token, so checking with `x` in each checks
        // every subject the template can make.
        let mut sample = String::new();
        for part in template.parts() {
            match part {
                TemplatePart::Text(t) => sample.push_str(t),
                TemplatePart::Value(_) => sample.push('x'),
            }
        }
        if sample.is_empty() || sample.split('.').any(str::is_empty) {
            return Err(format!("`{text}`: a subject has no empty tokens"));
        }
        Ok(SubjectTemplate { template })
    }

    /// The subject of `signal`, appended to `out`.
    pub fn render(&self, signal: &Signal, out: &mut String) {
        self.template.render(signal, out, |value, out| match value {
            Some(value) => sanitize_token(value, out),
            None => out.push('_'),
        });
    }

    /// The subject a stream for this template listens on: the fixed tokens before the
    /// first placeholder, then `>` (`patchbay.{source}.{type}` → `patchbay.>`).
    pub fn stream_subject(&self) -> String {
        let mut fixed = String::new();
        for part in self.template.parts() {
            match part {
                TemplatePart::Text(t) => fixed.push_str(t),
                TemplatePart::Value(_) => break,
            }
        }
        let tokens: Vec<&str> = fixed.split('.').collect();
        // The last token is complete only if a `.` follows it.
        let whole = &tokens[..tokens.len().saturating_sub(1)];
        if whole.is_empty() {
            ">".into()
        } else {
            format!("{}.>", whole.join("."))
        }
    }
}

impl<'de> Deserialize<'de> for SubjectTemplate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        SubjectTemplate::parse(&text).map_err(D::Error::custom)
    }
}

/// Appends `value` as one subject token: `.`, `*`, `>` and whitespace (and control
/// characters) become `_`; an empty value is `_`.
pub fn sanitize_token(value: &str, out: &mut String) {
    if value.is_empty() {
        out.push('_');
        return;
    }
    out.extend(value.chars().map(|c| {
        if matches!(c, '.' | '*' | '>') || c.is_whitespace() || c.is_control() {
            '_'
        } else {
            c
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_signal::object;

    fn render(template: &str, signal: &Signal) -> String {
        let mut out = String::new();
        SubjectTemplate::parse(template)
            .unwrap()
            .render(signal, &mut out);
        out
    }

    #[test]
    fn placeholders_become_single_sanitized_tokens() {
        let s = Signal::new(
            "tool.error",
            "openai:ollama",
            object! {"agentId" => "a b>c*", "n" => 3},
        );
        assert_eq!(
            render("patchbay.{source}.{type}", &s),
            "patchbay.openai:ollama.tool_error"
        );
        assert_eq!(render("a.{agentId}.{n}.{missing}", &s), "a.a_b_c_.3._");
        assert_eq!(render("x.{payload.agentId}", &s), "x.a_b_c_");
    }

    #[test]
    fn stream_subjects() {
        let t = |s: &str| SubjectTemplate::parse(s).unwrap().stream_subject();
        assert_eq!(t("patchbay.{source}.{type}"), "patchbay.>");
        assert_eq!(t("a.b.{type}"), "a.b.>");
        assert_eq!(t("a.b{type}"), "a.>");
        assert_eq!(t("{type}"), ">");
        assert_eq!(t("fixed.subject"), "fixed.>");
    }

    #[test]
    fn bad_templates() {
        for bad in [
            "", "a..b", "a.*", "a.>", "a b", "a.{type", "a.{}", ".{type}", "a.}",
        ] {
            assert!(SubjectTemplate::parse(bad).is_err(), "{bad}");
        }
    }
}

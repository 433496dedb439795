//! `${ENV_VAR}` substitution inside config strings.
//!
//! Substitution happens on parsed string values, not on the file text, so locations stay
//! exact; the substituted values are remembered as secrets and scrubbed from every message
//! patchbay prints about the config.

use std::ops::Range;

/// The values substituted so far, to scrub from messages.
#[derive(Debug, Default, Clone)]
pub struct Secrets {
    values: Vec<(String, String)>,
}

impl Secrets {
    /// Replaces every substituted value in `message` by its `${NAME}`.
    pub fn scrub(&self, message: &str) -> String {
        let mut out = message.to_owned();
        for (name, value) in &self.values {
            if !value.is_empty() {
                out = out.replace(value.as_str(), &format!("${{{name}}}"));
            }
        }
        out
    }
}

/// Substitutes `${NAME}` in `text` from `lookup`; `$$` is a literal `$`. Returns the new
/// text, or an error message naming the missing variable.
pub fn substitute(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Secrets,
) -> Result<Option<String>, String> {
    if !text.contains('$') {
        return Ok(None);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            changed = true;
        } else if let Some(tail) = after.strip_prefix('{') {
            let end = tail.find('}').ok_or_else(|| {
                "unterminated `${` in string (write `$$` for a literal `$`)".to_owned()
            })?;
            let name = &tail[..end];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!(
                    "`${{{name}}}` is not a valid environment variable name"
                ));
            }
            let value =
                lookup(name).ok_or_else(|| format!("environment variable `{name}` is not set"))?;
            out.push_str(&value);
            secrets.values.push((name.to_owned(), value));
            rest = &tail[end + 1..];
            changed = true;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(changed.then_some(out))
}

/// Walks a parsed TOML value, substituting in every string; errors carry their span.
pub fn substitute_tree(
    value: &mut toml::Spanned<toml::de::DeValue<'_>>,
    lookup: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Secrets,
    errors: &mut Vec<(Range<usize>, String)>,
) {
    use toml::de::DeValue;
    let span = value.span();
    match value.get_mut() {
        DeValue::String(s) => match substitute(s, lookup, secrets) {
            Ok(Some(new)) => *s = std::borrow::Cow::Owned(new),
            Ok(None) => {}
            Err(e) => errors.push((span, e)),
        },
        DeValue::Array(items) => {
            for item in items.iter_mut() {
                substitute_tree(item, lookup, secrets, errors);
            }
        }
        DeValue::Table(table) => {
            for (_, item) in table.iter_mut() {
                substitute_tree(item, lookup, secrets, errors);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "s3cret".to_owned())
    }

    #[test]
    fn substitutes_and_scrubs() {
        let mut secrets = Secrets::default();
        let out = substitute("Bearer ${TOKEN}, $$5, $x", &env, &mut secrets).unwrap();
        assert_eq!(out.as_deref(), Some("Bearer s3cret, $5, $x"));
        assert_eq!(secrets.scrub("bad value s3cret"), "bad value ${TOKEN}");
        assert_eq!(substitute("plain", &env, &mut secrets), Ok(None));
    }

    #[test]
    fn missing_and_malformed() {
        let mut s = Secrets::default();
        assert!(
            substitute("${NOPE}", &env, &mut s)
                .unwrap_err()
                .contains("NOPE")
        );
        assert!(substitute("${TOKEN", &env, &mut s).is_err());
        assert!(substitute("${A-B}", &env, &mut s).is_err());
    }
}

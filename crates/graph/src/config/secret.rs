//! Secret option values (tokens, API keys).

use std::fmt;

use serde::Deserialize;

/// A secret string option (a token, an API key): `Debug` and `Display` show `***`, so it
/// stays out of logs, errors and status. Read the value (`.0`) only where it is sent.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl Secret {
    /// Whether the value is empty (or only whitespace).
    pub fn is_blank(&self) -> bool {
        self.0.trim().is_empty()
    }

    /// Whether `given` is this secret, compared in a time that does not depend on where
    /// they differ (a token check must not tell an attacker how much it got right).
    pub fn matches(&self, given: &str) -> bool {
        let (a, b) = (given.as_bytes(), self.0.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl schemars::JsonSchema for Secret {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Secret".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A secret (never logged or shown); `${ENV}` keeps it out of the file.",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn never_shown() {
        let s = Secret("hunter2".into());
        assert_eq!(format!("{s:?} {s}"), "Secret(***) ***");
        assert!(!s.is_blank());
        assert!(Secret(" ".into()).is_blank());
    }
}

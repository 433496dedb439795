//! Extra request headers of a connection (`headers = { Authorization = "Bearer ${TOKEN}" }`).

use std::collections::BTreeMap;
use std::fmt;

use reqwest::header::{HeaderName, HeaderValue};
use serde::Deserialize;

/// Extra request headers, sent with every connection attempt. Their values often carry
/// tokens, so `Debug` shows the names only and nothing here ever logs a value.
#[derive(Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct Headers(pub BTreeMap<String, String>);

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|name| (name, "***")))
            .finish()
    }
}

impl Headers {
    /// Checks every name and value; the error says which header is wrong (not its value).
    pub fn check(&self) -> Result<(), String> {
        for (name, value) in &self.0 {
            if HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(format!("`{name}` is not a header name"));
            }
            if HeaderValue::from_str(value).is_err() {
                return Err(format!("the value of `{name}` is not a valid header value"));
            }
        }
        Ok(())
    }

    /// The headers as HTTP header pairs (values marked sensitive); invalid ones, which
    /// [`Headers::check`] refuses, are skipped.
    pub fn pairs(&self) -> impl Iterator<Item = (HeaderName, HeaderValue)> + '_ {
        self.0.iter().filter_map(|(name, value)| {
            let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
            let mut value = HeaderValue::from_str(value).ok()?;
            value.set_sensitive(true);
            Some((name, value))
        })
    }
}

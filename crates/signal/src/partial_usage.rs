//! `token_usage` from a producer that may give only some of the counts (a stream frame
//! with the output tokens but not the input ones): the count it lacks is 0, and named in
//! `metadata.missing`, so that a consumer can tell a real 0 from an unknown.

use crate::Signal;
use crate::well_known::{Payload, TokenUsage};

/// The counts a producer gave, each possibly absent.
#[derive(Debug, Clone, PartialEq)]
pub struct PartialUsage {
    /// The consuming agent.
    pub agent_id: String,
    /// Prompt (input) tokens, if given.
    pub input: Option<u64>,
    /// Completion (output) tokens, if given.
    pub output: Option<u64>,
    /// The model used.
    pub model: Option<String>,
    /// Estimated cost in USD.
    pub cost: Option<f64>,
}

impl PartialUsage {
    /// The `token_usage` signal from `source`: an absent count is 0 and its name
    /// (`promptTokens`, `completionTokens`) is listed in `metadata.missing`.
    pub fn into_signal(self, source: &str) -> Signal {
        let missing: Vec<&str> = [
            ("promptTokens", self.input.is_none()),
            ("completionTokens", self.output.is_none()),
        ]
        .into_iter()
        .filter_map(|(name, absent)| absent.then_some(name))
        .collect();
        let signal = TokenUsage {
            agent_id: self.agent_id,
            prompt_tokens: self.input.unwrap_or(0),
            completion_tokens: self.output.unwrap_or(0),
            model: self.model,
            cost: self.cost,
        }
        .into_signal(source);
        if missing.is_empty() {
            signal
        } else {
            signal.with_meta("missing", missing)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn usage(input: Option<u64>, output: Option<u64>) -> Signal {
        PartialUsage {
            agent_id: "a".into(),
            input,
            output,
            model: Some("m".into()),
            cost: None,
        }
        .into_signal("test")
    }

    #[test]
    fn an_absent_count_is_zero_and_named() {
        let both = usage(Some(3), Some(4));
        assert_eq!(
            both.to_value()["payload"].get("promptTokens"),
            Some(&json!(3))
        );
        assert_eq!(
            both.to_value()["payload"].get("completionTokens"),
            Some(&json!(4))
        );
        assert_eq!(both.meta("missing"), None);
        let output_only = usage(None, Some(4));
        assert_eq!(
            output_only.to_value()["payload"].get("promptTokens"),
            Some(&json!(0))
        );
        assert_eq!(output_only.meta("missing"), Some(&json!(["promptTokens"])));
        let neither = usage(None, None);
        assert_eq!(
            neither.meta("missing"),
            Some(&json!(["promptTokens", "completionTokens"]))
        );
        assert_eq!(neither.kind, "token_usage");
    }
}

//! `when`: passes the signals that match a condition; the others leave by `.dropped`.

use std::sync::Arc;

use patchbay_graph::{Diagnostic, Emit, Filter, FilterSpec, Options};
use patchbay_signal::SharedSignal;
use serde::Deserialize;

use crate::ConfigError;
use crate::condition::Condition;
use crate::jq::JqExpr;

/// Options of a `when` filter: exactly one of `when` and `expr`.
///
/// ```toml
/// when = { type = "midi.note_on", "payload.velocity" = { gt = 0 } }
/// # or
/// expr = '.type == "midi.note_on" and .payload.velocity > 0'
/// ```
///
/// See [`crate::condition`] for the operators and their exact meaning.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WhenConfig {
    /// An operator table (`path = condition`, all must hold), an array of them (any must
    /// hold), or a string holding a jq expression.
    #[serde(default)]
    pub when: Option<Condition>,
    /// A jq expression, run on the envelope: passes when its first output is neither
    /// `false` nor `null` (no output or a runtime error: does not pass).
    #[serde(default)]
    pub expr: Option<JqExpr>,
}

/// Builds a `when` from its options.
pub fn build(options: &Options<'_>) -> Result<FilterSpec, Diagnostic> {
    let config: WhenConfig = options.parse()?;
    config.into_spec().map_err(|e| e.locate(options))
}

impl WhenConfig {
    /// Checks the combination of options and makes the filter's spec.
    pub fn into_spec(self) -> Result<FilterSpec, ConfigError> {
        let condition = match (self.when, self.expr) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::not_both("when", "expr"));
            }
            (Some(c), None) => c,
            (None, Some(e)) => Condition::Jq(e),
            (None, None) => {
                return Err(ConfigError::whole(
                    "`when` needs `when` (an operator table) or `expr` (a jq expression)",
                ));
            }
        };
        let condition = Arc::new(condition);
        Ok(FilterSpec::new(None, move || {
            Box::new(When {
                condition: condition.clone(),
            })
        }))
    }
}

/// A running `when`.
pub struct When {
    condition: Arc<Condition>,
}

impl Filter for When {
    fn on_signal(&mut self, signal: SharedSignal, _now: i64, emit: &mut Emit) {
        if self.condition.matches(&signal) {
            emit.pass(signal);
        } else {
            emit.drop(signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Driver, config, config_error, sig};
    use patchbay_graph::Port;

    fn run(toml: &str) -> Vec<String> {
        let spec = config::<WhenConfig>(toml).into_spec().unwrap();
        assert_eq!(spec.clock, None);
        Driver::new(&spec).run(vec![sig(0, "a"), sig(1, "b"), sig(2, "c")])
    }

    #[test]
    fn passes_matches_and_drops_the_rest() {
        assert_eq!(
            run(r#"when = { n = { matches = "^[ac]$" } }"#),
            ["a", "-b", "c"]
        );
        assert_eq!(
            run(r#"when = [{ n = "a" }, { "payload.n" = "c" }]"#),
            ["a", "-b", "c"]
        );
        assert_eq!(run(r#"expr = '.payload.n != "b"'"#), ["a", "-b", "c"]);
        assert_eq!(run(r#"when = '.payload.n == "b"'"#), ["-a", "b", "-c"]);
    }

    #[test]
    fn signals_pass_through_unchanged() {
        let spec = config::<WhenConfig>("when = {}").into_spec().unwrap();
        let mut filter = spec.instantiate();
        let signal = Arc::new(sig(0, "a"));
        let mut emit = Emit::new();
        filter.on_signal(signal.clone(), 0, &mut emit);
        let out = emit.take();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, Port::Main);
        assert!(Arc::ptr_eq(&out[0].1, &signal), "the same Arc, not a copy");
    }

    #[test]
    fn config_errors() {
        let (l, c, m) = config_error::<WhenConfig>("expr = '.a |'");
        assert_eq!((l, c), (1, 8), "{m}");
        assert!(m.contains("bad jq expression"), "{m}");
        let (l, c, m) = config_error::<WhenConfig>("when = 5");
        assert_eq!((l, c), (1, 8), "{m}");
        let (l, c, m) = config_error::<WhenConfig>("whne = {}");
        assert_eq!((l, c), (1, 1), "{m}");
        assert!(m.contains("did you mean `when`"), "{m}");
        let e = config::<WhenConfig>("when = {}\nexpr = 'true'")
            .into_spec()
            .unwrap_err();
        assert_eq!(e.key, Some("expr"));
        let e = config::<WhenConfig>("").into_spec().unwrap_err();
        assert_eq!(e.key, None);
    }
}

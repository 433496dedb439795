//! `delta`: report by exception — pass a signal when the value at a path has moved.

use std::sync::Arc;

use patchbay_graph::{Emit, Filter, FilterSpec};
use patchbay_signal::SharedSignal;
use patchbay_signal::path::Path;
use serde::Deserialize;
use serde_json::Value;

use crate::keyed::{KeySpec, Keyed};
use crate::options::{DotPath, FilterConfig, default_max_keys, max_keys, non_negative_opt};
use crate::{ConfigError, RESET};

/// Options of a `delta` filter.
///
/// The value at `path` is compared with `last`, the last value that *passed* (per key):
///
/// - a signal without a value at `path` (missing or `null`) passes and changes nothing;
/// - the first value passes;
/// - a number passes when it differs from `last` by at least `threshold`
///   (`|v − last| >= threshold`), or with `percent` when `|v − last| >= |last|·percent/100`;
///   an unchanged number never passes, so `threshold = 0` (the default) and `percent = 0`
///   pass any change, as does `percent` when `last` is 0;
/// - any other value (or a number after a non-number) passes when it is not equal (JSON
///   equality: `1` equals `1.0`, `"5"` is not `5`) to `last`.
///
/// What does not pass leaves by `NAME.dropped`. A `reset` signal clears every key's `last`
/// and passes on.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeltaConfig {
    /// The value to watch (a dot path).
    pub path: DotPath,
    /// The smallest absolute change of a number that passes (≥ 0, default 0: any change).
    #[serde(default, deserialize_with = "non_negative_opt")]
    pub threshold: Option<f64>,
    /// The smallest change of a number that passes, in percent of `last` (≥ 0). Not with
    /// `threshold`.
    #[serde(default, deserialize_with = "non_negative_opt")]
    pub percent: Option<f64>,
    /// Compare each value at this path separately (a missing value is one more key).
    #[serde(default)]
    pub key: Option<DotPath>,
    /// At most this many keys are remembered (default 10000, at most 1000000); the least
    /// recently used one is forgotten (its next value passes as a first one).
    #[serde(default = "default_max_keys", deserialize_with = "max_keys")]
    pub max_keys: u64,
}

impl FilterConfig for DeltaConfig {
    fn into_spec(self) -> Result<FilterSpec, ConfigError> {
        let bound = match (self.threshold, self.percent) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::not_both("threshold", "percent"));
            }
            (_, Some(p)) => Bound::Percent(p),
            (t, None) => Bound::Absolute(t.unwrap_or(0.0)),
        };
        let settings = Arc::new(Settings {
            path: self.path.0,
            bound,
            keys: KeySpec::new(self.key.map(|k| k.0), self.max_keys),
        });
        Ok(FilterSpec::new(None, move || {
            Box::new(Delta::new(settings.clone()))
        }))
    }
}

#[derive(Debug)]
struct Settings {
    path: Path,
    bound: Bound,
    keys: KeySpec,
}

#[derive(Debug, Clone, Copy)]
enum Bound {
    Absolute(f64),
    Percent(f64),
}

impl Bound {
    /// Whether a move from `last` to `value` is large enough to report.
    fn passes(self, last: f64, value: f64) -> bool {
        if value == last {
            return false;
        }
        let moved = (value - last).abs();
        match self {
            Bound::Absolute(threshold) => moved >= threshold,
            Bound::Percent(percent) => moved >= last.abs() * percent / 100.0,
        }
    }
}

/// A running `delta`.
pub struct Delta {
    settings: Arc<Settings>,
    /// The last passed value of each key.
    keys: Keyed<Option<Value>>,
}

impl Delta {
    fn new(settings: Arc<Settings>) -> Self {
        Delta {
            keys: Keyed::new(&settings.keys),
            settings,
        }
    }
}

impl Filter for Delta {
    fn on_signal(&mut self, signal: SharedSignal, _now: i64, emit: &mut Emit) {
        if signal.kind == RESET {
            self.keys.clear();
            emit.pass(signal);
            return;
        }
        let Some(found) = self.settings.path.get(&signal).filter(|f| !f.is_null()) else {
            emit.pass(signal);
            return;
        };
        // An evicted key holds nothing that must be emitted: its `last` is just forgotten.
        let (slot, _evicted) = self.keys.entry(&signal, |_| None);
        let Some(last) = self.keys.get_mut(slot) else {
            emit.pass(signal);
            return;
        };
        let passes = match last.as_ref() {
            None => true,
            Some(previous) => match (previous.as_f64(), found.as_f64()) {
                (Some(l), Some(v)) => self.settings.bound.passes(l, v),
                _ => !found.equals(previous),
            },
        };
        if passes {
            *last = Some(found.to_value());
            emit.pass(signal);
        } else {
            emit.drop(signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Driver, config, config_error, reset};
    use patchbay_signal::{Object, Signal};
    use serde_json::json;

    /// A signal labelled `n` with `payload.v = v` (no `v` when `v` is `None`).
    fn val(n: &str, v: Option<Value>) -> Signal {
        let mut payload = Object::new();
        payload.insert("n".into(), n.into());
        if let Some(v) = v {
            payload.insert("v".into(), v);
        }
        Signal::new("x", "test:d", payload).at(0)
    }

    fn run(toml: &str, values: &[Value]) -> Vec<String> {
        let spec = config::<DeltaConfig>(toml).into_spec().unwrap();
        assert_eq!(spec.clock, None);
        let signals = values
            .iter()
            .enumerate()
            .map(|(i, v)| val(&i.to_string(), Some(v.clone())))
            .collect();
        Driver::new(&spec).run(signals)
    }

    #[test]
    fn default_passes_any_change() {
        let out = run(
            "path = \"payload.v\"",
            &[json!(1), json!(1), json!(1.0), json!(2), json!(1)],
        );
        assert_eq!(out, ["0", "-1", "-2", "3", "4"]);
        assert_eq!(
            run(
                "path = \"v\"\nthreshold = 0",
                &[json!(1), json!(1), json!(1.5)]
            ),
            ["0", "-1", "2"]
        );
    }

    #[test]
    fn absolute_threshold_from_the_last_passed_value() {
        let out = run(
            "path = \"v\"\nthreshold = 5",
            &[
                json!(10),
                json!(14),
                json!(14.9),
                json!(15),
                json!(11),
                json!(10),
                json!(14.999),
                json!(5),
            ],
        );
        // last: 10 → 15 (exactly 5 passes) → 10 → 5.
        assert_eq!(out, ["0", "-1", "-2", "3", "-4", "5", "-6", "7"]);
    }

    #[test]
    fn percent_of_the_last_passed_value() {
        let out = run(
            "path = \"v\"\npercent = 10",
            &[
                json!(100),
                json!(109),
                json!(110),
                json!(99.5),
                json!(99),
                json!(-10),
            ],
        );
        // 100 → 110 (10 of 100) → 99 (11 of 110; 10.5 is not enough) → -10.
        assert_eq!(out, ["0", "-1", "2", "-3", "4", "5"]);
        let out = run(
            "path = \"v\"\npercent = 50",
            &[json!(0), json!(0), json!(0.001), json!(0.002)],
        );
        assert_eq!(out, ["0", "-1", "2", "3"], "from 0 any change passes");
        let out = run(
            "path = \"v\"\npercent = 50",
            &[json!(-4), json!(-3), json!(-2)],
        );
        assert_eq!(out, ["0", "-1", "2"], "|last| for negative values");
    }

    #[test]
    fn non_numbers_pass_when_they_change() {
        let out = run(
            "path = \"v\"\nthreshold = 100",
            &[
                json!("a"),
                json!("a"),
                json!("b"),
                json!(5),
                json!("5"),
                json!("5"),
                json!(5),
                json!(6),
                json!({"x": [1]}),
                json!({"x": [1.0]}),
                json!(true),
                json!(true),
            ],
        );
        assert_eq!(
            out,
            [
                "0", "-1", "2", "3", "4", "-5", "6", "-7", "8", "-9", "10", "-11"
            ]
        );
    }

    #[test]
    fn missing_or_null_values_pass_and_change_nothing() {
        let spec = config::<DeltaConfig>("path = \"v\"\nthreshold = 1")
            .into_spec()
            .unwrap();
        let out = Driver::new(&spec).run(vec![
            val("a", None),
            val("b", Some(json!(1))),
            val("c", None),
            val("d", Some(Value::Null)),
            val("e", Some(json!(1.5))),
            val("f", Some(json!(2))),
        ]);
        assert_eq!(out, ["a", "b", "c", "d", "-e", "f"]);
    }

    #[test]
    fn keys_reset_and_eviction() {
        let keyed = |n: &str, k: &str, v: i64| {
            let mut s = val(n, Some(json!(v)));
            s.payload.insert("k".into(), k.into());
            s
        };
        let spec = config::<DeltaConfig>("path = \"v\"\nkey = \"payload.k\"\nmax_keys = 2")
            .into_spec()
            .unwrap();
        let out = Driver::new(&spec).run(vec![
            keyed("a1", "a", 1),
            keyed("b1", "b", 1),
            keyed("a2", "a", 1),
            keyed("b2", "b", 2),
            keyed("c1", "c", 1),
            keyed("a3", "a", 1),
            reset(0),
            keyed("b3", "b", 2),
        ]);
        // c evicts a (least recently used), so a's next value is a first one again.
        assert_eq!(out, ["a1", "b1", "-a2", "b2", "c1", "a3", "reset", "b3"]);
    }

    #[test]
    fn config_errors() {
        let err = |toml: &str| config_error::<DeltaConfig>(toml);
        let (l, c, m) = err("path = \"v\"\nthreshold = -1");
        assert_eq!((l, c), (2, 13), "{m}");
        assert!(m.contains(">= 0"), "{m}");
        let (l, c, m) = err("path = \"v\"\npercent = nan");
        assert_eq!((l, c), (2, 11), "{m}");
        let (l, c, m) = err("path = \"\"");
        assert_eq!((l, c), (1, 8), "{m}");
        let (_, _, m) = err("threshold = 1");
        assert!(m.contains("missing field `path`"), "{m}");
        let e = config::<DeltaConfig>("path = \"v\"\nthreshold = 1\npercent = 2")
            .into_spec()
            .unwrap_err();
        assert_eq!(e.key, Some("percent"));
    }
}

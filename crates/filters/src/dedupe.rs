//! `dedupe`: drops a signal whose chosen fields were seen recently.

use std::sync::Arc;

use patchbay_graph::config::MAX_DURATION_MS;
use patchbay_graph::{ClockKind, Diagnostic, Emit, Filter, FilterSpec, Options};
use patchbay_signal::path::Path;
use patchbay_signal::{SharedSignal, Signal};
use serde::Deserialize;

use crate::keyed::{Key, KeySpec, Keyed};
use crate::options::{DotPath, FilterConfig, default_max_keys, max_keys, millis, positive_opt};
use crate::{ConfigError, RESET};

/// Options of a `dedupe` filter.
///
/// A signal is a duplicate when the values at `fields` (all of them together; by default
/// the whole envelope but its `id` and `timestamp`) are those of a signal that passed
/// less than `window_ms` before it, or, without `window_ms`, of one of the last
/// `max_keys` distinct values seen. Duplicates leave by `NAME.dropped`. The window counts
/// from the signal that passed, so a value repeated forever passes once per window.
///
/// The clock is the signals' timestamps by default (`event`): `dedupe` holds nothing
/// back, so it needs no timer, and a recording replayed at any speed drops the same
/// signals. A `reset` signal forgets every value and passes.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DedupeConfig {
    /// The paths whose values identify a signal (a missing value counts as one value);
    /// default: the whole envelope but `id` and `timestamp`.
    #[serde(default)]
    pub fields: Option<Vec<DotPath>>,
    /// A value seen again this many milliseconds (≥ 1) or more after it passed passes
    /// again; without it, a value is remembered until `max_keys` evicts it.
    #[serde(default, deserialize_with = "positive_opt")]
    pub window_ms: Option<u64>,
    /// At most this many distinct values are remembered (default 10000, at most 1000000);
    /// the least recently seen one is forgotten first.
    #[serde(default = "default_max_keys", deserialize_with = "max_keys")]
    pub max_keys: u64,
    /// `event` (default: the signals' timestamps) or `wall` (machine time).
    #[serde(default = "event_clock")]
    pub clock: ClockKind,
}

fn event_clock() -> ClockKind {
    ClockKind::Event
}

impl FilterConfig for DedupeConfig {
    fn check_ranges(&self, options: &Options<'_>) -> Result<(), Diagnostic> {
        options.check_range_opt("window_ms", self.window_ms, 1..=MAX_DURATION_MS)?;
        Ok(())
    }

    fn into_spec(self) -> Result<FilterSpec, ConfigError> {
        let fields = match self.fields {
            Some(fields) if fields.is_empty() => {
                return Err(ConfigError::at(
                    "fields",
                    "`fields` needs at least one path (leave it out for the whole envelope)",
                ));
            }
            Some(fields) => Some(fields.into_iter().map(|p| p.0).collect()),
            None => None,
        };
        let settings = Arc::new(Settings {
            fields,
            window: self.window_ms.map(millis),
            // Each key is computed by `key` below (from `fields` or the whole envelope).
            keys: KeySpec::new(None, self.max_keys),
        });
        Ok(FilterSpec::new(Some(self.clock), move || {
            Box::new(Dedupe {
                seen: Keyed::new(&settings.keys),
                settings: settings.clone(),
                now: i64::MIN,
            })
        }))
    }
}

#[derive(Debug)]
struct Settings {
    fields: Option<Vec<Path>>,
    window: Option<i64>,
    keys: KeySpec,
}

/// A running `dedupe`.
pub struct Dedupe {
    settings: Arc<Settings>,
    /// When each remembered value last passed.
    seen: Keyed<i64>,
    now: i64,
}

impl Dedupe {
    fn key(&self, signal: &Signal) -> Key {
        match &self.settings.fields {
            Some(paths) => Key::of_paths(paths, signal),
            None => {
                let mut value = signal.to_value();
                if let Some(o) = value.as_object_mut() {
                    o.remove("id");
                    o.remove("timestamp");
                }
                Key::of_value(&value)
            }
        }
    }
}

impl Filter for Dedupe {
    fn on_signal(&mut self, signal: SharedSignal, now: i64, emit: &mut Emit) {
        self.now = self.now.max(now);
        let now = self.now;
        if signal.kind == RESET {
            self.seen.clear();
            emit.pass(signal);
            return;
        }
        let key = self.key(&signal);
        let mut fresh = false;
        let (slot, _) = self.seen.entry_for(key, |_| {
            fresh = true;
            now
        });
        let Some(passed_at) = self.seen.get_mut(slot) else {
            return;
        };
        let expired = self
            .settings
            .window
            .is_some_and(|w| now.saturating_sub(*passed_at) >= w);
        if fresh || expired {
            *passed_at = now;
            emit.pass(signal);
        } else {
            emit.drop(signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Driver, assert_config_refuses, config, reset, sig, timeline};

    fn run(toml: &str, signals: Vec<Signal>) -> Vec<String> {
        let spec = config::<DedupeConfig>(toml).into_spec().unwrap();
        Driver::new(&spec).run(signals)
    }

    #[test]
    fn by_fields_within_the_window() {
        let toml = "fields = [\"payload.k\"]\nwindow_ms = 100";
        let out = run(
            toml,
            timeline("a1@0 b1@50 a2@99 a3@100 b2@150 a4@199 a5@200"),
        );
        // The window counts from the signal that passed: a1 at 0, a3 at 100, a5 at 200.
        assert_eq!(out, ["a1", "b1", "-a2", "a3", "b2", "-a4", "a5"]);
    }

    #[test]
    fn whole_envelope_but_id_and_timestamp() {
        // Same payload at another time is a duplicate; another payload is not.
        let out = run(
            "",
            vec![sig(0, "a"), sig(5, "a"), sig(6, "b"), sig(1_000_000, "a")],
        );
        assert_eq!(out, ["a", "-a", "b", "-a"]);
        let other_source = {
            let mut s = sig(7, "a");
            s.source = "test:other".into();
            s
        };
        assert_eq!(run("", vec![sig(0, "a"), other_source]), ["a", "a"]);
    }

    #[test]
    fn max_keys_forgets_the_least_recently_seen() {
        let toml = "fields = [\"payload.k\"]\nmax_keys = 2";
        let out = run(toml, timeline("a1@0 b1@1 a2@2 c1@3 b2@4 a3@5"));
        // c evicts b (a was seen again at 2), then b comes back and evicts a.
        assert_eq!(out, ["a1", "b1", "-a2", "c1", "b2", "a3"]);
    }

    #[test]
    fn reset_forgets_and_passes() {
        let out = run("", vec![sig(0, "a"), reset(1), sig(2, "a")]);
        assert_eq!(out, ["a", "reset", "a"]);
    }

    #[test]
    fn config_errors() {
        assert_config_refuses::<DedupeConfig>(&[
            ("window_ms = 0", (1, 13), ""),
            ("fields = [\"payload.\"]", (1, 10), ""),
        ]);
        let e = config::<DedupeConfig>("fields = []")
            .into_spec()
            .unwrap_err();
        assert_eq!(e.key, Some("fields"));
        let spec = config::<DedupeConfig>("").into_spec().unwrap();
        assert_eq!(spec.clock, Some(ClockKind::Event));
    }
}

//! `debounce`: per key, the last signal of a burst, once the key has been quiet.

use patchbay_graph::config::MAX_DURATION_MS;
use patchbay_graph::{ClockKind, Diagnostic, Emit, FilterSpec, Options};
use patchbay_signal::SharedSignal;
use serde::Deserialize;

use crate::ConfigError;
use crate::key_timers::{AfterRelease, HoldRules, Holding, KeyTimers};
use crate::keyed::KeySpec;
use crate::options::{
    FilterConfig, KeyPaths, default_max_keys, max_keys, millis, positive, positive_opt,
};

/// Options of a `debounce` filter.
///
/// Each key holds the newest signal of a burst; it is emitted once no signal of that key
/// has come for `quiet_ms`, or, with `max_wait_ms`, at the latest that long after the
/// burst's first signal, so a key that never pauses still gets through. The signals it
/// replaces leave by `NAME.dropped`. At end of input, on a `reset` signal and when
/// `max_keys` evicts a key, the held signals are emitted (in order of due time).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DebounceConfig {
    /// How long (ms, ≥ 1) a key must be quiet before its last signal is emitted.
    #[serde(deserialize_with = "positive")]
    pub quiet_ms: u64,
    /// Emit at the latest this many milliseconds (≥ `quiet_ms`) after a burst's first
    /// signal, even if the key is not quiet.
    #[serde(default, deserialize_with = "positive_opt")]
    pub max_wait_ms: Option<u64>,
    /// The path(s) whose values make a key (default `["agentId", "correlationId"]`).
    #[serde(default)]
    pub key: KeyPaths,
    /// At most this many keys are remembered (default 10000, at most 1000000); the least
    /// recently used one is evicted, after emitting its held signal.
    #[serde(default = "default_max_keys", deserialize_with = "max_keys")]
    pub max_keys: u64,
    /// `wall` (default: machine time) or `event` (the signals' timestamps).
    #[serde(default)]
    pub clock: ClockKind,
}

impl FilterConfig for DebounceConfig {
    fn check_ranges(&self, options: &Options<'_>) -> Result<(), Diagnostic> {
        options.check_range("quiet_ms", self.quiet_ms, 1..=MAX_DURATION_MS)?;
        options.check_range_opt("max_wait_ms", self.max_wait_ms, 1..=MAX_DURATION_MS)?;
        Ok(())
    }

    fn into_spec(self) -> Result<FilterSpec, ConfigError> {
        if self.max_wait_ms.is_some_and(|m| m < self.quiet_ms) {
            return Err(ConfigError::at(
                "max_wait_ms",
                format!(
                    "`max_wait_ms` must be at least `quiet_ms` ({})",
                    self.quiet_ms
                ),
            ));
        }
        Ok(Holding::spec(
            Some(self.clock),
            KeySpec::new(self.key.0, self.max_keys),
            Debounce {
                quiet: millis(self.quiet_ms),
                max_wait: self.max_wait_ms.map(millis),
            },
        ))
    }
}

/// A key's burst.
#[derive(Debug, Default)]
pub(crate) struct Burst {
    /// When the burst's first signal came (while the key holds a signal).
    started: Option<i64>,
}

/// A `debounce`'s rules, from its options: when a key's burst ends. Its running instances
/// are the shared holding filter over them.
#[derive(Debug)]
pub struct Debounce {
    quiet: i64,
    max_wait: Option<i64>,
}

impl HoldRules for Debounce {
    type State = Burst;

    fn on_signal(&self, keys: &mut KeyTimers<Burst>, signal: SharedSignal, emit: &mut Emit) {
        let now = keys.now();
        let slot = keys.entry(&signal, |_| Burst::default(), emit);
        let holding = keys.is_holding(slot);
        let Some(burst) = keys.state_mut(slot) else {
            return;
        };
        let started = match burst.started {
            Some(started) if holding => started,
            _ => now,
        };
        burst.started = Some(started);
        let mut due = now.saturating_add(self.quiet);
        if let Some(max_wait) = self.max_wait {
            due = due.min(started.saturating_add(max_wait));
        }
        keys.hold(slot, signal, due, emit);
    }

    fn released(&self, _due: i64, _burst: &mut Burst) -> AfterRelease {
        // The burst is over: the key is forgotten (nothing is left to remember).
        AfterRelease::Forget
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Driver, assert_config_refuses, config, timeline};

    fn run(toml: &str, line: &str) -> Vec<String> {
        let toml = format!("clock = \"event\"\nkey = \"payload.k\"\n{toml}");
        let spec = config::<DebounceConfig>(&toml).into_spec().unwrap();
        Driver::new(&spec).run(timeline(line))
    }

    #[test]
    fn the_last_of_a_burst_once_quiet() {
        let out = run("quiet_ms = 100", "a1@0 a2@50 a3@149 a4@300 a5@400");
        // a3 is held until 249; a4 at 300 starts a new burst; a5 at 400 replaces it
        // (400 is not after 400: the timer due at 400 fires first).
        assert_eq!(out, ["-a1", "-a2", "a3", "a4", "a5"]);
    }

    #[test]
    fn the_quiet_time_is_exact() {
        assert_eq!(run("quiet_ms = 100", "a1@0 a2@99"), ["-a1", "a2"]);
        assert_eq!(run("quiet_ms = 100", "a1@0 a2@100"), ["a1", "a2"]);
    }

    #[test]
    fn max_wait_bounds_a_burst_that_never_pauses() {
        let out = run(
            "quiet_ms = 100\nmax_wait_ms = 250",
            "a1@0 a2@80 a3@160 a4@240 a5@320 a6@400",
        );
        // The burst from 0 ends at 250 with a4; a5 starts the next one (due 570 at most).
        assert_eq!(out, ["-a1", "-a2", "-a3", "a4", "-a5", "a6"]);
    }

    #[test]
    fn keys_are_independent() {
        let out = run(
            "quiet_ms = 100",
            "a1@0 b1@10 a2@20 b2@30 c1@500 reset@510 c2@520",
        );
        assert_eq!(out, ["-a1", "-b1", "a2", "b2", "c1", "reset", "c2"]);
    }

    #[test]
    fn config_errors() {
        assert_config_refuses::<DebounceConfig>(&[
            ("max_wait_ms = 5", (1, 1), "quiet_ms"),
            ("quiet_ms = -1", (1, 12), ""),
        ]);
        let e = config::<DebounceConfig>("quiet_ms = 100\nmax_wait_ms = 50")
            .into_spec()
            .unwrap_err();
        assert_eq!(e.key, Some("max_wait_ms"));
    }
}

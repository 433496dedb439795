//! `sample`: one in N, a seeded random ratio, or the latest value per time window.

use patchbay_graph::config::MAX_DURATION_MS;
use patchbay_graph::{ClockKind, Diagnostic, Emit, FilterSpec, Options};
use patchbay_signal::SharedSignal;
use serde::Deserialize;

use crate::ConfigError;
use crate::key_timers::{AfterRelease, HoldRules, Holding, KeyTimers};
use crate::keyed::{Key, KeySpec};
use crate::options::{
    DotPath, FilterConfig, MAX_COUNT, default_max_keys, max_keys, millis, positive_opt, ratio_opt,
    seed_opt,
};

/// The seed of `ratio` when none is given: runs are reproducible by default.
pub const DEFAULT_SEED: u64 = 0x5EED_0F5A_4D1E;

/// Options of a `sample` filter: exactly one of `every`, `ratio` and `interval_ms`.
///
/// - `every = N` passes the 1st, (N+1)th, (2N+1)th … signal (of each key).
/// - `ratio = p` passes each signal with probability `p` (`0` never, `1` always), drawn
///   from a pseudo-random generator seeded with `seed`: the same seed and input give the
///   same choices. With `key`, each key has its own stream (seeded from `seed` and the
///   key), so a key's choices do not depend on the other keys' traffic.
/// - `interval_ms = I` divides time into windows `[kI, (k+1)I)` and emits the latest signal
///   of each non-empty window (per key) when the clock passes the window's end — when any
///   signal at or after `(k+1)I` arrives — or at end of input. Signals replaced within a
///   window leave by `NAME.dropped`, as do those `every` and `ratio` do not pass.
///
/// A `reset` signal emits the windows' held signals (in order of window end), clears every
/// key's state (counters, random streams) and passes on. A key evicted by `max_keys` first
/// emits its held signal.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SampleConfig {
    /// Pass one signal in this many (from 1 to 10^9), starting with the first.
    #[serde(default, deserialize_with = "positive_opt")]
    pub every: Option<u64>,
    /// Pass each signal with this probability (0 to 1).
    #[serde(default, deserialize_with = "ratio_opt")]
    pub ratio: Option<f64>,
    /// With `ratio`: the random generator's seed (any integer).
    #[serde(default, deserialize_with = "seed_opt")]
    pub seed: Option<u64>,
    /// Emit the latest signal of each window of this many milliseconds, from 1 to
    /// 86400000 (one day).
    #[serde(default, deserialize_with = "positive_opt")]
    pub interval_ms: Option<u64>,
    /// Sample each value at this path separately (a missing value is one more key).
    #[serde(default)]
    pub key: Option<DotPath>,
    /// At most this many keys are remembered (default 10000, at most 1000000); the least
    /// recently used one is evicted, after emitting its held signal.
    #[serde(default = "default_max_keys", deserialize_with = "max_keys")]
    pub max_keys: u64,
    /// With `interval_ms`: `wall` (default, machine time) or `event` (the signals'
    /// timestamps).
    #[serde(default)]
    pub clock: Option<ClockKind>,
}

impl FilterConfig for SampleConfig {
    fn check_ranges(&self, options: &Options<'_>) -> Result<(), Diagnostic> {
        options.check_range_opt("every", self.every, 1..=MAX_COUNT)?;
        options.check_range_opt("interval_ms", self.interval_ms, 1..=MAX_DURATION_MS)?;
        Ok(())
    }

    fn into_spec(self) -> Result<FilterSpec, ConfigError> {
        let mut chosen: Vec<&'static str> = Vec::new();
        if self.every.is_some() {
            chosen.push("every");
        }
        if self.ratio.is_some() {
            chosen.push("ratio");
        }
        if self.interval_ms.is_some() {
            chosen.push("interval_ms");
        }
        if let Some(second) = chosen.get(1) {
            return Err(ConfigError::at(
                second,
                format!(
                    "use only one of `every`, `ratio` and `interval_ms` (`{}` is set)",
                    chosen[0]
                ),
            ));
        }
        let mode = match (self.every, self.ratio, self.interval_ms) {
            (Some(n), _, _) => Mode::Every(n),
            (_, Some(p), _) => Mode::Ratio(p),
            (_, _, Some(ms)) => Mode::Interval(millis(ms)),
            _ => {
                return Err(ConfigError::whole(
                    "sample needs one of `every` (one in N), `ratio` (0 to 1) or `interval_ms`",
                ));
            }
        };
        if self.seed.is_some() && !matches!(mode, Mode::Ratio(_)) {
            return Err(ConfigError::only_with("seed", "ratio"));
        }
        let clock = match mode {
            Mode::Interval(_) => Some(self.clock.unwrap_or_default()),
            _ if self.clock.is_some() => {
                return Err(ConfigError::only_with("clock", "interval_ms"));
            }
            _ => None,
        };
        Ok(Holding::spec(
            clock,
            KeySpec::new(self.key.map(|k| k.0), self.max_keys),
            Sample {
                mode,
                seed: self.seed.unwrap_or(DEFAULT_SEED),
            },
        ))
    }
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Every(u64),
    Ratio(f64),
    Interval(i64),
}

/// splitmix64: small, fast, and good enough to sample signals.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform draw in `[0, 1)` with 53 bits of precision.
fn unit_draw(state: &mut u64) -> f64 {
    (splitmix64(state) >> 11) as f64 / (1u64 << 53) as f64
}

/// A key's state when it is first seen (or again after a reset or an eviction).
fn fresh_state(seed: u64, is_keyed: bool, key: &Key) -> KeyState {
    let mut rng = seed;
    if is_keyed {
        // Hashing the mix decorrelates the streams of keys whose hashes are close.
        let mut mix = seed ^ key.stable_hash();
        rng = splitmix64(&mut mix);
    }
    KeyState { count: 0, rng }
}

#[derive(Debug)]
pub(crate) struct KeyState {
    /// `every`: signals seen.
    count: u64,
    /// `ratio`: the random stream.
    rng: u64,
}

/// A `sample`'s rules, from its options: what it does with each signal. Its running
/// instances are the shared holding filter over them (with `interval_ms`, each key holds
/// the latest signal of its current window).
#[derive(Debug)]
pub struct Sample {
    mode: Mode,
    seed: u64,
}

impl HoldRules for Sample {
    type State = KeyState;

    fn on_signal(&self, keys: &mut KeyTimers<KeyState>, signal: SharedSignal, emit: &mut Emit) {
        let (seed, is_keyed) = (self.seed, keys.is_keyed());
        let slot = keys.entry(&signal, |key| fresh_state(seed, is_keyed, key), emit);
        let Some(state) = keys.state_mut(slot) else {
            return;
        };
        match self.mode {
            Mode::Every(n) => {
                let pass = state.count % n == 0;
                state.count = state.count.wrapping_add(1);
                if pass {
                    emit.pass(signal);
                } else {
                    emit.drop(signal);
                }
            }
            Mode::Ratio(p) => {
                if unit_draw(&mut state.rng) < p {
                    emit.pass(signal);
                } else {
                    emit.drop(signal);
                }
            }
            Mode::Interval(interval) => {
                let window = keys.now().div_euclid(interval);
                let due = window.saturating_add(1).saturating_mul(interval);
                keys.hold(slot, signal, due, emit);
            }
        }
    }

    fn released(&self, _due: i64, _state: &mut KeyState) -> AfterRelease {
        // A window's key has nothing else to remember: forget it.
        AfterRelease::Forget
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{
        Driver, assert_config_refuses, config, keyed, labels, reset, sig, timeline,
    };
    use patchbay_signal::Signal;

    fn driver(toml: &str) -> Driver {
        Driver::new(&config::<SampleConfig>(toml).into_spec().unwrap())
    }

    fn run(toml: &str, signals: Vec<Signal>) -> Vec<String> {
        driver(toml).run(signals)
    }

    fn numbered(count: usize) -> Vec<Signal> {
        (0..count).map(|i| sig(i as i64, &i.to_string())).collect()
    }

    #[test]
    fn every_passes_the_first_and_each_nth_after() {
        let out = run("every = 3", numbered(8));
        assert_eq!(out, ["0", "-1", "-2", "3", "-4", "-5", "6", "-7"]);
        assert_eq!(run("every = 1", numbered(3)), ["0", "1", "2"]);
        let out = run(
            "every = 2\nkey = \"payload.k\"",
            timeline("a1@0 b1@1 a2@2 a3@3 b2@4"),
        );
        assert_eq!(out, ["a1", "b1", "-a2", "a3", "-b2"]);
        let out = run(
            "every = 2",
            vec![sig(0, "a"), sig(1, "b"), reset(2), sig(3, "c")],
        );
        assert_eq!(out, ["a", "-b", "reset", "c"], "reset restarts the count");
    }

    #[test]
    fn every_eviction_restarts_a_key() {
        let out = run(
            "every = 2\nkey = \"payload.k\"\nmax_keys = 1",
            timeline("a1@0 b1@1 a2@2"),
        );
        assert_eq!(out, ["a1", "b1", "a2"]);
    }

    #[test]
    fn ratio_is_seeded_and_deterministic() {
        let passed = |toml: &str| {
            run(toml, numbered(2000))
                .into_iter()
                .filter(|l| !l.starts_with('-'))
                .collect::<Vec<_>>()
        };
        let a = passed("ratio = 0.25");
        assert_eq!(a, passed("ratio = 0.25"), "same default seed, same choices");
        assert_eq!(
            passed("ratio = 0.25\nseed = 7"),
            passed("ratio = 0.25\nseed = 7")
        );
        assert_ne!(
            passed("ratio = 0.25\nseed = 7"),
            passed("ratio = 0.25\nseed = 8")
        );
        assert!((400..600).contains(&a.len()), "{}", a.len());
        assert_eq!(passed("ratio = 0").len(), 0);
        assert_eq!(passed("ratio = 1").len(), 2000);
        assert_eq!(passed("ratio = 1.0\nseed = -1").len(), 2000);
        // With a key, a key's choices do not depend on the other keys.
        let only_a: Vec<Signal> = (0..200).map(|i| keyed(i, &format!("a{i}"), "a")).collect();
        let mixed: Vec<Signal> = (0..400)
            .map(|i| {
                if i % 2 == 0 {
                    keyed(i, &format!("a{}", i / 2), "a")
                } else {
                    keyed(i, &format!("b{i}"), "b")
                }
            })
            .collect();
        let toml = "ratio = 0.5\nkey = \"payload.k\"";
        let a_alone: Vec<String> = run(toml, only_a);
        let a_mixed: Vec<String> = run(toml, mixed)
            .into_iter()
            .filter(|l| l.trim_start_matches('-').starts_with('a'))
            .collect();
        assert_eq!(a_alone, a_mixed);
    }

    #[test]
    fn interval_emits_the_latest_of_each_window() {
        let i = "interval_ms = 100\nclock = \"event\"";
        let out = run(
            i,
            vec![
                sig(0, "a"),
                sig(50, "b"),
                sig(99, "c"),
                sig(100, "d"),
                sig(250, "e"),
                sig(260, "f"),
            ],
        );
        assert_eq!(out, ["-a", "-b", "c", "d", "-e", "f"]);
        let mut d = driver(i);
        assert!(d.push(sig(5, "a")).is_empty());
        assert_eq!(d.next_due(), Some(100));
        assert_eq!(labels(&d.push(sig(99, "b"))), ["-a"]);
        // The window [0, 100) closes at exactly 100, before the signal at 100.
        assert_eq!(labels(&d.push(sig(100, "c"))), ["b"]);
        assert_eq!(d.next_due(), Some(200));
        assert_eq!(labels(&d.push(sig(450, "d"))), ["c"]);
        assert_eq!(labels(&d.finish()), ["d"]);
        // Windows are aligned on multiples of the interval, negative times included.
        let out = run(i, vec![sig(-1, "a"), sig(0, "b")]);
        assert_eq!(out, ["a", "b"]);
    }

    #[test]
    fn interval_windows_close_for_every_key() {
        let k = "interval_ms = 100\nkey = \"payload.k\"\nclock = \"event\"";
        let out = run(k, timeline("b1@10 a1@20 b2@30 c1@150 a2@160"));
        // At 150 both windows [0,100) close, in the order of the signals they release.
        assert_eq!(out, ["-b1", "a1", "b2", "c1", "a2"]);
        let out = run(k, timeline("b1@10 a1@20 z@150"));
        assert_eq!(out, ["b1", "a1", "z"]);
        // End of input: in order of window end, then of the signals.
        let out = run(k, timeline("a1@120 b1@10"));
        assert_eq!(out, ["a1", "b1"], "out of order: b1 is handled at 120");
        let out = run(k, timeline("a1@150 b1@160 c1@170"));
        assert_eq!(out, ["a1", "b1", "c1"]);
    }

    #[test]
    fn interval_reset_and_eviction_emit_held_signals() {
        let k = "interval_ms = 100\nkey = \"payload.k\"\nclock = \"event\"\nmax_keys = 2";
        let out = run(k, timeline("a1@0 b1@1 c1@2 b2@3"));
        assert_eq!(
            out,
            ["a1", "-b1", "c1", "b2"],
            "a evicted by c first emits a1"
        );
        let out = run(k, timeline("a1@0 b1@1 reset@2 a2@3"));
        assert_eq!(out, ["a1", "b1", "reset", "a2"]);
    }

    #[test]
    fn interval_timers_fire_without_signals() {
        let spec = config::<SampleConfig>("interval_ms = 100")
            .into_spec()
            .unwrap();
        let mut filter = spec.instantiate();
        let mut emit = Emit::new();
        filter.on_signal(std::sync::Arc::new(sig(0, "a")), 1050, &mut emit);
        assert_eq!(filter.next_due(), Some(1100));
        filter.on_timer(1099, &mut emit);
        assert!(emit.is_empty());
        filter.on_timer(1100, &mut emit);
        assert_eq!(labels(&emit.take()), ["a"]);
        assert_eq!(filter.next_due(), None);
    }

    #[test]
    fn config_errors() {
        assert_config_refuses::<SampleConfig>(&[
            ("every = 0", (1, 9), ""),
            ("ratio = 1.5", (1, 9), "between 0 and 1"),
            ("ratio = -0.1", (1, 9), ""),
            ("interval_ms = 0", (1, 15), ""),
            ("ratio = \"half\"", (1, 9), ""),
        ]);

        let cross = |toml: &str| config::<SampleConfig>(toml).into_spec().unwrap_err();
        let e = cross("every = 2\nratio = 0.5");
        assert_eq!(e.key, Some("ratio"));
        let e = cross("ratio = 0.5\ninterval_ms = 5");
        assert_eq!(e.key, Some("interval_ms"));
        assert_eq!(cross("key = \"k\"").key, None);
        assert_eq!(cross("every = 2\nseed = 3").key, Some("seed"));
        assert_eq!(cross("every = 2\nclock = \"event\"").key, Some("clock"));
        let spec = config::<SampleConfig>("interval_ms = 5")
            .into_spec()
            .unwrap();
        assert_eq!(spec.clock, Some(ClockKind::Wall));
        let spec = config::<SampleConfig>("every = 5").into_spec().unwrap();
        assert_eq!(spec.clock, None);
    }
}

//! `throttle`: at most one signal per interval (or a rate with bursts), per key.

use patchbay_graph::config::MAX_DURATION_MS;
use patchbay_graph::{ClockKind, Diagnostic, Emit, FilterSpec, Options};
use patchbay_signal::SharedSignal;
use serde::Deserialize;

use crate::ConfigError;
use crate::key_timers::{AfterRelease, HoldRules, Holding, KeyTimers};
use crate::keyed::KeySpec;
use crate::options::{
    DotPath, FilterConfig, MAX_COUNT, Rate, default_max_keys, max_keys, millis, positive_opt,
};

/// Options of a `throttle` filter.
///
/// **Interval** (`interval_ms = I`). Each key has a window and at most one pending signal.
/// A signal that finds its key idle opens a window ending `I` ms later and, with `leading`
/// or `both`, passes at once (with `trailing` it becomes the pending signal). A signal that
/// comes inside the window is dropped with `leading`, and replaces the pending signal with
/// `trailing` and `both`. When the window ends, the pending signal (if any) is emitted and
/// a new window starts; with none, the key becomes idle. So with `leading` a signal passes
/// exactly when `t − last_passed >= I`; with `both`, the first of a burst passes at once
/// and the last one at the end of the window, so a stream's last value is never lost.
///
/// **Rate** (`rate = "N/s"`, `burst = B`): GCRA. Signals pass while they conform: up to `B`
/// at once, then one every `1/N` s. What does not conform is dropped with `leading`; with
/// `trailing` or `both` the newest such signal is kept pending and emitted as soon as it
/// conforms (so in rate mode `trailing` and `both` behave the same: conforming signals
/// always pass at once).
///
/// Replaced and dropped signals leave by `NAME.dropped`. At end of input, on a `reset`
/// signal and when `max_keys` evicts a key, pending signals are emitted (in order of due
/// time), so nothing accepted is lost.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThrottleConfig {
    /// Milliseconds between passed signals, from 1 to 86400000 (one day). Exactly one of
    /// `interval_ms` and `rate`.
    #[serde(default, deserialize_with = "positive_opt")]
    pub interval_ms: Option<u64>,
    /// A rate, `"N/s"`, `"N/m"` or `"N/h"`, limited with GCRA.
    #[serde(default)]
    pub rate: Option<Rate>,
    /// With `rate`: how many signals may pass at once (from 1 to 10^9, default 1).
    #[serde(default, deserialize_with = "positive_opt")]
    pub burst: Option<u64>,
    /// What passes: `leading`, `trailing` or `both` (default).
    #[serde(default)]
    pub emit: EmitMode,
    /// Throttle each value at this path separately (a missing value is one more key).
    #[serde(default)]
    pub key: Option<DotPath>,
    /// At most this many keys are remembered (default 10000, at most 1000000); the least
    /// recently used one is evicted, after emitting its pending signal.
    #[serde(default = "default_max_keys", deserialize_with = "max_keys")]
    pub max_keys: u64,
    /// `wall` (default: machine time) or `event` (the signals' timestamps).
    #[serde(default)]
    pub clock: ClockKind,
}

/// Which signals of a burst a throttle delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EmitMode {
    /// The first, at once; the rest are dropped.
    Leading,
    /// The newest, when the interval ends.
    Trailing,
    /// The first at once and the newest when the interval ends.
    #[default]
    Both,
}

impl FilterConfig for ThrottleConfig {
    fn check_ranges(&self, options: &Options<'_>) -> Result<(), Diagnostic> {
        options.check_range_opt("interval_ms", self.interval_ms, 1..=MAX_DURATION_MS)?;
        options.check_range_opt("burst", self.burst, 1..=MAX_COUNT)?;
        Ok(())
    }

    fn into_spec(self) -> Result<FilterSpec, ConfigError> {
        let limit = match (self.interval_ms, self.rate) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::not_both("interval_ms", "rate"));
            }
            (None, None) => {
                return Err(ConfigError::whole(
                    "throttle needs `interval_ms` (milliseconds) or `rate` (\"N/s\")",
                ));
            }
            (Some(ms), None) => {
                if self.burst.is_some() {
                    return Err(ConfigError::only_with("burst", "rate"));
                }
                Limit::Interval(millis(ms))
            }
            (None, Some(rate)) => Limit::Rate(Gcra::new(rate, self.burst.unwrap_or(1))),
        };
        Ok(Holding::spec(
            Some(self.clock),
            KeySpec::new(self.key.map(|k| k.0), self.max_keys),
            Throttle {
                limit,
                emit: self.emit,
            },
        ))
    }
}

#[derive(Debug, Clone, Copy)]
enum Limit {
    Interval(i64),
    Rate(Gcra),
}

/// The generic cell rate algorithm in exact integer arithmetic: times are scaled by `N`
/// (the rate's count), so the emission interval `period/N` ms becomes the integer
/// `period`, and nothing is rounded.
#[derive(Debug, Clone, Copy)]
struct Gcra {
    /// `N`: one millisecond is `N` scaled units.
    count: i128,
    /// The emission interval, scaled.
    interval: i128,
    /// How far ahead of time a signal may be and still conform: `(burst − 1)` intervals.
    tolerance: i128,
}

impl Gcra {
    fn new(rate: Rate, burst: u64) -> Self {
        let interval = i128::from(rate.per_ms);
        Gcra {
            count: i128::from(rate.count),
            interval,
            tolerance: i128::from(burst.saturating_sub(1)) * interval,
        }
    }

    fn scaled(&self, ms: i64) -> i128 {
        i128::from(ms) * self.count
    }

    /// Whether a signal at `now` conforms, given the theoretical arrival time `tat`.
    fn conforms(&self, tat: Option<i128>, now: i64) -> bool {
        tat.is_none_or(|tat| tat - self.scaled(now) <= self.tolerance)
    }

    /// The new theoretical arrival time after a signal passed at `now`.
    fn after_pass(&self, tat: Option<i128>, now: i64) -> i128 {
        let now = self.scaled(now);
        tat.map_or(now, |tat| tat.max(now)) + self.interval
    }

    /// The first millisecond at which a signal conforms.
    fn conforming_at(&self, tat: Option<i128>) -> i64 {
        let Some(tat) = tat else {
            return i64::MIN;
        };
        let x = tat - self.tolerance;
        let mut ms = x.div_euclid(self.count);
        if x.rem_euclid(self.count) != 0 {
            ms += 1;
        }
        i64::try_from(ms).unwrap_or(i64::MAX)
    }
}

#[derive(Debug, Default)]
pub(crate) struct KeyState {
    /// Interval mode: the end of the current window (idle once it is reached with nothing
    /// pending).
    window_end: Option<i64>,
    /// Rate mode: the theoretical arrival time (scaled).
    tat: Option<i128>,
}

/// A `throttle`'s rules, from its options: what it does with each signal and with each
/// released one. Its running instances are the shared holding filter over them.
#[derive(Debug)]
pub struct Throttle {
    limit: Limit,
    emit: EmitMode,
}

impl HoldRules for Throttle {
    type State = KeyState;

    fn on_signal(&self, keys: &mut KeyTimers<KeyState>, signal: SharedSignal, emit: &mut Emit) {
        let now = keys.now();
        let slot = keys.entry(&signal, |_| KeyState::default(), emit);
        let pending = keys.is_holding(slot);
        let Some(state) = keys.state_mut(slot) else {
            return;
        };
        match self.limit {
            Limit::Interval(interval) => {
                let in_window = pending || state.window_end.is_some_and(|end| end > now);
                if !in_window {
                    let end = now.saturating_add(interval);
                    state.window_end = Some(end);
                    match self.emit {
                        EmitMode::Leading | EmitMode::Both => emit.pass(signal),
                        EmitMode::Trailing => keys.hold(slot, signal, end, emit),
                    }
                } else if self.emit == EmitMode::Leading {
                    emit.drop(signal);
                } else {
                    let end = state.window_end.unwrap_or(now);
                    keys.hold(slot, signal, end, emit);
                }
            }
            Limit::Rate(gcra) => {
                if !pending && gcra.conforms(state.tat, now) {
                    state.tat = Some(gcra.after_pass(state.tat, now));
                    emit.pass(signal);
                } else if self.emit == EmitMode::Leading {
                    emit.drop(signal);
                } else {
                    let due = gcra.conforming_at(state.tat).max(now);
                    keys.hold(slot, signal, due, emit);
                }
            }
        }
    }

    fn released(&self, due: i64, state: &mut KeyState) -> AfterRelease {
        match self.limit {
            // The released signal ends this window and starts the next one.
            Limit::Interval(interval) => {
                state.window_end = Some(due.saturating_add(interval));
            }
            Limit::Rate(gcra) => state.tat = Some(gcra.after_pass(state.tat, due)),
        }
        AfterRelease::Keep
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testing::{Driver, assert_config_refuses, config, reset, sig, timeline};

    fn driver(toml: &str) -> Driver {
        let spec = config::<ThrottleConfig>(toml).into_spec().unwrap();
        Driver::new(&spec)
    }

    fn run(toml: &str, signals: Vec<patchbay_signal::Signal>) -> Vec<String> {
        driver(toml).run(signals)
    }

    const LEADING: &str = "interval_ms = 100\nemit = \"leading\"\nclock = \"event\"";
    const TRAILING: &str = "interval_ms = 100\nemit = \"trailing\"\nclock = \"event\"";
    const BOTH: &str = "interval_ms = 100\nclock = \"event\"";
    const KEYED: &str = "interval_ms = 100\nkey = \"payload.k\"\nclock = \"event\"";

    #[test]
    fn leading_passes_when_a_full_interval_has_elapsed() {
        let out = run(LEADING, timeline("a@0 b@99 c@100 d@150 e@199 f@200 g@1000"));
        assert_eq!(out, ["a", "-b", "c", "-d", "-e", "f", "g"]);
    }

    #[test]
    fn leading_first_signal_passes_at_any_time() {
        assert_eq!(run(LEADING, vec![sig(-5, "a"), sig(94, "b")]), ["a", "-b"]);
        assert_eq!(run(LEADING, timeline("a@1700000000000")), ["a"]);
    }

    #[test]
    fn trailing_delivers_the_newest_at_the_end_of_the_window() {
        let mut d = driver(TRAILING);
        assert!(d.push(sig(0, "a")).is_empty());
        assert_eq!(d.next_due(), Some(100));
        let out = d.push(sig(50, "b"));
        assert_eq!(
            crate::testing::labels(&out),
            ["-a"],
            "replaced goes to dropped"
        );
        // The timer due at exactly 100 fires before the signal at 100.
        let out = d.push(sig(100, "c"));
        assert_eq!(crate::testing::labels(&out), ["b"]);
        assert_eq!(
            d.next_due(),
            Some(200),
            "c is pending in the window that b started"
        );
        let out = d.push(sig(199, "d"));
        assert_eq!(crate::testing::labels(&out), ["-c"]);
        let out = d.push(sig(400, "e"));
        assert_eq!(
            crate::testing::labels(&out),
            ["d"],
            "d at 200, then idle until e"
        );
        assert_eq!(d.next_due(), Some(500));
        assert_eq!(crate::testing::labels(&d.finish()), ["e"]);
    }

    #[test]
    fn trailing_window_boundary() {
        // 99 is inside the window that 0 opened; 100 is released by the timer at 100 and
        // the signal at 100 opens nothing new: it is pending in the next window.
        assert_eq!(run(TRAILING, timeline("a@0 b@99")), ["-a", "b"]);
        assert_eq!(run(TRAILING, timeline("a@0 b@100")), ["a", "b"]);
        assert_eq!(run(TRAILING, timeline("a@0 b@200")), ["a", "b"]);
    }

    #[test]
    fn both_passes_first_and_last() {
        let out = run(BOTH, timeline("a@0 b@10 c@20 d@99 e@300"));
        assert_eq!(out, ["a", "-b", "-c", "d", "e"]);
        // A signal exactly at the end of the window: the timer releases the pending one
        // first, a new window starts, and the signal is pending in it.
        let out = run(BOTH, timeline("a@0 b@50 c@100 d@150"));
        assert_eq!(out, ["a", "b", "-c", "d"]);
        // Nothing pending when the window ends: the key is idle and the next signal passes.
        let out = run(BOTH, timeline("a@0 b@100 c@150 d@199"));
        assert_eq!(out, ["a", "b", "-c", "d"]);
        let out = run(BOTH, timeline("a@0 b@99 c@199"));
        assert_eq!(out, ["a", "b", "c"], "b at 100, c pending until 200");
    }

    #[test]
    fn out_of_order_signals_are_handled_at_now() {
        let out = run(LEADING, timeline("a@100 b@0 c@199 d@200"));
        assert_eq!(out, ["a", "-b", "-c", "d"]);
    }

    #[test]
    fn keys_are_independent_and_flush_in_due_order() {
        let out = run(KEYED, timeline("a1@0 b1@10 a2@20 b2@30 a3@40"));
        assert_eq!(
            out,
            ["a1", "b1", "-a2", "a3", "b2"],
            "end of input: a due 100, b due 110"
        );
        // Ties in due time fire in the order of the signals they release.
        let out = run(KEYED, timeline("a1@0 b1@0 b2@50 a2@60 z@100"));
        assert_eq!(out, ["a1", "b1", "b2", "a2", "z"]);
        let out = run(KEYED, timeline("a1@0 b1@0 b2@50 a2@60"));
        assert_eq!(out, ["a1", "b1", "b2", "a2"], "same order at end of input");
        // "5" and 5 are different keys, a missing key is a key of its own.
        let mut five_str = sig(1, "s");
        five_str.payload.insert("k".into(), "5".into());
        let mut five_num = sig(2, "i");
        five_num.payload.insert("k".into(), 5.into());
        let out = run(
            KEYED,
            vec![sig(0, "none"), five_str, five_num, sig(3, "none2")],
        );
        assert_eq!(out, ["none", "s", "i", "none2"]);
    }

    #[test]
    fn reset_emits_pending_in_due_order_then_clears() {
        let out = run(
            KEYED,
            timeline("a1@0 b1@5 b2@10 a2@20 reset@30 a3@40 a4@50"),
        );
        assert_eq!(out, ["a1", "b1", "a2", "b2", "reset", "a3", "a4"]);
        let out = run(LEADING, vec![sig(0, "a"), reset(10), sig(20, "b")]);
        assert_eq!(out, ["a", "reset", "b"], "state cleared: b passes");
    }

    #[test]
    fn eviction_emits_the_pending_signal() {
        let k = "interval_ms = 100\nkey = \"payload.k\"\nmax_keys = 2\nclock = \"event\"";
        let out = run(k, timeline("a1@0 a2@1 b1@2 c1@3 a3@4"));
        // c evicts a (least recently used), which first emits a2; a3 then finds a fresh
        // key (evicting b, which holds nothing).
        assert_eq!(out, ["a1", "b1", "a2", "c1", "a3"]);
        let out = run(k, timeline("a1@0 b1@1 a2@2 c1@3"));
        assert_eq!(
            out,
            ["a1", "b1", "c1", "a2"],
            "a was used last: b is evicted"
        );
    }

    #[test]
    fn rate_with_burst_is_gcra() {
        let r = "rate = \"10/s\"\nburst = 3\nemit = \"leading\"\nclock = \"event\"";
        let out = run(
            r,
            timeline("a@0 b@0 c@0 d@0 e@99 f@100 g@150 h@200 i@1000 j@1000 k@1000 l@1000"),
        );
        assert_eq!(
            out,
            [
                "a", "b", "c", "-d", "-e", "f", "-g", "h", "i", "j", "k", "-l"
            ]
        );
        let r = "rate = \"2/s\"\nemit = \"leading\"\nclock = \"event\"";
        let out = run(r, timeline("a@0 b@499 c@500 d@999"));
        assert_eq!(out, ["a", "-b", "c", "-d"]);
        // 3/s: an interval of 333.33 ms, kept exact.
        let r = "rate = \"3/s\"\nemit = \"leading\"\nclock = \"event\"";
        // c passes at 334, 2/3 ms late: the next slot is at 667.33, so 668, then 1001.33.
        let out = run(r, timeline("a@0 b@333 c@334 d@667 e@668 f@1001 g@1002"));
        assert_eq!(out, ["a", "-b", "c", "-d", "e", "-f", "g"]);
        let r = "rate = \"60/m\"\nemit = \"leading\"\nclock = \"event\"";
        assert_eq!(run(r, timeline("a@0 b@999 c@1000")), ["a", "-b", "c"]);
        let r = "rate = \"1/h\"\nemit = \"leading\"\nclock = \"event\"";
        assert_eq!(
            run(r, timeline("a@0 b@3599999 c@3600000")),
            ["a", "-b", "c"]
        );
    }

    #[test]
    fn rate_trailing_releases_the_newest_when_it_conforms() {
        let r = "rate = \"10/s\"\nclock = \"event\"";
        let mut d = driver(r);
        assert_eq!(crate::testing::labels(&d.push(sig(0, "a"))), ["a"]);
        assert!(d.push(sig(10, "b")).is_empty());
        assert_eq!(d.next_due(), Some(100));
        assert_eq!(crate::testing::labels(&d.push(sig(20, "c"))), ["-b"]);
        assert_eq!(crate::testing::labels(&d.push(sig(100, "d"))), ["c"]);
        assert_eq!(d.next_due(), Some(200), "d waits for the slot after c");
        assert_eq!(crate::testing::labels(&d.push(sig(250, "e"))), ["d"]);
        assert_eq!(
            crate::testing::labels(&d.push(sig(300, "f"))),
            ["e"],
            "e conforms at 300"
        );
        assert_eq!(crate::testing::labels(&d.finish()), ["f"]);
        let r = "rate = \"10/s\"\nburst = 2\nemit = \"trailing\"\nclock = \"event\"";
        let out = run(r, timeline("a@0 b@0 c@0 d@0 e@100"));
        assert_eq!(
            out,
            ["a", "b", "-c", "d", "e"],
            "d released at 100, e pending until 200"
        );
    }

    #[test]
    fn timers_fire_without_signals_on_the_wall_clock() {
        // The runtime's `now` rules, not the signal's timestamp.
        let spec = config::<ThrottleConfig>("interval_ms = 100\nemit = \"trailing\"")
            .into_spec()
            .unwrap();
        let mut filter = spec.instantiate();
        let mut emit = Emit::new();
        filter.on_signal(Arc::new(sig(0, "a")), 1000, &mut emit);
        assert!(emit.is_empty());
        assert_eq!(filter.next_due(), Some(1100));
        filter.on_timer(1099, &mut emit);
        assert!(emit.is_empty());
        filter.on_timer(1100, &mut emit);
        assert_eq!(crate::testing::labels(&emit.take()), ["a"]);
        assert_eq!(filter.next_due(), None);
        filter.on_signal(Arc::new(sig(0, "b")), 1150, &mut emit);
        assert_eq!(
            filter.next_due(),
            Some(1200),
            "b waits in the window a's release opened"
        );
    }

    #[test]
    fn config_defaults_and_clock() {
        let spec = config::<ThrottleConfig>("interval_ms = 5")
            .into_spec()
            .unwrap();
        assert_eq!(spec.clock, Some(ClockKind::Wall));
        let c = config::<ThrottleConfig>("interval_ms = 5");
        assert_eq!(c.emit, EmitMode::Both);
        assert_eq!(c.max_keys, 10_000);
        let spec = config::<ThrottleConfig>("rate = \"5/s\"\nclock = \"event\"")
            .into_spec()
            .unwrap();
        assert_eq!(spec.clock, Some(ClockKind::Event));
    }

    #[test]
    fn config_errors() {
        assert_config_refuses::<ThrottleConfig>(&[
            (
                "emit = \"both\"\ninterval_ms = 0",
                (2, 15),
                "must be at least 1",
            ),
            ("interval_ms = -3", (1, 15), ""),
            ("rate = \"ten/s\"", (1, 8), "bad rate `ten/s`"),
            ("rate = \"0/s\"", (1, 8), ""),
            ("rate = \"5/s\"\nburst = 0", (2, 9), ""),
            (
                "interval_ms = 5\nemit = \"trailling\"",
                (2, 8),
                "did you mean `trailing`",
            ),
            ("interval_ms = 5\nclock = \"events\"", (2, 9), ""),
            ("interval_ms = 5\nkey = \"payload..k\"", (2, 7), "bad path"),
            ("interval_ms = 5\nmax_keys = 0", (2, 12), ""),
            ("interval = 5", (1, 1), "did you mean `interval_ms`"),
        ]);

        let cross = |toml: &str| config::<ThrottleConfig>(toml).into_spec().unwrap_err();
        let e = cross("interval_ms = 5\nrate = \"5/s\"");
        assert_eq!(e.key, Some("rate"));
        assert!(e.message.contains("not both"));
        let e = cross("emit = \"both\"");
        assert_eq!(e.key, None);
        assert!(e.message.contains("needs `interval_ms`"));
        let e = cross("interval_ms = 5\nburst = 2");
        assert_eq!(e.key, Some("burst"));
    }
}

//! A test driver that plays the runtime's event clock: `now = max(now, timestamp)`, due
//! timers fire before the signal, `flush` at end of input. Tests then read as "inputs
//! (timestamps) → outputs".

use std::sync::Arc;

use patchbay_graph::{Emit, Filter, FilterSpec, Port};
use patchbay_signal::{Object, SharedSignal, Signal};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Drives one filter instance on the event clock.
pub(crate) struct Driver {
    filter: Box<dyn Filter>,
    now: Option<i64>,
}

impl Driver {
    pub(crate) fn new(spec: &FilterSpec) -> Self {
        Driver {
            filter: spec.instantiate(),
            now: None,
        }
    }

    /// Feeds one signal; returns what came out (timers first, then the signal's outputs).
    pub(crate) fn push(&mut self, signal: Signal) -> Vec<(Port, SharedSignal)> {
        let now = self
            .now
            .map_or(signal.timestamp, |n| n.max(signal.timestamp));
        self.now = Some(now);
        let mut emit = Emit::new();
        if self.filter.next_due().is_some_and(|due| due <= now) {
            self.filter.on_timer(now, &mut emit);
        }
        self.filter.on_signal(Arc::new(signal), now, &mut emit);
        emit.take()
    }

    /// End of input.
    pub(crate) fn finish(&mut self) -> Vec<(Port, SharedSignal)> {
        let mut emit = Emit::new();
        self.filter.flush(&mut emit);
        emit.take()
    }

    /// Feeds all `signals`, then ends the input; returns everything, labelled.
    pub(crate) fn run(&mut self, signals: Vec<Signal>) -> Vec<String> {
        let mut out = Vec::new();
        for s in signals {
            out.extend(self.push(s));
        }
        out.extend(self.finish());
        labels(&out)
    }

    pub(crate) fn next_due(&self) -> Option<i64> {
        self.filter.next_due()
    }
}

/// A signal of type `x` at `ts` whose label is `n` (kept in `payload.n`).
pub(crate) fn sig(ts: i64, n: &str) -> Signal {
    let mut payload = Object::new();
    payload.insert("n".into(), Value::String(n.into()));
    Signal::new("x", "test:in", payload).at(ts)
}

/// Like [`sig`], with `payload.k = key`.
pub(crate) fn keyed(ts: i64, n: &str, key: &str) -> Signal {
    let mut s = sig(ts, n);
    s.payload.insert("k".into(), Value::String(key.into()));
    s
}

/// Signals written as a timeline, `LABEL@TIMESTAMP` separated by spaces: each is a
/// [`keyed`] signal whose key is its label without the trailing digits (`b2@50` is
/// `keyed(50, "b2", "b")`), except `reset@T`, which is [`reset`]`(T)`. Keeps the keyed
/// tests of `throttle` and `sample` to one line of input each.
pub(crate) fn timeline(text: &str) -> Vec<Signal> {
    text.split_whitespace()
        .map(|item| {
            let Some((label, ts)) = item.split_once('@') else {
                panic!("`{item}` is not LABEL@TIMESTAMP");
            };
            let Ok(ts) = ts.parse() else {
                panic!("`{item}`: bad timestamp");
            };
            if label == "reset" {
                return reset(ts);
            }
            keyed(
                ts,
                label,
                label.trim_end_matches(|c: char| c.is_ascii_digit()),
            )
        })
        .collect()
}

/// A `reset` signal at `ts`.
pub(crate) fn reset(ts: i64) -> Signal {
    let mut s = sig(ts, "reset");
    s.kind = crate::RESET.into();
    s
}

/// `n` for the main port, `-n` for `.dropped`, `N:n` for the named port `N`.
pub(crate) fn labels(out: &[(Port, SharedSignal)]) -> Vec<String> {
    out.iter()
        .map(|(port, s)| {
            let n = s
                .payload
                .get("n")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned();
            match port {
                Port::Main => n,
                Port::Dropped => format!("-{n}"),
                Port::Named(p) => format!("{p}:{n}"),
            }
        })
        .collect()
}

/// Deserializes a config from TOML, panicking with the located error.
pub(crate) fn config<T: DeserializeOwned>(toml: &str) -> T {
    match patchbay_graph::Options::parse_snippet::<T>(toml) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// The located error of a config that must not load: `(line, col, message)`.
pub(crate) fn config_error<T: DeserializeOwned>(toml: &str) -> (usize, usize, String) {
    match patchbay_graph::Options::parse_snippet::<T>(toml) {
        Ok(_) => panic!("{toml} should not load"),
        Err(e) => (e.line, e.col, e.message),
    }
}

/// A filter's `build` function.
pub(crate) type Build =
    fn(&patchbay_graph::Options<'_>) -> Result<FilterSpec, patchbay_graph::Diagnostic>;

/// One config that must be refused: its TOML, where the error is (line, column), and what
/// its message contains (`""` when only the place is checked).
pub(crate) type Refused<'a> = (&'a str, (usize, usize), &'a str);

/// Asserts that config `T` loads from none of the `cases`, each refused as it says.
#[track_caller]
pub(crate) fn assert_config_refuses<T: DeserializeOwned>(cases: &[Refused<'_>]) {
    for &(toml, at, says) in cases {
        let (line, col, message) = config_error::<T>(toml);
        assert_refused((line, col, message), toml, at, says);
    }
}

/// Asserts that `build` refuses each of the `cases` as it says.
#[track_caller]
pub(crate) fn assert_build_refuses(build: Build, cases: &[Refused<'_>]) {
    for &(toml, at, says) in cases {
        assert_refused(build_error(toml, build), toml, at, says);
    }
}

#[track_caller]
fn assert_refused(
    (line, col, message): (usize, usize, String),
    toml: &str,
    at: (usize, usize),
    says: &str,
) {
    assert_eq!((line, col), at, "{toml}: {message}");
    assert!(message.contains(says), "{toml}: {message}");
}

/// The location and message of the error a filter's `build` gives for `toml`.
pub(crate) fn build_error(toml: &str, build: Build) -> (usize, usize, String) {
    match patchbay_graph::Options::parse_snippet_with(toml, build) {
        Ok(_) => panic!("{toml} should not build"),
        Err(e) => (e.line, e.col, e.message),
    }
}

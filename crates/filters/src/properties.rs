//! Property-style tests over pseudo-random inputs: no filter loses or duplicates a signal,
//! and `throttle` with `leading` agrees with its one-line definition.

use std::collections::HashMap;

use patchbay_graph::{FilterSpec, Port};
use patchbay_signal::Signal;
use patchbay_testkit::prng::Rng;

use crate::testing::{Driver, config, keyed, reset};
use crate::{ADAPTER, DeltaConfig, FilterConfig, SampleConfig, ThrottleConfig, WhenConfig};

/// Signals with mostly increasing timestamps (some out of order, some ties), a handful of
/// keys (some missing) and the occasional `reset`.
fn random_signals(rng: &mut Rng, count: usize, resets: bool) -> Vec<Signal> {
    let mut ts: i64 = 1000;
    (0..count)
        .map(|i| {
            match rng.below(10) {
                0 => ts -= rng.below(80) as i64,
                1 | 2 => {}
                _ => ts += rng.below(120) as i64,
            }
            if resets && rng.below(40) == 0 {
                return reset(ts);
            }
            let label = format!("s{i}");
            let mut s = keyed(ts, &label, ["a", "b", "c", "d", "e"][rng.below(5)]);
            if rng.below(8) == 0 {
                s.payload.remove("k");
            }
            s.payload
                .insert("v".into(), serde_json::json!(rng.below(6)));
            s
        })
        .collect()
}

/// Every input comes out exactly once (on the main or the dropped port).
fn assert_conserved(spec: &FilterSpec, signals: Vec<Signal>, what: &str) {
    let ids: Vec<String> = signals.iter().map(|s| s.id.to_string()).collect();
    let mut driver = Driver::new(spec);
    let mut seen: HashMap<String, usize> = HashMap::new();
    for s in signals {
        for (_, out) in driver.push(s) {
            *seen.entry(out.id.to_string()).or_default() += 1;
        }
    }
    for (_, out) in driver.finish() {
        *seen.entry(out.id.to_string()).or_default() += 1;
    }
    assert_eq!(driver.next_due(), None, "{what}: timers left after flush");
    for id in &ids {
        assert_eq!(seen.get(id), Some(&1), "{what}: signal {id}");
    }
    assert_eq!(seen.len(), ids.len(), "{what}: unknown outputs");
}

#[test]
fn no_filter_loses_or_duplicates_signals() {
    let throttles = [
        "interval_ms = 100\nemit = \"leading\"",
        "interval_ms = 100\nemit = \"trailing\"",
        "interval_ms = 100",
        "interval_ms = 1\nkey = \"payload.k\"",
        "interval_ms = 250\nkey = \"payload.k\"\nmax_keys = 2",
        "interval_ms = 250\nemit = \"trailing\"\nkey = \"payload.k\"\nmax_keys = 3",
        "rate = \"5/s\"\nburst = 3",
        "rate = \"5/s\"\nemit = \"leading\"\nkey = \"payload.k\"",
        "rate = \"20/s\"\nemit = \"trailing\"\nkey = \"payload.k\"\nmax_keys = 2",
    ];
    let samples = [
        "every = 3\nkey = \"payload.k\"\nmax_keys = 2",
        "ratio = 0.3\nkey = \"payload.k\"",
        "interval_ms = 100",
        "interval_ms = 300\nkey = \"payload.k\"\nmax_keys = 2",
    ];
    let deltas = [
        "path = \"v\"",
        "path = \"v\"\nthreshold = 2\nkey = \"payload.k\"\nmax_keys = 2",
    ];
    let whens = [
        "when = { \"payload.v\" = { gt = 2 } }",
        "expr = '.payload.v % 2 == 0'",
    ];
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    for round in 0..20 {
        let resets = round % 2 == 0;
        for toml in throttles {
            let spec = config::<ThrottleConfig>(&format!("{toml}\nclock = \"event\""))
                .into_spec()
                .unwrap();
            assert_conserved(&spec, random_signals(&mut rng, 200, resets), toml);
        }
        for toml in samples {
            let toml = if toml.starts_with("interval") {
                format!("{toml}\nclock = \"event\"")
            } else {
                toml.to_owned()
            };
            let spec = config::<SampleConfig>(&toml).into_spec().unwrap();
            assert_conserved(&spec, random_signals(&mut rng, 200, resets), &toml);
        }
        for toml in deltas {
            let spec = config::<DeltaConfig>(toml).into_spec().unwrap();
            assert_conserved(&spec, random_signals(&mut rng, 200, resets), toml);
        }
        for toml in whens {
            let spec = config::<WhenConfig>(toml).into_spec().unwrap();
            assert_conserved(&spec, random_signals(&mut rng, 200, resets), toml);
        }
    }
}

#[test]
fn leading_throttle_passes_exactly_when_a_full_interval_elapsed() {
    let mut rng = Rng(42);
    for interval in [1, 7, 100, 250] {
        let toml = format!(
            "interval_ms = {interval}\nemit = \"leading\"\nkey = \"payload.k\"\nclock = \"event\""
        );
        let spec = config::<ThrottleConfig>(&toml).into_spec().unwrap();
        let mut driver = Driver::new(&spec);
        let mut now = i64::MIN;
        let mut last_passed: HashMap<Option<String>, i64> = HashMap::new();
        for s in random_signals(&mut rng, 2000, false) {
            now = now.max(s.timestamp);
            let key = s
                .payload
                .get("k")
                .and_then(|k| k.as_str())
                .map(str::to_owned);
            let expected = last_passed
                .get(&key)
                .is_none_or(|last| now - last >= interval);
            let out = driver.push(s);
            assert_eq!(out.len(), 1);
            assert_eq!(
                out[0].0 == Port::Main,
                expected,
                "at {now}, interval {interval}"
            );
            if expected {
                last_passed.insert(key, now);
            }
        }
    }
}

#[test]
fn builders_are_the_nine_filters() {
    let names: Vec<&str> = ADAPTER.components.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "throttle", "sample", "delta", "when", "map", "route", "dedupe", "coalesce", "debounce"
        ]
    );
}

//! `coalesce`: merges runs of streaming deltas of one key into one signal with the
//! concatenated text, so that a UI gets a few updates a second instead of every token.

use std::sync::Arc;

use patchbay_graph::config::MAX_DURATION_MS;
use patchbay_graph::{ClockKind, Diagnostic, Emit, FilterSpec, Options};
use patchbay_signal::path::{Found, Path};
use patchbay_signal::{SharedSignal, Signal};
use serde::Deserialize;
use serde_json::Value;

use crate::ConfigError;
use crate::key_timers::{AfterRelease, HoldRules, Holding, KeyTimers};
use crate::keyed::{KeySpec, Slot};
use crate::options::{
    DotPath, FilterConfig, KeyPaths, MAX_COUNT, default_max_keys, max_keys, millis, parse_path,
    positive, positive_opt,
};

/// Options of a `coalesce` filter.
///
/// A run is a series of signals of one key and one of the `types`, each with a string at
/// `field`. The first signal of a run is held; the next ones are appended to its `field`
/// (their other fields are not kept) and the merged signal, with the first one's `id` and
/// `timestamp` and `metadata.coalesced` = how many were merged, is emitted when
///
/// - `window_ms` has passed since the first signal of the run;
/// - the text reaches `max_chars` characters;
/// - a signal of that key of another type (or another of the `types`) comes: the run is
///   emitted first, then that signal;
/// - the input ends, a `reset` signal comes, or `max_keys` evicts the key.
///
/// No text is lost and a key's signals keep their order. Runs of different keys leave in
/// the order they started: a run emitted early first releases the runs started before it.
/// Signals of other types are not held. A run of one signal is emitted as it came.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CoalesceConfig {
    /// The signal types whose runs are merged (default `["text_delta", "thinking"]`).
    #[serde(default = "default_types")]
    pub types: Vec<String>,
    /// Where the text is (default `content`, i.e. `payload.content`).
    #[serde(default = "default_field")]
    pub field: DotPath,
    /// A run is emitted at the latest this many milliseconds (≥ 1) after its first signal
    /// (default 50: 20 updates a second per key).
    #[serde(default = "default_window", deserialize_with = "positive")]
    pub window_ms: u64,
    /// A run is emitted as soon as its text has this many characters (≥ 1).
    #[serde(default, deserialize_with = "positive_opt")]
    pub max_chars: Option<u64>,
    /// The path(s) whose values make a key (default `["agentId", "correlationId"]`).
    #[serde(default)]
    pub key: KeyPaths,
    /// At most this many keys are remembered (default 10000, at most 1000000); the least
    /// recently used one is evicted, after emitting its run.
    #[serde(default = "default_max_keys", deserialize_with = "max_keys")]
    pub max_keys: u64,
    /// `wall` (default: machine time) or `event` (the signals' timestamps).
    #[serde(default)]
    pub clock: ClockKind,
}

fn default_types() -> Vec<String> {
    vec!["text_delta".into(), "thinking".into()]
}

fn default_field() -> DotPath {
    DotPath(parse_path("content").unwrap_or_else(|_| unreachable!("a valid path")))
}

fn default_window() -> u64 {
    50
}

impl FilterConfig for CoalesceConfig {
    fn check_ranges(&self, options: &Options<'_>) -> Result<(), Diagnostic> {
        options.check_range("window_ms", self.window_ms, 1..=MAX_DURATION_MS)?;
        options.check_range_opt("max_chars", self.max_chars, 1..=MAX_COUNT)?;
        Ok(())
    }

    fn into_spec(self) -> Result<FilterSpec, ConfigError> {
        if self.types.is_empty() {
            return Err(ConfigError::at("types", "`types` needs at least one type"));
        }
        Ok(Holding::spec(
            Some(self.clock),
            KeySpec::new(self.key.0, self.max_keys),
            Coalesce {
                types: self.types,
                field: self.field.0,
                window: millis(self.window_ms),
                max_chars: self
                    .max_chars
                    .map(|m| usize::try_from(m).unwrap_or(usize::MAX)),
            },
        ))
    }
}

/// A key's current run.
#[derive(Debug, Default)]
pub(crate) struct Run {
    /// How many signals it merged.
    count: u64,
    /// Its text's length in characters.
    chars: usize,
}

/// A `coalesce`'s rules, from its options: which signals make runs and when a run ends.
/// Its running instances are the shared holding filter over them; the signal a key holds
/// is its merged run.
#[derive(Debug)]
pub struct Coalesce {
    types: Vec<String>,
    field: Path,
    window: i64,
    max_chars: Option<usize>,
}

impl Coalesce {
    /// The text of a signal that can be part of a run.
    fn text<'a>(&self, signal: &'a Signal) -> Option<&'a str> {
        if !self.types.iter().any(|t| signal.kind == *t) {
            return None;
        }
        match self.field.get(signal)? {
            Found::Str(s) => Some(s),
            Found::Json(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    /// Appends `text` to the run held by `slot`.
    fn append(&self, keys: &mut KeyTimers<Run>, slot: Slot, text: &str) {
        let Some(run) = keys.state_mut(slot) else {
            return;
        };
        run.count += 1;
        run.chars += text.chars().count();
        let count = run.count;
        let Some(held) = keys.held_mut(slot) else {
            return;
        };
        // The held signal is usually ours alone: no copy. When the first delta was also
        // sent elsewhere, it is copied once, and the copy is ours from then on.
        let merged = Arc::make_mut(held);
        let mut content = match self.field.take(merged) {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        content.push_str(text);
        // The field held a string (it was read as one), so it takes one back.
        let _ = self.field.set(merged, Value::String(content));
        merged
            .metadata_mut()
            .insert("coalesced".into(), Value::from(count));
    }
}

impl HoldRules for Coalesce {
    type State = Run;

    fn on_signal(&self, keys: &mut KeyTimers<Run>, signal: SharedSignal, emit: &mut Emit) {
        let Some(text) = self.text(&signal) else {
            // Not part of a run: the key's run (if any) goes first, after the runs of
            // other keys that started before it.
            if let Some(slot) = keys.find(&signal)
                && keys.is_holding(slot)
            {
                keys.release_early(slot, emit);
            }
            emit.pass(signal);
            return;
        };
        let chars = text.chars().count();
        let slot = keys.entry(&signal, |_| Run::default(), emit);
        let same_run = keys
            .held_mut(slot)
            .is_some_and(|held| held.kind == signal.kind);
        if same_run {
            let text = text.to_owned();
            self.append(keys, slot, &text);
        } else {
            if keys.is_holding(slot) {
                keys.release_early(slot, emit);
            }
            if let Some(run) = keys.state_mut(slot) {
                *run = Run { count: 1, chars };
            }
            let due = keys.now().saturating_add(self.window);
            keys.hold(slot, signal, due, emit);
        }
        let full = self
            .max_chars
            .is_some_and(|max| keys.state_mut(slot).is_some_and(|run| run.chars >= max));
        if full {
            keys.release_early(slot, emit);
        }
    }

    fn released(&self, _due: i64, _run: &mut Run) -> AfterRelease {
        AfterRelease::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Driver, assert_config_refuses, config, reset};
    use patchbay_graph::Port;
    use patchbay_signal::object;

    fn delta(ts: i64, kind: &str, agent: &str, text: &str) -> Signal {
        Signal::new(
            kind,
            "test:in",
            object! {"agentId" => agent, "content" => text},
        )
        .at(ts)
    }

    fn t(ts: i64, agent: &str, text: &str) -> Signal {
        delta(ts, "text_delta", agent, text)
    }

    /// Each output as `agent:type:content(xN)`.
    fn show(out: &[(Port, SharedSignal)]) -> Vec<String> {
        out.iter()
            .map(|(port, s)| {
                assert_eq!(*port, Port::Main);
                let count = s
                    .meta("coalesced")
                    .map(|c| format!("#{c}"))
                    .unwrap_or_default();
                format!(
                    "{}:{}:{}{count}",
                    s.payload
                        .get("agentId")
                        .and_then(Value::as_str)
                        .unwrap_or("-"),
                    s.kind,
                    s.payload
                        .get("content")
                        .and_then(Value::as_str)
                        .unwrap_or("-"),
                )
            })
            .collect()
    }

    /// Deltas written `AGENT:TEXT@TS` (a `text_delta`) or `AGENT:TYPE:TEXT@TS`, separated
    /// by spaces.
    fn deltas(text: &str) -> Vec<Signal> {
        text.split_whitespace()
            .map(|item| {
                let Some((head, ts)) = item.rsplit_once('@') else {
                    panic!("`{item}` is not AGENT:TEXT@TS");
                };
                let ts = ts.parse().expect("timestamp");
                match head.split(':').collect::<Vec<_>>()[..] {
                    [agent, text] => t(ts, agent, text),
                    [agent, kind, text] => delta(ts, kind, agent, text),
                    _ => panic!("`{item}` is not AGENT:TEXT@TS"),
                }
            })
            .collect()
    }

    fn run(toml: &str, signals: Vec<Signal>) -> Vec<String> {
        let spec = config::<CoalesceConfig>(&format!("clock = \"event\"\n{toml}"))
            .into_spec()
            .unwrap();
        let mut d = Driver::new(&spec);
        let mut out = Vec::new();
        for s in signals {
            out.extend(d.push(s));
        }
        out.extend(d.finish());
        show(&out)
    }

    #[test]
    fn a_window_of_deltas_becomes_one_signal() {
        let out = run(
            "window_ms = 50",
            deltas("a:Hel@0 a:lo@10 a:,@49 a:wor@50 a:ld@60 a:!@200"),
        );
        // The timer due at 50 fires before the signal at 50.
        assert_eq!(
            out.join(" "),
            "a:text_delta:Hello,#3 a:text_delta:world#2 a:text_delta:!"
        );
    }

    #[test]
    fn first_id_and_timestamp_are_kept() {
        let spec = config::<CoalesceConfig>("clock = \"event\"")
            .into_spec()
            .unwrap();
        let mut d = Driver::new(&spec);
        let first = t(5, "a", "x");
        let id = first.id.clone();
        d.push(first);
        d.push(t(6, "a", "y"));
        let out = d.finish();
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].1.id.as_str(), out[0].1.timestamp), (id.as_str(), 5));
    }

    #[test]
    fn another_type_ends_the_run_first() {
        let out = run(
            "",
            deltas("a:x@0 a:thinking:hm@1 a:thinking:m@2 a:tool_call:-@3 a:y@4"),
        );
        assert_eq!(
            out.join(" "),
            "a:text_delta:x a:thinking:hmm#2 a:tool_call:- a:text_delta:y"
        );
    }

    #[test]
    fn max_chars_releases_early_after_earlier_runs() {
        let out = run(
            "window_ms = 1000\nmax_chars = 5",
            deltas("a:aa@0 b:bb@1 b:bbb@2 a:a@3 c:cccccc@4"),
        );
        // b is full at 2: a's run started before it and leaves first. A single signal
        // past max_chars is a run of its own.
        assert_eq!(
            out.join(" "),
            "a:text_delta:aa b:text_delta:bbbbb#2 a:text_delta:a c:text_delta:cccccc"
        );
    }

    #[test]
    fn keys_are_apart_and_leave_in_start_order() {
        let out = run(
            "window_ms = 100",
            deltas("a:1@0 b:1@10 a:2@20 b:2@30 b:tool_call:-@40 b:3@50"),
        );
        // The tool call of b releases a's earlier run, then b's run, then itself.
        assert_eq!(
            out.join(" "),
            "a:text_delta:12#2 b:text_delta:12#2 b:tool_call:- b:text_delta:3"
        );
    }

    #[test]
    fn correlation_ids_are_keys_too_and_reset_flushes() {
        let mut s1 = t(0, "a", "x");
        s1.correlation_id = Some("c1".into());
        let mut s2 = t(1, "a", "y");
        s2.correlation_id = Some("c2".into());
        let out = run("", vec![s1, s2, reset(2), t(3, "a", "z")]);
        assert_eq!(
            out.join(" "),
            "a:text_delta:x a:text_delta:y -:reset:- a:text_delta:z"
        );
    }

    #[test]
    fn a_delta_without_text_passes_alone() {
        let mut bad = t(1, "a", "");
        bad.payload.insert("content".into(), Value::from(3));
        let out = run("", vec![t(0, "a", "x"), bad, t(2, "a", "y")]);
        assert_eq!(
            out.join(" "),
            "a:text_delta:x a:text_delta:- a:text_delta:y"
        );
    }

    #[test]
    fn config_errors() {
        assert_config_refuses::<CoalesceConfig>(&[
            ("window_ms = 0", (1, 13), ""),
            ("key = 5", (1, 7), "path or an array of paths"),
            ("key = [\"a..b\"]", (1, 7), ""),
        ]);
        let e = config::<CoalesceConfig>("types = []")
            .into_spec()
            .unwrap_err();
        assert_eq!(e.key, Some("types"));
        let spec = config::<CoalesceConfig>("").into_spec().unwrap();
        assert_eq!(spec.clock, Some(ClockKind::Wall));
    }
}

//! patchbay's built-in filters: `throttle`, `sample`, `delta`, `when`, `map`, `route`,
//! `dedupe`, `coalesce` and `debounce`.
//!
//! Each filter is a pure, synchronous state machine implementing
//! [`patchbay_graph::Filter`]: the runtime owns the clock, fires timers through
//! [`Filter::on_timer`](patchbay_graph::Filter::on_timer) before handing over a signal, and
//! calls [`Filter::flush`](patchbay_graph::Filter::flush) at end of input. Nothing here
//! reads a clock, sleeps or does I/O, so a recording replayed on the event clock always
//! gives the same output.
//!
//! Config is checked at load: every option is deserialized into a documented config struct
//! ([`ThrottleConfig`], [`SampleConfig`], [`DeltaConfig`], [`WhenConfig`], [`MapConfig`],
//! [`RouteConfig`], [`DedupeConfig`], [`CoalesceConfig`], [`DebounceConfig`]);
//! a bad value (an interval of 0, a ratio outside `0..=1`, a bad regex or jq expression, …)
//! is reported at its `FILE:LINE:COL`.
//!
//! What a filter drops or replaces leaves by its `NAME.dropped` port
//! ([`Emit::drop`](patchbay_graph::Emit::drop)); `route` sends each branch out of its own
//! port, `NAME.<branch>` ([`Emit::to`](patchbay_graph::Emit::to)); nothing a filter accepted is silently
//! lost: held signals are emitted at end of input, on a `reset` signal and when their key is
//! evicted by `max_keys`.

pub mod coalesce;
pub mod condition;
pub mod debounce;
pub mod dedupe;
pub mod delta;
pub mod jq;
mod key_timers;
mod keyed;
pub mod map;
pub mod options;
pub mod route;
pub mod sample;
pub mod throttle;
pub mod when;

#[cfg(test)]
mod properties;
#[cfg(test)]
mod testing;

use patchbay_graph::{Adapter, ComponentType, Diagnostic, Options, options_of};

pub use coalesce::{Coalesce, CoalesceConfig};
pub use condition::Condition;
pub use debounce::{Debounce, DebounceConfig};
pub use dedupe::{Dedupe, DedupeConfig};
pub use delta::{Delta, DeltaConfig};
pub use jq::JqExpr;
pub use map::{Map, MapConfig, Mapping, ScaleConfig, ScaleFn};
pub use options::{DotPath, FilterConfig, KeyPaths, Rate, build};
pub use route::{Route, RouteConfig};
pub use sample::{Sample, SampleConfig};
pub use throttle::{EmitMode, Throttle, ThrottleConfig};
pub use when::{When, WhenConfig};

/// The built-in filters, described for the registry and `patchbay components`.
pub const ADAPTER: Adapter = Adapter::new(
    "filters",
    "built-in filters: rate limits, sampling, change detection, conditions, mapping, \
     routing, deduplication, merging of deltas, debouncing",
    &[
        ComponentType::filter(
            "throttle",
            "at most one signal per key per interval (first, last or both)",
            build::<ThrottleConfig>,
            options_of::<ThrottleConfig>,
        ),
        ComponentType::filter(
            "sample",
            "keep a fraction of the signals, or one in N, per key",
            build::<SampleConfig>,
            options_of::<SampleConfig>,
        ),
        ComponentType::filter(
            "delta",
            "pass a signal only when a value changed (by at least a threshold)",
            build::<DeltaConfig>,
            options_of::<DeltaConfig>,
        ),
        ComponentType::filter(
            "when",
            "pass the signals a condition (operators or jq) holds for",
            when::build,
            options_of::<WhenConfig>,
        ),
        ComponentType::filter(
            "map",
            "rewrite signals: set, rename, scale, retype, or a jq expression",
            map::build,
            options_of::<MapConfig>,
        ),
        ComponentType::filter(
            "route",
            "named branches by condition, each its own output `NAME.<branch>`",
            route::build,
            options_of::<RouteConfig>,
        ),
        ComponentType::filter(
            "dedupe",
            "drop a signal whose fields were seen recently",
            build::<DedupeConfig>,
            options_of::<DedupeConfig>,
        ),
        ComponentType::filter(
            "coalesce",
            "merge runs of streaming deltas into one signal per window",
            build::<CoalesceConfig>,
            options_of::<CoalesceConfig>,
        ),
        ComponentType::filter(
            "debounce",
            "per key, the last signal once the key has been quiet",
            build::<DebounceConfig>,
            options_of::<DebounceConfig>,
        ),
    ],
);

/// The `type` of the signal that clears the state of every keyed filter it goes through.
pub const RESET: &str = "reset";

/// A config error found after deserializing: a combination of options that does not make
/// sense (both `interval_ms` and `rate`, neither, …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// The offending key (a dotted path into the options), or `None` when the problem is
    /// the filter as a whole (a required option missing).
    pub key: Option<&'static str>,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error about the value of `key`.
    pub fn at(key: &'static str, message: impl Into<String>) -> Self {
        ConfigError {
            key: Some(key),
            message: message.into(),
        }
    }

    /// An error about the filter as a whole.
    pub fn whole(message: impl Into<String>) -> Self {
        ConfigError {
            key: None,
            message: message.into(),
        }
    }

    /// Two options that exclude each other are both set: reported at `second`.
    pub(crate) fn not_both(first: &'static str, second: &'static str) -> Self {
        ConfigError::at(
            second,
            format!("use either `{first}` or `{second}`, not both"),
        )
    }

    /// `key` is set without `needed`, the option it only applies with.
    pub(crate) fn only_with(key: &'static str, needed: &'static str) -> Self {
        ConfigError::at(key, format!("`{key}` only applies with `{needed}`"))
    }

    /// The located diagnostic for these options.
    pub fn locate(&self, options: &Options<'_>) -> Diagnostic {
        match self.key {
            Some(key) => options.error_at(key, &self.message),
            None => options.error(&self.message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ConfigError;

    #[test]
    fn option_conflicts_name_both_options() {
        let e = ConfigError::not_both("interval_ms", "rate");
        assert_eq!(e.key, Some("rate"));
        assert_eq!(e.message, "use either `interval_ms` or `rate`, not both");
        let e = ConfigError::only_with("burst", "rate");
        assert_eq!(e.key, Some("burst"));
        assert_eq!(e.message, "`burst` only applies with `rate`");
    }
}

//! Option values shared by the filters, checked while they are deserialized so that a bad
//! value is reported at its exact `FILE:LINE:COL`.

use std::fmt;

use patchbay_graph::{Diagnostic, FilterSpec, Options};
use patchbay_signal::path::Path;
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, Error as _};

use crate::ConfigError;

/// The default bound on the number of keys a keyed filter remembers.
pub const DEFAULT_MAX_KEYS: u64 = 10_000;

/// The largest `max_keys` of a keyed filter: one million keys.
pub const MAX_KEYS: u64 = 1_000_000;

/// The largest `burst` of a rate throttle and `every` of a sample.
pub const MAX_COUNT: u64 = 1_000_000_000;

/// A filter's options, as `build` takes them: their numbers' ranges are checked first, so
/// that an error points at the value; then their combination, an error located at its key.
pub trait FilterConfig: DeserializeOwned {
    /// Checks the ranges of the numbers (none by default).
    fn check_ranges(&self, options: &Options<'_>) -> Result<(), Diagnostic> {
        let _ = options;
        Ok(())
    }

    /// Checks the combination of options and makes the filter's spec.
    fn into_spec(self) -> Result<FilterSpec, ConfigError>;
}

/// Builds the filter whose options are `C`: a component type's `build`.
pub fn build<C: FilterConfig>(options: &Options<'_>) -> Result<FilterSpec, Diagnostic> {
    let config: C = options.parse()?;
    config.check_ranges(options)?;
    config.into_spec().map_err(|e| e.locate(options))
}

/// A dot path into a signal (`type`, `payload.note`, `metadata.seq`, sajou's `content`),
/// parsed at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DotPath(pub Path);

patchbay_graph::described_as!(DotPath, {"type": "string"});
patchbay_graph::described_as!(Rate, {"type": "string"});
patchbay_graph::described_as!(KeyPaths, {"type": ["string", "array"], "items": {"type": "string"}});

impl<'de> Deserialize<'de> for DotPath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_path(&text).map(DotPath).map_err(D::Error::custom)
    }
}

/// The `key` of the filters that follow agent streams (`coalesce`, `debounce`): one path or
/// several, whose values together are the key; `[]` for one shared key. Defaults to
/// `["agentId", "correlationId"]`: one key per agent and conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPaths(pub Vec<Path>);

impl Default for KeyPaths {
    fn default() -> Self {
        KeyPaths(
            ["agentId", "correlationId"]
                .iter()
                .filter_map(|p| Path::parse(p).ok())
                .collect(),
        )
    }
}

impl serde::Serialize for KeyPaths {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|p| p.to_string()))
    }
}

impl<'de> Deserialize<'de> for KeyPaths {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            One(String),
            Many(Vec<String>),
        }
        let texts = match Written::deserialize(deserializer)
            .map_err(|_| D::Error::custom("expected a path or an array of paths"))?
        {
            Written::One(text) => vec![text],
            Written::Many(texts) => texts,
        };
        texts
            .iter()
            .map(|t| parse_path(t))
            .collect::<Result<Vec<_>, _>>()
            .map(KeyPaths)
            .map_err(D::Error::custom)
    }
}

impl serde::Serialize for DotPath {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

/// Parses a dot path, with a message fit for a config error.
pub(crate) fn parse_path(text: &str) -> Result<Path, String> {
    Path::parse(text).map_err(|e| format!("bad path: {e}"))
}

/// A rate limit: `count` signals per `per_ms` milliseconds, written `"N/s"`, `"N/m"` or
/// `"N/h"` with `N` a whole number ≥ 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// How many signals per period.
    pub count: u64,
    /// The period in milliseconds (1000, 60000 or 3600000).
    pub per_ms: u64,
}

/// The largest `N` of a rate: beyond it the emission interval is below a nanosecond.
const MAX_RATE_COUNT: u64 = 1_000_000_000;

/// A rate that is not `"N/s"`, `"N/m"` or `"N/h"` with `N` from 1 to 10⁹ (the text as
/// written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad rate `{0}`: expected \"N/s\", \"N/m\" or \"N/h\" with N a whole number from 1 to \
     {MAX_RATE_COUNT}"
)]
pub struct BadRate(pub String);

impl Rate {
    /// Parses `"N/s"`, `"N/m"` or `"N/h"` (spaces around the parts are allowed; `sec`,
    /// `min` and `hour` are accepted too).
    pub fn parse(text: &str) -> Result<Rate, BadRate> {
        let bad = || BadRate(text.to_owned());
        let (count, unit) = text.split_once('/').ok_or_else(bad)?;
        let count: u64 = count.trim().parse().map_err(|_| bad())?;
        if count == 0 || count > MAX_RATE_COUNT {
            return Err(bad());
        }
        let per_ms = match unit.trim() {
            "s" | "sec" => 1_000,
            "m" | "min" => 60_000,
            "h" | "hour" => 3_600_000,
            _ => return Err(bad()),
        };
        Ok(Rate { count, per_ms })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.per_ms {
            1_000 => "s",
            60_000 => "m",
            _ => "h",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Rate::parse(&text).map_err(D::Error::custom)
    }
}

/// A whole number ≥ 1.
pub(crate) fn positive<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let value = i64::deserialize(deserializer)?;
    if value < 1 {
        return Err(D::Error::custom(format!("must be at least 1, got {value}")));
    }
    Ok(value.unsigned_abs())
}

/// A keyed filter's `max_keys`: a whole number from 1 to [`MAX_KEYS`], checked here once
/// for every keyed filter.
pub(crate) fn max_keys<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let value = i64::deserialize(deserializer)?;
    match patchbay_graph::config::out_of_range("max_keys", value, &(1..=MAX_KEYS as i64)) {
        Some(message) => Err(D::Error::custom(message)),
        None => Ok(value.unsigned_abs()),
    }
}

/// An optional whole number ≥ 1.
pub(crate) fn positive_opt<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    positive(deserializer).map(Some)
}

/// An optional number that `valid` accepts; the error of another says what it `must_be`.
fn number_opt<'de, D: Deserializer<'de>>(
    deserializer: D,
    valid: impl Fn(f64) -> bool,
    must_be: &str,
) -> Result<Option<f64>, D::Error> {
    let value = f64::deserialize(deserializer)?;
    if !valid(value) {
        return Err(D::Error::custom(format!("must be {must_be}, got {value}")));
    }
    Ok(Some(value))
}

/// An optional number between 0 and 1 inclusive.
pub(crate) fn ratio_opt<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<f64>, D::Error> {
    let between = |v: f64| (0.0..=1.0).contains(&v);
    number_opt(deserializer, between, "between 0 and 1 (inclusive)")
}

/// An optional finite number ≥ 0.
pub(crate) fn non_negative_opt<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<f64>, D::Error> {
    let non_negative = |v: f64| v.is_finite() && v >= 0.0;
    number_opt(deserializer, non_negative, "a number >= 0")
}

/// An optional seed: any integer (negative ones are taken as their two's complement bits).
pub(crate) fn seed_opt<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    let value = i64::deserialize(deserializer)?;
    Ok(Some(u64::from_ne_bytes(value.to_ne_bytes())))
}

/// A duration option in milliseconds as a span of the filters' `i64` clock (saturating;
/// an option's range keeps it far below the limit anyway).
pub(crate) fn millis(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The default of `max_keys`.
pub(crate) fn default_max_keys() -> u64 {
    DEFAULT_MAX_KEYS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranges every filter checks, in one table: an absurd number is refused at its
    /// value, naming the bounds.
    #[test]
    fn absurd_numbers_are_refused_at_their_value() {
        use crate::testing::{Build, assert_build_refuses};
        use crate::{
            CoalesceConfig, DebounceConfig, DedupeConfig, DeltaConfig, SampleConfig, ThrottleConfig,
        };
        const DAY: &str = "must be at least 1 and at most 86400000";
        const COUNT: &str = "must be at least 1 and at most 1000000000";
        const KEYS: &str = "must be at least 1 and at most 1000000";
        let (ms, n) = ("1000000000000000000", "1000000000000");
        // A filter, its required options, then each (key, absurd value, bounds).
        let refuses = |build: Build, required: &str, cases: &[(&str, &str, &str)]| {
            for (key, value, bounds) in cases {
                let toml = format!("{required}{key} = {value}");
                let at = (required.lines().count() + 1, key.len() + 4);
                assert_build_refuses(build, &[(&toml, at, &format!("`{key}` {bounds}"))]);
            }
        };
        let keys = ("max_keys", n, KEYS);
        refuses(build::<CoalesceConfig>, "", &[("window_ms", ms, DAY), keys]);
        refuses(build::<DebounceConfig>, "", &[("quiet_ms", ms, DAY)]);
        refuses(
            build::<DebounceConfig>,
            "quiet_ms = 5\n",
            &[("max_wait_ms", ms, DAY), keys],
        );
        refuses(build::<DedupeConfig>, "", &[("window_ms", ms, DAY), keys]);
        refuses(build::<DeltaConfig>, "path = \"payload.v\"\n", &[keys]);
        refuses(
            build::<SampleConfig>,
            "",
            &[("interval_ms", ms, DAY), ("every", n, COUNT)],
        );
        refuses(build::<SampleConfig>, "every = 5\n", &[keys]);
        refuses(build::<ThrottleConfig>, "", &[("interval_ms", ms, DAY)]);
        refuses(
            build::<ThrottleConfig>,
            "rate = \"1/s\"\n",
            &[("burst", n, COUNT)],
        );
        refuses(build::<ThrottleConfig>, "interval_ms = 5\n", &[keys]);
    }

    #[test]
    fn rates() {
        assert_eq!(
            Rate::parse("30/s"),
            Ok(Rate {
                count: 30,
                per_ms: 1000
            })
        );
        assert_eq!(
            Rate::parse(" 2 / m "),
            Ok(Rate {
                count: 2,
                per_ms: 60_000
            })
        );
        assert_eq!(Rate::parse("1/h").map(|r| r.per_ms), Ok(3_600_000));
        for bad in [
            "0/s", "-1/s", "1.5/s", "30", "30/d", "/s", "x/s", "30/s/s", "",
        ] {
            assert_eq!(Rate::parse(bad), Err(BadRate(bad.into())), "{bad}");
        }
        assert_eq!(
            Rate::parse("0/s").unwrap_err().to_string(),
            "bad rate `0/s`: expected \"N/s\", \"N/m\" or \"N/h\" with N a whole number from 1 \
             to 1000000000"
        );
        assert_eq!(
            Rate::parse("30/sec").map(|r| r.to_string()),
            Ok("30/s".into())
        );
    }
}

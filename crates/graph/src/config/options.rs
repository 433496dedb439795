//! A component's options, deserialized with exact error locations.

use std::fmt::Display;
use std::ops::{Range, RangeInclusive};

use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::DeValue;

use super::diagnostic::{Diagnostic, SourceText, suggestion};
use super::env::Secrets;
use super::parse_error;

/// The options table of one component (its `type`, `inputs` and the runtime's common keys
/// already taken out), ready to be deserialized into the component's config struct.
///
/// Config structs use `#[serde(deny_unknown_fields)]`; errors point at the offending key
/// or value as `FILE:LINE:COL`, suggest the closest known key on a typo, and never show an
/// `${ENV}` value.
pub struct Options<'a> {
    file: &'a SourceText,
    secrets: &'a Secrets,
    name: String,
    value: Spanned<DeValue<'a>>,
}

impl<'a> Options<'a> {
    pub(crate) fn new(
        file: &'a SourceText,
        secrets: &'a Secrets,
        name: String,
        value: Spanned<DeValue<'a>>,
    ) -> Self {
        Options {
            file,
            secrets,
            name,
            value,
        }
    }

    /// Options parsed from a TOML snippet, for tests of component configs.
    pub fn parse_snippet<T: DeserializeOwned>(toml_text: &str) -> Result<T, Diagnostic> {
        Options::parse_snippet_with(toml_text, |options| options.parse())
    }

    /// Options from a TOML snippet, handed to `parse` (a component's own parse function),
    /// for tests of component configs.
    pub fn parse_snippet_with<T>(
        toml_text: &str,
        parse: impl FnOnce(&Options<'_>) -> Result<T, Diagnostic>,
    ) -> Result<T, Diagnostic> {
        let file = SourceText::new("<snippet>", toml_text);
        let secrets = Secrets::default();
        let table = toml::de::DeTable::parse(&file.text)
            .map_err(|e| file.error(e.span().unwrap_or(0..0), e.message()))?;
        let span = table.span();
        let options = Options::new(
            &file,
            &secrets,
            "snippet".into(),
            Spanned::new(span, DeValue::Table(table.into_inner())),
        );
        parse(&options)
    }

    /// The component's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deserializes the options into `T`. An error points at the value at fault (also
    /// through `#[serde(flatten)]`, where serde keeps no place) and says, in the user's
    /// words, which option it is, what it wants and what was found.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, Diagnostic> {
        deserialize::<T>(&self.value).map_err(|e| {
            let attempt = |value: &Spanned<DeValue<'a>>| {
                deserialize::<T>(value)
                    .err()
                    .map(|e| e.message().to_owned())
            };
            let explained =
                parse_error::explain(&self.value, e.message(), e.span(), &attempt, self.secrets);
            self.error_span(explained.span, explained.message)
        })
    }

    /// A path option as written in the config, resolved against the config file's folder
    /// when it is relative (text without a file: the current directory).
    pub fn resolve_path(&self, path: &std::path::Path) -> std::path::PathBuf {
        match &self.file.base_dir {
            Some(base) if path.is_relative() => base.join(path),
            _ => path.to_path_buf(),
        }
    }

    /// Refuses a key that is not in `known`, as `#[serde(deny_unknown_fields)]` would,
    /// for options structs that flatten other structs (where serde cannot): the error
    /// points at the key, lists the known keys and suggests the closest one.
    pub fn refuse_unknown_keys<'k>(
        &self,
        known: impl IntoIterator<Item = &'k str>,
    ) -> Result<(), Diagnostic> {
        let DeValue::Table(table) = self.value.get_ref() else {
            return Ok(());
        };
        let mut known: Vec<&str> = known.into_iter().collect();
        known.sort_unstable();
        for key in table.keys() {
            let name: &str = key.get_ref();
            if known.contains(&name) {
                continue;
            }
            let list = known
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(self.error_span(
                key.span(),
                format!(
                    "unknown field `{name}`, expected one of {list}{}",
                    suggestion(name, known.iter().copied())
                ),
            ));
        }
        Ok(())
    }

    /// Whether a key is present.
    pub fn has(&self, key: &str) -> bool {
        self.find(key).is_some()
    }

    /// An error located at the value of `key` (a dotted path into nested tables), or at
    /// the component when the key is absent.
    pub fn error_at(&self, key: &str, message: impl AsRef<str>) -> Diagnostic {
        let span = self
            .find(key)
            .map(|v| v.span())
            .unwrap_or_else(|| self.value.span());
        self.error_span(span, message.as_ref().to_owned())
    }

    /// Checks that the number option `key` (its parsed `value`) lies in `range`; the error
    /// points at the value and names the bounds. Every component checks its sizes,
    /// intervals, timeouts and counts with it, so that an absurd value (a queue of 10^12,
    /// a timeout of 10^19 ms) is refused at validation, never met at run time.
    pub fn check_range<T: PartialOrd + Display + Copy>(
        &self,
        key: &str,
        value: T,
        range: RangeInclusive<T>,
    ) -> Result<T, Diagnostic> {
        match out_of_range(key, value, &range) {
            Some(message) => Err(self.error_at(key, message)),
            None => Ok(value),
        }
    }

    /// [`check_range`](Self::check_range) for an optional option: `None` passes.
    pub fn check_range_opt<T: PartialOrd + Display + Copy>(
        &self,
        key: &str,
        value: Option<T>,
        range: RangeInclusive<T>,
    ) -> Result<Option<T>, Diagnostic> {
        value.map(|v| self.check_range(key, v, range)).transpose()
    }

    /// An error located at the component.
    pub fn error(&self, message: impl AsRef<str>) -> Diagnostic {
        self.error_span(self.value.span(), message.as_ref().to_owned())
    }

    fn error_span(&self, span: Range<usize>, message: String) -> Diagnostic {
        self.file.error(
            span,
            format!("{}: {}", self.name, self.secrets.scrub(&message)),
        )
    }

    fn find(&self, key: &str) -> Option<&Spanned<DeValue<'a>>> {
        let mut current = &self.value;
        for part in key.split('.') {
            current = match current.get_ref() {
                DeValue::Table(t) => t.get(part)?,
                DeValue::Array(a) => a.get(part.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(current)
    }
}

/// The longest duration option (a timeout, an interval, a delay) in ms unless a component
/// documents another bound: one day.
pub const MAX_DURATION_MS: u64 = 24 * 60 * 60 * 1000;

/// The longest queue (of signals, frames or entries) unless a component documents another
/// bound: one million.
pub const MAX_QUEUE: usize = 1_000_000;

/// The message for a number option outside its range, or `None` when it is inside (for
/// checks that have a [`SourceText`] span rather than an [`Options`]).
pub fn out_of_range<T: PartialOrd + Display>(
    key: &str,
    value: T,
    range: &RangeInclusive<T>,
) -> Option<String> {
    if range.contains(&value) {
        return None;
    }
    Some(format!(
        "`{key}` must be at least {} and at most {}, got {value}",
        range.start(),
        range.end()
    ))
}

/// `T` from an options value.
fn deserialize<T: DeserializeOwned>(value: &Spanned<DeValue<'_>>) -> Result<T, toml::de::Error> {
    T::deserialize(toml::de::ValueDeserializer::from(value.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Demo {
        interval_ms: u64,
        #[serde(default)]
        emit: Option<String>,
    }

    #[test]
    fn unknown_field_suggests() {
        let err = Options::parse_snippet::<Demo>("interval_ms = 5\nintervl_ms = 3\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert_eq!(err.col, 1);
        assert!(err.message.contains("did you mean `interval_ms`"), "{err}");
    }

    #[test]
    fn wrong_type_points_at_value() {
        let err = Options::parse_snippet::<Demo>("interval_ms = \"x\"\n").unwrap_err();
        assert_eq!((err.line, err.col), (1, 15));
    }

    #[test]
    fn unknown_keys_are_refused_at_the_key_with_a_suggestion() {
        let err = Options::parse_snippet_with("interval_ms = 5\n  intervl_ms = 3\n", |o| {
            o.refuse_unknown_keys(["interval_ms", "emit"])
        })
        .unwrap_err();
        assert_eq!((err.line, err.col), (2, 3), "{err}");
        assert!(err.message.contains("unknown field `intervl_ms`"), "{err}");
        assert!(err.message.contains("did you mean `interval_ms`"), "{err}");
        Options::parse_snippet_with("emit = \"x\"", |o| o.refuse_unknown_keys(["emit"]))
            .expect("known keys pass");
    }

    #[test]
    fn a_number_out_of_range_is_refused_at_its_value_with_the_bounds() {
        let check = |text: &str| {
            Options::parse_snippet_with(text, |o| {
                let demo: Demo = o.parse()?;
                o.check_range("interval_ms", demo.interval_ms, 1..=MAX_DURATION_MS)
            })
        };
        assert_eq!(check("interval_ms = 5").unwrap(), 5);
        let err = check("emit = \"x\"\ninterval_ms = 18446744073709551615\n").unwrap_err();
        assert_eq!((err.line, err.col), (2, 15), "{err}");
        assert!(
            err.message.contains(
                "`interval_ms` must be at least 1 and at most 86400000, got 18446744073709551615"
            ),
            "{err}"
        );
        assert!(check("interval_ms = 0").is_err());
        let opt = Options::parse_snippet_with("x = 1", |o| {
            o.check_range_opt::<u64>("y", None, 1..=2)?;
            o.check_range_opt("x", Some(1u64), 1..=2)
        });
        assert_eq!(opt.unwrap(), Some(1));
    }

    #[test]
    fn missing_field() {
        let err = Options::parse_snippet::<Demo>("emit = \"both\"\n").unwrap_err();
        assert!(err.message.contains("missing field `interval_ms`"), "{err}");
    }
}

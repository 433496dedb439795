//! `route`: sends each signal to the named branches whose condition it matches, each branch
//! its own output (`NAME.<branch>`), and what matches none to `NAME._unmatched`.

use std::fmt;
use std::sync::Arc;

use patchbay_graph::{Diagnostic, Emit, Filter, FilterSpec, Options};
use patchbay_signal::SharedSignal;
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, Visitor};
use serde_spanned::Spanned;

use crate::ConfigError;
use crate::condition::Condition;

/// The output of the signals no branch matched.
pub const UNMATCHED: &str = "_unmatched";

/// Options of a `route` filter.
///
/// ```toml
/// [filters.by_kind]
/// type = "route"
/// inputs = ["agent"]
///
/// [filters.by_kind.branches]
/// errors = { type = "error" }
/// tools = { type = { matches = "^tool_" } }
/// slow = '.payload.durationMs > 1000'
/// ```
///
/// Each branch is an output: `inputs = ["by_kind.errors"]` reads it, and so does a test's
/// `extract_from`. A signal goes to every branch it matches (the same signal, not a copy),
/// in the order the branches are written, or only to the first one with
/// `first_match = true`. A signal that matches no branch leaves by `NAME._unmatched`.
/// Nothing is dropped: `route` has no bare `NAME` output.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The branches, `name = condition`, in order: each condition is an operator table, an
    /// array of them (any holds), or a jq expression string, as in `when`. Names are
    /// letters, digits, `_` and `-`, and not `dropped` or `_unmatched`.
    pub branches: Branches,
    /// Send a signal only to the first branch it matches (default: to every one).
    #[serde(default)]
    pub first_match: bool,
}

/// `route`'s branches, in the order they are written.
#[derive(Debug, Clone)]
pub struct Branches(pub Vec<(String, Condition)>);

patchbay_graph::described_as!(Branches, {"type": "object"});

impl<'de> Deserialize<'de> for Branches {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(BranchesVisitor)
    }
}

struct BranchesVisitor;

impl<'de> Visitor<'de> for BranchesVisitor {
    type Value = Branches;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of branch = condition")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Branches, A::Error> {
        // The table may come in any order; the keys' places in the file give the order
        // the user wrote (which `first_match` depends on).
        let mut branches: Vec<(usize, String, Condition)> = Vec::new();
        while let Some(name) = map.next_key::<Spanned<String>>()? {
            let start = name.span().start;
            let name = name.into_inner();
            if let Err(message) = check_name(&name) {
                // Failing while reading the value puts the error on the branch's line.
                return Err(map
                    .next_value_seed(Reject(message))
                    .err()
                    .unwrap_or_else(|| A::Error::custom("bad branch name")));
            }
            let condition: Condition = map.next_value()?;
            branches.push((start, name, condition));
        }
        branches.sort_by_key(|b| b.0);
        Ok(Branches(
            branches.into_iter().map(|(_, n, c)| (n, c)).collect(),
        ))
    }
}

/// Fails with its message, whatever the value.
struct Reject(String);

impl<'de> DeserializeSeed<'de> for Reject {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, _: D) -> Result<(), D::Error> {
        Err(D::Error::custom(self.0))
    }
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "bad branch name `{name}`: use letters, digits, `_` and `-`"
        ));
    }
    if name == "dropped" || name == UNMATCHED {
        return Err(format!("`{name}` is reserved: name the branch otherwise"));
    }
    Ok(())
}

/// Builds a `route` from its options.
pub fn build(options: &Options<'_>) -> Result<FilterSpec, Diagnostic> {
    let config: RouteConfig = options.parse()?;
    config.into_spec().map_err(|e| e.locate(options))
}

impl RouteConfig {
    /// Checks the options and makes the filter's spec, its outputs the branches then
    /// `_unmatched`.
    pub fn into_spec(self) -> Result<FilterSpec, ConfigError> {
        if self.branches.0.is_empty() {
            return Err(ConfigError::at(
                "branches",
                "`route` needs at least one branch",
            ));
        }
        // Each branch is a `Port::Named(u16)`: the bound is far above any sane config.
        if self.branches.0.len() >= usize::from(u16::MAX) {
            return Err(ConfigError::at("branches", "too many branches"));
        }
        let mut ports: Vec<String> = self.branches.0.iter().map(|b| b.0.clone()).collect();
        ports.push(UNMATCHED.into());
        let conditions: Arc<[Condition]> = self.branches.0.into_iter().map(|b| b.1).collect();
        let first_match = self.first_match;
        Ok(FilterSpec::new(None, move || {
            Box::new(Route {
                conditions: conditions.clone(),
                first_match,
            })
        })
        .with_ports(ports))
    }
}

/// A running `route`.
pub struct Route {
    conditions: Arc<[Condition]>,
    first_match: bool,
}

impl Filter for Route {
    fn on_signal(&mut self, signal: SharedSignal, _now: i64, emit: &mut Emit) {
        let mut matched = false;
        for (i, condition) in self.conditions.iter().enumerate() {
            if condition.matches(&signal) {
                matched = true;
                // Bounded by `into_spec`.
                emit.to(i as u16, Arc::clone(&signal));
                if self.first_match {
                    break;
                }
            }
        }
        if !matched {
            emit.to(self.conditions.len() as u16, signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{config, config_error, sig};
    use patchbay_graph::Port;

    const BRANCHES: &str = r#"
[branches]
zeta = { "payload.n" = { matches = "^[ab]$" } }
alpha = '.payload.n == "b" or .payload.n == "c"'
"#;

    /// `(port name, label)` for each emitted signal.
    fn run(toml: &str, labels: &[&str]) -> Vec<String> {
        let spec = config::<RouteConfig>(toml).into_spec().unwrap();
        assert_eq!(spec.clock, None);
        let mut filter = spec.instantiate();
        let mut out = Vec::new();
        for (t, n) in labels.iter().enumerate() {
            let mut emit = Emit::new();
            filter.on_signal(Arc::new(sig(t as i64, n)), t as i64, &mut emit);
            for (port, s) in emit.take() {
                let Port::Named(p) = port else {
                    panic!("route emitted on {port:?}");
                };
                out.push(format!(
                    "{}:{}",
                    spec.ports()[usize::from(p)],
                    s.payload["n"]
                ));
            }
        }
        out
    }

    #[test]
    fn every_matching_branch_in_written_order() {
        let out = run(BRANCHES, &["a", "b", "c", "d"]);
        assert_eq!(
            out,
            [
                "zeta:\"a\"",
                "zeta:\"b\"",
                "alpha:\"b\"",
                "alpha:\"c\"",
                "_unmatched:\"d\""
            ]
        );
    }

    #[test]
    fn first_match_only() {
        let toml = format!("first_match = true\n{BRANCHES}");
        let out = run(&toml, &["a", "b", "c", "d"]);
        assert_eq!(
            out,
            [
                "zeta:\"a\"",
                "zeta:\"b\"",
                "alpha:\"c\"",
                "_unmatched:\"d\""
            ]
        );
    }

    #[test]
    fn ports_are_the_branches_then_unmatched() {
        let spec = config::<RouteConfig>(BRANCHES).into_spec().unwrap();
        assert_eq!(spec.ports(), ["zeta", "alpha", "_unmatched"]);
        assert_eq!(spec.port("alpha"), Some(Port::Named(1)));
        assert_eq!(spec.port("dropped"), None);
    }

    #[test]
    fn a_signal_in_several_branches_is_shared() {
        let spec = config::<RouteConfig>(BRANCHES).into_spec().unwrap();
        let mut filter = spec.instantiate();
        let signal = Arc::new(sig(0, "b"));
        let mut emit = Emit::new();
        filter.on_signal(signal.clone(), 0, &mut emit);
        let out = emit.take();
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|(_, s)| Arc::ptr_eq(s, &signal)));
    }

    #[test]
    fn config_errors() {
        let (l, c, m) = config_error::<RouteConfig>("[branches]\nok = {}\ndropped = {}");
        assert_eq!(l, 3, "{c} {m}");
        assert!(m.contains("reserved"), "{m}");
        let (l, _, m) = config_error::<RouteConfig>("[branches]\n\"a b\" = {}");
        assert_eq!(l, 2, "{m}");
        assert!(m.contains("bad branch name"), "{m}");
        let (l, c, m) = config_error::<RouteConfig>("[branches]\nx = '.a |'");
        assert_eq!((l, c), (2, 5), "{m}");
        assert!(m.contains("bad jq expression"), "{m}");
        let (l, c, m) = config_error::<RouteConfig>("first_match = true");
        assert_eq!((l, c), (1, 1), "{m}");
        assert!(m.contains("branches"), "{m}");
        let (l, c, m) = config_error::<RouteConfig>("branchs = {}");
        assert_eq!((l, c), (1, 1), "{m}");
        assert!(m.contains("did you mean `branches`"), "{m}");
        let e = config::<RouteConfig>("branches = {}")
            .into_spec()
            .unwrap_err();
        assert_eq!(e.key, Some("branches"));
    }
}

//! Choosing MIDI ports by name.
//!
//! midir's JACK port names are `client:port` (a controller's virtual port `pad` shows as
//! `ctl:pad`), so a `port` option is either a full name or an unanchored regex
//! (`nanoPAD2.*`, `ctl:`). Port lists include patchbay's own virtual ports
//! (`patchbay:leds`); matching them by a regex would loop patchbay's output back into
//! itself, so they only match a pattern that names them exactly.

use regex::Regex;

/// The JACK client name patchbay's own ports are created under.
const OWN_CLIENT: &str = "patchbay";

/// A `port` pattern that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortPatternError {
    /// The pattern is not an exact name of any port and not a valid regex either.
    #[error("port pattern `{pattern}` is not a valid regex: {message}")]
    InvalidRegex {
        /// The pattern.
        pattern: String,
        /// The regex compiler's explanation.
        message: String,
    },
}

/// Matches port names against a `port` option: the exact name, or else an unanchored
/// regex, never one of patchbay's own ports unless named exactly.
#[derive(Debug, Clone)]
pub struct PortMatcher {
    pattern: String,
    regex: Regex,
    own_client: String,
}

impl PortMatcher {
    /// A matcher for `pattern`; fails when it is not a valid regex. (A full name with
    /// regex metacharacters still matches itself exactly, as long as it compiles: one
    /// that does not, like `pad[`, must be escaped, as the regex `pad\[`.)
    pub fn new(pattern: &str) -> Result<Self, PortPatternError> {
        let regex = Regex::new(pattern).map_err(|err| PortPatternError::InvalidRegex {
            pattern: pattern.to_owned(),
            message: err.to_string(),
        })?;
        Ok(PortMatcher {
            pattern: pattern.to_owned(),
            regex,
            own_client: OWN_CLIENT.to_owned(),
        })
    }

    /// Sets the client name whose ports are patchbay's own (default `patchbay`).
    pub fn with_own_client(mut self, client: impl Into<String>) -> Self {
        self.own_client = client.into();
        self
    }

    /// The pattern as given.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Whether the port named `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        name == self.pattern || (!self.is_own(name) && self.regex.is_match(name))
    }

    /// The port to connect to among `names`: the one named exactly if present, else the
    /// first that matches.
    pub fn pick<'a, I>(&self, names: I) -> Option<&'a str>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let mut first = None;
        for name in names {
            if name == self.pattern {
                return Some(name);
            }
            if first.is_none() && self.matches(name) {
                first = Some(name);
            }
        }
        first
    }

    /// Whether `name` is one of patchbay's own ports (see [`PortMatcher::with_own_client`]),
    /// which a regex never matches.
    pub fn is_own_port(&self, name: &str) -> bool {
        self.is_own(name)
    }

    /// Whether `name` is a port of patchbay's own client.
    fn is_own(&self, name: &str) -> bool {
        is_own_port(&self.own_client, name)
    }
}

/// Whether `name` is a port of the client `own_client`: `patchbay:…`, or `patchbay-NN:…`
/// (JACK renames a duplicate client `name-01`, so a second patchbay gets that).
pub(crate) fn is_own_port(own_client: &str, name: &str) -> bool {
    let Some(rest) = name.strip_prefix(own_client) else {
        return false;
    };
    if rest.starts_with(':') {
        return true;
    }
    rest.strip_prefix('-').is_some_and(|numbered| {
        let digits = numbered.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && numbered.as_bytes().get(digits) == Some(&b':')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_name() {
        let m = PortMatcher::new("ctl:pad").unwrap();
        assert!(m.matches("ctl:pad"));
        assert!(
            m.matches("ctl:pad2"),
            "a full name is also an unanchored regex"
        );
        assert!(!m.matches("other:knobs"));
        assert_eq!(m.pattern(), "ctl:pad");
    }

    #[test]
    fn unanchored_regex() {
        let m = PortMatcher::new("nanoPAD2.*").unwrap();
        assert!(m.matches("nanoPAD2:nanoPAD2 MIDI 1"));
        assert!(
            m.matches("system:nanoPAD2 port"),
            "unanchored: anywhere in the name"
        );
        assert!(!m.matches("nanoKONTROL:out"));
        let anchored = PortMatcher::new("^ctl:").unwrap();
        assert!(anchored.matches("ctl:pad"));
        assert!(!anchored.matches("xctl:pad"));
    }

    #[test]
    fn own_ports_are_excluded_unless_named_exactly() {
        let m = PortMatcher::new("leds").unwrap();
        assert!(!m.matches("patchbay:leds"));
        assert!(!m.matches("patchbay-01:leds"));
        assert!(m.matches("ctl:leds"));
        assert!(
            m.matches("patchbayish:leds"),
            "another client whose name starts alike"
        );
        assert!(m.matches("patchbay-x:leds"));
        let all = PortMatcher::new(".*").unwrap();
        assert!(!all.matches("patchbay:leds"));
        let exact = PortMatcher::new("patchbay:leds").unwrap();
        assert!(exact.matches("patchbay:leds"));
        assert!(
            !exact.matches("patchbay:leds2"),
            "a regex never reaches own ports"
        );
        let renamed = PortMatcher::new("leds").unwrap().with_own_client("pb");
        assert!(!renamed.matches("pb:leds"));
        assert!(renamed.matches("patchbay:leds"));
    }

    #[test]
    fn pick_prefers_the_exact_name() {
        let m = PortMatcher::new("ctl:pad").unwrap();
        let ports = ["ctl:pad2", "patchbay:leds", "ctl:pad"];
        assert_eq!(m.pick(ports), Some("ctl:pad"));
        let m = PortMatcher::new("pad").unwrap();
        assert_eq!(m.pick(ports), Some("ctl:pad2"));
        let m = PortMatcher::new("leds").unwrap();
        assert_eq!(m.pick(ports), None);
    }

    #[test]
    fn invalid_regex_is_a_typed_error() {
        let err = PortMatcher::new("pad[").unwrap_err();
        let PortPatternError::InvalidRegex { pattern, message } = &err;
        assert_eq!(pattern, "pad[");
        assert!(!message.is_empty());
        assert!(
            err.to_string()
                .starts_with("port pattern `pad[` is not a valid regex")
        );
    }
}

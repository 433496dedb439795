//! MQTT topics: the filters a source subscribes to (wildcards `+` and `#`, shared
//! subscriptions `$share/GROUP/…`), how a topic matches them, and the topic templates an
//! output publishes on (`agents/{payload.agentId}/state`). Pure: no I/O.

use patchbay_signal::Signal;
use patchbay_signal::template::Template;
use serde::Deserialize;
use serde::de::{Deserializer, Error as _};

/// The longest topic or filter MQTT can carry (a 16-bit length prefix), in bytes.
pub const MAX_TOPIC_LEN: usize = 65_535;

/// Why a topic filter or a template is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// Nothing to subscribe to or publish on.
    #[error("a topic cannot be empty")]
    Empty,
    /// Over [`MAX_TOPIC_LEN`] bytes.
    #[error("`{0}…` is longer than MQTT's 65535 bytes")]
    TooLong(String),
    /// A NUL character, which MQTT forbids in topics.
    #[error("`{0}` holds a NUL character")]
    Nul(String),
    /// `+` or `#` that is not a whole level, or `#` before the last level.
    #[error("`{0}`: `+` must be a whole level and `#` a whole last level (`a/+/c`, `a/#`)")]
    Wildcard(String),
    /// A shared subscription without a group or a filter (`$share/GROUP/FILTER`).
    #[error("`{0}`: a shared subscription is `$share/GROUP/FILTER`")]
    Shared(String),
    /// A wildcard in an output's topic: a message goes to one topic.
    #[error("`{0}`: no `+` or `#` in a topic to publish on")]
    WildcardInTemplate(String),
    /// Topics starting with `$` belong to the broker (`$SYS/…`).
    #[error("`{0}`: topics starting with `$` are the broker's")]
    Reserved(String),
    /// A `{` without its `}`, or a placeholder that is not a path.
    #[error("`{0}`: {1}")]
    Placeholder(String, String),
}

fn shown(text: &str) -> String {
    patchbay_signal::truncate(text, 80)
}

/// A topic filter a source subscribes to, checked: `home/+/button`, `esp32/#`,
/// `$share/lamps/agents/+/state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicFilter {
    text: String,
    /// Where the filter proper starts (after `$share/GROUP/`).
    filter_at: usize,
}

patchbay_graph::described_as!(TopicFilter, {"type": "string"});

impl TopicFilter {
    /// Checks a filter: not empty, at most 65535 bytes, no NUL, `+` a whole level, `#` a
    /// whole last level; `$share/GROUP/FILTER` is a shared subscription (the broker hands
    /// each message to one of the group's subscribers).
    pub fn parse(text: &str) -> Result<TopicFilter, TopicError> {
        check_text(text)?;
        let filter_at = match text.strip_prefix("$share/") {
            Some(rest) => match rest.split_once('/') {
                Some((group, filter))
                    if !group.is_empty() && !filter.is_empty() && !group.contains(['+', '#']) =>
                {
                    text.len() - filter.len()
                }
                _ => return Err(TopicError::Shared(shown(text))),
            },
            None => 0,
        };
        let filter = &text[filter_at..];
        let levels: Vec<&str> = filter.split('/').collect();
        for (i, level) in levels.iter().enumerate() {
            let last = i + 1 == levels.len();
            let bad = (level.contains('+') && *level != "+")
                || (level.contains('#') && (*level != "#" || !last));
            if bad {
                return Err(TopicError::Wildcard(shown(text)));
            }
        }
        Ok(TopicFilter {
            text: text.to_owned(),
            filter_at,
        })
    }

    /// The filter as written (what is sent in SUBSCRIBE).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether a message on `topic` is one this filter subscribes to (MQTT's rules: `+`
    /// matches one level, `#` the parent level and everything below it, and a wildcard
    /// in the first level does not match a topic starting with `$`).
    pub fn matches(&self, topic: &str) -> bool {
        let filter = &self.text[self.filter_at..];
        if topic.starts_with('$') && filter.starts_with(['+', '#']) {
            return false;
        }
        let mut levels = topic.split('/');
        for want in filter.split('/') {
            match want {
                "#" => return true,
                "+" => {
                    if levels.next().is_none() {
                        return false;
                    }
                }
                literal => {
                    if levels.next() != Some(literal) {
                        return false;
                    }
                }
            }
        }
        levels.next().is_none()
    }
}

impl<'de> Deserialize<'de> for TopicFilter {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        TopicFilter::parse(&text).map_err(D::Error::custom)
    }
}

/// Checks what every topic and filter must be.
fn check_text(text: &str) -> Result<(), TopicError> {
    if text.is_empty() {
        return Err(TopicError::Empty);
    }
    if text.len() > MAX_TOPIC_LEN {
        return Err(TopicError::TooLong(shown(text)));
    }
    if text.contains('\0') {
        return Err(TopicError::Nul(shown(text)));
    }
    Ok(())
}

/// The topic an output publishes each signal on: literal text and `{path}` placeholders,
/// each replaced by the signal's value at that path made into one level (see
/// [`push_level`]).
#[derive(Debug, Clone)]
pub struct TopicTemplate {
    template: Template,
}

patchbay_graph::described_as!(TopicTemplate, {"type": "string"});

impl TopicTemplate {
    /// Parses a template. Its literal text may not hold `+`, `#` or NUL, nor start with
    /// `$`; `{` opens a placeholder that `}` closes.
    pub fn parse(text: &str) -> Result<TopicTemplate, TopicError> {
        check_text(text)?;
        if text.starts_with('$') {
            return Err(TopicError::Reserved(shown(text)));
        }
        let template = Template::parse(text)
            .map_err(|e| TopicError::Placeholder(shown(text), e.to_string()))?;
        if template.texts().any(|t| t.contains(['+', '#'])) {
            return Err(TopicError::WildcardInTemplate(shown(text)));
        }
        Ok(TopicTemplate { template })
    }

    /// Whether the template has no placeholder (every signal goes to one topic).
    pub fn is_fixed(&self) -> bool {
        self.template.is_fixed()
    }

    /// The topic of `signal`, appended to `out`. Always a valid topic to publish on when
    /// the template is: placeholders never add `+`, `#`, `/` or NUL, and never nothing.
    pub fn render(&self, signal: &Signal, out: &mut String) {
        self.template.render(signal, out, |value, out| match value {
            Some(value) => push_level(value, out),
            None => out.push('_'),
        });
    }
}

impl<'de> Deserialize<'de> for TopicTemplate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        TopicTemplate::parse(&text).map_err(D::Error::custom)
    }
}

/// The longest a placeholder's value may make one level, in bytes (a topic stays far
/// below MQTT's limit whatever the signal holds).
pub const MAX_LEVEL_LEN: usize = 256;

/// Appends `value` as one topic level: `/`, `+`, `#`, NUL and other control characters
/// become `_` (a value cannot add levels or wildcards), an empty value is `_`, and a
/// value over [`MAX_LEVEL_LEN`] bytes is cut at a character boundary.
pub fn push_level(value: &str, out: &mut String) {
    if value.is_empty() {
        out.push('_');
        return;
    }
    let mut used = 0;
    for c in value.chars() {
        used += c.len_utf8();
        if used > MAX_LEVEL_LEN {
            break;
        }
        out.push(if matches!(c, '/' | '+' | '#') || c.is_control() {
            '_'
        } else {
            c
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_signal::object;
    use serde_json::Value;

    fn filter(text: &str) -> TopicFilter {
        TopicFilter::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn filters_that_mqtt_accepts() {
        for good in [
            "a",
            "/",
            "a/b/c",
            "+",
            "#",
            "+/+",
            "a/+/c",
            "a/#",
            "/+",
            "a//b",
            "$SYS/#",
            "home/+/button/#",
            "$share/g/a/+",
            "$share/g/#",
            "ünï/cödé",
        ] {
            assert_eq!(filter(good).as_str(), good);
        }
    }

    #[test]
    fn filters_that_mqtt_refuses() {
        for (bad, want) in [
            ("", TopicError::Empty),
            ("a/b+", TopicError::Wildcard("a/b+".into())),
            ("a/+b/c", TopicError::Wildcard("a/+b/c".into())),
            ("a/#/c", TopicError::Wildcard("a/#/c".into())),
            ("a#", TopicError::Wildcard("a#".into())),
            ("#/", TopicError::Wildcard("#/".into())),
            ("a/\0", TopicError::Nul("a/\0".into())),
            ("$share/g", TopicError::Shared("$share/g".into())),
            ("$share//a", TopicError::Shared("$share//a".into())),
            ("$share/g/", TopicError::Shared("$share/g/".into())),
            ("$share/+/a", TopicError::Shared("$share/+/a".into())),
            (
                "$share/g/a/#/b",
                TopicError::Wildcard("$share/g/a/#/b".into()),
            ),
        ] {
            assert_eq!(TopicFilter::parse(bad), Err(want), "{bad:?}");
        }
        let long = "a".repeat(MAX_TOPIC_LEN + 1);
        assert!(matches!(
            TopicFilter::parse(&long),
            Err(TopicError::TooLong(_))
        ));
        assert!(TopicFilter::parse(&"a".repeat(MAX_TOPIC_LEN)).is_ok());
    }

    #[test]
    fn matching_follows_mqtt() {
        let cases: &[(&str, &str, bool)] = &[
            ("a/b", "a/b", true),
            ("a/b", "a/c", false),
            ("a/b", "a/b/c", false),
            ("a/b/c", "a/b", false),
            ("a/+", "a/b", true),
            ("a/+", "a/", true),
            ("a/+", "a", false),
            ("a/+", "a/b/c", false),
            ("+/+", "/x", true),
            ("+", "/x", false),
            ("a/#", "a", true),
            ("a/#", "a/b", true),
            ("a/#", "a/b/c", true),
            ("a/#", "ab", false),
            ("#", "anything/at/all", true),
            ("#", "/", true),
            ("#", "$SYS/uptime", false),
            ("+/uptime", "$SYS/uptime", false),
            ("$SYS/#", "$SYS/uptime", true),
            ("$SYS/+", "$SYS/uptime", true),
            ("home/+/button/#", "home/kitchen/button", true),
            ("home/+/button/#", "home/kitchen/button/1/long", true),
            ("home/+/button/#", "home/kitchen/lamp", false),
            ("$share/g/a/+", "a/b", true),
            ("$share/g/a/+", "$share/g/a/b", false),
            ("a//b", "a//b", true),
            ("a/+/b", "a//b", true),
        ];
        for (f, topic, want) in cases {
            assert_eq!(filter(f).matches(topic), *want, "{f} vs {topic}");
        }
    }

    fn render(template: &str, signal: &Signal) -> String {
        let mut out = String::new();
        TopicTemplate::parse(template)
            .unwrap_or_else(|e| panic!("{template}: {e}"))
            .render(signal, &mut out);
        out
    }

    #[test]
    fn placeholders_become_one_level() {
        let s = Signal::new(
            "agent_state_change",
            "claude-code:main",
            object! {"agentId" => "a/b+c#d", "n" => 3, "flag" => true, "empty" => "", "nul" => Value::Null},
        );
        assert_eq!(
            render("patchbay/{source}/{type}", &s),
            "patchbay/claude-code:main/agent_state_change"
        );
        assert_eq!(render("agents/{agentId}/state", &s), "agents/a_b_c_d/state");
        assert_eq!(
            render("agents/{payload.agentId}/state", &s),
            "agents/a_b_c_d/state"
        );
        assert_eq!(render("x/{n}/{flag}", &s), "x/3/true");
        assert_eq!(render("x/{missing}/{empty}/{nul}", &s), "x/_/_/_");
        assert_eq!(render("pre{n}post", &s), "pre3post");
        assert_eq!(render("fixed/topic", &s), "fixed/topic");
        let tabbed = Signal::new("t", "s", object! {"v" => "a\tb\nc\0"});
        assert_eq!(render("{v}", &tabbed), "a_b_c_");
        let nested = Signal::new("t", "s", object! {"o" => serde_json::json!({"k": [1]})});
        assert_eq!(render("{o}", &nested), "{\"k\":[1]}");
    }

    #[test]
    fn a_long_value_is_cut_at_a_character() {
        let long = "é".repeat(MAX_LEVEL_LEN);
        let s = Signal::new("t", "s", object! {"v" => long});
        let topic = render("a/{v}", &s);
        assert!(topic.len() <= 2 + MAX_LEVEL_LEN, "{}", topic.len());
        assert!(topic.ends_with('é'));
    }

    #[test]
    fn bad_templates() {
        for bad in ["", "a/+", "a/#", "a/{type", "a/{}", "a/}", "$SYS/x", "a\0"] {
            assert!(TopicTemplate::parse(bad).is_err(), "{bad:?}");
        }
        assert!(TopicTemplate::parse("a/b").unwrap().is_fixed());
        assert!(!TopicTemplate::parse("a/{type}").unwrap().is_fixed());
    }

    #[test]
    fn what_a_template_renders_is_a_topic_no_filter_wildcard_can_fake() {
        // Whatever the value, the rendered topic has exactly the template's levels.
        let values = ["", "/", "//", "+", "#", "a/+/#", "\u{0}", "ok", "$x"];
        for v in values {
            let s = Signal::new("t", "s", object! {"v" => v});
            let topic = render("agents/{v}/state", &s);
            assert_eq!(topic.split('/').count(), 3, "{v:?} → {topic}");
            assert!(!topic.contains(['+', '#', '\0']), "{v:?} → {topic}");
            assert!(filter("agents/+/state").matches(&topic), "{topic}");
        }
    }
}

//! [`SmallString`]: the envelope's short strings (`id`, `type`, `source`,
//! `correlationId`) without an allocation when they are short.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest text kept inline: a patchbay id (26 bytes) and the usual types and source
/// names fit.
const INLINE: usize = 29;

/// An immutable string that keeps up to 29 bytes inline and longer text on the heap.
///
/// The envelope's `id`, `type`, `source` and `correlationId` are almost always short; kept
/// inline they cost no allocation (and no free) per signal. It reads as a `&str` (it
/// dereferences to one and compares with `str` and `String`) and is made from either with
/// `into()`.
///
/// Inline text made by a reader that saw it needs no escape as a JSON string (an id
/// patchbay made, a string read from JSON without escapes) says so
/// ([`is_json_plain`](SmallString::is_json_plain)): a writer of JSON then copies it
/// between quotes without looking at it again.
///
/// ```
/// use patchbay_signal::SmallString;
/// let kind = SmallString::from("text_delta");
/// assert_eq!(kind, "text_delta");
/// assert!(kind.starts_with("text"));
/// assert_eq!(SmallString::from("x".repeat(40)).len(), 40);
/// ```
#[derive(Clone)]
pub struct SmallString(Repr);

#[derive(Clone)]
enum Repr {
    /// `bytes[..len]` is the text, whole UTF-8 (copied from a `&str`, or ASCII); `plain`:
    /// it is known to need no escape as a JSON string.
    Inline {
        len: u8,
        plain: bool,
        bytes: [u8; INLINE],
    },
    Heap(Box<str>),
}

impl SmallString {
    /// The empty string.
    pub const fn new() -> Self {
        SmallString(Repr::Inline {
            len: 0,
            plain: true,
            bytes: [0; INLINE],
        })
    }

    /// Text its maker knows needs no escape as a JSON string: no `"`, no `\` and no
    /// control character (a string read from JSON without escapes, or text made from such
    /// characters only). Inline, it remembers that (see
    /// [`is_json_plain`](SmallString::is_json_plain)).
    pub(crate) fn json_plain(text: &str) -> Self {
        debug_assert_eq!(crate::payload::plain_len(text.as_bytes()), text.len());
        SmallString::from(text).known_plain()
    }

    /// Whether the text is known to need no escape as a JSON string (no `"`, no `\`, no
    /// control character): its maker saw it, and it is kept inline. `false` says nothing:
    /// the text may need escapes, or not.
    ///
    /// ```
    /// use patchbay_signal::SmallString;
    /// assert!(!SmallString::from("made from any text").is_json_plain());
    /// ```
    #[inline]
    pub fn is_json_plain(&self) -> bool {
        matches!(self.0, Repr::Inline { plain: true, .. })
    }

    /// `bytes` as text when they are ASCII and fit inline: a cheaper check than UTF-8
    /// validation, for text patchbay writes itself (ids).
    pub(crate) fn from_ascii(bytes: &[u8]) -> Option<Self> {
        (bytes.len() <= INLINE && bytes.is_ascii()).then(|| SmallString::inline(bytes))
    }

    /// [`from_ascii`](SmallString::from_ascii) for bytes its maker knows need no escape
    /// in a JSON string (ids, from an alphabet of letters and digits).
    pub(crate) fn from_plain_ascii(bytes: &[u8]) -> Option<Self> {
        debug_assert_eq!(crate::payload::plain_len(bytes), bytes.len());
        SmallString::from_ascii(bytes).map(SmallString::known_plain)
    }

    /// This text, remembered as needing no escape when it is inline (its maker knows).
    fn known_plain(mut self) -> Self {
        if let Repr::Inline { plain, .. } = &mut self.0 {
            *plain = true;
        }
        self
    }

    /// `prefix` then `text`: inline when both fit, its bytes moved as a whole block rather
    /// than copied part by part (`invalid.<type>`, for each signal made invalid).
    ///
    /// ```
    /// use patchbay_signal::SmallString;
    /// let kind = SmallString::from("text_delta");
    /// assert_eq!(SmallString::with_prefix("invalid.", &kind), "invalid.text_delta");
    /// ```
    #[inline]
    pub fn with_prefix(prefix: &str, text: &SmallString) -> Self {
        match &text.0 {
            Repr::Inline { len, plain, bytes } if prefix.len() + usize::from(*len) <= INLINE => {
                // The prefix, then the text's whole block: bytes past the length are not read.
                let mut joined = [0; INLINE];
                joined[..prefix.len()].copy_from_slice(prefix.as_bytes());
                joined[prefix.len()..].copy_from_slice(&bytes[..INLINE - prefix.len()]);
                SmallString(Repr::Inline {
                    len: prefix.len() as u8 + len,
                    // Plain when both are (a literal prefix is looked at when compiled).
                    plain: *plain && !prefix.bytes().any(crate::payload::needs_escape),
                    bytes: joined,
                })
            }
            _ => SmallString::concat(&[prefix, text]),
        }
    }

    /// Inline text of `bytes`, which its callers made sure are whole UTF-8 and at most
    /// `INLINE` bytes.
    fn inline(text: &[u8]) -> Self {
        let mut bytes = [0; INLINE];
        bytes[..text.len()].copy_from_slice(text);
        SmallString(Repr::Inline {
            len: text.len() as u8,
            plain: false,
            bytes,
        })
    }

    /// `parts` one after the other, inline when they fit: a prefixed name (`invalid.<type>`)
    /// without formatting or an allocation.
    ///
    /// ```
    /// use patchbay_signal::SmallString;
    /// assert_eq!(SmallString::concat(&["invalid.", "text_delta"]), "invalid.text_delta");
    /// ```
    pub fn concat(parts: &[&str]) -> Self {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > INLINE {
            return SmallString(Repr::Heap(parts.concat().into_boxed_str()));
        }
        let mut bytes = [0; INLINE];
        let mut at = 0;
        for part in parts {
            bytes[at..at + part.len()].copy_from_slice(part.as_bytes());
            at += part.len();
        }
        // Whole `&str`s one after the other: valid UTF-8, as `inline` requires.
        SmallString(Repr::Inline {
            len: len as u8,
            plain: false,
            bytes,
        })
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline { len, bytes, .. } => {
                let text = &bytes[..*len as usize];
                // Safety: `Inline` is only built by `inline`, from the bytes of a whole
                // `&str` (`From<&str>`) or from ASCII (`from_ascii`): valid UTF-8.
                // Checking it again on every read would cost what inline storage saves.
                #[allow(unsafe_code)]
                unsafe {
                    std::str::from_utf8_unchecked(text)
                }
            }
            Repr::Heap(text) => text,
        }
    }
}

impl Default for SmallString {
    fn default() -> Self {
        SmallString::new()
    }
}

impl Deref for SmallString {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for SmallString {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for SmallString {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for SmallString {
    fn from(text: &str) -> Self {
        if text.len() <= INLINE {
            SmallString::inline(text.as_bytes())
        } else {
            SmallString(Repr::Heap(text.into()))
        }
    }
}

impl From<&String> for SmallString {
    fn from(text: &String) -> Self {
        SmallString::from(text.as_str())
    }
}

impl From<&SmallString> for SmallString {
    fn from(text: &SmallString) -> Self {
        text.clone()
    }
}

impl From<String> for SmallString {
    fn from(text: String) -> Self {
        if text.len() <= INLINE {
            SmallString::from(text.as_str())
        } else {
            SmallString(Repr::Heap(text.into_boxed_str()))
        }
    }
}

impl From<SmallString> for String {
    fn from(text: SmallString) -> Self {
        match text.0 {
            Repr::Heap(text) => text.into_string(),
            Repr::Inline { .. } => text.as_str().to_owned(),
        }
    }
}

impl From<SmallString> for serde_json::Value {
    fn from(text: SmallString) -> Self {
        serde_json::Value::String(text.into())
    }
}

impl From<&SmallString> for serde_json::Value {
    fn from(text: &SmallString) -> Self {
        serde_json::Value::String(text.as_str().to_owned())
    }
}

impl PartialEq for SmallString {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for SmallString {}

impl PartialEq<str> for SmallString {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SmallString {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for SmallString {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<serde_json::Value> for SmallString {
    fn eq(&self, other: &serde_json::Value) -> bool {
        other.as_str() == Some(self.as_str())
    }
}

impl PartialEq<SmallString> for str {
    fn eq(&self, other: &SmallString) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<SmallString> for &str {
    fn eq(&self, other: &SmallString) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<SmallString> for String {
    fn eq(&self, other: &SmallString) -> bool {
        self == other.as_str()
    }
}

impl PartialOrd for SmallString {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SmallString {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for SmallString {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl fmt::Debug for SmallString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SmallString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl Serialize for SmallString {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SmallString {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = SmallString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<SmallString, E> {
                Ok(text.into())
            }
            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<SmallString, E> {
                Ok(text.into())
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_text_read_back_as_made() {
        for text in [
            "",
            "a",
            "é",
            &"x".repeat(INLINE),
            &"y".repeat(INLINE + 1),
            "日本語のテキスト、長めのもの",
        ] {
            let s = SmallString::from(text);
            assert_eq!(s, text);
            assert_eq!(SmallString::from(text.to_owned()), s);
            assert_eq!(String::from(s.clone()), text);
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(serde_json::from_str::<SmallString>(&json).unwrap(), s);
        }
        assert!(matches!(
            SmallString::from("x".repeat(INLINE)).0,
            Repr::Inline { .. }
        ));
        assert!(matches!(
            SmallString::from("x".repeat(INLINE + 1)).0,
            Repr::Heap(_)
        ));
    }

    #[test]
    fn from_ascii_takes_only_ascii_that_fits_inline() {
        assert_eq!(
            SmallString::from_ascii(b"01ARZ3NDEK").unwrap(),
            "01ARZ3NDEK"
        );
        assert!(SmallString::from_ascii("é".as_bytes()).is_none());
        assert!(SmallString::from_ascii(&[b'a'; INLINE + 1]).is_none());
    }

    #[test]
    fn a_prefixed_string_is_the_two_one_after_the_other() {
        for text in [
            "",
            "a",
            "text_delta",
            &"x".repeat(22),
            &"y".repeat(23),
            &"é".repeat(20),
        ] {
            for prefix in ["", "invalid.", "ü."] {
                let joined = SmallString::with_prefix(prefix, &SmallString::from(text));
                assert_eq!(joined, format!("{prefix}{text}"));
                // Equal to the same text made otherwise, inline or not.
                assert_eq!(joined, SmallString::from(format!("{prefix}{text}")));
            }
        }
    }

    #[test]
    fn only_text_its_maker_saw_plain_says_it_needs_no_escape() {
        assert!(SmallString::new().is_json_plain());
        assert!(!SmallString::from("text_delta").is_json_plain());
        assert!(!SmallString::from("a\"b".to_owned()).is_json_plain());
        let kind = SmallString::json_plain("text_delta");
        assert!(kind.is_json_plain() && kind == "text_delta");
        assert!(kind.clone().is_json_plain());
        // Kept on the heap, it says nothing.
        assert!(!SmallString::json_plain(&"x".repeat(INLINE + 1)).is_json_plain());
        let id = SmallString::from_plain_ascii(b"01ARZ3NDEK").unwrap();
        assert!(id.is_json_plain() && id == "01ARZ3NDEK");
        assert!(
            !SmallString::from_ascii(b"01ARZ3NDEK")
                .unwrap()
                .is_json_plain()
        );
        // Prefixed: plain when the text and the prefix are.
        assert!(SmallString::with_prefix("invalid.", &kind).is_json_plain());
        assert!(!SmallString::with_prefix("in\"valid.", &kind).is_json_plain());
        assert!(!SmallString::with_prefix("invalid.", &SmallString::from("t")).is_json_plain());
    }

    #[test]
    fn is_as_big_as_four_words() {
        assert_eq!(std::mem::size_of::<SmallString>(), 32);
        assert_eq!(std::mem::size_of::<Option<SmallString>>(), 32);
    }
}

//! A payload that keeps the producer's JSON text and builds its tree only when read.
//!
//! Most signals pass through the graph without anyone reading their payload (a `when` on
//! the type, a sidecar that forwards them), yet building a `serde_json` tree (an ordered
//! map per object, a `String` per key and per string) is the largest cost of taking a
//! signal in. A [`LazyObject`] made from JSON text keeps the text and builds the tree on
//! first read; writers that emit JSON ([`LazyObject::raw_json`]) copy the text as it is.
//!
//! The text is only kept when it is exactly what `serde_json` would write for the tree it
//! parses to ([`is_canonical_object`]): compact, no duplicate keys, strings escaped as
//! `serde_json` escapes them, numbers as `serde_json` prints them. So splicing the text
//! gives the same bytes as serializing the tree would: key order, escapes and numbers are
//! unchanged, and nothing downstream can tell the difference. Any other text (pretty
//! printed, `\u` escapes, `1E3`, repeated keys) takes the tree path, as before.

use std::fmt;
use std::ops::{Deref, DerefMut, Range};
use std::sync::OnceLock;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::Object;

/// A JSON object, kept as its canonical JSON text until something reads it.
///
/// Reads go through [`Deref`] to an [`Object`] (parsed once, on first use, and kept);
/// any mutable access ([`DerefMut`]) builds the tree and forgets the text, so the text is
/// never stale. Equality, `Debug` and serialization are those of the object.
pub struct LazyObject {
    /// The object's JSON text, exactly as `serde_json` would write the tree; `None` once
    /// the object may have been changed (or when it was made from a tree).
    raw: Option<Box<str>>,
    /// The tree: set from the start when made from one, built on first read otherwise
    /// (from the text, or empty). Boxed, so that a signal (moved between tasks several
    /// times) stays small.
    tree: OnceLock<Box<Object>>,
    /// The top-level keys the text may have, when the pass that checked it noted them
    /// (else any): a question about one key is then mostly answered without the text.
    keys: KeySet,
}

/// Which keys an object may have at its top level: one bit per key, chosen by the key's
/// first and last bytes and its length, so that a key whose bit is clear is certainly not
/// there (and one whose bit is set may be). A pass that reads an object's keys anyway notes
/// them; the sidecar then asks each signal's metadata for its own `seq` without reading
/// the text again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeySet(u64);

impl KeySet {
    /// Nothing known: every key may be there.
    pub(crate) const ANY: KeySet = KeySet(u64::MAX);
    /// No key.
    pub(crate) const NONE: KeySet = KeySet(0);

    /// The bit of `key` (as written between its quotes).
    #[inline]
    fn bit(key: &[u8]) -> u64 {
        let (first, last) = (key.first().copied(), key.last().copied());
        let mix = usize::from(first.unwrap_or(0)) * 3 + usize::from(last.unwrap_or(0)) * 5;
        1 << ((mix + key.len() * 7) % 64)
    }

    /// Notes `key`.
    #[inline]
    pub(crate) fn add(&mut self, key: &[u8]) {
        self.0 |= Self::bit(key);
    }

    /// These keys and `key`.
    pub(crate) fn with(mut self, key: &str) -> KeySet {
        self.add(key.as_bytes());
        self
    }

    /// Whether `key` may be one of the keys.
    #[inline]
    pub(crate) fn may_have(self, key: &[u8]) -> bool {
        self.0 & Self::bit(key) != 0
    }
}

impl LazyObject {
    /// An empty object.
    pub fn new() -> Self {
        // No text and no tree yet: reading builds the empty tree (an empty payload, the
        // most common one, allocates nothing).
        LazyObject {
            raw: None,
            tree: OnceLock::new(),
            keys: KeySet::ANY,
        }
    }

    /// Keeps `text` as an object's JSON text when it is exactly what `serde_json` writes
    /// for the object it parses to (see [`is_canonical_object`]); `None` otherwise (the
    /// caller parses it into a tree).
    pub fn from_json(text: &str) -> Option<Self> {
        is_canonical_object(text).then(|| LazyObject::from_canonical(text))
    }

    /// Keeps `text`, already found (or made) canonical.
    pub(crate) fn from_canonical(text: &str) -> Self {
        LazyObject::from_canonical_with_keys(text, KeySet::ANY)
    }

    /// Keeps `text`, already found (or made) canonical, whose top-level keys are among
    /// `keys`.
    pub(crate) fn from_canonical_with_keys(text: &str, keys: KeySet) -> Self {
        LazyObject {
            raw: Some(text.into()),
            tree: OnceLock::new(),
            keys,
        }
    }

    /// The object's compact JSON text, when it is kept (made by
    /// [`from_json`](LazyObject::from_json) and not changed since): the same bytes as
    /// serializing the object with `serde_json`.
    pub fn raw_json(&self) -> Option<&str> {
        self.raw.as_deref()
    }

    /// Where the kept text has the top-level field `key` (a plain key, without escapes):
    /// the span of `"key":value`, for a writer that copies the text without it. `None` when
    /// no text is kept, `Some(None)` when the text has no such field.
    pub fn raw_field(&self, key: &str) -> Option<Option<Range<usize>>> {
        let raw = self.raw.as_deref()?;
        if !self.keys.may_have(key.as_bytes()) {
            return Some(None);
        }
        Some(field_of_canonical(raw, key))
    }

    /// Whether the tree has been built (for tests and measurements).
    pub fn is_parsed(&self) -> bool {
        self.tree.get().is_some()
    }

    /// The object as a tree, built now if it was not.
    pub fn into_object(self) -> Object {
        match self.tree.into_inner() {
            Some(tree) => *tree,
            None => parse(self.raw.as_deref()),
        }
    }

    fn tree(&self) -> &Object {
        self.tree
            .get_or_init(|| Box::new(parse(self.raw.as_deref())))
    }
}

/// Parses text that [`is_canonical_object`] accepted: it cannot fail.
fn parse(raw: Option<&str>) -> Object {
    raw.and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default()
}

impl Default for LazyObject {
    fn default() -> Self {
        LazyObject::new()
    }
}

impl Deref for LazyObject {
    type Target = Object;

    fn deref(&self) -> &Object {
        self.tree()
    }
}

impl DerefMut for LazyObject {
    fn deref_mut(&mut self) -> &mut Object {
        if let Some(raw) = self.raw.take()
            && self.tree.get().is_none()
        {
            self.tree = OnceLock::from(Box::new(parse(Some(&raw))));
        }
        if self.tree.get().is_none() {
            self.tree = OnceLock::from(Box::default());
        }
        // Set just above when it was not.
        self.tree.get_mut().expect("the tree is set")
    }
}

impl From<Object> for LazyObject {
    fn from(tree: Object) -> Self {
        LazyObject {
            raw: None,
            tree: OnceLock::from(Box::new(tree)),
            keys: KeySet::ANY,
        }
    }
}

impl From<LazyObject> for Object {
    fn from(lazy: LazyObject) -> Self {
        lazy.into_object()
    }
}

impl From<LazyObject> for Value {
    fn from(lazy: LazyObject) -> Self {
        Value::Object(lazy.into_object())
    }
}

impl LazyObject {
    /// A copy: the text alone when the text is kept (the copy builds its own tree if it
    /// is read), else the tree.
    ///
    /// (`LazyObject` is not `Clone` on purpose: `payload.clone()` keeps meaning a copy of
    /// the [`Object`], through `Deref`, as it did when payloads were plain objects.)
    pub fn duplicate(&self) -> Self {
        match &self.raw {
            // The text is enough: the copy builds its own tree if it is read.
            Some(raw) => LazyObject {
                raw: Some(raw.clone()),
                tree: OnceLock::new(),
                keys: self.keys,
            },
            None => LazyObject::from(self.tree().clone()),
        }
    }
}

impl PartialEq for LazyObject {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl PartialEq<Object> for LazyObject {
    fn eq(&self, other: &Object) -> bool {
        **self == *other
    }
}

impl PartialEq<LazyObject> for Object {
    fn eq(&self, other: &LazyObject) -> bool {
        *self == **other
    }
}

impl fmt::Debug for LazyObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl Serialize for LazyObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Kept text goes out as it is, without a tree (`serde_json` writes a `RawValue`'s
        // text, and reads it into a `Value` for `to_value`): the same bytes as the tree's.
        if let Some(raw) = self.raw.as_deref()
            && let Ok(raw) = serde_json::from_str::<&RawValue>(raw)
        {
            return raw.serialize(serializer);
        }
        self.tree().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for LazyObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Object::deserialize(deserializer).map(LazyObject::from)
    }
}

impl<'a> IntoIterator for &'a LazyObject {
    type Item = (&'a String, &'a Value);
    type IntoIter = serde_json::map::Iter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.tree().iter()
    }
}

/// Nesting deeper than this is left to `serde_json` (which refuses beyond 128 levels).
const MAX_DEPTH: usize = 64;
/// Objects with more keys than this are left to the tree path (duplicate keys are looked
/// for pairwise).
const MAX_KEYS: usize = 64;
/// Keys of one object kept on the stack for the duplicate check.
const FEW_KEYS: usize = 16;

/// Whether `text` is a JSON object written exactly as `serde_json` writes the object it
/// parses to (with `preserve_order`): no whitespace between tokens, no repeated key in
/// any object, strings with only the escapes `serde_json` writes (`\"`, `\\`, `\b`, `\f`,
/// `\n`, `\r`, `\t`; no `\u`, no `\/`), numbers as `serde_json` prints them.
///
/// ```
/// use patchbay_signal::payload::is_canonical_object;
/// assert!(is_canonical_object(r#"{"b":1,"a":[true,null,"x\n"],"c":{"d":-2.5}}"#));
/// assert!(!is_canonical_object(r#"{"a": 1}"#));
/// assert!(!is_canonical_object(r#"{"a":1,"a":2}"#));
/// assert!(!is_canonical_object(r#"{"a":1E3}"#));
/// assert!(!is_canonical_object(r#"{"a":"\u0041"}"#));
/// ```
pub fn is_canonical_object(text: &str) -> bool {
    canonical_object_len(text) == Some(text.len())
}

/// Whether the byte `b` cannot stand as it is inside a JSON string: a quote, a backslash
/// or a control character. `serde_json` escapes exactly these, so a string without any is
/// written as it is between quotes.
#[inline]
pub fn needs_escape(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// How many bytes at the start of `bytes` need no escape in a JSON string (see
/// [`needs_escape`]): the run a reader skips at once. Eight bytes are looked at in one step
/// (the strings of signals are mostly plain, and every byte of every frame goes through
/// here).
#[inline]
pub fn plain_len(bytes: &[u8]) -> usize {
    // The classic zero-byte test, `(x - 0x01…) & !x & 0x80…`, flags the first byte that
    // is zero exactly (a borrow can only flag bytes after it): zero in `quote` is a `"`,
    // in `backslash` a `\`, and `w` below 0x20 per byte is a control character.
    run_len(
        bytes,
        |w| {
            let quote = w ^ (ONES * u64::from(b'"'));
            let backslash = w ^ (ONES * u64::from(b'\\'));
            (quote.wrapping_sub(ONES) & !quote)
                | (backslash.wrapping_sub(ONES) & !backslash)
                | (w.wrapping_sub(ONES * 0x20) & !w)
        },
        |b| !needs_escape(b),
    )
}

/// How many ASCII digits `bytes` starts with, eight bytes at a time (numbers are in every
/// envelope: counts, indexes, stamps of 19 digits).
pub(crate) fn digits_len(bytes: &[u8]) -> usize {
    // As in `plain_len`, `(x - n…) & !x` flags the first byte below `n` exactly; and
    // `(x + (0x7f - n)…) | x` flags each byte above `n` (a carry out of a byte of 0x80 or
    // more lands only after a byte already flagged).
    run_len(
        bytes,
        |w| {
            let below = w.wrapping_sub(ONES * u64::from(b'0')) & !w;
            let above = w.wrapping_add(ONES * u64::from(0x7f - b'9')) | w;
            below | above
        },
        |b| b.is_ascii_digit(),
    )
}

/// A byte of ones in each of a word's eight bytes.
const ONES: u64 = 0x0101_0101_0101_0101;

/// How many bytes at the start of `bytes` belong to a run, eight at a time: `ends` maps a
/// word of eight bytes to one whose high bit is set in the first byte that ends the run and
/// in none before it (the bytes after it do not matter), and `belongs` tells the bytes
/// after the last whole word.
#[inline(always)]
fn run_len(bytes: &[u8], ends: impl Fn(u64) -> u64, belongs: impl Fn(u8) -> bool) -> usize {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut at = 0;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let found = ends(u64::from_le_bytes(word)) & HIGH;
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at + bytes[at..].iter().take_while(|&&b| belongs(b)).count()
}

/// The length of the canonical object (see [`is_canonical_object`]) that `text` starts
/// with, whatever follows it; `None` when `text` does not start with one.
pub(crate) fn canonical_object_len(text: &str) -> Option<usize> {
    let mut scan = Scan {
        bytes: text.as_bytes(),
        at: 0,
        depth: 0,
        top_field: |_, _| {},
    };
    (scan.peek() == Some(b'{') && scan.value()).then_some(scan.at)
}

/// [`canonical_object_len`], calling `visit` with the spans of each top-level field's key
/// (between its quotes, escapes as written) and value as the check passes them, so that a
/// caller that looks at the fields needs no second pass. A text found not canonical may
/// have had some of its fields visited.
pub(crate) fn canonical_object_len_visiting(
    text: &str,
    visit: impl FnMut(Range<usize>, Range<usize>),
) -> Option<usize> {
    let mut scan = Scan {
        bytes: text.as_bytes(),
        at: 0,
        depth: 0,
        top_field: visit,
    };
    (scan.peek() == Some(b'{') && scan.value()).then_some(scan.at)
}

/// Calls `visit` with each top-level field of a canonical object's text (see
/// [`is_canonical_object`]): the key's text (between its quotes, escapes as written) and
/// its value's JSON text, until `visit` returns `false`. Returns `false` when `text` is not
/// canonical or `visit` stopped.
///
/// ```
/// use patchbay_signal::payload::canonical_fields;
/// let mut seen = Vec::new();
/// assert!(canonical_fields(r#"{"a":[1,{"b":"}"}],"c":"x\"y"}"#, |k, v| {
///     seen.push((k.to_owned(), v.to_owned()));
///     true
/// }));
/// assert_eq!(seen, [("a".into(), r#"[1,{"b":"}"}]"#.into()), ("c".into(), r#""x\"y""#.into())]);
/// ```
pub fn canonical_fields(text: &str, visit: impl FnMut(&str, &str) -> bool) -> bool {
    is_canonical_object(text) && fields_of_canonical(text, visit)
}

/// [`canonical_fields`] of text already known to be canonical (a kept payload's): the
/// spans are found without checking anything again.
fn fields_of_canonical(text: &str, mut visit: impl FnMut(&str, &str) -> bool) -> bool {
    spans_of_canonical(text, |key, value| {
        // Both spans start and end next to ASCII bytes: they lie on character boundaries.
        match (text.get(key), text.get(value)) {
            (Some(key), Some(value)) => visit(key, value),
            _ => false,
        }
    })
}

/// The span of the top-level field `key` (`"key":value`; `key` a plain key, without
/// escapes) in canonical object text, if it has one.
pub(crate) fn field_of_canonical(text: &str, key: &str) -> Option<Range<usize>> {
    let bytes = text.as_bytes();
    let name = key.as_bytes();
    // A quote inside a string is escaped, so a quote right after `{` or `,` opens a key:
    // `{"key":` and `,"key":` are the only ways a field `key` is written, at any depth. The
    // object's own brace is the text's first byte: after it, the first top-level field.
    let value_from = name.len() + 4;
    if bytes.get(1) == Some(&b'"')
        && bytes.get(2..value_from - 2) == Some(name)
        && bytes.get(value_from - 2..value_from) == Some(&b"\":"[..])
    {
        return Some(1..value_end(bytes, value_from));
    }
    // After any other brace it is the first field of a nested object; after a comma its
    // depth is not known from here. No `,"key":` (the usual answer, found by looking at
    // what follows each comma: canonical objects have few, and a substring searcher costs
    // more to set up than this whole look): no field `key` at the top level.
    let after_comma = |i: usize| {
        bytes[i + 1..]
            .strip_prefix(b"\"")
            .and_then(|rest| rest.strip_prefix(name))
            .is_some_and(|rest| rest.starts_with(b"\":"))
    };
    if memchr::memchr_iter(b',', bytes).any(after_comma) {
        walked_field(text, name)
    } else {
        None
    }
}

/// [`field_of_canonical`] by walking the top-level fields.
fn walked_field(text: &str, name: &[u8]) -> Option<Range<usize>> {
    let bytes = text.as_bytes();
    let mut found = None;
    spans_of_canonical(text, |key, value| {
        if &bytes[key.clone()] == name {
            found = Some(key.start - 1..value.end);
        }
        found.is_none()
    });
    found
}

/// [`fields_of_canonical`] by byte spans: each top-level field's key (between its quotes)
/// and value, for a caller that copies fields as written (a key's quote is the byte before
/// its span; a field is `key.start - 1 .. value.end`).
pub(crate) fn spans_of_canonical(
    text: &str,
    mut visit: impl FnMut(Range<usize>, Range<usize>) -> bool,
) -> bool {
    let bytes = text.as_bytes();
    let mut at = 1; // after '{'
    while at < bytes.len() && bytes[at] == b'"' {
        let key_from = at + 1;
        let key_to = string_end(bytes, key_from);
        let value_from = key_to + 2; // '":'
        let value_to = value_end(bytes, value_from);
        if value_to > bytes.len() || !visit(key_from..key_to, value_from..value_to) {
            return false;
        }
        at = value_to + 1; // ',' or the final '}'
    }
    true
}

/// Whether two keys are the same. Keys mostly differ in length or first byte, and are
/// short: told apart, or compared in two overlapping words, without a call to `memcmp`
/// (which costs more than the comparison for a key of a few bytes).
#[inline]
pub(crate) fn same_key(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() || a.first() != b.first() {
        return false;
    }
    // The key's first and last few bytes, overlapping: together they cover all of it.
    match n {
        0..=3 => a.get(1) == b.get(1) && a.get(2) == b.get(2),
        4..=7 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        8..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        _ => a == b,
    }
}

/// The `N` bytes of `s` from `at` (which the caller keeps within `s`).
#[inline]
fn word<const N: usize>(s: &[u8], at: usize) -> [u8; N] {
    s.get(at..at + N)
        .and_then(|w| w.try_into().ok())
        .unwrap_or([0; N])
}

/// Where the string whose content starts at `from` ends (the index of its closing quote).
fn string_end(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() {
        at += plain_len(&bytes[at..]);
        match bytes.get(at) {
            Some(b'"') | None => return at,
            Some(b'\\') => at += 2,
            // A control character does not occur in canonical text; passed over.
            Some(_) => at += 1,
        }
    }
    at
}

/// Where the value that starts at `from` ends (the index after it) in compact JSON.
fn value_end(bytes: &[u8], mut at: usize) -> usize {
    let mut depth = 0usize;
    while at < bytes.len() {
        match bytes[at] {
            b'"' => at = string_end(bytes, at + 1),
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth == 0 => return at,
            b'}' | b']' => depth -= 1,
            b',' if depth == 0 => return at,
            _ => {}
        }
        at += 1;
    }
    at
}

/// A checking pass over JSON text.
struct Scan<'a, F> {
    bytes: &'a [u8],
    at: usize,
    depth: usize,
    /// Told each field of the outermost object: the spans of its key and its value.
    top_field: F,
}

impl<F: FnMut(Range<usize>, Range<usize>)> Scan<'_, F> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        if self.bytes[self.at..].starts_with(word) {
            self.at += word.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> bool {
        match self.peek() {
            Some(b'{') => self.nested(|scan| scan.object()),
            Some(b'[') => self.nested(|scan| scan.array()),
            Some(b'"') => self.string().is_some(),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => false,
        }
    }

    #[inline(always)]
    fn nested(&mut self, read: impl FnOnce(&mut Self) -> bool) -> bool {
        if self.depth >= MAX_DEPTH {
            return false;
        }
        self.depth += 1;
        let ok = read(self);
        self.depth -= 1;
        ok
    }

    fn object(&mut self) -> bool {
        self.at += 1; // '{'
        if self.eat(b'}') {
            return true;
        }
        // The keys met so far, for the duplicate check: on the stack for the usual small
        // object (no allocation), in a vector beyond.
        let mut few: [&[u8]; FEW_KEYS] = [&[]; FEW_KEYS];
        let mut many: Vec<&[u8]> = Vec::new();
        let mut count = 0;
        loop {
            let Some((from, to)) = self.string() else {
                return false;
            };
            let key = &self.bytes[from..to];
            let seen = if count <= FEW_KEYS {
                &few[..count]
            } else {
                &many[..]
            };
            let repeated = seen.iter().any(|k| same_key(k, key));
            if count >= MAX_KEYS || repeated {
                return false;
            }
            if count < FEW_KEYS {
                few[count] = key;
            } else {
                if count == FEW_KEYS {
                    many.extend_from_slice(&few);
                }
                many.push(key);
            }
            count += 1;
            if !self.eat(b':') {
                return false;
            }
            let value_from = self.at;
            if !self.member_value() {
                return false;
            }
            if self.depth == 1 {
                (self.top_field)(from..to, value_from..self.at);
            }
            match self.next() {
                Some(b',') => {}
                Some(b'}') => break,
                _ => return false,
            }
        }
        true
    }

    /// A member's value: strings and numbers (most values) read here, without a call
    /// through [`value`](Self::value) and its frame.
    #[inline(always)]
    fn member_value(&mut self) -> bool {
        match self.peek() {
            Some(b'"') => self.string().is_some(),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => self.value(),
        }
    }

    fn array(&mut self) -> bool {
        self.at += 1; // '['
        if self.eat(b']') {
            return true;
        }
        loop {
            if !self.value() {
                return false;
            }
            match self.next() {
                Some(b',') => {}
                Some(b']') => return true,
                _ => return false,
            }
        }
    }

    /// A string with only the escapes `serde_json` writes; the span between its quotes.
    #[inline(always)]
    fn string(&mut self) -> Option<(usize, usize)> {
        if !self.eat(b'"') {
            return None;
        }
        let from = self.at;
        loop {
            // Skip a run of plain characters in one go.
            self.at += plain_len(&self.bytes[self.at..]);
            match self.next()? {
                b'"' => return Some((from, self.at - 1)),
                b'\\' => match self.next()? {
                    b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    _ => return None,
                },
                // Control characters must be escaped (the text is not JSON).
                0..=0x1f => return None,
                _ => {}
            }
        }
    }

    /// A number token, canonical when `serde_json` prints the number it parses to the same.
    fn number(&mut self) -> bool {
        let bytes = self.bytes;
        let from = self.at;
        let negative = bytes[from] == b'-';
        let digits_from = from + usize::from(negative);
        let mut end = digits_from + digits_len(&bytes[digits_from..]);
        let integer =
            end > digits_from && !matches!(bytes.get(end), Some(b'-' | b'+' | b'.' | b'e' | b'E'));
        if !integer {
            // The rest of a float (or of no number): the tree path's check below.
            end += bytes[end..]
                .iter()
                .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                .count();
        }
        self.at = end;
        let token = &bytes[from..end];
        let digits = &bytes[digits_from..end];
        // The usual case, an integer that fits 64 bits (serde_json keeps it as an integer
        // and prints it back as it is): canonical unless it has a leading zero or is `-0`
        // (which serde_json reads as -0.0).
        if integer {
            if digits[0] == b'0' {
                return token == b"0";
            }
            // Within 64 bits (`u64::MAX`, or `-2^63`), compared as digits: without a
            // leading zero, fewer digits is smaller, and as many compare as text.
            let limit: &[u8] = if negative {
                b"9223372036854775808"
            } else {
                b"18446744073709551615"
            };
            if digits.len() < limit.len() || (digits.len() == limit.len() && digits <= limit) {
                return true;
            }
            // Beyond 64 bits serde_json reads a float: checked below.
        }
        let Ok(number) = serde_json::from_slice::<serde_json::Number>(token) else {
            return false;
        };
        let mut buf = [0u8; 40];
        let mut out = &mut buf[..];
        if serde_json::to_writer(&mut out, &number).is_err() {
            return false;
        }
        let written = 40 - out.len();
        buf[..written] == *token
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn digits_len_stops_at_the_first_byte_that_is_not_a_digit() {
        let naive = |b: &[u8]| b.iter().take_while(|c| c.is_ascii_digit()).count();
        // Every byte value at every position of runs of digits of several lengths, alone and
        // with 0xff after it (whose carry must not hide it).
        for len in 0..24 {
            let base: Vec<u8> = (0..len).map(|i| b'0' + (i % 10) as u8).collect();
            assert_eq!(digits_len(&base), len);
            for at in 0..len {
                for stop in 0..=255u8 {
                    let mut text = base.clone();
                    text[at] = stop;
                    assert_eq!(digits_len(&text), naive(&text), "{text:?}");
                    if at + 1 < len {
                        text[at + 1] = 0xff;
                        assert_eq!(digits_len(&text), naive(&text), "{text:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn plain_len_stops_at_the_first_byte_that_needs_an_escape() {
        let naive = |b: &[u8]| b.iter().position(|&c| needs_escape(c)).unwrap_or(b.len());
        // Every stop byte at every position of strings of several lengths, after plain
        // ASCII and multi-byte text (bytes ≥ 0x80 never stop), and with a second stop
        // byte after the first.
        let fillers: [&[u8]; 3] = [
            b"abcdefghijklmnopqrstuvwxyz0123456789",
            "é日本→ü".as_bytes(),
            b"\x7f ~!#$%&'()*+,-./:;<=>?@[]^_`{|}",
        ];
        for filler in fillers {
            for len in 0..filler.len() {
                let base = &filler[..len];
                assert_eq!(plain_len(base), naive(base));
                for at in 0..len {
                    for stop in [b'"', b'\\', 0x00, 0x1f, b'\n'] {
                        let mut text = base.to_vec();
                        text[at] = stop;
                        assert_eq!(plain_len(&text), at, "{text:?}");
                        if at + 3 < len {
                            text[at + 3] = b'"';
                            assert_eq!(plain_len(&text), at, "{text:?}");
                        }
                    }
                }
            }
        }
        // Bytes around the thresholds.
        for b in 0..=255u8 {
            let text = [b'a', b'b', b'c', b'd', b'e', b'f', b'g', b, b'h'];
            assert_eq!(plain_len(&text), naive(&text), "{b}");
        }
    }

    #[test]
    fn same_key_tells_keys_apart_at_every_byte() {
        for n in 0..=24 {
            let key: Vec<u8> = (0..n).map(|i| b'a' + i as u8).collect();
            assert!(same_key(&key, &key.clone()), "{n}");
            for at in 0..n {
                let mut other = key.clone();
                other[at] ^= 1;
                assert!(!same_key(&key, &other), "length {n}, byte {at}");
            }
            if n > 0 {
                assert!(!same_key(&key, &key[..n - 1]), "lengths {n} and {}", n - 1);
            }
        }
    }

    #[test]
    fn raw_field_finds_top_level_fields_only() {
        let has = |text: &str| {
            let lazy = LazyObject::from_json(text).unwrap();
            let span = lazy.raw_field("seq");
            span.map(|s| s.map(|s| text[s].to_owned()))
        };
        let seq = |value: &str| Some(Some(format!("\"seq\":{value}")));
        assert_eq!(has(r#"{"seq":1}"#), seq("1"));
        assert_eq!(has(r#"{"seq":{"seq":1},"a":2}"#), seq(r#"{"seq":1}"#));
        assert_eq!(has(r#"{"a":{"seq":1},"seq":2}"#), seq("2"));
        assert_eq!(has(r#"{"a":{"seq":1}}"#), Some(None));
        assert_eq!(has(r#"{"a":{"b":1,"seq":1}}"#), Some(None));
        assert_eq!(has(r#"{"a":"\"seq\":1","b":["seq"]}"#), Some(None));
        assert_eq!(has(r#"{"sequence":1,"xseq":2}"#), Some(None));
        assert_eq!(has(r#"{"x\"seq":1}"#), Some(None));
        assert_eq!(has(r#"{"x\"seq":1,"seq":2}"#), seq("2"));
        assert_eq!(has(r#"{"a":[{"seq":1}],"b":"{\"seq\":"}"#), Some(None));
        assert_eq!(
            has(r#"{"extra":{"seq":1,"t0":2},"n":{"seq":{"seq":3}},"seq":"4"}"#),
            seq(r#""4""#)
        );
        assert_eq!(has(r#"{}"#), Some(None));
        assert_eq!(LazyObject::new().raw_field("seq"), None);
    }

    #[test]
    fn raw_field_agrees_with_the_tree_on_generated_objects() {
        use patchbay_testkit::prng::Rng;
        // Values that nest `seq` as a key, hide it in strings, or neither.
        fn value(rng: &mut Rng, depth: usize) -> Value {
            let strings = ["seq", "\"seq\":", "{\"seq\":1}", "x"];
            match rng.below(if depth > 2 { 3 } else { 5 }) {
                0 => Value::from(rng.below(1000)),
                1 => Value::from(strings[rng.below(strings.len())]),
                2 => Value::Null,
                3 => Value::Array((0..rng.below(3)).map(|_| value(rng, depth + 1)).collect()),
                _ => Value::Object(object(rng, depth + 1)),
            }
        }
        fn object(rng: &mut Rng, depth: usize) -> Object {
            let keys = ["seq", "extra", "a\"seq", "sequence", "t0"];
            (0..rng.below(4))
                .map(|_| (keys[rng.below(keys.len())].to_owned(), value(rng, depth)))
                .collect()
        }
        let mut rng = Rng(7);
        for _ in 0..5000 {
            let tree = object(&mut rng, 0);
            let text = serde_json::to_string(&tree).unwrap();
            let lazy = LazyObject::from_json(&text).unwrap();
            let span = lazy.raw_field("seq").unwrap().map(|s| &text[s]);
            let field = tree.get("seq").map(|v| format!("\"seq\":{v}"));
            assert_eq!(span, field.as_deref(), "{text}");
        }
    }

    #[test]
    fn duplicate_keys_are_found_in_small_and_large_objects() {
        let object = |keys: &[usize]| {
            let fields: Vec<String> = keys.iter().map(|k| format!("\"k{k}\":{k}")).collect();
            format!("{{{}}}", fields.join(","))
        };
        let distinct: Vec<usize> = (0..40).collect();
        assert!(is_canonical_object(&object(&distinct[..3])));
        assert!(is_canonical_object(&object(&distinct)));
        for (len, repeated) in [(3, 1), (16, 0), (17, 15), (17, 16), (40, 2), (40, 30)] {
            let mut keys = distinct[..len].to_vec();
            keys.push(repeated);
            assert!(!is_canonical_object(&object(&keys)), "{keys:?}");
        }
        // Keys of nested objects are their own.
        assert!(is_canonical_object(
            r#"{"a":{"a":{"a":1}},"b":[{"a":1},{"a":2}]}"#
        ));
    }

    #[test]
    fn canonical_text_is_what_serde_json_writes() {
        let canonical = [
            r#"{}"#,
            r#"{"a":{}}"#,
            r#"{"z":1,"a":[],"m":[1,-2,3.5,1e300,-0.0,18446744073709551615,-9223372036854775808]}"#,
            r#"{"i":[0,-1,999999999999999999,1000000000000000000,-999999999999999999]}"#,
            r#"{"i":[1764160000000000000,9999999999999999999,18446744073709551615]}"#,
            r#"{"i":[-9223372036854775808,-1000000000000000000]}"#,
            r#"{"i":[-9223372036854775809]}"#,
            r#"{"i":[18446744073709551616]}"#,
            r#"{"i":[99999999999999999999]}"#,
            r#"{"i":[-99999999999999999999]}"#,
            r#"{"i":[18446744073709551614,10000000000000000000,9223372036854775807]}"#,
            r#"{"i":[19999999999999999999]}"#,
            r#"{"i":[-9223372036854775807,-1000000000000000000]}"#,
            r#"{"i":[-9300000000000000000]}"#,
            r#"{"s":"é ü \" \\ \n \t \r \b \f / ~","n":null,"t":true,"f":false}"#,
            r#"{"nested":{"a":{"a":{"a":1}},"b":[{"a":1},{"a":2}]}}"#,
            r#"{"a":{"k":1},"b":{"k":1}}"#,
            r#"{"x":1.0e-7,"y":100.0,"big":1.2345678901234567e+40}"#,
        ];
        for text in canonical {
            let tree: Value = serde_json::from_str(text).unwrap();
            let written = serde_json::to_string(&tree).unwrap();
            assert_eq!(
                is_canonical_object(text),
                written == text,
                "{text} vs {written}"
            );
        }
        for text in [
            r#"{}"#,
            r#"{"a":[1,{"b":"c"}],"d":0.5}"#,
            r#"{"s":"é \" \\ \n"}"#,
        ] {
            assert!(is_canonical_object(text), "{text}");
        }
        for text in [
            r#" {}"#,
            r#"{} "#,
            r#"{"a":1 }"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":{"b":1,"b":1}}"#,
            r#"{"a":"\u0041"}"#,
            r#"{"a":"\/"}"#,
            r#"{"a":1E3}"#,
            r#"{"a":1e3}"#,
            r#"{"a":-0}"#,
            r#"{"a":1.50}"#,
            r#"{"a":18446744073709551616}"#,
            r#"{"a":1e400}"#,
            r#"[1]"#,
            r#""x""#,
            r#"{"a":tru}"#,
            r#"{"a":1,}"#,
            r#"{"a"}"#,
            r#"{"a":"unterminated}"#,
            "{\"a\":\"\u{1}\"}",
            r#"{"a":01}"#,
            r#"{"a":-01}"#,
            r#"{"a":1-2}"#,
            r#"{"a":--1}"#,
            r#"{"a":1}{"#,
        ] {
            assert!(!is_canonical_object(text), "{text}");
        }
    }

    #[test]
    fn kept_text_is_serialized_as_it_is_without_a_tree() {
        let text = r#"{"b":1,"a":[true,"x\n"],"c":{"d":-2.5}}"#;
        let lazy = LazyObject::from_json(text).unwrap();
        assert_eq!(serde_json::to_string(&lazy).unwrap(), text);
        assert_eq!(
            serde_json::to_value(&lazy).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        assert!(!lazy.is_parsed());
        let mut signal = crate::Signal::new("x", "s", Object::new()).at(1);
        signal.payload = LazyObject::from_json(text).unwrap();
        signal.metadata = LazyObject::from_json(r#"{"t0":1}"#);
        let json = signal.to_json();
        assert!(
            json.ends_with(&format!(r#","metadata":{{"t0":1}},"payload":{text}}}"#)),
            "{json}"
        );
        assert!(!signal.payload.is_parsed());
        assert!(!signal.metadata.as_ref().unwrap().is_parsed());
    }

    #[test]
    fn lazy_objects_read_change_and_compare_like_trees() {
        let text = r#"{"b":1,"a":{"c":[1,2]}}"#;
        let lazy = LazyObject::from_json(text).unwrap();
        assert!(!lazy.is_parsed());
        assert_eq!(lazy.raw_json(), Some(text));
        assert_eq!(lazy["a"]["c"][1], 2);
        assert!(lazy.is_parsed());
        assert_eq!(lazy.raw_json(), Some(text), "reading keeps the text");
        let tree: Object = serde_json::from_str(text).unwrap();
        assert_eq!(lazy, tree);
        assert_eq!(tree, lazy);
        assert_eq!(serde_json::to_string(&lazy).unwrap(), text);
        assert_eq!(format!("{lazy:?}"), format!("{tree:?}"));

        let mut changed = lazy.duplicate();
        assert_eq!(changed, lazy);
        changed.insert("z".into(), json!(3));
        assert_eq!(changed.raw_json(), None, "a change forgets the text");
        assert_eq!(
            serde_json::to_string(&changed).unwrap(),
            r#"{"b":1,"a":{"c":[1,2]},"z":3}"#
        );
        assert_ne!(changed, lazy);
        // A change without a read first.
        let mut fresh = LazyObject::from_json(text).unwrap();
        fresh.shift_remove("b");
        assert_eq!(
            serde_json::to_string(&fresh).unwrap(),
            r#"{"a":{"c":[1,2]}}"#
        );
        assert_eq!(fresh.raw_json(), None);

        assert_eq!(LazyObject::from_json(text).unwrap().into_object(), tree);
        assert!(LazyObject::from_json(r#"{"a": 1}"#).is_none());
        assert!(LazyObject::new().is_empty());
    }

    fn fields(text: &str) -> Option<Vec<(String, String)>> {
        let mut out = Vec::new();
        canonical_fields(text, |k, v| {
            out.push((k.to_owned(), v.to_owned()));
            true
        })
        .then_some(out)
    }

    #[test]
    fn top_level_fields_are_spans_of_the_text() {
        let text = r#"{"agentId":"a","content":"x\"y}]\\","n":[1,{"k":"]"}],"o":{},"z":-1.5}"#;
        let expected = [
            ("agentId", r#""a""#),
            ("content", r#""x\"y}]\\""#),
            ("n", r#"[1,{"k":"]"}]"#),
            ("o", "{}"),
            ("z", "-1.5"),
        ];
        assert_eq!(
            fields(text).unwrap(),
            expected.map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert_eq!(fields("{}").unwrap(), []);
        assert!(fields(r#"{"a": 1}"#).is_none());
        let mut first = None;
        assert!(!canonical_fields(text, |k, _| {
            first = Some(k.to_owned());
            false
        }));
        assert_eq!(first.as_deref(), Some("agentId"));
    }
}

//! Per-key state of the keyed filters (`throttle`, `sample`, `delta`, `dedupe`,
//! `coalesce`, `debounce`): a map bounded by `max_keys` that evicts the least recently
//! used key, and the timer queue of the time-based filters.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use patchbay_signal::path::{Found, Path};
use patchbay_signal::{Object, Signal};
use serde_json::{Number, Value};

/// The identity of a key: the value at the filter's `key` path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    /// No value at the path (or no `key` configured): all such signals share one key.
    Absent,
    /// A string: kept apart from other JSON, so `"5"` and `5` are different keys.
    Str(Box<str>),
    /// Any other value as canonical JSON text: numbers by value (`1` and `1.0` are one
    /// key), object keys sorted.
    Json(Box<str>),
}

impl Key {
    /// The key of `signal` under `path`.
    pub(crate) fn of(path: Option<&Path>, signal: &Signal) -> Key {
        let Some(found) = path.and_then(|p| p.get(signal)) else {
            return Key::Absent;
        };
        if let Some(s) = found.as_str() {
            return Key::Str(s.into());
        }
        let mut text = String::new();
        match found {
            Found::Int(i) => {
                let _ = write!(text, "{i}");
            }
            Found::Map(map) => write_object(map, &mut text, 0),
            Found::Json(value) => write_value(value, &mut text, 0),
            Found::Str(s) => write_string(s, &mut text),
        }
        Key::Json(text.into())
    }

    /// The key of `signal` under several paths together (one shared key without any).
    pub(crate) fn of_paths(paths: &[Path], signal: &Signal) -> Key {
        match paths {
            [] => Key::Absent,
            [path] => Key::of(Some(path), signal),
            _ => {
                // Each part's own key, tagged and comma-separated: JSON strings are quoted
                // and JSON values are whole, so the text splits back one way only.
                let mut text = String::new();
                for (i, path) in paths.iter().enumerate() {
                    if i > 0 {
                        text.push(',');
                    }
                    match Key::of(Some(path), signal) {
                        Key::Absent => text.push('~'),
                        Key::Str(s) => write_string(&s, &mut text),
                        Key::Json(j) => {
                            text.push('=');
                            text.push_str(&j);
                        }
                    }
                }
                Key::Json(text.into())
            }
        }
    }

    /// The key of a whole JSON value, canonical (object keys sorted, numbers by value).
    pub(crate) fn of_value(value: &Value) -> Key {
        let mut text = String::new();
        write_value(value, &mut text, 0);
        Key::Json(text.into())
    }

    /// A stable 64-bit hash (FNV-1a), the same in every process: seeds per-key random
    /// streams, so `sample`'s choices for a key do not depend on other keys' traffic.
    pub(crate) fn stable_hash(&self) -> u64 {
        let (tag, text): (u8, &str) = match self {
            Key::Absent => (0, ""),
            Key::Str(s) => (1, s),
            Key::Json(s) => (2, s),
        };
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in std::iter::once(tag).chain(text.bytes()) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash
    }
}

/// Deeper values are written as plain JSON: keys that deep are not worth canonicalizing,
/// and the bound keeps recursion shallow.
const MAX_CANONICAL_DEPTH: usize = 32;

fn write_value(value: &Value, out: &mut String, depth: usize) {
    if depth > MAX_CANONICAL_DEPTH {
        out.push_str(&value.to_string());
        return;
    }
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out, depth + 1);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(map, out, depth + 1),
    }
}

fn write_object(map: &Object, out: &mut String, depth: usize) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(k, out);
        out.push(':');
        write_value(v, out, depth + 1);
    }
    out.push('}');
}

fn write_string(s: &str, out: &mut String) {
    out.push_str(&Value::String(s.to_owned()).to_string());
}

/// Integral numbers are written as integers, so `1` and `1.0` are the same key.
fn write_number(n: &Number, out: &mut String) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else {
        let f = n.as_f64().unwrap_or(0.0);
        if f.fract() == 0.0 && f.abs() < 9.0e15 {
            let _ = write!(out, "{}", f as i64);
        } else {
            let _ = write!(out, "{f}");
        }
    }
}

/// How a keyed filter keys its signals, from its options: the paths whose values make a
/// key (one shared key without any) and how many keys it remembers.
#[derive(Debug, Clone)]
pub(crate) struct KeySpec {
    paths: Vec<Path>,
    max_keys: usize,
}

impl KeySpec {
    /// Keys by the values at `paths`, at most `max_keys` of them (as written: a bound
    /// beyond the address space is no bound).
    pub(crate) fn new(paths: impl IntoIterator<Item = Path>, max_keys: u64) -> Self {
        KeySpec {
            paths: paths.into_iter().collect(),
            max_keys: usize::try_from(max_keys).unwrap_or(usize::MAX),
        }
    }
}

/// The index of a key's state in a [`Keyed`] (stable until the key is removed).
pub(crate) type Slot = usize;

const NIL: Slot = usize::MAX;

struct Entry<S> {
    key: Key,
    state: S,
    /// Towards the most recently used entry.
    newer: Slot,
    /// Towards the least recently used entry.
    older: Slot,
}

/// States by key, at most `max_keys` of them; when a new key comes and the map is full, the
/// least recently used key is evicted and its state handed back, so that the filter can
/// first emit what that key holds.
pub(crate) struct Keyed<S> {
    paths: Vec<Path>,
    max_keys: usize,
    index: HashMap<Key, Slot>,
    entries: Vec<Option<Entry<S>>>,
    free: Vec<Slot>,
    newest: Slot,
    oldest: Slot,
}

impl<S> Keyed<S> {
    /// An empty map keyed as `spec` says.
    pub(crate) fn new(spec: &KeySpec) -> Self {
        Keyed {
            paths: spec.paths.clone(),
            max_keys: spec.max_keys.max(1),
            index: HashMap::new(),
            entries: Vec::new(),
            free: Vec::new(),
            newest: NIL,
            oldest: NIL,
        }
    }

    /// Whether a `key` path is configured.
    pub(crate) fn is_keyed(&self) -> bool {
        !self.paths.is_empty()
    }

    /// The state of `signal`'s key, marked most recently used; created by `make` when the
    /// key is new. Returns the state of the key evicted to make room, if any.
    pub(crate) fn entry(
        &mut self,
        signal: &Signal,
        make: impl FnOnce(&Key) -> S,
    ) -> (Slot, Option<S>) {
        let key = Key::of_paths(&self.paths, signal);
        self.entry_for(key, make)
    }

    /// Like [`Keyed::entry`], for a key computed by the filter.
    pub(crate) fn entry_for(
        &mut self,
        key: Key,
        make: impl FnOnce(&Key) -> S,
    ) -> (Slot, Option<S>) {
        if let Some(&slot) = self.index.get(&key) {
            self.touch(slot);
            return (slot, None);
        }
        let evicted = if self.index.len() >= self.max_keys {
            let victim = self.oldest;
            self.remove(victim)
        } else {
            None
        };
        let state = make(&key);
        let entry = Entry {
            key: key.clone(),
            state,
            newer: NIL,
            older: NIL,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                if let Some(place) = self.entries.get_mut(slot) {
                    *place = Some(entry);
                }
                slot
            }
            None => {
                self.entries.push(Some(entry));
                self.entries.len() - 1
            }
        };
        self.index.insert(key, slot);
        self.link_newest(slot);
        (slot, evicted)
    }

    /// The slot of `signal`'s key if it is remembered (not marked as used).
    pub(crate) fn find(&self, signal: &Signal) -> Option<Slot> {
        self.index.get(&Key::of_paths(&self.paths, signal)).copied()
    }

    /// The state at `slot`, to read.
    pub(crate) fn get(&self, slot: Slot) -> Option<&S> {
        self.entries.get(slot)?.as_ref().map(|e| &e.state)
    }

    /// The state at `slot`.
    pub(crate) fn get_mut(&mut self, slot: Slot) -> Option<&mut S> {
        self.entry_at(slot).map(|e| &mut e.state)
    }

    /// Removes the key at `slot`, returning its state.
    pub(crate) fn remove(&mut self, slot: Slot) -> Option<S> {
        self.unlink(slot);
        let entry = self.entries.get_mut(slot)?.take()?;
        self.index.remove(&entry.key);
        self.free.push(slot);
        Some(entry.state)
    }

    /// Forgets every key.
    pub(crate) fn clear(&mut self) {
        self.index.clear();
        self.entries.clear();
        self.free.clear();
        self.newest = NIL;
        self.oldest = NIL;
    }

    /// How many keys are remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    fn entry_at(&mut self, slot: Slot) -> Option<&mut Entry<S>> {
        self.entries.get_mut(slot).and_then(Option::as_mut)
    }

    fn touch(&mut self, slot: Slot) {
        if self.newest != slot {
            self.unlink(slot);
            self.link_newest(slot);
        }
    }

    fn link_newest(&mut self, slot: Slot) {
        let previous = self.newest;
        if let Some(e) = self.entry_at(slot) {
            e.newer = NIL;
            e.older = previous;
        }
        if let Some(e) = self.entry_at(previous) {
            e.newer = slot;
        }
        self.newest = slot;
        if self.oldest == NIL {
            self.oldest = slot;
        }
    }

    fn unlink(&mut self, slot: Slot) {
        let Some(e) = self.entry_at(slot) else {
            return;
        };
        let (newer, older) = (e.newer, e.older);
        e.newer = NIL;
        e.older = NIL;
        match self.entry_at(newer) {
            Some(n) => n.older = older,
            None => self.newest = older,
        }
        match self.entry_at(older) {
            Some(o) => o.newer = newer,
            None => self.oldest = newer,
        }
    }
}

/// Pending timers of a time-based filter, in order of due time, then of the sequence
/// number of the signal each releases (ties fire in the order of those signals).
#[derive(Debug, Default)]
pub(crate) struct Timers {
    queue: BTreeMap<(i64, u64), Slot>,
}

impl Timers {
    /// Schedules the release of the signal numbered `seq`, held by `slot`, at `due`.
    pub(crate) fn insert(&mut self, due: i64, seq: u64, slot: Slot) {
        self.queue.insert((due, seq), slot);
    }

    /// Cancels a timer.
    pub(crate) fn remove(&mut self, due: i64, seq: u64) {
        self.queue.remove(&(due, seq));
    }

    /// The earliest due time.
    pub(crate) fn next_due(&self) -> Option<i64> {
        self.queue.first_key_value().map(|(&(due, _), _)| due)
    }

    /// The earliest timer: `((due, seq), slot)`.
    pub(crate) fn first(&self) -> Option<((i64, u64), Slot)> {
        self.queue.first_key_value().map(|(&k, &slot)| (k, slot))
    }

    /// Takes the earliest timer if it is due at or before `now`.
    pub(crate) fn pop_due(&mut self, now: i64) -> Option<(i64, Slot)> {
        if self.next_due()? > now {
            return None;
        }
        self.queue.pop_first().map(|((due, _), slot)| (due, slot))
    }

    /// Takes every timer, in firing order.
    pub(crate) fn take_all(&mut self) -> Vec<Slot> {
        std::mem::take(&mut self.queue).into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_signal::object;
    use serde_json::json;

    fn sig(v: Value) -> Signal {
        let mut payload = Object::new();
        payload.insert("k".into(), v);
        Signal::new("x", "test:k", payload)
    }

    fn key(v: Value) -> Key {
        Key::of(Path::parse("payload.k").ok().as_ref(), &sig(v))
    }

    #[test]
    fn keys_keep_json_types_apart() {
        assert_ne!(key(json!("5")), key(json!(5)));
        assert_eq!(key(json!(1)), key(json!(1.0)));
        assert_eq!(key(json!({"a": 1, "b": 2})), key(json!({"b": 2, "a": 1.0})));
        assert_ne!(key(json!(null)), Key::Absent);
        assert_eq!(
            Key::of(Path::parse("payload.missing").ok().as_ref(), &sig(json!(1))),
            Key::Absent
        );
        assert_eq!(key(json!("a")).stable_hash(), key(json!("a")).stable_hash());
        assert_ne!(key(json!("5")).stable_hash(), key(json!(5)).stable_hash());
    }

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let mut keyed: Keyed<u32> = Keyed::new(&KeySpec::new(Path::parse("payload.k").ok(), 2));
        let (a, ev) = keyed.entry(&sig(json!("a")), |_| 1);
        assert!(ev.is_none());
        let (_b, ev) = keyed.entry(&sig(json!("b")), |_| 2);
        assert!(ev.is_none());
        // Touch "a": "b" becomes the oldest.
        let (a2, _) = keyed.entry(&sig(json!("a")), |_| 9);
        assert_eq!(a, a2);
        let (_c, ev) = keyed.entry(&sig(json!("c")), |_| 3);
        assert_eq!(ev, Some(2));
        assert_eq!(keyed.len(), 2);
        let (_, ev) = keyed.entry(&sig(json!("d")), |_| 4);
        assert_eq!(ev, Some(1));
        let (slot, _) = keyed.entry(&sig(json!("c")), |_| 0);
        assert_eq!(keyed.get_mut(slot).copied(), Some(3));
        assert_eq!(keyed.remove(slot), Some(3));
        assert_eq!(keyed.len(), 1);
        keyed.clear();
        assert_eq!(keyed.len(), 0);
        let (_, ev) = keyed.entry(&Signal::new("x", "t", object! {}), |_| 5);
        assert!(ev.is_none());
    }

    #[test]
    fn timers_fire_by_due_then_sequence() {
        let mut timers = Timers::default();
        timers.insert(10, 2, 7);
        timers.insert(10, 1, 8);
        timers.insert(5, 3, 9);
        assert_eq!(timers.next_due(), Some(5));
        assert_eq!(timers.pop_due(4), None);
        assert_eq!(timers.pop_due(10), Some((5, 9)));
        timers.remove(10, 2);
        assert_eq!(timers.take_all(), vec![8]);
        assert_eq!(timers.next_due(), None);
    }
}

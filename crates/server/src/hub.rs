//! The fan-out core: numbered frames, the replay ring, and one bounded queue per client.
//!
//! The output task is the only publisher. Each signal is serialized once per wire format
//! (the Escapement form only when a client first asks for it) and the bytes are shared by
//! every client; the signals of a batch are serialized into small blocks (see [`frames`]),
//! a few allocations per block rather than per signal. Publishing never waits for a
//! client. When a client's queue is full:
//!
//! - by default (`drop_oldest`), it drops its own oldest frames and leaves the client one
//!   `lagged` notice;
//! - on a lossless sidecar (`when_full = "block"`), the client is cut off instead: it gets
//!   every frame queued for it, a `lagged` notice and the end of its stream, and resumes
//!   with `?since=N` from the ring, told of the exact range the ring no longer holds (a
//!   `gap` notice). No frame is ever dropped silently, and the other clients go on.
//!
//! The ring keeps the newest frames by count and, on a lossless sidecar, every frame of
//! the resume window by age ([`RingLimits`]), within a bound on its text: a client that
//! went away comes back to everything it missed, however fast frames were published
//! meanwhile, as long as it comes back within the window.

use std::collections::VecDeque;
use std::ops::{Deref, Range};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::ws::Utf8Bytes;
use bytes::Bytes;
use patchbay_graph::ComponentStats;
use patchbay_signal::payload::plain_len;
use patchbay_signal::{LazyObject, PREFETCH_AHEAD, SharedSignal, Signal, SmallString, spent};
use serde::ser::{Serialize, SerializeMap, Serializer};
use tokio::sync::{Notify, watch};

/// The wire format a client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The sajou envelope with `metadata.seq` set (the default).
    Sajou,
    /// `{"kind":"event","seq","ts","event","data"}`, the OpenTUI sidecar shape.
    Escapement,
}

impl Format {
    /// Parses `?format=`.
    pub fn parse(text: &str) -> Option<Format> {
        match text {
            "sajou" | "" => Some(Format::Sajou),
            "escapement" => Some(Format::Escapement),
            _ => None,
        }
    }
}

/// One published signal with its sequence number and its serialized forms.
///
/// A frame keeps where its wire form lies in its block's text, and the little the hub
/// needs (the type for clients' filters, the timestamp for the Escapement form), not the
/// signal: the signal's tree is freed once serialized, and the ring holds bytes. Its
/// texts are read through its [`FrameRef`].
#[derive(Debug)]
pub struct Frame {
    /// The per-output sequence number (1, 2, …).
    pub seq: u64,
    /// The signal's type: where it stands in the sajou text, or its own text when it
    /// needed escapes there.
    kind: Kind,
    timestamp: i64,
    /// Where the sajou text lies in its block's text.
    sajou: Range<usize>,
    /// Where the payload's JSON starts in the sajou text (it is the last field, up to the
    /// closing brace): the Escapement form reuses it.
    payload_at: usize,
    escapement: OnceLock<Utf8Bytes>,
}

/// Frames serialized together: their sajou texts, one after the other in one buffer
/// (shared by every frame of the block, not counted for each), and what each keeps.
#[derive(Debug)]
struct FrameBlock {
    text: Utf8Bytes,
    frames: Vec<Frame>,
}

/// Where a frame keeps its signal's type.
#[derive(Debug)]
enum Kind {
    /// The byte range of the type in the sajou text (written there without escapes, the
    /// usual case: no allocation of its own).
    InText(u32, u32),
    /// A type that was escaped in the sajou text.
    Own(Box<str>),
}

/// Frames made together share one text buffer and one allocation for the frames, up to
/// this many frames…
const BLOCK_FRAMES: usize = 16;
/// …and this many bytes of text: a frame queued for a client keeps its whole block in
/// memory, so a block stays small, and a frame this large goes in a block of its own.
const BLOCK_BYTES: usize = 4096;

/// The room a signal's part kept as a tree is given in a block's buffer (its text is
/// not known before it is written; a larger one grows the buffer).
const FRAME_TREE_BYTES: usize = 128;

/// A published frame, as the ring and the clients' queues hold it: a share of the block
/// of frames it was serialized with (see [`frames`]).
///
/// Sixteen bytes (a thin pointer, an index and the length of the frame's text), as a
/// client's queue may hold many.
#[derive(Debug, Clone)]
pub struct FrameRef {
    block: Arc<FrameBlock>,
    index: u32,
    /// The length of the frame's sajou text (saturated at `u32::MAX`), kept here so that
    /// the ring counts the bytes of a frame it lets go without reading the frame (by then
    /// long out of the caches).
    len: u32,
}

/// What a frame in the ring holds besides its text: its [`Frame`] in its block and its
/// reference in the ring.
const FRAME_BOOKKEEPING: usize = std::mem::size_of::<Frame>() + std::mem::size_of::<FrameRef>();

impl FrameRef {
    /// The memory the ring counts for this frame: its text and [`FRAME_BOOKKEEPING`]
    /// (at a burst's rates the bookkeeping is a third of a short frame's memory, which
    /// `ring_max_bytes` bounds too). Found without reading the frame.
    fn cost(&self) -> usize {
        self.len as usize + FRAME_BOOKKEEPING
    }
}

impl Deref for FrameRef {
    type Target = Frame;

    fn deref(&self) -> &Frame {
        &self.block.frames[self.index as usize]
    }
}

/// Numbers signals from `first_seq` and serializes their sajou forms (the envelope with
/// `metadata.seq`).
///
/// The frames are made in blocks (at most [`BLOCK_FRAMES`] frames and about
/// [`BLOCK_BYTES`] of text each): a block's texts share one buffer, and its frames one
/// allocation, so that publishing a burst costs a few allocations per block rather than
/// several per signal. The signals are then handed back to be freed where they were made
/// ([`spent`]), and `signals` is left empty.
pub fn frames(first_seq: u64, signals: &mut Vec<SharedSignal>) -> Vec<FrameRef> {
    let mut out = Vec::with_capacity(signals.len());
    let mut block = Block::default();
    for (i, signal) in signals.iter().enumerate() {
        let seq = first_seq + i as u64;
        // Texts made on another core, asked for a few frames ahead of their copy.
        if let Some(ahead) = signals.get(i + PREFETCH_AHEAD) {
            ahead.prefetch_texts();
        }
        let room = Part::room(signal);
        if !block.parts.is_empty() && block.text.len() + room > BLOCK_BYTES {
            // The block is full: a frame is not copied again by a buffer that grows.
            block.finish(&mut out);
        }
        if block.text.capacity() == 0 {
            let left = signals.len() - i;
            // Room for a frame like this one of each signal left, up to a block's worth
            // (the ring keeps blocks: a block of a few frames does not hold a buffer sized
            // for many).
            block
                .text
                .reserve((left.clamp(1, BLOCK_FRAMES) * room).min(BLOCK_BYTES.max(room)));
        }
        let from = block.text.len();
        let mut part = Part::write(&mut block.text, seq, signal);
        if part.end - from >= BLOCK_BYTES && !block.parts.is_empty() {
            // A large frame is not kept alive by the small ones before it (nor they by
            // it): it takes a block of its own.
            let large = block.text.split_off(from);
            block.finish(&mut out);
            block.text = large;
            part.end -= from;
        }
        block.parts.push(part);
        if block.parts.len() == BLOCK_FRAMES || block.text.len() >= BLOCK_BYTES {
            block.finish(&mut out);
        }
    }
    block.finish(&mut out);
    spent::hand_back(signals);
    out
}

/// One signal's frame, alone in its block.
#[cfg(test)]
pub fn frame(seq: u64, signal: SharedSignal) -> FrameRef {
    let mut out = frames(seq, &mut vec![signal]);
    // `frames` makes one frame per signal.
    out.swap_remove(0)
}

/// Frames being serialized into one block.
#[derive(Default)]
struct Block {
    text: String,
    parts: Vec<Part>,
}

impl Block {
    /// Turns the frames written so far into one block, appended to `out`.
    fn finish(&mut self, out: &mut Vec<FrameRef>) {
        if self.parts.is_empty() {
            return;
        }
        let mut from = 0;
        let frames = self
            .parts
            .drain(..)
            .map(|part| {
                let sajou = from..part.end;
                from = part.end;
                Frame {
                    seq: part.seq,
                    kind: part.kind,
                    timestamp: part.timestamp,
                    sajou,
                    payload_at: part.payload_at,
                    escapement: OnceLock::new(),
                }
            })
            .collect();
        let block = Arc::new(FrameBlock {
            text: Utf8Bytes::from(std::mem::take(&mut self.text)),
            frames,
        });
        // A block has at most `BLOCK_FRAMES` frames.
        out.extend(block.frames.iter().zip(0..).map(|(frame, index)| FrameRef {
            block: Arc::clone(&block),
            index,
            len: u32::try_from(frame.sajou.len()).unwrap_or(u32::MAX),
        }));
    }
}

/// A frame written into a block's text: where it ends there, and what the frame keeps.
struct Part {
    seq: u64,
    kind: Kind,
    timestamp: i64,
    /// Where the frame's text ends in the block's.
    end: usize,
    /// Where its payload starts, from the start of the frame's text.
    payload_at: usize,
}

impl Part {
    /// The room `write` takes for the signal: exact for the parts kept as text (the usual
    /// case), an estimate for trees.
    fn room(s: &Signal) -> usize {
        // The keys and punctuation, quotes included, and the longest `timestamp` and `seq`.
        const FIXED: usize =
            r#"{"id":"","type":"","timestamp":,"source":"","metadata":{,"seq":},"payload":}"#.len()
                + 2 * 20;
        let tree = |raw: Option<&str>| raw.map_or(FRAME_TREE_BYTES, str::len);
        FIXED
            + s.id.len()
            + s.kind.len()
            + s.source.len()
            + s.correlation_id
                .as_ref()
                .map_or(0, |c| r#","correlationId":"""#.len() + c.len())
            + s.metadata.as_ref().map_or(0, |m| tree(m.raw_json()))
            + tree(s.payload.raw_json())
    }

    /// Appends the signal's sajou form to `out`.
    fn write(out: &mut String, seq: u64, s: &Signal) -> Part {
        let start = out.len();
        let plain = s.id.is_json_plain() && s.kind.is_json_plain() && s.source.is_json_plain();
        let kind_at = if plain {
            // The usual signal: its strings copied between the quotes of the text around
            // them.
            out.push_str("{\"id\":\"");
            out.push_str(&s.id);
            out.push_str("\",\"type\":\"");
            let kind_at = out.len() - start;
            out.push_str(&s.kind);
            out.push_str("\",\"timestamp\":");
            put_int(out, s.timestamp);
            out.push_str(",\"source\":\"");
            out.push_str(&s.source);
            out.push('"');
            Some(kind_at)
        } else {
            out.push_str("{\"id\":");
            put_str(out, &s.id);
            out.push_str(",\"type\":");
            let kind_at = out.len() + 1 - start;
            let kind_plain = put_str(out, &s.kind);
            out.push_str(",\"timestamp\":");
            put_int(out, s.timestamp);
            out.push_str(",\"source\":");
            put_str(out, &s.source);
            // Not in the text as it is when it was escaped.
            kind_plain.then_some(kind_at)
        };
        let span = |at: usize| {
            Some((
                u32::try_from(at).ok()?,
                u32::try_from(at + s.kind.len()).ok()?,
            ))
        };
        let kind = match kind_at.and_then(span) {
            Some((from, to)) => Kind::InText(from, to),
            None => Kind::Own(s.kind.as_str().into()),
        };
        if let Some(c) = &s.correlation_id {
            out.push_str(",\"correlationId\":");
            put_small(out, c);
        }
        out.push_str(",\"metadata\":");
        // Metadata kept as its text: the text without a `seq` of its own (this sidecar's
        // numbering replaces it) and with `seq` added last, the same bytes as serializing
        // its tree and `seq`.
        let kept = s
            .metadata
            .as_ref()
            .and_then(|meta| Some((meta.raw_json()?, meta.raw_field("seq")?)));
        match kept {
            Some((raw, own_seq)) => {
                let body = &raw[..raw.len() - 1];
                match own_seq {
                    None => out.push_str(body),
                    Some(field) => {
                        // The field and the comma before it (after it, when it is first).
                        let (cut_from, cut_to) = if field.start > 1 {
                            (field.start - 1, field.end)
                        } else {
                            (field.start, (field.end + 1).min(body.len()))
                        };
                        out.push_str(&body[..cut_from]);
                        out.push_str(&body[cut_to..]);
                    }
                }
                if !out.ends_with('{') {
                    out.push(',');
                }
                out.push_str("\"seq\":");
                put_int(out, seq);
                out.push('}');
            }
            None => put(
                out,
                &MetaWithSeq {
                    meta: s.metadata.as_ref(),
                    seq,
                },
            ),
        }
        out.push_str(",\"payload\":");
        let payload_at = out.len() - start;
        // A payload that arrived as compact JSON and passed unread is copied as it came
        // (the same bytes as serializing its tree).
        match s.payload.raw_json() {
            Some(raw) => out.push_str(raw),
            None => put(out, &*s.payload),
        }
        out.push('}');
        Part {
            seq,
            kind,
            timestamp: s.timestamp,
            end: out.len(),
            payload_at,
        }
    }
}

impl FrameRef {
    /// The frame's sajou text (a part of its block's).
    fn sajou(&self) -> &str {
        &self.block.text.as_str()[self.sajou.clone()]
    }

    /// The signal's type.
    pub fn kind(&self) -> &str {
        match &self.kind {
            Kind::InText(from, to) => &self.sajou()[*from as usize..*to as usize],
            Kind::Own(kind) => kind,
        }
    }

    /// The frame's text in `format` as shared bytes (the sajou form a share of its block's
    /// text; the Escapement form serialized at most once), for a body that sends bytes.
    pub fn bytes(&self, format: Format) -> Bytes {
        match format {
            Format::Sajou => Bytes::from(self.block.text.clone()).slice(self.sajou.clone()),
            Format::Escapement => Bytes::from(self.escapement().clone()),
        }
    }

    /// The frame's text in `format`, borrowed (to copy it into a socket's buffer).
    pub fn as_str(&self, format: Format) -> &str {
        match format {
            Format::Sajou => self.sajou(),
            Format::Escapement => self.escapement().as_str(),
        }
    }

    /// The Escapement form, made on first use.
    fn escapement(&self) -> &Utf8Bytes {
        self.escapement.get_or_init(|| {
            // `{"kind":"event","seq","ts","event","data"}`, the payload's text taken from
            // the sajou form.
            let sajou = self.sajou();
            let payload = &sajou[self.payload_at..sajou.len() - 1];
            let kind = self.kind();
            let mut out = String::with_capacity(payload.len() + 64 + kind.len());
            out.push_str("{\"kind\":\"event\",\"seq\":");
            put_int(&mut out, self.seq);
            out.push_str(",\"ts\":");
            put_int(&mut out, self.timestamp);
            out.push_str(",\"event\":");
            put_str(&mut out, kind);
            out.push_str(",\"data\":");
            out.push_str(payload);
            out.push('}');
            to_text(out)
        })
    }
}

/// The notice a client gets once when its queue overflowed.
pub fn lagged_text(resume_from: u64) -> Utf8Bytes {
    Utf8Bytes::from(format!(
        "{{\"kind\":\"lagged\",\"resume_from\":{resume_from}}}"
    ))
}

/// Appends `value`'s compact JSON (the parts of a signal that are trees), written straight
/// into `out`.
fn put(out: &mut String, value: &(impl Serialize + ?Sized)) {
    // Signals hold only strings, integers and JSON values: serializing cannot fail.
    let _ = serde_json::to_writer(TextWriter(out), value);
}

/// An `io::Write` that appends to a `String`. `serde_json` writes whole `str`s (string
/// fragments cut at ASCII escapes, numbers, punctuation), so each write is checked as
/// UTF-8 on its own, and only the parts written this way are checked at all.
struct TextWriter<'a>(&'a mut String);

impl std::io::Write for TextWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = std::str::from_utf8(buf).map_err(std::io::Error::other)?;
        self.0.push_str(text);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Appends an integer as JSON writes it.
fn put_int(out: &mut String, n: impl itoa::Integer) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// Appends `text` as a JSON string: as it is between quotes when it needs no escape (ids,
/// types and sources almost never do; then it returns `true`), else as `serde_json`
/// escapes it.
fn put_str(out: &mut String, text: &str) -> bool {
    if plain_len(text.as_bytes()) < text.len() {
        put(out, text);
        false
    } else {
        out.push('"');
        out.push_str(text);
        out.push('"');
        true
    }
}

/// [`put_str`] for an envelope's short string, which says when it is known to need no
/// escape (read so, or an id patchbay made): then it is not looked at again.
fn put_small(out: &mut String, text: &SmallString) -> bool {
    if text.is_json_plain() {
        out.push('"');
        out.push_str(text);
        out.push('"');
        return true;
    }
    put_str(out, text)
}

/// The shared bytes of a frame's text (the `String`'s buffer, not copied).
fn to_text(json: String) -> Utf8Bytes {
    Utf8Bytes::from(json)
}

struct MetaWithSeq<'a> {
    meta: Option<&'a LazyObject>,
    seq: u64,
}

impl Serialize for MetaWithSeq<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (k, v) in self.meta.into_iter().flatten() {
            // This sidecar's numbering replaces any upstream `seq`.
            if k != "seq" {
                map.serialize_entry(k, v)?;
            }
        }
        map.serialize_entry("seq", &self.seq)?;
        map.end()
    }
}

/// Which signal types a client takes: `?types=a,b*` (exact names, or prefixes ending in
/// `*`), everything, or nothing (a WebSocket client that only sends, `?receive=false`).
#[derive(Debug, Clone, Default)]
pub enum TypeFilter {
    /// Every type (no `types`, or an empty list).
    #[default]
    All,
    /// These types.
    Types {
        /// Exact names.
        exact: Vec<String>,
        /// Prefixes (written with a trailing `*`).
        prefixes: Vec<String>,
    },
    /// No frame at all: the hub passes the client over without looking at a frame.
    Nothing,
}

impl TypeFilter {
    /// Parses a comma-separated list; an empty list lets everything through.
    pub fn parse(text: &str) -> TypeFilter {
        let (mut exact, mut prefixes) = (Vec::new(), Vec::new());
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.strip_suffix('*') {
                Some(prefix) => prefixes.push(prefix.to_owned()),
                None => exact.push(item.to_owned()),
            }
        }
        // An empty prefix (`*`) takes every type: no frame's type need be read.
        if (exact.is_empty() && prefixes.is_empty()) || prefixes.iter().any(String::is_empty) {
            TypeFilter::All
        } else {
            TypeFilter::Types { exact, prefixes }
        }
    }

    /// Whether a signal of type `kind` passes.
    pub fn matches(&self, kind: &str) -> bool {
        match self {
            TypeFilter::All => true,
            TypeFilter::Types { exact, prefixes } => {
                exact.iter().any(|e| e == kind)
                    || prefixes.iter().any(|p| kind.starts_with(p.as_str()))
            }
            TypeFilter::Nothing => false,
        }
    }

    /// Whether `frame` passes (its type is read only when the filter names types).
    fn takes(&self, frame: &FrameRef) -> bool {
        match self {
            TypeFilter::All => true,
            TypeFilter::Nothing => false,
            types => types.matches(frame.kind()),
        }
    }
}

/// The notice a resuming client gets when the ring no longer holds frames it asked for:
/// the seqs `from..=to` are lost to it.
pub fn gap_text(from: u64, to: u64) -> Utf8Bytes {
    Utf8Bytes::from(format!(
        "{{\"kind\":\"gap\",\"from\":{from},\"to\":{to},\"missed\":{}}}",
        to - from + 1
    ))
}

/// What a client's queue yields.
#[derive(Debug, Clone)]
pub enum Outgoing {
    /// A signal's frame.
    Frame(FrameRef),
    /// The client's queue overflowed: it can resume with `?since=N` without missing
    /// anything the ring still holds.
    Lagged(u64),
    /// The client of a lossless sidecar fell behind and is cut off (everything queued for
    /// it was yielded first): send a `lagged` notice with this `resume_from`, then end the
    /// stream. Always the last item.
    Cut(u64),
}

impl Outgoing {
    /// The text to send in `format`, as shared bytes.
    pub fn bytes(&self, format: Format) -> Bytes {
        match self {
            Outgoing::Frame(f) => f.bytes(format),
            Outgoing::Lagged(n) | Outgoing::Cut(n) => Bytes::from(lagged_text(*n)),
        }
    }

    /// The frame's seq (`None` for a notice).
    pub fn seq(&self) -> Option<u64> {
        match self {
            Outgoing::Frame(f) => Some(f.seq),
            Outgoing::Lagged(_) | Outgoing::Cut(_) => None,
        }
    }
}

/// The close reason a cut-off WebSocket client gets.
pub fn cut_reason(resume_from: u64) -> String {
    format!("lagged behind: reconnect with ?since={resume_from}")
}

/// One connected client (a WebSocket or an SSE stream).
#[derive(Debug)]
pub struct Client {
    id: u64,
    /// The format it asked for.
    pub format: Format,
    filter: TypeFilter,
    capacity: usize,
    state: Mutex<ClientState>,
    notify: Notify,
}

#[derive(Debug, Default)]
struct ClientState {
    queue: VecDeque<FrameRef>,
    /// A `lagged` notice not yet taken: the seq to resume after.
    lag: Option<u64>,
    lagged_ever: bool,
    closed: bool,
    /// Cut off (lossless sidecar): the seq to resume after, yielded once the queue is empty.
    cut: Option<u64>,
}

/// What queueing a frame for a client did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Pushed {
    /// How many of the client's oldest frames were dropped.
    dropped: u64,
    /// The client lagged for the first time.
    newly_lagged: bool,
    /// The client was cut off (it takes nothing more).
    cut: bool,
}

impl Client {
    fn lock(&self) -> MutexGuard<'_, ClientState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues frames the client's filter takes, in order, under one lock and with one
    /// wake-up. When the queue is full, a lossless hub cuts the client off; otherwise its
    /// oldest frame is dropped.
    fn push_all(&self, frames: &[FrameRef], lossless: bool) -> Pushed {
        let mut pushed = Pushed::default();
        if matches!(self.filter, TypeFilter::Nothing) {
            return pushed;
        }
        let mut queued = false;
        let mut st = self.lock();
        for frame in frames {
            if st.cut.is_some() {
                break;
            }
            if !self.filter.takes(frame) {
                continue;
            }
            if st.queue.len() >= self.capacity {
                pushed.newly_lagged |= !st.lagged_ever;
                st.lagged_ever = true;
                if lossless {
                    // Everything before this frame is queued (or sent): resume right
                    // before it.
                    st.cut = Some(frame.seq.saturating_sub(1));
                    st.closed = true;
                    pushed.cut = true;
                    queued = true;
                    break;
                }
                if let Some(oldest) = st.queue.pop_front() {
                    pushed.dropped += 1;
                    if st.lag.is_none() {
                        st.lag = Some(oldest.seq.saturating_sub(1));
                    }
                }
            }
            st.queue.push_back(frame.clone());
            queued = true;
        }
        drop(st);
        if queued {
            self.notify.notify_one();
        }
        pushed
    }

    fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_one();
    }

    /// Takes every waiting frame and notice, up to `max`, into `into` under one lock (a
    /// writer then writes them all and flushes once).
    pub fn take_ready(&self, max: usize, into: &mut Vec<Outgoing>) {
        let mut st = self.lock();
        if let Some(n) = st.lag.take() {
            into.push(Outgoing::Lagged(n));
        }
        let n = st.queue.len().min(max.saturating_sub(into.len()));
        into.extend(st.queue.drain(..n).map(Outgoing::Frame));
        if st.queue.is_empty()
            && let Some(n) = st.cut.take()
        {
            into.push(Outgoing::Cut(n));
        }
    }

    /// The next frame or notice if one is waiting.
    #[cfg(test)]
    pub fn try_pop(&self) -> Option<Outgoing> {
        let mut st = self.lock();
        if let Some(n) = st.lag.take() {
            return Some(Outgoing::Lagged(n));
        }
        match st.queue.pop_front() {
            Some(f) => Some(Outgoing::Frame(f)),
            None => st.cut.take().map(Outgoing::Cut),
        }
    }

    /// The next frame or notice; `None` once the sidecar stopped and the queue is empty.
    /// Only one task may wait on a client.
    pub async fn pop(&self) -> Option<Outgoing> {
        loop {
            {
                let mut st = self.lock();
                if let Some(n) = st.lag.take() {
                    return Some(Outgoing::Lagged(n));
                }
                if let Some(f) = st.queue.pop_front() {
                    return Some(Outgoing::Frame(f));
                }
                if let Some(n) = st.cut.take() {
                    return Some(Outgoing::Cut(n));
                }
                if st.closed {
                    return None;
                }
            }
            // `notify_one` keeps a permit when nobody waits, so no wake-up is lost.
            self.notify.notified().await;
        }
    }
}

/// What the replay ring keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLimits {
    /// The newest frames kept whatever their age (`ring`); 0: no ring, no replay.
    pub frames: usize,
    /// Every frame published less than this long ago is kept too (a lossless sidecar's
    /// `resume_window_ms`; zero: the count alone).
    pub window: Duration,
    /// The most memory the ring keeps (`ring_max_bytes`: its frames' text and
    /// bookkeeping): past it the oldest frames go even when the
    /// count or the window would keep them, and are counted (`ring_evicted_early`). The
    /// newest frame is always kept.
    pub max_bytes: usize,
}

impl RingLimits {
    /// A ring of `frames` frames by count alone, with no bound on its text (tests).
    #[cfg(test)]
    pub fn count(frames: usize) -> RingLimits {
        RingLimits {
            frames,
            window: Duration::ZERO,
            max_bytes: usize::MAX,
        }
    }
}

/// The sidecar's frames and clients.
#[derive(Debug)]
pub struct Hub {
    inner: Mutex<HubInner>,
    ring: RingLimits,
    client_queue: usize,
    /// A full client queue cuts the client off instead of dropping (`when_full = "block"`).
    lossless: bool,
    stats: Arc<ComponentStats>,
    /// Frames dropped from slow clients' queues, all clients together.
    client_dropped: AtomicU64,
    /// Clients cut off for lagging (lossless hub), all together.
    clients_cut: AtomicU64,
    /// Frames the ring let go that its count or window would have kept (`max_bytes`).
    evicted_early: AtomicU64,
    /// Set when the drain deadline passed: the remaining connections are dropped.
    abandoned: watch::Sender<bool>,
    /// How many clients are connected (to wait for the last one to leave).
    connected: watch::Sender<usize>,
    /// How many of them take frames, counted when a client comes or goes (read for
    /// every large read of a connection, without the lock).
    receiving: AtomicUsize,
}

#[derive(Debug, Default)]
struct HubInner {
    ring: VecDeque<FrameRef>,
    /// The memory of the frames in the ring: their text and their bookkeeping
    /// ([`FrameRef::cost`]).
    ring_bytes: usize,
    /// When frames were published, for the window (only kept when there is one): the
    /// frames from a mark's `seq` up to the next mark's were published at its `at` or
    /// before. The first mark covers the ring's first frame.
    marks: VecDeque<Mark>,
    /// When running out of `max_bytes` was last logged.
    early_warned: Option<Instant>,
    /// The seq of the newest frame published (0 before the first).
    published: u64,
    clients: Vec<Arc<Client>>,
    next_client: u64,
    lagged_clients: usize,
    closed: bool,
}

/// How often running out of `ring_max_bytes` is logged while it goes on (it is counted
/// every time).
const EARLY_WARN_EVERY: Duration = Duration::from_secs(60);

/// Frames published from `seq` on (up to the next mark) were published between `opened`
/// and `at`.
#[derive(Debug, Clone, Copy)]
struct Mark {
    seq: u64,
    opened: Instant,
    at: Instant,
}

impl HubInner {
    /// Notes that frames from `seq` on were published at `now`. A mark takes the frames of
    /// a 64th of the window and says the latest time among them: a frame's age is never
    /// overstated, so it is kept at least the window, and there are about 64 marks.
    fn mark(&mut self, seq: u64, now: Instant, window: Duration) {
        match self.marks.back_mut() {
            Some(mark) if now.saturating_duration_since(mark.opened) < window / 64 => {
                mark.at = now;
            }
            _ => self.marks.push_back(Mark {
                seq,
                opened: now,
                at: now,
            }),
        }
    }

    /// Lets the oldest frames go until the ring is within `limits`, into `evicted` (freed
    /// after the hub's lock). Returns how many of them the count or the window would have
    /// kept (let go for `max_bytes`).
    fn trim(
        &mut self,
        limits: RingLimits,
        now: Option<Instant>,
        evicted: &mut Vec<FrameRef>,
    ) -> u64 {
        let mut early = 0;
        while self.ring.len() > 1 {
            let over_bytes = self.ring_bytes > limits.max_bytes;
            let over_count = self.ring.len() > limits.frames;
            if !over_bytes && !over_count {
                break;
            }
            // The first mark says when the ring's first frame was published.
            let in_window = match (now, self.marks.front()) {
                (Some(now), Some(mark)) => now.saturating_duration_since(mark.at) < limits.window,
                _ => false,
            };
            if !over_bytes && in_window {
                break;
            }
            if in_window || !over_count {
                early += 1;
            }
            let Some(frame) = self.ring.pop_front() else {
                break;
            };
            self.ring_bytes -= frame.cost();
            evicted.push(frame);
            // Marks are kept with a window, where every batch goes to the ring whole: its
            // frames are the seqs up to the newest, one after the other, and the first one
            // is found without reading it.
            if self.marks.len() > 1 {
                let next = self.published + 1 - self.ring.len() as u64;
                debug_assert_eq!(self.ring.front().map(|f| f.seq), Some(next));
                while self.marks.get(1).is_some_and(|mark| mark.seq <= next) {
                    self.marks.pop_front();
                }
            }
        }
        early
    }
}

/// What a subscribing client gets before its live frames.
#[derive(Debug, Default)]
pub struct Replay {
    /// Seqs `from..=to` that the client asked for and the ring no longer holds (lossless
    /// hub only): it gets a `gap` notice first.
    pub gap: Option<(u64, u64)>,
    /// The frames the ring holds after `since`, for the client's filter.
    pub frames: Vec<FrameRef>,
}

/// Unregisters its client when dropped (the connection ended).
#[derive(Debug)]
pub struct Subscription {
    hub: Arc<Hub>,
    /// The client.
    pub client: Arc<Client>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.unsubscribe(&self.client);
    }
}

impl Hub {
    /// A hub whose ring keeps what `ring` says, with `client_queue` frames per client;
    /// its gauges go to `stats`. A `lossless` hub cuts off a client whose queue is full
    /// instead of dropping its frames.
    pub fn new(
        ring: RingLimits,
        client_queue: usize,
        lossless: bool,
        stats: Arc<ComponentStats>,
    ) -> Hub {
        let hub = Hub {
            inner: Mutex::new(HubInner::default()),
            ring,
            client_queue: client_queue.max(1),
            lossless,
            stats,
            client_dropped: AtomicU64::new(0),
            clients_cut: AtomicU64::new(0),
            evicted_early: AtomicU64::new(0),
            abandoned: watch::Sender::new(false),
            connected: watch::Sender::new(0),
            receiving: AtomicUsize::new(0),
        };
        hub.set_gauges(&HubInner::default());
        hub
    }

    fn lock(&self) -> MutexGuard<'_, HubInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_gauges(&self, inner: &HubInner) {
        self.connected.send_replace(inner.clients.len());
        let receiving = inner
            .clients
            .iter()
            .filter(|c| !matches!(c.filter, TypeFilter::Nothing))
            .count();
        self.receiving.store(receiving, Ordering::Relaxed);
        self.stats.set_gauge("clients", inner.clients.len() as f64);
        self.stats
            .set_gauge("lagged_clients", inner.lagged_clients as f64);
    }

    /// Publishes a numbered signal: into the ring and every client's queue.
    #[cfg(test)]
    pub fn publish(&self, frame: FrameRef) {
        self.publish_all(vec![frame]);
    }

    /// Publishes numbered signals, in order: into the ring and every client's queue, with
    /// one lock of the hub and one of each client for the whole batch.
    pub fn publish_all(&self, frames: Vec<FrameRef>) {
        // The clock is read only when the ring keeps frames by age.
        let now = (!self.ring.window.is_zero()).then(Instant::now);
        self.publish_at(frames, now);
    }

    /// [`Hub::publish_all`] at `now` (`None`: the ring keeps frames by count alone).
    fn publish_at(&self, mut frames: Vec<FrameRef>, now: Option<Instant>) {
        let Some(last) = frames.last().map(|f| f.seq) else {
            return;
        };
        // Frames leaving the ring are freed after the lock is released.
        let mut evicted = Vec::new();
        let mut inner = self.lock();
        inner.published = last;
        let mut newly_lagged = 0;
        let mut dropped = 0;
        let mut cut = 0;
        for c in &inner.clients {
            let pushed = c.push_all(&frames, self.lossless);
            dropped += pushed.dropped;
            newly_lagged += usize::from(pushed.newly_lagged);
            cut += u64::from(pushed.cut);
        }
        // The ring takes the batch's own shares (the clients' queues have theirs); frames
        // it has no room for are freed after the lock, with those it lets go.
        let mut early = 0;
        if self.ring.frames > 0 {
            if let (Some(now), Some(first)) = (now, frames.first()) {
                inner.mark(first.seq, now, self.ring.window);
            }
            // By count alone, a batch larger than the ring keeps only its newest frames.
            let skip = match now {
                None => frames.len().saturating_sub(self.ring.frames),
                Some(_) => 0,
            };
            for frame in frames.drain(skip..) {
                inner.ring_bytes += frame.cost();
                inner.ring.push_back(frame);
            }
            early = inner.trim(self.ring, now, &mut evicted);
        }
        if early > 0 {
            let total = self.evicted_early.fetch_add(early, Ordering::Relaxed) + early;
            self.stats.set_gauge("ring_evicted_early", total as f64);
            let at = now.unwrap_or_else(Instant::now);
            if inner
                .early_warned
                .is_none_or(|t| at.saturating_duration_since(t) >= EARLY_WARN_EVERY)
            {
                inner.early_warned = Some(at);
                tracing::warn!(
                    evicted_early = total,
                    ring_max_bytes = self.ring.max_bytes,
                    "the sidecar's ring reached ring_max_bytes: it let frames go that a \
                     client resuming within the window could still need (such a client \
                     gets a gap frame)"
                );
            }
        }
        if dropped > 0 {
            self.client_dropped.fetch_add(dropped, Ordering::Relaxed);
        }
        if cut > 0 {
            let total = self.clients_cut.fetch_add(cut, Ordering::Relaxed) + cut;
            self.stats.set_gauge("clients_cut", total as f64);
        }
        if newly_lagged > 0 {
            inner.lagged_clients += newly_lagged;
            self.set_gauges(&inner);
        }
        if dropped > 0 {
            self.stats.set_gauge(
                "client_frames_dropped",
                self.client_dropped.load(Ordering::Relaxed) as f64,
            );
        }
        drop(inner);
        drop(evicted);
    }

    /// Registers a client and returns what the ring holds after `since` (for its filter).
    /// Both happen under one lock, so the replay and the live frames neither overlap nor
    /// leave a gap. On a lossless hub, the replay starts with a `gap` notice when the ring
    /// no longer holds every frame after `since`. `None` when the sidecar has stopped.
    pub fn subscribe(
        self: &Arc<Self>,
        since: Option<u64>,
        format: Format,
        filter: TypeFilter,
    ) -> Option<(Subscription, Replay)> {
        let mut inner = self.lock();
        if inner.closed {
            return None;
        }
        let gap = match since {
            Some(since) if self.lossless => {
                let first_kept = inner.ring.front().map_or(inner.published + 1, |f| f.seq);
                (since + 1 < first_kept).then(|| (since + 1, first_kept - 1))
            }
            _ => None,
        };
        let frames = match since {
            Some(since) => inner
                .ring
                .iter()
                .filter(|f| f.seq > since && filter.takes(f))
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        let replay = Replay { gap, frames };
        inner.next_client += 1;
        let client = Arc::new(Client {
            id: inner.next_client,
            format,
            filter,
            capacity: self.client_queue,
            state: Mutex::new(ClientState::default()),
            notify: Notify::new(),
        });
        inner.clients.push(Arc::clone(&client));
        self.set_gauges(&inner);
        Some((
            Subscription {
                hub: Arc::clone(self),
                client,
            },
            replay,
        ))
    }

    fn unsubscribe(&self, client: &Client) {
        let mut inner = self.lock();
        let before = inner.clients.len();
        inner.clients.retain(|c| c.id != client.id);
        if inner.clients.len() < before && client.lock().lagged_ever {
            inner.lagged_clients = inner.lagged_clients.saturating_sub(1);
        }
        self.set_gauges(&inner);
    }

    /// How many clients are connected.
    pub fn client_count(&self) -> usize {
        self.lock().clients.len()
    }

    /// How many of them take frames (not `?receive=false`).
    pub fn receiving_count(&self) -> usize {
        self.receiving.load(Ordering::Relaxed)
    }

    /// The seq of the newest frame in the ring (0 when empty).
    pub fn last_seq(&self) -> u64 {
        self.lock().ring.back().map(|f| f.seq).unwrap_or(0)
    }

    /// Stops: clients get what is queued, then their streams end; no new subscriptions.
    pub fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        for c in &inner.clients {
            c.close();
        }
    }

    /// Whether [`Hub::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Resolves once every client has left (after [`Hub::close`], once each has taken
    /// what was queued for it).
    pub async fn wait_no_clients(&self) {
        let mut rx = self.connected.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// The drain deadline passed: every client still connected is counted and logged with
    /// the frames it did not take, and its connection is dropped. Returns those frames,
    /// all clients together.
    pub fn abandon(&self, sidecar: &str) -> u64 {
        let inner = self.lock();
        let mut total = 0;
        for c in &inner.clients {
            let left = c.lock().queue.len() as u64;
            tracing::warn!(
                sidecar,
                client = c.id,
                undelivered = left,
                "the shutdown deadline passed before the client took every frame queued for it"
            );
            total += left;
        }
        drop(inner);
        if total > 0 {
            let dropped = self.client_dropped.fetch_add(total, Ordering::Relaxed) + total;
            self.stats
                .set_gauge("client_frames_dropped", dropped as f64);
        }
        self.abandoned.send_replace(true);
        total
    }

    /// Resolves once [`Hub::abandon`] was called: the connection must end now.
    pub async fn wait_abandoned(&self) {
        let mut rx = self.abandoned.subscribe();
        let _ = rx.wait_for(|gone| *gone).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_graph::telemetry::Role;
    use patchbay_signal::{Object, Signal, object};

    fn hub(ring: usize, queue: usize) -> Arc<Hub> {
        hub_with(ring, queue, false)
    }

    fn hub_with(ring: usize, queue: usize, lossless: bool) -> Arc<Hub> {
        hub_limited(RingLimits::count(ring), queue, lossless)
    }

    fn hub_limited(ring: RingLimits, queue: usize, lossless: bool) -> Arc<Hub> {
        Arc::new(Hub::new(
            ring,
            queue,
            lossless,
            Arc::new(ComponentStats::new("ui", "sidecar", Role::Output)),
        ))
    }

    #[test]
    fn wire_forms_are_the_envelope_and_the_escapement_event_byte_for_byte() {
        let s = Signal::new(
            "text_delta",
            "test:a",
            object! {"content" => "a \"quoted\"\nline é", "agentId" => "x", "index" => 3},
        )
        .at(42)
        .correlated("c1")
        .with_meta("seq", 99)
        .with_meta("t0", 1);
        let f = frame(7, Arc::new(s.clone()));
        let expected = serde_json::json!({
            "id": s.id,
            "type": "text_delta",
            "timestamp": 42,
            "source": "test:a",
            "correlationId": "c1",
            "metadata": {"t0": 1, "seq": 7},
            "payload": {"content": "a \"quoted\"\nline é", "agentId": "x", "index": 3},
        });
        assert_eq!(f.as_str(Format::Sajou), expected.to_string());
        let expected = serde_json::json!({
            "kind": "event",
            "seq": 7,
            "ts": 42,
            "event": "text_delta",
            "data": {"content": "a \"quoted\"\nline é", "agentId": "x", "index": 3},
        });
        assert_eq!(f.as_str(Format::Escapement), expected.to_string());
        let bare = frame(1, Arc::new(Signal::new("a", "b", Object::new()).at(0)));
        let v: serde_json::Value = serde_json::from_str(bare.as_str(Format::Sajou)).unwrap();
        assert_eq!(v["metadata"], serde_json::json!({"seq": 1}));
        assert!(v.get("correlationId").is_none());
    }

    fn sig(kind: &str) -> SharedSignal {
        Arc::new(Signal::new(kind, "test:a", object! {"x" => 1}).at(5))
    }

    #[test]
    fn frames_made_together_read_as_frames_made_alone_and_blocks_stay_small() {
        let mut signals: Vec<SharedSignal> = (0..40)
            .map(|i| sig(if i % 3 == 0 { "a" } else { "b.c" }))
            .collect();
        // A large frame among small ones, and a type written with escapes.
        signals[20] = Arc::new(
            Signal::new(
                "big",
                "test:a",
                object! {"x" => "y".repeat(2 * BLOCK_BYTES)},
            )
            .at(5),
        );
        signals[21] = sig("t\"q");
        let together = frames(100, &mut signals.clone());
        assert_eq!(together.len(), signals.len());
        for (i, (made, signal)) in together.iter().zip(&signals).enumerate() {
            let alone = frame(100 + i as u64, Arc::clone(signal));
            assert_eq!(made.seq, 100 + i as u64);
            assert_eq!(made.kind(), signal.kind);
            for format in [Format::Sajou, Format::Escapement] {
                assert_eq!(made.as_str(format), alone.as_str(format), "{i}");
            }
        }
        assert!(
            together
                .iter()
                .all(|f| f.block.frames.len() <= BLOCK_FRAMES)
        );
        assert_eq!(std::mem::size_of::<FrameRef>(), 16);
        assert!(Arc::ptr_eq(&together[0].block, &together[1].block));
        // The large frame keeps no small one alive, nor they it.
        assert_eq!(together[20].block.frames.len(), 1);
        assert!(!Arc::ptr_eq(&together[19].block, &together[21].block));
    }

    #[test]
    fn a_frame_kept_as_text_fits_the_room_its_block_gives_it() {
        // The room is what keeps a block's buffer from growing (and copying itself): for
        // the usual signal, read from text, it holds the whole frame.
        let mut normalizer = patchbay_signal::normalize::Normalizer::new("ui");
        for text in [
            r#"{"type":"text_delta","source":"s","payload":{"agentId":"a","content":"hi"}}"#,
            r#"{"type":"text_delta","source":"s","payload":{"agentId":"a","text":"hi"},"metadata":{"t0":1}}"#,
            r#"{"type":"x.y","id":"1","timestamp":-12345678901234,"source":"s","correlationId":"c","payload":{},"metadata":{}}"#,
            r#"{"type":"text_delta","source":"s","payload":{"agentId":"a","content":"hi","seq":1},"metadata":{"seq":3}}"#,
        ] {
            let signal = Arc::new(normalizer.envelope_from_str(text).unwrap());
            let made = frame(18_000_000_000_000_000_000, Arc::clone(&signal));
            let len = made.as_str(Format::Sajou).len();
            let room = Part::room(&signal);
            assert!(len <= room && room <= len + 60, "{len} {room} {text}");
        }
    }

    fn next_now(c: &Client) -> Option<Outgoing> {
        c.try_pop()
    }

    #[test]
    fn frames_carry_seq_in_both_formats() {
        let f = frame(7, sig("a.b").clone());
        let v: serde_json::Value = serde_json::from_str(f.as_str(Format::Sajou)).unwrap();
        assert_eq!(v["metadata"]["seq"], 7);
        assert_eq!(v["type"], "a.b");
        let e: serde_json::Value = serde_json::from_str(f.as_str(Format::Escapement)).unwrap();
        assert_eq!(
            e,
            serde_json::json!({"kind":"event","seq":7,"ts":5,"event":"a.b","data":{"x":1}})
        );
    }

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        for text in [
            "plain",
            "é ü → 日本",
            "a\"b",
            "back\\slash",
            "line\nbreak",
            "\u{1}\u{7f}",
            "é\"日本\n→",
            "",
        ] {
            // Payload and metadata built as trees: written by serde_json into the frame.
            let mut signal = Signal::new(text, text, object! { text => text }).at(5);
            signal.id = text.into();
            signal.correlation_id = Some(text.into());
            signal.metadata = Some(object! { text => text }.into());
            let f = frame(1, Arc::new(signal));
            let quoted = serde_json::to_string(text).unwrap();
            let sajou = f.as_str(Format::Sajou);
            assert!(
                sajou.starts_with(&format!(
                    "{{\"id\":{quoted},\"type\":{quoted},\"timestamp\":5,\"source\":{quoted},\"correlationId\":{quoted},"
                )),
                "{sajou}"
            );
            assert!(
                f.as_str(Format::Escapement)
                    .contains(&format!("\"event\":{quoted},"))
            );
            assert!(
                sajou.ends_with(&format!(
                    "\"metadata\":{{{quoted}:{quoted},\"seq\":1}},\"payload\":{{{quoted}:{quoted}}}}}"
                )),
                "{sajou}"
            );
            // The type the hub filters on is the signal's, escaped in the text or not.
            assert_eq!(f.kind(), text);
        }
    }

    #[test]
    fn decoded_signals_are_written_as_their_trees() {
        // Strings read without escapes are copied as they are; the others are escaped.
        let mut normalizer = patchbay_signal::normalize::Normalizer::new("test:a");
        for text in [
            r#"{"type":"text_delta","source":"s","payload":{"agentId":"a","content":"c"}}"#,
            r#"{"type":"x","id":"i","source":"s","correlationId":"c","payload":{"a":1}}"#,
            r#"{"type":"x\"y","source":"s","payload":{}}"#,
            r#"{"type":"x","source":"s\\t","correlationId":"c\n","payload":{}}"#,
            r#"{"type":"x","id":"\u00e9","source":"é","payload":{},"metadata":{"t0":1}}"#,
        ] {
            let signal = normalizer.decode_text(text).unwrap().into_signal();
            let mut expected = signal.to_value();
            expected["metadata"]["seq"] = 3.into();
            let f = frame(3, Arc::new(signal));
            let v: serde_json::Value = serde_json::from_str(f.as_str(Format::Sajou)).unwrap();
            assert_eq!(v, expected, "{text}");
            assert_eq!(f.kind(), expected["type"], "{text}");
        }
    }

    #[test]
    fn metadata_kept_as_text_gets_seq_added_without_being_parsed() {
        let mut normalizer = patchbay_signal::normalize::Normalizer::new("test:a");
        for (metadata, expected) in [
            (r#"{"t0":1}"#, r#"{"t0":1,"seq":7}"#),
            ("{}", r#"{"seq":7}"#),
            (r#"{"seq":3,"a":[1]}"#, r#"{"a":[1],"seq":7}"#),
            (r#"{"seq":3}"#, r#"{"seq":7}"#),
            (r#"{"a":{"seq":1},"seq":3}"#, r#"{"a":{"seq":1},"seq":7}"#),
            (r#"{"a":1,"seq":3,"b":2}"#, r#"{"a":1,"b":2,"seq":7}"#),
            (r#"{"a": 1}"#, r#"{"a":1,"seq":7}"#),
        ] {
            let text = format!(r#"{{"type":"x","id":"i","timestamp":1,"metadata":{metadata}}}"#);
            let signal = normalizer.decode_text(&text).unwrap().into_signal();
            let signal = Arc::new(signal);
            let f = frame(7, Arc::clone(&signal));
            let v: serde_json::Value = serde_json::from_str(f.as_str(Format::Sajou)).unwrap();
            assert_eq!(v["metadata"].to_string(), expected, "{metadata}");
            // Parsed only when it came pretty-printed (not kept as text).
            let kept = signal.metadata.as_ref().unwrap();
            assert_eq!(kept.is_parsed(), kept.raw_json().is_none(), "{metadata}");
        }
    }

    #[test]
    fn metadata_text_with_seq_anywhere_reads_as_its_tree_with_seq() {
        // Every object of up to three fields from these keys and values, in every order:
        // `seq` first, between, last, nested, in a string, or absent.
        let keys = ["seq", "a", "extra"];
        let values = [r#"1"#, r#"{"seq":2,"b":[3]}"#, r#""x,\"seq\":""#];
        let mut objects = vec![String::from("{}")];
        for n in 1..=3 {
            let count = (keys.len() * values.len()).pow(n);
            for mut code in 0..count {
                let mut fields = Vec::new();
                for _ in 0..n {
                    let pick = code % (keys.len() * values.len());
                    code /= keys.len() * values.len();
                    fields.push((keys[pick % keys.len()], values[pick / keys.len()]));
                }
                let mut names: Vec<_> = fields.iter().map(|f| f.0).collect();
                names.sort_unstable();
                names.dedup();
                if names.len() == fields.len() {
                    let text: Vec<_> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    objects.push(format!("{{{}}}", text.join(",")));
                }
            }
        }
        for text in objects {
            let metadata = LazyObject::from_json(&text).expect("canonical");
            let mut signal = Signal::new("x", "test:a", Object::new());
            signal.metadata = Some(metadata);
            let f = frame(9, Arc::new(signal));
            let tree: Object = serde_json::from_str(&text).unwrap();
            let expected = serde_json::to_string(&MetaWithSeq {
                meta: Some(&LazyObject::from(tree)),
                seq: 9,
            })
            .unwrap();
            let sajou = f.as_str(Format::Sajou);
            assert!(
                sajou.contains(&format!(",\"metadata\":{expected},")),
                "{text}: {sajou}"
            );
        }
    }

    #[test]
    fn escapement_form_is_serialized_lazily_and_once() {
        let f = frame(1, sig("a"));
        assert!(f.escapement.get().is_none());
        let a = f.bytes(Format::Escapement);
        let b = f.bytes(Format::Escapement);
        assert_eq!(a.as_ptr(), b.as_ptr(), "the same bytes are shared");
    }

    #[test]
    fn type_filter() {
        let f = TypeFilter::parse("a, b*");
        assert!(f.matches("a") && f.matches("b") && f.matches("b.c"));
        assert!(!f.matches("ab") && !f.matches("c"));
        assert!(TypeFilter::parse("").matches("anything"));
        assert!(TypeFilter::parse("*").matches("anything"));
        assert!(matches!(TypeFilter::parse("a, *"), TypeFilter::All));
        assert!(!TypeFilter::Nothing.matches("anything"));
    }

    #[test]
    fn overflow_drops_oldest_and_leaves_one_notice() {
        let h = hub(100, 2);
        let (sub, _) = h
            .subscribe(None, Format::Sajou, TypeFilter::default())
            .unwrap();
        for seq in 1..=5 {
            h.publish(frame(seq, sig("a")));
        }
        let got: Vec<_> = std::iter::from_fn(|| next_now(&sub.client)).collect();
        assert!(matches!(got[0], Outgoing::Lagged(0)), "{got:?}");
        let seqs: Vec<_> = got[1..].iter().filter_map(Outgoing::seq).collect();
        assert_eq!(seqs, [4, 5]);
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn subscribe_replays_after_since_then_live() {
        let h = hub(3, 10);
        for seq in 1..=5 {
            h.publish(frame(seq, sig(if seq % 2 == 0 { "even" } else { "odd" })));
        }
        let (_s, replay) = h
            .subscribe(Some(1), Format::Sajou, TypeFilter::default())
            .unwrap();
        assert_eq!(replay.gap, None, "not a lossless hub");
        assert_eq!(
            replay.frames.iter().map(|f| f.seq).collect::<Vec<_>>(),
            [3, 4, 5]
        );
        let (s2, replay) = h
            .subscribe(Some(3), Format::Sajou, TypeFilter::parse("odd"))
            .unwrap();
        assert_eq!(replay.frames.iter().map(|f| f.seq).collect::<Vec<_>>(), [5]);
        h.publish(frame(6, sig("even")));
        h.publish(frame(7, sig("odd")));
        assert_eq!(next_now(&s2.client).and_then(|o| o.seq()), Some(7));
        assert_eq!(h.client_count(), 2);
        drop(s2);
        assert_eq!(h.client_count(), 1);
    }

    #[test]
    fn a_lossless_hub_cuts_a_full_client_after_its_queue_and_names_gaps() {
        let h = hub_with(3, 2, true);
        let (slow, _) = h
            .subscribe(None, Format::Sajou, TypeFilter::default())
            .unwrap();
        let (fast, _) = h
            .subscribe(None, Format::Sajou, TypeFilter::default())
            .unwrap();
        for seq in 1..=5 {
            h.publish(frame(seq, sig("a")));
            while next_now(&fast.client).is_some() {}
        }
        let got: Vec<_> = std::iter::from_fn(|| next_now(&slow.client)).collect();
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(
            got[..2]
                .iter()
                .filter_map(Outgoing::seq)
                .collect::<Vec<_>>(),
            [1, 2]
        );
        assert!(matches!(got[2], Outgoing::Cut(2)), "{got:?}");
        assert!(next_now(&slow.client).is_none());
        assert_eq!(h.stats.snapshot().gauges["clients_cut"], 1.0);
        // The ring holds 3..=5: resuming after 2 misses nothing, after 0 misses 1..=2.
        let (_s, replay) = h
            .subscribe(Some(2), Format::Sajou, TypeFilter::default())
            .unwrap();
        assert_eq!(replay.gap, None);
        assert_eq!(replay.frames.len(), 3);
        let (_s, replay) = h
            .subscribe(Some(0), Format::Sajou, TypeFilter::default())
            .unwrap();
        assert_eq!(replay.gap, Some((1, 2)));
        assert_eq!(
            gap_text(1, 2).as_str(),
            r#"{"kind":"gap","from":1,"to":2,"missed":2}"#
        );
        let (_s, replay) = h
            .subscribe(Some(9), Format::Sajou, TypeFilter::default())
            .unwrap();
        assert_eq!((replay.gap, replay.frames.len()), (None, 0));
    }

    /// A lossless hub whose ring keeps 3 frames by count and a minute by age.
    fn windowed(max_bytes: usize) -> Arc<Hub> {
        hub_limited(
            RingLimits {
                frames: 3,
                window: Duration::from_secs(60),
                max_bytes,
            },
            2,
            true,
        )
    }

    fn publish_at(h: &Hub, seqs: std::ops::RangeInclusive<u64>, at: Instant) {
        let first = *seqs.start();
        let mut signals: Vec<_> = seqs.map(|_| sig("a")).collect();
        h.publish_at(frames(first, &mut signals), Some(at));
    }

    #[test]
    fn a_lossless_ring_keeps_what_a_cut_client_missed_for_the_window_however_much_follows() {
        // The soak's case: a client cut after 2 comes back when far more than `ring`
        // frames were published meanwhile. By count alone it is told of a gap…
        let by_count = hub_with(3, 2, true);
        let (slow, _) = by_count
            .subscribe(None, Format::Sajou, TypeFilter::default())
            .unwrap();
        let start = Instant::now();
        for seq in 1..=500 {
            by_count.publish(frame(seq, sig("a")));
        }
        assert!(matches!(
            std::iter::from_fn(|| next_now(&slow.client)).last(),
            Some(Outgoing::Cut(2))
        ));
        let (_s, replay) = by_count
            .subscribe(Some(2), Format::Sajou, TypeFilter::default())
            .unwrap();
        assert_eq!(replay.gap, Some((3, 497)));

        // …with the window, it gets every frame, whatever the count.
        let h = windowed(usize::MAX);
        let (slow, _) = h
            .subscribe(None, Format::Sajou, TypeFilter::default())
            .unwrap();
        for seq in 1..=500 {
            publish_at(&h, seq..=seq, start + Duration::from_millis(seq * 100));
        }
        assert!(matches!(
            std::iter::from_fn(|| next_now(&slow.client)).last(),
            Some(Outgoing::Cut(2))
        ));
        // 50 s after frame 1: everything is within the window.
        let (_s, replay) = h
            .subscribe(Some(2), Format::Sajou, TypeFilter::default())
            .unwrap();
        assert_eq!(replay.gap, None);
        assert_eq!(
            replay.frames.iter().map(|f| f.seq).collect::<Vec<_>>(),
            (3..=500).collect::<Vec<_>>()
        );
        assert_eq!(h.stats.snapshot().gauges.get("ring_evicted_early"), None);
    }

    #[test]
    fn frames_older_than_the_window_go_down_to_the_count() {
        let h = windowed(usize::MAX);
        let start = Instant::now();
        publish_at(&h, 1..=100, start);
        publish_at(&h, 101..=200, start + Duration::from_secs(30));
        // Both batches are within the window.
        assert_eq!(h.lock().ring.len(), 200);
        // A minute after the first batch it goes; the second stays.
        publish_at(&h, 201..=201, start + Duration::from_secs(61));
        assert_eq!(h.lock().ring.front().map(|f| f.seq), Some(101));
        let (_s, replay) = h
            .subscribe(Some(0), Format::Sajou, TypeFilter::default())
            .unwrap();
        assert_eq!(replay.gap, Some((1, 100)));
        // Past the window of everything, the newest `ring` frames stay.
        publish_at(&h, 202..=202, start + Duration::from_secs(200));
        let ring: Vec<_> = h.lock().ring.iter().map(|f| f.seq).collect();
        assert_eq!(ring, [200, 201, 202]);
        assert!(h.lock().ring_bytes > 0);
    }

    #[test]
    fn the_ring_memory_bound_lets_the_oldest_go_and_counts_what_the_window_would_keep() {
        // Seqs of two digits: frames of one length. Room for ten of them.
        let one = frame(10, sig("a")).sajou.len() + FRAME_BOOKKEEPING;
        // What `ring_max_bytes`'s documentation says a frame's bookkeeping is.
        assert!(
            (100..=120).contains(&FRAME_BOOKKEEPING),
            "{FRAME_BOOKKEEPING}"
        );
        let h = windowed(10 * one);
        let start = Instant::now();
        publish_at(&h, 10..=34, start);
        let inner = h.lock();
        assert_eq!(inner.ring.len(), 10);
        assert_eq!(inner.ring.front().map(|f| f.seq), Some(25));
        assert!(inner.ring_bytes <= 10 * one);
        drop(inner);
        assert_eq!(h.stats.snapshot().gauges["ring_evicted_early"], 15.0);
        let (_s, replay) = h
            .subscribe(Some(0), Format::Sajou, TypeFilter::default())
            .unwrap();
        assert_eq!(replay.gap, Some((1, 24)));
        // The newest frame stays, however large.
        let tiny = windowed(1);
        publish_at(&tiny, 1..=3, start);
        assert_eq!(tiny.lock().ring.len(), 1);
    }

    #[test]
    fn publication_marks_stay_few_and_never_make_a_frame_older_than_it_is() {
        let h = windowed(usize::MAX);
        let start = Instant::now();
        // Ten minutes of a frame every 10 ms.
        for seq in 1..=60_000u64 {
            publish_at(&h, seq..=seq, start + Duration::from_millis(seq * 10));
            let inner = h.lock();
            assert!(inner.marks.len() <= 66, "{} marks", inner.marks.len());
        }
        // Every frame of the last minute is there.
        let inner = h.lock();
        let first = inner.ring.front().map(|f| f.seq).unwrap();
        assert!(first <= 60_000 - 6000 + 1, "the ring starts at {first}");
        assert!(inner.ring.len() < 6100, "{} frames", inner.ring.len());
    }
}

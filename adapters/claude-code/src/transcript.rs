//! `token_usage` from a session's transcript (`transcript_path`, one JSON object a line).
//!
//! On `Stop` and `SubagentStop` the transport reads what was appended since the last
//! time ([`TranscriptReader`]), and [`usage_signals`] turns the assistant messages'
//! `usage` into `token_usage`. A message streamed in several blocks is written as several
//! lines with the same `message.id` and the same usage: it counts once.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use patchbay_signal::well_known::{Payload, TokenUsage};
use patchbay_signal::{Signal, now_ms};
use serde_json::Value;

/// The most read from one transcript at one `Stop`: a huge first read (a resumed session
/// with a long history) skips to the last part.
pub const MAX_READ: u64 = 4 << 20;

/// How many transcripts' positions are remembered.
const FILES_KEPT: usize = 256;

/// How many message ids are remembered per transcript (to count each message once).
const IDS_KEPT: usize = 4096;

/// Where each transcript was read up to, and the message ids already counted.
#[derive(Debug, Default)]
pub struct TranscriptReader {
    files: HashMap<PathBuf, FileState>,
    tick: u64,
}

#[derive(Debug, Default)]
struct FileState {
    offset: u64,
    seen: HashSet<String>,
    used: u64,
}

impl TranscriptReader {
    /// A reader that has read nothing yet.
    pub fn new() -> Self {
        TranscriptReader::default()
    }

    /// The complete lines appended to `path` since the last call (a half-written last line
    /// waits for the next call). A missing or unreadable file gives nothing; a file that
    /// shrank (rewritten) is read from its start again.
    pub fn new_lines(&mut self, path: &Path) -> Vec<String> {
        self.tick += 1;
        if !self.files.contains_key(path)
            && self.files.len() >= FILES_KEPT
            && let Some(oldest) = self
                .files
                .iter()
                .min_by_key(|(_, f)| f.used)
                .map(|(p, _)| p.clone())
        {
            self.files.remove(&oldest);
        }
        let state = self.files.entry(path.to_owned()).or_default();
        state.used = self.tick;
        let Ok(mut file) = std::fs::File::open(path) else {
            return Vec::new();
        };
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            return Vec::new();
        };
        if len < state.offset {
            state.offset = 0;
            state.seen.clear();
        }
        let start = state.offset.max(len.saturating_sub(MAX_READ));
        let skipped = start > state.offset;
        if file.seek(SeekFrom::Start(start)).is_err() {
            return Vec::new();
        }
        let mut bytes = Vec::new();
        if file.take(len - start).read_to_end(&mut bytes).is_err() {
            return Vec::new();
        }
        let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else {
            // No complete line yet: the next call reads it whole.
            return Vec::new();
        };
        state.offset = start + end as u64 + 1;
        let text = String::from_utf8_lossy(&bytes[..end]);
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if skipped && !lines.is_empty() {
            // Skipped ahead into the middle of a line: drop that partial first line.
            lines.remove(0);
        }
        lines
    }

    /// Reads the new lines of `path` and returns the `token_usage` signals of the assistant
    /// messages not counted yet.
    pub fn usage(&mut self, path: &Path, source: &str, agent_id: &str) -> Vec<Signal> {
        let lines = self.new_lines(path);
        let Some(state) = self.files.get_mut(path) else {
            return Vec::new();
        };
        if state.seen.len() > IDS_KEPT {
            state.seen.clear();
        }
        usage_signals(&lines, source, agent_id, &mut state.seen)
    }
}

/// The `token_usage` signals of the assistant messages in transcript `lines` whose
/// `message.id` is not in `seen` (which they are added to). Lines that are not JSON, or
/// not assistant messages with a usage, are skipped.
pub fn usage_signals(
    lines: &[String],
    source: &str,
    agent_id: &str,
    seen: &mut HashSet<String>,
) -> Vec<Signal> {
    let mut out = Vec::new();
    for line in lines {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if entry.get("type").and_then(Value::as_str) != Some("assistant") {
            continue;
        }
        let Some(message) = entry.get("message") else {
            continue;
        };
        let Some(usage) = message.get("usage").filter(|u| u.is_object()) else {
            continue;
        };
        if let Some(id) = message.get("id").and_then(Value::as_str)
            && !seen.insert(id.to_owned())
        {
            continue;
        }
        let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
        let cache_write = count("cache_creation_input_tokens");
        let cache_read = count("cache_read_input_tokens");
        let payload = TokenUsage {
            agent_id: agent_id.to_owned(),
            prompt_tokens: count("input_tokens") + cache_write + cache_read,
            completion_tokens: count("output_tokens"),
            model: message
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_owned),
            cost: None,
        };
        let mut signal = payload.into_signal(source.to_owned());
        signal.timestamp = entry
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(patchbay_signal::rfc3339_millis)
            .unwrap_or_else(now_ms);
        if let Some(id) = message.get("id").and_then(Value::as_str) {
            signal.metadata_mut().insert("messageId".into(), id.into());
        }
        signal
            .metadata_mut()
            .insert("cacheReadTokens".into(), cache_read.into());
        signal
            .metadata_mut()
            .insert("cacheWriteTokens".into(), cache_write.into());
        if let Some(session) = entry.get("sessionId").and_then(Value::as_str) {
            signal.correlation_id = Some(session.into());
        }
        out.push(signal);
    }
    out
}

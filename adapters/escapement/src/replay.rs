//! What a reconnect replay means: duplicates of frames already decoded, or the start of a
//! new agent session whose `seq` began again at 0.

use serde_json::Value;

use crate::decode::SeqDedupe;

/// How many replayed frames are held back while it is not yet known whether they are
/// duplicates or a new session's first frames.
const MAX_HELD: usize = 256;

/// Sits in front of the decoder's [`SeqDedupe`] on a live connection.
///
/// A frame whose `seq` is at or below the highest seen is usually a replay after a
/// reconnect, but it may also be the first frame of a new session (an agent restarted
/// behind the same URL numbers from 0 again). Such frames are held back:
///
/// - a `runner/started` event naming a different `session-id` than the last one seen
///   starts a new session: the dedupe is reset and the held frames are released, in
///   order, followed by it;
/// - a frame with a `seq` above the highest proves the held ones were replays: they are
///   dropped (counted in [`ReplayGuard::dropped`]);
/// - a new connection drops what is held (the agent replays it again if needed).
///
/// Frames without a `seq` (phase snapshots, prompts) are never held.
#[derive(Debug, Clone, Default)]
pub struct ReplayGuard {
    session: Option<String>,
    held: Vec<Value>,
    dropped: u64,
}

impl ReplayGuard {
    /// A guard that has seen no session yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The session id of the last `runner/started` seen.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// How many replayed frames were dropped here (the decoder's dedupe counts the rest).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// A new connection: what is held will be replayed again if it matters.
    pub fn reconnected(&mut self) {
        self.dropped += self.held.len() as u64;
        self.held.clear();
    }

    /// Takes one incoming frame and returns the frames to decode now, in order (none,
    /// the frame itself, or released held frames followed by it).
    pub fn admit(&mut self, frame: Value, dedupe: &mut SeqDedupe) -> Vec<Value> {
        let seq = frame.get("seq").and_then(Value::as_u64);
        if let Some(started) = started_session(&frame) {
            let new_session = self.session.as_deref().is_some_and(|s| s != started);
            self.session = Some(started.to_owned());
            if new_session {
                dedupe.reset();
                let mut out = std::mem::take(&mut self.held);
                out.push(frame);
                return out;
            }
        }
        match (seq, dedupe.highest()) {
            (Some(seq), Some(highest)) if seq <= highest => {
                if self.held.len() >= MAX_HELD {
                    self.held.remove(0);
                    self.dropped += 1;
                }
                self.held.push(frame);
                Vec::new()
            }
            (Some(_), _) => {
                self.reconnected();
                vec![frame]
            }
            (None, _) => vec![frame],
        }
    }
}

/// The `session-id` of a `runner/started` event frame.
fn started_session(frame: &Value) -> Option<&str> {
    if frame.get("event").and_then(Value::as_str) != Some("runner/started") {
        return None;
    }
    frame.pointer("/data/session-id").and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(seq: u64, event: &str) -> Value {
        json!({"kind": "event", "seq": seq, "event": event, "data": {}})
    }

    fn started(seq: u64, session: &str) -> Value {
        json!({"kind": "event", "seq": seq, "event": "runner/started",
               "data": {"session-id": session}})
    }

    /// Runs frames through the guard and the dedupe, returning the seqs decoded.
    fn run(guard: &mut ReplayGuard, dedupe: &mut SeqDedupe, frames: Vec<Value>) -> Vec<u64> {
        let mut decoded = Vec::new();
        for f in frames {
            for f in guard.admit(f, dedupe) {
                let seq = f.get("seq").and_then(Value::as_u64);
                if dedupe.admit(seq) {
                    decoded.push(seq.unwrap_or(u64::MAX));
                }
            }
        }
        decoded
    }

    #[test]
    fn a_replay_of_the_same_session_is_dropped() {
        let (mut g, mut d) = (ReplayGuard::new(), SeqDedupe::new());
        let first = run(
            &mut g,
            &mut d,
            vec![ev(0, "a"), started(1, "s1"), ev(2, "b"), ev(3, "c")],
        );
        assert_eq!(first, [0, 1, 2, 3]);
        g.reconnected();
        let again = run(
            &mut g,
            &mut d,
            vec![
                ev(1, "x"),
                started(1, "s1"),
                ev(2, "b"),
                ev(3, "c"),
                ev(4, "d"),
            ],
        );
        assert_eq!(again, [4]);
        assert_eq!(g.dropped(), 4);
    }

    #[test]
    fn a_new_session_resets_and_keeps_its_first_frames() {
        let (mut g, mut d) = (ReplayGuard::new(), SeqDedupe::new());
        run(
            &mut g,
            &mut d,
            vec![ev(0, "a"), started(1, "s1"), ev(2, "b"), ev(3, "c")],
        );
        g.reconnected();
        let next = run(
            &mut g,
            &mut d,
            vec![ev(0, "cli/config-loaded"), started(1, "s2"), ev(2, "x")],
        );
        assert_eq!(next, [0, 1, 2]);
        assert_eq!(g.session(), Some("s2"));
    }

    #[test]
    fn frames_without_seq_always_pass() {
        let (mut g, mut d) = (ReplayGuard::new(), SeqDedupe::new());
        run(&mut g, &mut d, vec![ev(0, "a"), ev(1, "b")]);
        let out = g.admit(json!({"kind": "phase", "config": []}), &mut d);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn the_hold_is_bounded() {
        let (mut g, mut d) = (ReplayGuard::new(), SeqDedupe::new());
        run(&mut g, &mut d, vec![ev(10_000, "a")]);
        for i in 0..1000 {
            assert!(g.admit(ev(i, "old"), &mut d).is_empty());
        }
        assert!(g.held.len() <= MAX_HELD);
        assert_eq!(g.dropped(), 1000 - MAX_HELD as u64);
    }
}

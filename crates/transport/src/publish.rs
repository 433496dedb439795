//! Publishing to a running patchbay from a program that is not one (`patchbay wrap`):
//! signals are sent as JSON arrays to the sidecar's `POST /signal`, without ever making
//! the caller wait, and kept (bounded) while patchbay cannot be reached.

use std::collections::VecDeque;
use std::time::Duration;

use patchbay_signal::Signal;
use tokio::sync::mpsc;

/// Where `wrap` publishes by default: a sidecar on its default address.
pub const DEFAULT_PUBLISH_URL: &str = "http://127.0.0.1:7878";

/// Signals waiting for the publisher; past this new ones are dropped (the caller never
/// waits for the publisher).
const QUEUE: usize = 4096;

/// Signals kept while patchbay is unreachable; past this the oldest are dropped.
const MAX_BUFFER: usize = 10_000;

/// Signals per `POST /signal`.
const MAX_BATCH: usize = 256;

/// How long what is left is tried once the caller is done.
const FINAL_FLUSH: Duration = Duration::from_secs(3);

/// Publishes signals to the patchbay at a sidecar URL in the background.
pub struct Publisher {
    tx: PublishSender,
    task: tokio::task::JoinHandle<()>,
}

/// The sending end of a [`Publisher`] (cloneable, never waits).
#[derive(Clone)]
pub struct PublishSender {
    tx: mpsc::Sender<Signal>,
    full_noted: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl PublishSender {
    /// Queues `signal`; when the queue is full it is dropped (said once on standard
    /// error): the caller goes on.
    pub fn send(&self, signal: Signal) {
        if self.tx.try_send(signal).is_err()
            && !self
                .full_noted
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            eprintln!(
                "patchbay wrap: the publish queue is full; signals are dropped (the relay goes on)"
            );
        }
    }
}

impl Publisher {
    /// Starts publishing to the sidecar at `to` (`http://HOST:PORT`).
    pub fn start(to: &str) -> Publisher {
        let (tx, rx) = mpsc::channel::<Signal>(QUEUE);
        let task = tokio::spawn(publish(to.to_owned(), rx));
        Publisher {
            tx: PublishSender {
                tx,
                full_noted: Default::default(),
            },
            task,
        }
    }

    /// A sending end.
    pub fn sender(&self) -> PublishSender {
        self.tx.clone()
    }

    /// Queues `signal` (see [`PublishSender::send`]).
    pub fn send(&self, signal: Signal) {
        self.tx.send(signal);
    }

    /// Sends what is queued, trying for a few seconds more while patchbay cannot be
    /// reached (once every sender is dropped).
    pub async fn finish(self) {
        let Publisher { tx, task } = self;
        drop(tx);
        let _ = tokio::time::timeout(FINAL_FLUSH + Duration::from_secs(1), task).await;
    }
}

/// A child's exit status as a shell gives it: its code, or 128 + the signal that ended it.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return 128 + signal;
        }
    }
    1
}

/// The publisher: batches signals into `POST {to}/signal`; while patchbay cannot be
/// reached it keeps at most [`MAX_BUFFER`] signals (dropping the oldest) and retries
/// with a growing delay, warning once per outage on standard error.
async fn publish(to: String, mut rx: mpsc::Receiver<Signal>) {
    let url = format!("{}/signal", to.trim_end_matches('/'));
    let client = crate::client_builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new());
    let mut buffer: VecDeque<Signal> = VecDeque::new();
    let mut dropped = 0u64;
    let mut failing = false;
    let mut delay = Duration::from_millis(250);
    let mut open = true;
    let mut final_deadline: Option<tokio::time::Instant> = None;
    loop {
        if buffer.is_empty() {
            if !open {
                return;
            }
            match rx.recv().await {
                Some(s) => buffer.push_back(s),
                None => return,
            }
        }
        while buffer.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(s) => push_bounded(&mut buffer, s, &mut dropped),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        let n = buffer.len().min(MAX_BATCH);
        let body = batch_body(buffer.iter().take(n));
        let sent = client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => {
                buffer.drain(..n);
                if failing {
                    failing = false;
                    eprintln!(
                        "patchbay wrap: publishing to {url} again{}",
                        if dropped > 0 {
                            format!(" ({dropped} signals were dropped meanwhile)")
                        } else {
                            String::new()
                        }
                    );
                    dropped = 0;
                }
                delay = Duration::from_millis(250);
                continue;
            }
            Ok(response) if response.status().is_client_error() => {
                // patchbay refused the batch itself: sending it again would not help.
                eprintln!(
                    "patchbay wrap: {url} refused {n} signals ({})",
                    response.status()
                );
                buffer.drain(..n);
                continue;
            }
            Ok(response) => {
                if !failing {
                    eprintln!(
                        "patchbay wrap: {url} answered {}; relaying goes on, signals are kept (at most {MAX_BUFFER}) and sent again",
                        response.status()
                    );
                }
            }
            Err(e) => {
                if !failing {
                    eprintln!(
                        "patchbay wrap: cannot publish to {url} ({e}); relaying goes on, signals are kept (at most {MAX_BUFFER}) and sent again"
                    );
                }
            }
        }
        failing = true;
        if !open {
            // The runtime has exited: try a little longer, then give up.
            let deadline =
                *final_deadline.get_or_insert_with(|| tokio::time::Instant::now() + FINAL_FLUSH);
            if tokio::time::Instant::now() >= deadline {
                eprintln!(
                    "patchbay wrap: {} signals could not be published",
                    buffer.len() as u64 + dropped
                );
                return;
            }
            tokio::time::sleep(delay.min(Duration::from_millis(500))).await;
            continue;
        }
        // Wait before retrying, still taking new signals so the relay never waits.
        let wake = tokio::time::Instant::now() + delay;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(wake) => break,
                s = rx.recv() => match s {
                    Some(s) => push_bounded(&mut buffer, s, &mut dropped),
                    None => {
                        open = false;
                        break;
                    }
                },
            }
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

fn push_bounded(buffer: &mut VecDeque<Signal>, signal: Signal, dropped: &mut u64) {
    if buffer.len() >= MAX_BUFFER {
        buffer.pop_front();
        *dropped += 1;
    }
    buffer.push_back(signal);
}

/// A JSON array of envelopes.
fn batch_body<'a>(signals: impl Iterator<Item = &'a Signal>) -> String {
    let mut body = String::from("[");
    for (i, s) in signals.enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&s.to_json());
    }
    body.push(']');
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_json_arrays() {
        let a = Signal::new("x", "s", Default::default());
        let body = batch_body([a.clone(), a].iter());
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!(v.as_array().map(Vec::len), Some(2));
        assert_eq!(batch_body(std::iter::empty()), "[]");
    }

    #[test]
    fn the_buffer_is_bounded() {
        let mut b = VecDeque::new();
        let mut dropped = 0;
        for _ in 0..MAX_BUFFER + 5 {
            push_bounded(
                &mut b,
                Signal::new("x", "s", Default::default()),
                &mut dropped,
            );
        }
        assert_eq!(b.len(), MAX_BUFFER);
        assert_eq!(dropped, 5);
    }
}

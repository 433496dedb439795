//! Envelopes per second through the ingest decoder (`Normalizer::envelope_from_str`), on
//! one core: the envelope the load generator sends (`examples/loadgen.rs`), alone and in a
//! batch (one clock reading shared, as the sidecar's ingest does), and for comparison the
//! same text read into a `serde_json::Value` (a tree, nothing else done). Then each
//! envelope shape the load generator sends (`--shapes`), read in a batch: the clean one,
//! extra payload fields (moved to `metadata.extra`), a type that is not well known, and one
//! that becomes `invalid.text_delta`. (The sidecar then copies the payload's and the
//! metadata's text into its frame, whatever the shape.)
//!
//! `stream/<shape>` reads as a sidecar's connection does: a stream of envelopes that differ
//! (4 096 of them, in turn), in batches of 400 (a 64 KiB read), each signal made in its `Arc`,
//! and the batches dropped on another thread (as the graph does), so that every free is
//! one from another thread. It reports the time per envelope of the reading thread.
//!
//! Run: `cargo bench -p patchbay-signal --bench ingest` (`--profile dist` for the figures
//! in BENCHMARKS.md).

use std::sync::Arc;
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use patchbay_signal::Signal;
use patchbay_signal::normalize::Normalizer;

/// The allocator the `patchbay` binary runs with (its `src/main.rs`), so that the figures
/// are the binary's.
#[global_allocator]
static ALLOCATOR: patchbay_allocator::MiMalloc = patchbay_allocator::MiMalloc;

/// The load generator's envelope: no id and no timestamp (both made up on ingest).
const ENVELOPE: &str = r#"{"type":"text_delta","source":"loadgen","payload":{"agentId":"load","content":"token 123456 of the stream","index":123456},"metadata":{"t0":1764172345123456789}}"#;

/// The load generator's shapes (`examples/loadgen.rs`, `Shape::signal`).
const SHAPES: [(&str, &str); 4] = [
    ("clean", ENVELOPE),
    (
        "extra",
        r#"{"type":"text_delta","source":"loadgen","payload":{"agentId":"load","content":"token 123456 of the stream","index":123456,"seq":123456,"t0":1764172345123456789}}"#,
    ),
    (
        "unknown",
        r#"{"type":"loadgen.tick","source":"loadgen","payload":{"agentId":"load","content":"token 123456 of the stream","index":123456},"metadata":{"t0":1764172345123456789}}"#,
    ),
    (
        "invalid",
        r#"{"type":"text_delta","source":"loadgen","payload":{"agentId":"load","text":"token 123456 of the stream","index":123456},"metadata":{"t0":1764172345123456789}}"#,
    ),
];

fn ingest(c: &mut Criterion) {
    let mut group = c.benchmark_group("ingest");
    group.throughput(Throughput::Elements(1));
    let mut normalizer = Normalizer::new("sidecar:ui");
    group.bench_function("envelope_from_str", |b| {
        b.iter(|| normalizer.envelope_from_str(std::hint::black_box(ENVELOPE)))
    });
    // As the sidecar's ingest reads it: frames read together share one clock reading.
    let mut batched = Normalizer::new("sidecar:ui");
    batched.start_batch();
    group.bench_function("envelope_from_str_in_a_batch", |b| {
        b.iter(|| batched.envelope_from_str(std::hint::black_box(ENVELOPE)))
    });
    group.bench_function("serde_json_value", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(std::hint::black_box(ENVELOPE)))
    });
    for (shape, envelope) in SHAPES {
        group.bench_function(format!("read/{shape}"), |b| {
            b.iter(|| batched.envelope_from_str(std::hint::black_box(envelope)))
        });
    }
    for (shape, envelope) in SHAPES {
        let stream = varied(envelope);
        group.bench_function(format!("stream/{shape}"), |b| {
            b.iter_custom(|n| read_stream(&stream, n))
        });
    }
    group.finish();
}

/// 4 096 envelopes like `envelope`, each with its own numbers (its `123456`s counting up).
fn varied(envelope: &str) -> Vec<String> {
    (0..4096)
        .map(|i| envelope.replace("123456", &(123_456 + i).to_string()))
        .collect()
}

/// Reads `n` envelopes of `stream` in turn, in batches of 400 handed to a thread that
/// drops them; the time the reading took.
fn read_stream(stream: &[String], n: u64) -> Duration {
    let (tx, rx) = sync_channel::<Vec<Arc<Signal>>>(8);
    let dropper = std::thread::spawn(move || rx.into_iter().for_each(drop));
    let mut normalizer = Normalizer::new("sidecar:ui");
    let started = Instant::now();
    let mut envelopes = stream.iter().cycle().take(n as usize).peekable();
    while envelopes.peek().is_some() {
        normalizer.start_batch();
        let batch = envelopes
            .by_ref()
            .take(400)
            .filter_map(|text| normalizer.shared_envelope_from_str(text))
            .collect();
        normalizer.end_batch();
        // The dropper runs until the sender is dropped.
        let _ = tx.send(batch);
    }
    let took = started.elapsed();
    drop(tx);
    let _ = dropper.join();
    took
}

criterion_group!(benches, ingest);
criterion_main!(benches);

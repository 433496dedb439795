//! Envelopes per second through the ingest decoder (`Normalizer::envelope_from_str`), on
//! one core: the envelope the load generator sends (`examples/loadgen.rs`), alone and in a
//! batch (one clock reading shared, as the sidecar's ingest does), and for comparison the
//! same text read into a `serde_json::Value` (a tree, nothing else done). Then each
//! envelope shape the load generator sends (`--shapes`), read in a batch: the clean one,
//! extra payload fields (moved to `metadata.extra`), a type that is not well known, and one
//! that becomes `invalid.text_delta`. (The sidecar then copies the payload's and the
//! metadata's text into its frame, whatever the shape.)
//!
//! Run: `cargo bench -p patchbay-signal --bench ingest` (`--profile dist` for the figures
//! in BENCHMARKS.md).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use patchbay_signal::normalize::Normalizer;

/// The allocator the `patchbay` binary runs with (its `src/main.rs`), so that the figures
/// are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    group.finish();
}

criterion_group!(benches, ingest);
criterion_main!(benches);

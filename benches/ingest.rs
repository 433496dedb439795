//! Envelopes per second through the ingest decoder (`Normalizer::envelope_from_str`), on
//! one core: the envelope the load generator sends (`examples/loadgen.rs`), alone and in a
//! batch (one clock reading shared, as the sidecar's ingest does), and for comparison the
//! same text read into a `serde_json::Value` (a tree, nothing else done).
//!
//! Run: `cargo bench --bench ingest`. Results go to BENCHMARKS.md.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use patchbay_signal::normalize::Normalizer;

/// The allocator the `patchbay` binary runs with (src/main.rs), so that the figures are
/// the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The load generator's envelope: no id and no timestamp (both made up on ingest).
const ENVELOPE: &str = r#"{"type":"text_delta","source":"loadgen","payload":{"agentId":"load","content":"token 123456 of the stream","index":123456},"metadata":{"t0":1764172345123456789}}"#;

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
    group.finish();
}

criterion_group!(benches, ingest);
criterion_main!(benches);

//! The SSE parser with small limits: lines and events past them are dropped (and reported),
//! never kept, and no event comes out larger than its limit.
#![no_main]

use patchbay_sse::SseParser;

const MAX_LINE: usize = 64;
const MAX_EVENT: usize = 256;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut parser = SseParser::with_limits(MAX_LINE, MAX_EVENT);
    let check = |e: patchbay_sse::SseEventRef<'_>| {
        assert!(e.data.len() < MAX_EVENT, "event of {} bytes", e.data.len());
    };
    for part in data.chunks(patchbay_fuzz::chunk_size(data)) {
        parser.feed_ref(part, check);
    }
    parser.finish_ref(check);
    let _ = parser.take_overflow();
});

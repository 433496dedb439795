//! The stream splitters: `LineSplitter` with a line limit and `JsonTexts` (NDJSON or values
//! over several lines) with a size limit. Nothing longer than the limit is passed whole,
//! a cut one is passed shortened.
#![no_main]

use patchbay_signal::decode::{JsonTexts, LineSplitter};
use patchbay_signal::normalize::RAW_KEEP;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let max = data.len() / 3 % 128 + 1;
    // A cut text is its first bytes (at most RAW_KEEP) and an ellipsis.
    let cut_max = RAW_KEEP + '…'.len_utf8();
    // Lossy UTF-8 may turn one byte into a 3-byte replacement character.
    let check = |item: Result<&str, &str>| match item {
        Ok(line) => assert!(line.len() <= 3 * max, "{} > {max}", line.len()),
        Err(cut) => assert!(cut.len() <= cut_max, "cut of {}", cut.len()),
    };
    let mut lines = LineSplitter::new(max);
    let mut texts = JsonTexts::new(max);
    for part in data.chunks(patchbay_fuzz::chunk_size(data)) {
        lines.feed(part, check);
        texts.feed(part, check);
    }
    lines.finish(check);
    texts.finish(check);
});

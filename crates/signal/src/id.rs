//! Signal ids: 26-character ULIDs, unique per process and monotonic.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::SmallString;

const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

struct Generator {
    last_ms: u64,
    random: u128,
}

static GENERATOR: Mutex<Generator> = Mutex::new(Generator {
    last_ms: 0,
    random: 0,
});

/// A new signal id: a ULID (48-bit millisecond time + 80 bits), strictly increasing within
/// the process, so ids sort by creation time and never repeat.
pub fn next_id() -> SmallString {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    next_id_at(now)
}

/// [`next_id`] with the clock already read (`now`, epoch milliseconds), for a caller that
/// stamps the signal with the same reading.
pub(crate) fn next_id_at(now: u64) -> SmallString {
    let (ms, random) = {
        let mut g = GENERATOR.lock().unwrap_or_else(|e| e.into_inner());
        if now > g.last_ms {
            g.last_ms = now;
            g.random = seed(now) & ((1u128 << 79) - 1);
        } else {
            // Same millisecond (or the clock went back): increment, as monotonic ULIDs do.
            g.random = (g.random + 1) & ((1u128 << 80) - 1);
        }
        (g.last_ms, g.random)
    };
    encode(((ms as u128) << 80) | random)
}

fn seed(ms: u64) -> u128 {
    // Process-unique entropy without a RNG crate: address of a stack value, pid and time,
    // mixed with splitmix64.
    let local = 0u8;
    let mut x = ms ^ ((std::process::id() as u64) << 32) ^ (&local as *const u8 as u64);
    let mut next = || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    ((next() as u128) << 64) | next() as u128
}

fn encode(mut value: u128) -> SmallString {
    let mut out = [0u8; 26];
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(value & 31) as usize];
        value >>= 5;
    }
    // The alphabet is ASCII, and 26 bytes fit inline.
    SmallString::from_ascii(&out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_sorted() {
        let ids: Vec<SmallString> = (0..10_000).map(|_| next_id()).collect();
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "{} !< {}", pair[0], pair[1]);
        }
        assert_eq!(ids[0].len(), 26);
    }
}

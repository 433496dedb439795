//! Signal ids: 26-character ULIDs, unique per process and monotonic.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::SmallString;

const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Bits of [`LAST`] that count the ids made within one millisecond.
const COUNT_BITS: u32 = 16;
/// The largest millisecond a ULID holds (48 bits).
const MAX_MS: u64 = (1 << 48) - 1;

/// The last id made: its millisecond above [`COUNT_BITS`], its number within that
/// millisecond below. One atomic word, so that sources on several threads make ids
/// without a lock, and every id is above the one before it.
static LAST: AtomicU64 = AtomicU64::new(0);

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
    let stamp = now.min(MAX_MS) << COUNT_BITS;
    // The same millisecond (or a clock that went back) counts on from the last id, as
    // monotonic ULIDs do; a count that overflows carries into the next millisecond.
    let next = |last: u64| stamp.max(last.saturating_add(1));
    let last = match LAST.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| Some(next(l))) {
        Ok(last) | Err(last) => last,
    };
    let state = next(last);
    let ms = state >> COUNT_BITS;
    // Random for each millisecond (and process), plus the count: ids of one millisecond
    // follow each other.
    let random = (seed(ms) & ((1u128 << 79) - 1)) + u128::from(state & ((1 << COUNT_BITS) - 1));
    encode(ms, random)
}

/// 128 bits that look random, the same for every id of millisecond `ms` in this process.
fn seed(ms: u64) -> u128 {
    // Process-unique entropy without a RNG crate: the pid, the clock at the first id, and
    // an address (randomized per process), mixed with splitmix64.
    static SALT: OnceLock<u64> = OnceLock::new();
    let salt = *SALT.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        nanos ^ (u64::from(std::process::id()) << 32) ^ (&LAST as *const AtomicU64 as u64)
    });
    let mut x = ms ^ salt;
    let mut next = || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (u128::from(next()) << 64) | u128::from(next())
}

/// The ULID text of millisecond `ms` (48 bits) and `random` (80 bits): 10 characters of 5
/// bits for the time (its top 2 bits zero), then 8 for each 40-bit half of the random part,
/// each group from a 64-bit word (a 128-bit shift costs two).
fn encode(ms: u64, random: u128) -> SmallString {
    let mut out = [0u8; 26];
    let (time, rest) = out.split_at_mut(10);
    let (high, low) = rest.split_at_mut(8);
    put_base32(time, ms);
    put_base32(high, (random >> 40) as u64);
    put_base32(low, random as u64 & ((1 << 40) - 1));
    // The alphabet is ASCII letters and digits (no escape in JSON), and 26 bytes fit
    // inline.
    SmallString::from_plain_ascii(&out).unwrap_or_default()
}

/// Two characters of the alphabet for each 10-bit value, so that an id is written in 13
/// steps rather than 26.
const PAIRS: [[u8; 2]; 1024] = {
    let mut pairs = [[0; 2]; 1024];
    let mut i = 0;
    while i < 1024 {
        pairs[i] = [ALPHABET[i >> 5], ALPHABET[i & 31]];
        i += 1;
    }
    pairs
};

/// Writes the low `5 * slots.len()` bits of `value` into `slots` (an even number of
/// them: 10 or 8), most significant first.
fn put_base32(slots: &mut [u8], mut value: u64) {
    for pair in slots.rchunks_exact_mut(2) {
        pair.copy_from_slice(&PAIRS[(value & 1023) as usize]);
        value >>= 10;
    }
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

    #[test]
    fn ids_made_on_several_threads_never_repeat() {
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..20_000).map(|_| next_id()).collect::<Vec<_>>()))
            .collect();
        let mut all = Vec::new();
        for t in threads {
            let ids = t.join().unwrap();
            // Each thread's ids rise: each is made after the one before it.
            assert!(ids.windows(2).all(|p| p[0] < p[1]));
            all.extend(ids);
        }
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count);
    }

    #[test]
    fn encoding_is_the_128_bit_value_in_base_32() {
        let mut x = 0x0123_4567_89AB_CDEFu64;
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let ms = x >> 16;
            let random = (u128::from(x) << 64 | u128::from(x.rotate_left(17))) & ((1 << 80) - 1);
            let mut value = (u128::from(ms) << 80) | random;
            let mut expected = [0u8; 26];
            for slot in expected.iter_mut().rev() {
                *slot = ALPHABET[(value & 31) as usize];
                value >>= 5;
            }
            assert_eq!(encode(ms, random).as_bytes(), &expected);
        }
    }

    #[test]
    fn a_clock_that_goes_back_still_gives_rising_ids() {
        let now = 1_700_000_000_000u64;
        let a = next_id_at(now + 5);
        let b = next_id_at(now);
        let c = next_id_at(now + 5);
        assert!(a < b && b < c, "{a} {b} {c}");
    }
}

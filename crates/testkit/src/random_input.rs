//! Random decoder input: byte soup that leans towards a protocol's tokens, and small edits
//! of recorded text, so property tests reach deep into a decoder instead of failing at the
//! first byte.

use crate::prng::Rng;

/// Fewer than `max_count` items (how many is drawn first), each a random byte one time in
/// `byte_one_in` and otherwise one of `pieces` (the protocol's punctuation and keywords, as
/// text or as bytes).
pub fn random_pieces(
    rng: &mut Rng,
    max_count: usize,
    pieces: &[impl AsRef<[u8]>],
    byte_one_in: usize,
) -> Vec<u8> {
    let mut bytes = Vec::new();
    for _ in 0..rng.below(max_count) {
        if rng.below(byte_one_in) == 0 {
            bytes.push(rng.next_u64() as u8);
        } else {
            bytes.extend_from_slice(pieces[rng.below(pieces.len())].as_ref());
        }
    }
    bytes
}

/// Makes 1 to 8 random edits to `bytes` (not empty): a byte replaced by a random one, a
/// byte removed, or one of `inserts` inserted.
pub fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>, inserts: &[u8]) {
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(bytes.len());
        match rng.below(3) {
            0 => bytes[at] = rng.next_u64() as u8,
            1 => {
                bytes.remove(at);
            }
            _ => bytes.insert(at, inserts[rng.below(inserts.len())]),
        }
    }
}

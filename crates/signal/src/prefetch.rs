//! Asking the CPU for a signal's memory ahead of its use.
//!
//! A signal is made on the thread that reads its connection and read next on another
//! core (the graph's engine, then the sidecar that writes its frames): each of its cache
//! lines is fetched from the core that wrote it when first touched there, and the thread
//! waits for each in turn. A stage that takes a batch of signals asks for the memory of
//! the ones a few places ahead while it works on the current one, so that those fetches
//! overlap its work instead of stalling it.

/// Asks for the cache lines of `len` bytes from `ptr` (a hint: nothing is read, and any
/// address is allowed).
#[inline(always)]
pub(crate) fn lines(ptr: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        const LINE: usize = 64;
        // From the start of the line `ptr` lies in to the one its last byte lies in.
        let skew = ptr as usize % LINE;
        let ptr = ptr.wrapping_sub(skew);
        let mut at = 0;
        while at < skew + len {
            // SAFETY: a prefetch is a hint that reads nothing and cannot fault, whatever
            // the address; `wrapping_add` makes no claim about the pointer either. `sse`,
            // which the instruction needs, is part of every x86-64 target.
            #[allow(unsafe_code)]
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    ptr.wrapping_add(at).cast(),
                );
            }
            at += LINE;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (ptr, len);
}

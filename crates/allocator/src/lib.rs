//! The allocator patchbay runs with: [mimalloc], asked for memory so that it stays on its
//! fast path.
//!
//! Why mimalloc: signals are allocated by one task and freed by another, often on the
//! other worker thread, which glibc's malloc pays for in arena locks (BENCHMARKS.md, the
//! sidecar section). It is built without transparent huge pages (`no_thp`: each is zeroed
//! whole when first touched, and the heap grows and shrinks with bursts).
//!
//! Why not the `mimalloc` crate's `MiMalloc`: it passes every allocation to
//! `mi_malloc_aligned`, whose fast path needs a free block at hand in the size class's
//! page. When the page has none (its freed blocks wait on the page's other lists, which
//! only the general path collects), mimalloc 3 over-allocates `size + align - 1`
//! from the next size class instead, and the page it skipped is never refilled: from then
//! on every allocation of that size takes the slow path. On the data path that was the
//! signal itself (an `Arc<Signal>`), at about 185 instructions an allocation instead of
//! 35, and a block one size class too large. Every mimalloc block is aligned to a word, so
//! an allocation that asks for no more than that goes to `mi_malloc` (as mimalloc's own
//! `mi_realloc_aligned` does); only larger alignments take the aligned entry points.
//!
//! [mimalloc]: https://github.com/microsoft/mimalloc

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every mimalloc block has: a word (its smallest block is one word, and
/// every size class a multiple of one).
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc as a Rust global allocator (see the crate's documentation for how it asks).
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: patchbay_allocator::MiMalloc = patchbay_allocator::MiMalloc;
/// # fn main() { assert_eq!(vec![1u64, 2].iter().sum::<u64>(), 3); }
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct MiMalloc;

// SAFETY: each call goes to the mimalloc function for it, with the layout's size; a
// layout's alignment is honoured by mimalloc's aligned functions, or, when it is at most a
// word, by every block mimalloc hands out. Every block is freed by `mi_free`, however it
// was allocated.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain calls into mimalloc with a non-zero size (the caller's contract).
        unsafe {
            if layout.align() <= WORD {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe {
            if layout.align() <= WORD {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (the caller's contract).
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout` (the caller's contract);
        // mimalloc keeps the alignment, and takes its unaligned path for a word or less.
        unsafe { mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocations of every alignment up to a page, small and large, come back aligned,
    /// zeroed when asked, keep their bytes through a reallocation, and are freed.
    #[test]
    #[allow(unsafe_code)]
    fn blocks_are_aligned_zeroed_and_kept_through_realloc() {
        let a = MiMalloc;
        for align in (0..13).map(|shift| 1usize << shift) {
            for size in [1, 7, 8, 24, 100, 216, 1000, 5000, 70_000] {
                let layout = Layout::from_size_align(size.max(align), align).unwrap();
                // SAFETY: non-zero sizes; every block freed with its layout.
                unsafe {
                    let zeroed = a.alloc_zeroed(layout);
                    assert!(!zeroed.is_null());
                    assert_eq!(zeroed as usize % align, 0, "{layout:?}");
                    let bytes = std::slice::from_raw_parts(zeroed, layout.size());
                    assert!(bytes.iter().all(|&b| b == 0), "{layout:?}");
                    a.dealloc(zeroed, layout);

                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "{layout:?}");
                    std::ptr::write_bytes(p, 0xab, layout.size());
                    let grown = a.realloc(p, layout, layout.size() * 3);
                    assert_eq!(grown as usize % align, 0, "{layout:?}");
                    let kept = std::slice::from_raw_parts(grown, layout.size());
                    assert!(kept.iter().all(|&b| b == 0xab), "{layout:?}");
                    let grown_layout = Layout::from_size_align(layout.size() * 3, align).unwrap();
                    a.dealloc(grown, grown_layout);
                }
            }
        }
    }

    /// Many allocations of one size freed on another thread (as signals are) and made
    /// again: the blocks stay aligned and distinct.
    #[test]
    #[allow(unsafe_code)]
    fn blocks_freed_on_another_thread_are_reused_aligned() {
        let layout = Layout::from_size_align(216, 8).unwrap();
        for _ in 0..4 {
            // SAFETY: a non-zero size; every block freed once, with its layout.
            let blocks: Vec<usize> = (0..10_000)
                .map(|_| unsafe { MiMalloc.alloc(layout) } as usize)
                .collect();
            assert!(blocks.iter().all(|&p| p != 0 && p % 8 == 0));
            let mut sorted = blocks.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), blocks.len());
            std::thread::spawn(move || {
                for p in blocks {
                    // SAFETY: allocated above with `layout`, freed once.
                    unsafe { MiMalloc.dealloc(p as *mut u8, layout) };
                }
            })
            .join()
            .unwrap();
        }
    }
}

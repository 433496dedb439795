//! The `patchbay` binary: see `patchbay --help` and the README.

/// mimalloc, not glibc's malloc: signals are allocated by one task and freed by another
/// (often on the other worker thread), which glibc pays for in arena locks (see the
/// sidecar section of BENCHMARKS.md); metered, so that a jq expression's memory limit
/// holds. Built without transparent huge pages (`no_thp`): each one is zeroed whole when
/// first touched, and the heap grows and shrinks with bursts, so they cost more CPU and
/// memory than they save here.
#[global_allocator]
static ALLOCATOR: patchbay_filters::jq::MeteredAlloc<mimalloc::MiMalloc> =
    patchbay_filters::jq::MeteredAlloc(mimalloc::MiMalloc);

fn main() -> std::process::ExitCode {
    patchbay::main()
}

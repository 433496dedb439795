//! The `patchbay` binary: see `patchbay --help` and the README.

/// mimalloc, not glibc's malloc (see `patchbay_allocator` for why, and how it is asked);
/// metered, so that a jq expression's memory limit holds.
#[global_allocator]
static ALLOCATOR: patchbay_filters::jq::MeteredAlloc<patchbay_allocator::MiMalloc> =
    patchbay_filters::jq::MeteredAlloc(patchbay_allocator::MiMalloc);

fn main() -> std::process::ExitCode {
    patchbay::main()
}

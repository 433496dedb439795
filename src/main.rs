//! The `patchbay` binary: see `patchbay --help` and the README.

/// Counts what a jq expression allocates while it runs, so that its memory limit holds.
#[global_allocator]
static ALLOCATOR: patchbay_filters::jq::MeteredAlloc = patchbay_filters::jq::MeteredAlloc;

fn main() -> std::process::ExitCode {
    patchbay::main()
}

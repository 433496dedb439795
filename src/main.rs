//! The `patchbay` binary: see `patchbay --help` and the README.

fn main() -> std::process::ExitCode {
    patchbay::main()
}

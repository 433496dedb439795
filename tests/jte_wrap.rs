//! `patchbay wrap --protocol jte` end to end: the real binary in a pseudo-terminal the
//! test opens, wrapping a shell script that prints JSON terminal escapes in every accepted
//! form split at random byte boundaries, against a stand-in sidecar (see
//! `patchbay_testkit::jte_wrap_e2e` for what is checked).

use patchbay_testkit::jte_wrap_e2e as wrap_e2e;

fn wrap_command(to: &str, program: &[String]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_patchbay"));
    command
        .args(["wrap", "--protocol", "jte", "--to", to, "--"])
        .args(program)
        .env("PATCHBAY_LOG", "warn");
    command
}

#[test]
fn wrap_jte_in_a_real_pseudo_terminal() {
    wrap_e2e::run(wrap_command);
}

#[test]
fn wrap_jte_forwards_signals_and_restores_the_terminal() {
    wrap_e2e::run_signal_forwarding(wrap_command);
}

#[test]
fn wrap_jte_without_patchbay_keeps_the_program_running() {
    wrap_e2e::run_without_patchbay(wrap_command);
}

#[test]
fn wrap_jte_example_agent_obeys_pause_continue_quit() {
    wrap_e2e::run_example_agent(wrap_command);
}

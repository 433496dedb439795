//! End-to-end test of the wrap (see `patchbay_testkit::jte_wrap_e2e`), run without the `patchbay`
//! binary: this test program runs the wrap itself when started with
//! `PATCHBAY_JTE_WRAP_CHILD` set (`wrap.rs TO -- COMMAND…`), and runs the check otherwise.

use patchbay_testkit::jte_wrap_e2e as wrap_e2e;

use std::process::Command;

const CHILD: &str = "PATCHBAY_JTE_WRAP_CHILD";

fn main() {
    if std::env::var_os(CHILD).is_some() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let (to, command) = match args.split_first() {
            Some((to, rest)) if rest.first().map(String::as_str) == Some("--") => {
                (to.clone(), rest[1..].to_vec())
            }
            _ => {
                eprintln!("usage: TO -- COMMAND…");
                std::process::exit(2);
            }
        };
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let code = match runtime.block_on(patchbay_jte::wrap(command, to)) {
            Ok(code) => code,
            Err(err) => {
                eprintln!("wrap: {err} ({err:?})");
                1
            }
        };
        std::process::exit(code);
    }
    // `cargo test -- --list` and filters: this program has one test.
    if std::env::args().any(|a| a == "--list") {
        println!("wrap_end_to_end: test");
        println!("wrap_signal_forwarding: test");
        println!("wrap_without_patchbay: test");
        println!("wrap_example_agent: test");
        return;
    }
    let exe = std::env::current_exe().expect("current exe");
    let wrap_command = |to: &str, program: &[String]| {
        let mut command = Command::new(&exe);
        command.env(CHILD, "1").arg(to).arg("--").args(program);
        command
    };
    wrap_e2e::run(wrap_command);
    println!("test wrap_end_to_end ... ok");
    wrap_e2e::run_signal_forwarding(wrap_command);
    println!("test wrap_signal_forwarding ... ok");
    wrap_e2e::run_without_patchbay(wrap_command);
    println!("test wrap_without_patchbay ... ok");
    wrap_e2e::run_example_agent(wrap_command);
    println!("test wrap_example_agent ... ok");
}

//! `run`, `validate`, `graph` and `test`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use patchbay_graph::{Graph, NodeKind, Port, SourceText};

use patchbay_graph::WrapRequest;
use patchbay_graph::config::suggestion;

use crate::pipeline::{ADAPTERS, DEFAULT_PIPELINE, registry};

/// Loads and compiles configs; on errors prints them and returns `None`.
fn load(configs: &[PathBuf]) -> Option<Graph> {
    let files = if configs.is_empty() {
        vec![SourceText::new("<default pipeline>", DEFAULT_PIPELINE)]
    } else {
        match patchbay_graph::read_config_paths(configs) {
            Ok(files) if files.is_empty() => {
                eprintln!("patchbay: no *.toml config in {configs:?}");
                return None;
            }
            Ok(files) => files,
            Err(e) => {
                eprintln!("{e}");
                return None;
            }
        }
    };
    match patchbay_graph::compile(&files, &registry()) {
        Ok(graph) => Some(graph),
        Err(errors) => {
            for e in &errors {
                eprintln!("{e}");
            }
            eprintln!(
                "patchbay: {} error{} in the config",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            );
            None
        }
    }
}

pub fn validate(configs: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let Some(graph) = load(configs) else {
        return Ok(ExitCode::FAILURE);
    };
    let count = |f: fn(&NodeKind) -> bool| graph.nodes.iter().filter(|n| f(&n.kind)).count();
    println!(
        "ok: {} source(s), {} filter(s), {} output(s), {} test(s)",
        count(|k| matches!(k, NodeKind::Source(_) | NodeKind::Inbound { .. })),
        count(|k| matches!(k, NodeKind::Filter(_))),
        count(|k| matches!(k, NodeKind::Output { .. })),
        graph.tests.len()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn run(configs: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let Some(graph) = load(configs) else {
        return Ok(ExitCode::FAILURE);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let stop = async {
        stop_signal().await;
        // The graph drains for at most `shutdown_timeout_ms`; a second signal exits at once.
        tokio::spawn(async {
            stop_signal().await;
            tracing::warn!("second stop signal: exiting without draining");
            std::process::exit(130);
        });
    };
    let report = runtime.block_on(patchbay_graph::runtime::run(graph, stop));
    if !report.drained {
        tracing::warn!("shutdown timeout reached before every output drained");
    }
    // Sources may be blocked in reads (stdin) that cannot be cancelled: do not wait.
    runtime.shutdown_background();
    Ok(ExitCode::SUCCESS)
}

/// Resolves on SIGINT or SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub fn graph(configs: &[PathBuf], format: &str) -> anyhow::Result<ExitCode> {
    let Some(graph) = load(configs) else {
        return Ok(ExitCode::FAILURE);
    };
    print!("{}", draw(&graph, format == "mermaid"));
    Ok(ExitCode::SUCCESS)
}

/// The graph as Graphviz dot or a Mermaid flowchart.
pub fn draw(graph: &Graph, mermaid: bool) -> String {
    let mut out = String::new();
    let id = |i: usize| format!("n{i}");
    if mermaid {
        out.push_str("flowchart LR\n");
    } else {
        out.push_str("digraph patchbay {\n  rankdir=LR;\n");
    }
    for (i, n) in graph.nodes.iter().enumerate() {
        let label = format!("{}\\n{}", n.name, n.type_name);
        if mermaid {
            let (open, close) = match n.kind {
                NodeKind::Source(_) | NodeKind::Inbound { .. } => ("([", "])"),
                NodeKind::Filter(_) => ("[", "]"),
                NodeKind::Output { .. } => ("[[", "]]"),
            };
            let _ = writeln!(
                out,
                "  {}{open}\"{} ({})\"{close}",
                id(i),
                n.name,
                n.type_name
            );
        } else {
            let shape = match n.kind {
                NodeKind::Source(_) | NodeKind::Inbound { .. } => "ellipse",
                NodeKind::Filter(_) => "box",
                NodeKind::Output { .. } => "doubleoctagon",
            };
            let _ = writeln!(out, "  {} [label=\"{label}\", shape={shape}];", id(i));
        }
    }
    for (i, n) in graph.nodes.iter().enumerate() {
        for e in &n.inputs {
            let dropped = e.port == Port::Dropped;
            if mermaid {
                let arrow = if dropped { "-. dropped .->" } else { "-->" };
                let _ = writeln!(out, "  {} {arrow} {}", id(e.from), id(i));
            } else {
                let style = if dropped {
                    " [style=dashed, label=\"dropped\"]"
                } else {
                    ""
                };
                let _ = writeln!(out, "  {} -> {}{style};", id(e.from), id(i));
            }
        }
        if let NodeKind::Inbound { output } = n.kind {
            if mermaid {
                let _ = writeln!(out, "  {} -. inbound .-> {}", id(output), id(i));
            } else {
                let _ = writeln!(out, "  {} -> {} [style=dotted];", id(output), id(i));
            }
        }
    }
    if !mermaid {
        out.push_str("}\n");
    }
    out
}

pub fn test(configs: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let Some(graph) = load(configs) else {
        return Ok(ExitCode::FAILURE);
    };
    let results = patchbay_graph::testing::run_tests(&graph);
    let mut failed = 0;
    for r in &results {
        if r.passed() {
            println!("test {} ... passed", r.name);
        } else {
            failed += 1;
            println!("test {} ... FAILED", r.name);
            for f in &r.failures {
                println!("{f}");
            }
        }
    }
    println!("{} passed, {} failed", results.len() - failed, failed);
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub fn tap(
    url: &str,
    types: Option<&str>,
    since: Option<u64>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal;
    let readable = !json && std::io::stdout().is_terminal();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        tokio::select! {
            result = patchbay_server::tap(url, types, since, readable) => result.map_err(anyhow::Error::from),
            () = stop_signal() => Ok(()),
        }
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `patchbay wrap --protocol P -- COMMAND…`: the wrapper of the adapter that speaks `P`.
pub fn wrap(
    protocol: &str,
    to: String,
    name: Option<String>,
    command: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let Some(wrap) = ADAPTERS
        .iter()
        .find(|a| a.protocol == protocol)
        .and_then(|a| a.wrap)
    else {
        let known: Vec<&str> = wrap_protocols().collect();
        anyhow::bail!(
            "`wrap --protocol {protocol}` is not available{}; known: {}",
            suggestion(protocol, known.iter().copied()),
            known.join(", ")
        );
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let code = runtime
        .block_on(wrap(WrapRequest { command, to, name }))
        .map_err(|e| anyhow::anyhow!(e))?;
    // The relay tasks may still wait on the terminal: do not wait for them.
    runtime.shutdown_background();
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// The protocols `wrap` knows.
pub fn wrap_protocols() -> impl Iterator<Item = &'static str> {
    ADAPTERS
        .iter()
        .filter(|a| a.wrap.is_some())
        .map(|a| a.protocol)
}

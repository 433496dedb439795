//! The `palyra` component end to end, in-process: a graph (file source of controls →
//! `palyra` output → its inbound side → `file` output) run against the stand-in daemon of
//! `patchbay_testkit::palyra_e2e`.

use patchbay_testkit::palyra_e2e;

use patchbay_graph::{Registry, RunningGraph, SourceText, compile};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_resume_and_acp_commands() {
    let (fake, port) = palyra_e2e::start_fake().await;
    let dir = palyra_e2e::temp_dir("crate");
    let (config, out) = palyra_e2e::write_pipeline(&dir, port);

    let mut registry = Registry::new();
    registry.adapter(&patchbay_ndjson::ADAPTER);
    registry.adapter(&patchbay_palyra::ADAPTER);
    let text = std::fs::read_to_string(&config).expect("config");
    let graph = compile(
        &[SourceText::new(config.display().to_string(), text)],
        &registry,
    )
    .unwrap_or_else(|e| panic!("config compiles: {e:?}"));
    let running = RunningGraph::spawn(graph);

    palyra_e2e::wait_complete(&out).await;
    tokio::time::timeout(palyra_e2e::GUARD, running.stop())
        .await
        .expect("the graph stops")
        .expect("the graph task");
    palyra_e2e::check(&fake, &out);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Console mode: a source posts its prompt once, decodes the NDJSON run stream and ends;
/// an output streams the run of each `prompt {text}` signal into its inbound side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_runs_from_a_source_and_from_prompt_signals() {
    let (fake, port) = palyra_e2e::start_fake().await;
    let dir = palyra_e2e::temp_dir("console");
    let prompts = dir.join("prompts.ndjson");
    std::fs::write(
        &prompts,
        "{\"type\":\"prompt\",\"payload\":{\"text\":\"from a signal\"}}\n",
    )
    .expect("prompts");
    let out_source = dir.join("source.ndjson");
    let out_output = dir.join("output.ndjson");
    let common = format!(
        "url = \"http://127.0.0.1:{port}\"\ntoken = \"secret-token\"\nsession = \"{}\"\nmode = \"console\"\n",
        palyra_e2e::SESSION
    );
    let config = format!(
        r#"[sources.run]
type = "palyra"
prompt = "from the config"
{common}
[sources.prompts]
type = "file"
path = "{prompts}"

[outputs.agent]
type = "palyra"
inputs = ["prompts"]
{common}
[outputs.a]
type = "file"
inputs = ["run"]
path = "{a}"

[outputs.b]
type = "file"
inputs = ["agent.inbound"]
path = "{b}"
"#,
        prompts = prompts.display(),
        a = out_source.display(),
        b = out_output.display(),
    );
    let mut registry = Registry::new();
    registry.adapter(&patchbay_ndjson::ADAPTER);
    registry.adapter(&patchbay_palyra::ADAPTER);
    let graph = compile(&[SourceText::new("console.toml", config)], &registry)
        .unwrap_or_else(|e| panic!("config compiles: {e:?}"));
    let running = RunningGraph::spawn(graph);

    let expected = [
        "palyra.meta",
        "agent_state_change",
        "agent_state_change",
        "text_delta",
        "palyra.provider_turn_output",
        "palyra.message.replied",
        "completion",
        "palyra.complete",
    ];
    let types = |path: &std::path::Path| -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|s| s["type"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    let deadline = tokio::time::Instant::now() + palyra_e2e::GUARD;
    while types(&out_source).len() < expected.len() || types(&out_output).len() < expected.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "runs incomplete: {:?} / {:?}",
            types(&out_source),
            types(&out_output)
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tokio::time::timeout(palyra_e2e::GUARD, running.stop())
        .await
        .expect("the graph stops")
        .expect("the graph task");
    assert_eq!(types(&out_source), expected);
    assert_eq!(types(&out_output), expected);
    let seen = fake.seen.lock().expect("lock");
    let mut bodies: Vec<String> = seen
        .prompts
        .iter()
        .map(|(session, body)| {
            assert_eq!(session, palyra_e2e::SESSION);
            body["text"].as_str().unwrap_or("").to_owned()
        })
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["from a signal", "from the config"]);
    assert_eq!(seen.unauthorized, 0);
    drop(seen);
    let _ = std::fs::remove_dir_all(&dir);
}

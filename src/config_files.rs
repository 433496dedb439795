//! Which configs `patchbay run` reads, and the default pipeline it falls back to.
//!
//! In order: the paths given (`-c PATH` or positional), else `PATCHBAY_CONFIG` (paths
//! separated like `PATH`), else the user's config folder (`$XDG_CONFIG_HOME/patchbay/`,
//! or `~/.config/patchbay/`) when it holds a `*.toml`, else the built-in default
//! pipeline.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use patchbay_graph::SourceText;

use crate::pipeline::DEFAULT_PIPELINE;

/// Where the configs of a run come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigChoice {
    /// Files or folders given on the command line or in `PATCHBAY_CONFIG`.
    Paths(Vec<PathBuf>),
    /// The built-in default pipeline.
    Default,
}

/// Chooses the configs: `given` on the command line, `env` the value of
/// `PATCHBAY_CONFIG`, `user_dir` the user's config folder.
pub fn choose(given: &[PathBuf], env: Option<OsString>, user_dir: Option<PathBuf>) -> ConfigChoice {
    if !given.is_empty() {
        return ConfigChoice::Paths(given.to_vec());
    }
    if let Some(env) = env.filter(|v| !v.is_empty()) {
        return ConfigChoice::Paths(std::env::split_paths(&env).collect());
    }
    match user_dir {
        Some(dir) if has_toml(&dir) => ConfigChoice::Paths(vec![dir]),
        _ => ConfigChoice::Default,
    }
}

/// The user's config folder: `$XDG_CONFIG_HOME/patchbay`, else `~/.config/patchbay`.
pub fn user_config_dir() -> Option<PathBuf> {
    let nonempty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    nonempty("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|home| PathBuf::from(home).join(".config")))
        .map(|base| base.join("patchbay"))
}

fn has_toml(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.path().extension().is_some_and(|x| x == "toml"))
    })
}

/// How the default pipeline is adjusted for this run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DefaultPipeline {
    /// The sidecar's address instead of `127.0.0.1:7878` (`--listen`).
    pub listen: Option<String>,
    /// Whether standard input is read: only when it is not a terminal, so that a daemon
    /// started in the background from a shell is not stopped by its first read.
    pub stdin: bool,
}

impl DefaultPipeline {
    /// The pipeline's text: the built-in one as written when nothing changes, else the same
    /// graph with the sidecar's address replaced and/or the `stdin` source left out.
    pub fn source_text(&self) -> Result<SourceText, toml::de::Error> {
        const NAME: &str = "<default pipeline>";
        if self.listen.is_none() && self.stdin {
            return Ok(SourceText::new(NAME, DEFAULT_PIPELINE));
        }
        let mut pipeline: toml::Table = DEFAULT_PIPELINE.parse()?;
        if !self.stdin {
            if let Some(sources) = pipeline.get_mut("sources").and_then(|s| s.as_table_mut()) {
                sources.remove("stdin");
            }
            for section in ["filters", "outputs"] {
                let Some(components) = pipeline.get_mut(section).and_then(|s| s.as_table_mut())
                else {
                    continue;
                };
                for (_, component) in components.iter_mut() {
                    if let Some(inputs) = component.get_mut("inputs").and_then(|i| i.as_array_mut())
                    {
                        inputs.retain(|input| input.as_str() != Some("stdin"));
                    }
                }
            }
        }
        if let Some(listen) = &self.listen
            && let Some(ui) = pipeline
                .get_mut("outputs")
                .and_then(|o| o.get_mut("ui"))
                .and_then(|ui| ui.as_table_mut())
        {
            ui.insert("listen".into(), toml::Value::String(listen.clone()));
        }
        Ok(SourceText::new(NAME, pipeline.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_paths_win_then_the_environment_then_the_user_folder() {
        let scratch = std::env::temp_dir().join(format!("pb-config-choice-{}", std::process::id()));
        let user = scratch.join("patchbay");
        std::fs::create_dir_all(&user).unwrap();
        let given = [PathBuf::from("a.toml")];
        let env = Some(OsString::from("/x/b.toml:/x/c"));
        assert_eq!(
            choose(&given, env.clone(), Some(user.clone())),
            ConfigChoice::Paths(given.to_vec())
        );
        assert_eq!(
            choose(&[], env, Some(user.clone())),
            ConfigChoice::Paths(vec!["/x/b.toml".into(), "/x/c".into()])
        );
        // An empty folder is no config: the default pipeline.
        assert_eq!(choose(&[], None, Some(user.clone())), ConfigChoice::Default);
        std::fs::write(user.join("main.toml"), "").unwrap();
        assert_eq!(
            choose(&[], Some(OsString::new()), Some(user.clone())),
            ConfigChoice::Paths(vec![user])
        );
        assert_eq!(choose(&[], None, None), ConfigChoice::Default);
        let _ = std::fs::remove_dir_all(&scratch);
    }

    #[test]
    fn the_default_pipeline_without_stdin_and_on_another_address() {
        let as_written = DefaultPipeline {
            listen: None,
            stdin: true,
        };
        assert_eq!(as_written.source_text().unwrap().text, DEFAULT_PIPELINE);
        let adjusted = DefaultPipeline {
            listen: Some("127.0.0.1:9999".into()),
            stdin: false,
        }
        .source_text()
        .unwrap();
        let table: toml::Table = adjusted.text.parse().unwrap();
        assert!(table["sources"].get("stdin").is_none(), "{}", adjusted.text);
        assert_eq!(
            table["outputs"]["ui"]["listen"].as_str(),
            Some("127.0.0.1:9999")
        );
        for output in ["ui", "log"] {
            let inputs = table["outputs"][output]["inputs"].as_array().unwrap();
            assert!(
                !inputs.iter().any(|i| i.as_str() == Some("stdin")),
                "{output}"
            );
        }
        let graph = patchbay_graph::compile(&[adjusted], &crate::registry());
        assert!(graph.is_ok(), "{:?}", graph.err());
    }
}

//! Before the phases: config paths → the files' texts.

use crate::config::{Diagnostic, SourceText};

/// Loads config files from paths: a directory contributes its `*.toml` files in name
/// order.
pub fn read_config_paths(paths: &[std::path::PathBuf]) -> Result<Vec<SourceText>, Diagnostic> {
    let mut files = Vec::new();
    for path in paths {
        let io_error = |e: std::io::Error| Diagnostic {
            file: path.display().to_string(),
            line: 0,
            col: 0,
            message: format!("cannot read: {e}"),
        };
        if path.is_dir() {
            let mut entries: Vec<_> = std::fs::read_dir(path)
                .map_err(io_error)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect();
            entries.sort();
            for p in entries {
                let text = std::fs::read_to_string(&p).map_err(io_error)?;
                files.push(SourceText::from_file(&p, text));
            }
        } else {
            let text = std::fs::read_to_string(path).map_err(io_error)?;
            files.push(SourceText::from_file(path, text));
        }
    }
    Ok(files)
}

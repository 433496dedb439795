//! OpenClaw's own config file, `~/.openclaw/openclaw.json`: where the gateway token is.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// `~/.openclaw/openclaw.json`, if there is a home directory.
pub fn default_config_file() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .map(|home| PathBuf::from(home).join(".openclaw").join("openclaw.json"))
}

/// Why a config file gave no token. Its text names the file with `~` for the home
/// directory, and never shows a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoToken {
    /// The file does not exist.
    #[error("no {0}")]
    Missing(String),
    /// It exists but cannot be read.
    #[error("cannot read {0}: {1}")]
    Unreadable(String, String),
    /// It is not JSON.
    #[error("{0} is not JSON (line {1})")]
    NotJson(String, usize),
    /// It has no non-empty `gateway.auth.token`.
    #[error("no gateway.auth.token in {0}")]
    NoEntry(String),
}

/// The gateway token of an OpenClaw config file (`gateway.auth.token`, a non-empty
/// string), or why there is none.
pub fn read_token(path: &Path) -> Result<String, NoToken> {
    let shown = display_path(path);
    let text = std::fs::read_to_string(path).map_err(|err| match err.kind() {
        std::io::ErrorKind::NotFound => NoToken::Missing(shown.clone()),
        _ => NoToken::Unreadable(shown.clone(), err.to_string()),
    })?;
    let config: Value =
        serde_json::from_str(&text).map_err(|err| NoToken::NotJson(shown.clone(), err.line()))?;
    config
        .pointer("/gateway/auth/token")
        .and_then(Value::as_str)
        .filter(|token| !token.trim().is_empty())
        .map(str::to_owned)
        .ok_or(NoToken::NoEntry(shown))
}

/// The token from an OpenClaw config file, if it has one.
pub fn token_from_file(path: &Path) -> Option<String> {
    read_token(path).ok()
}

/// `path` with the home directory shown as `~`.
pub fn display_path(path: &Path) -> String {
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty())
        && let Ok(rest) = path.strip_prefix(&home)
    {
        return format!("~/{}", rest.display());
    }
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_found_and_its_absence_explained_never_shown() {
        let dir = std::env::temp_dir().join(format!("pb-openclaw-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("openclaw.json");
        std::fs::write(&path, r#"{"gateway":{"auth":{"token":"s3cr3t-token"}}}"#).unwrap();
        assert_eq!(read_token(&path).as_deref(), Ok("s3cr3t-token"));
        std::fs::write(&path, r#"{"gateway":{"auth":{"token":""}}}"#).unwrap();
        assert!(matches!(read_token(&path), Err(NoToken::NoEntry(_))));
        std::fs::write(&path, "{not json").unwrap();
        let why = read_token(&path).unwrap_err().to_string();
        assert!(why.contains("is not JSON"), "{why}");
        std::fs::remove_file(&path).unwrap();
        let why = read_token(&path).unwrap_err().to_string();
        assert!(why.starts_with("no "), "{why}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Config errors located as `FILE:LINE:COL`.

use std::fmt;
use std::ops::Range;

/// One config file's text, for locating byte offsets.
#[derive(Debug, Clone)]
pub struct SourceText {
    /// The file's path as the user gave it (or a label such as `<default>`).
    pub path: String,
    /// The file's contents.
    pub text: String,
    /// The folder relative paths in the file are relative to: the file's own folder for a
    /// file read from disk, `None` (the current directory) for text without a file.
    pub base_dir: Option<std::path::PathBuf>,
}

impl SourceText {
    /// A file's text under a display path.
    pub fn new(path: impl Into<String>, text: impl Into<String>) -> Self {
        SourceText {
            path: path.into(),
            text: text.into(),
            base_dir: None,
        }
    }

    /// The text of the config file at `path`: relative paths in it are relative to its
    /// folder.
    pub fn from_file(path: &std::path::Path, text: impl Into<String>) -> Self {
        SourceText {
            base_dir: Some(
                path.parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .map_or_else(
                        || std::path::PathBuf::from("."),
                        std::path::Path::to_path_buf,
                    ),
            ),
            ..SourceText::new(path.display().to_string(), text)
        }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = self.text.get(..offset).unwrap_or(&self.text);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
        let col = before
            .get(line_start..)
            .map(|s| s.chars().count())
            .unwrap_or(0)
            + 1;
        (line, col)
    }

    /// The location of a byte offset.
    pub fn location(&self, offset: usize) -> Location {
        let (line, col) = self.line_col(offset);
        Location {
            file: self.path.clone(),
            line,
            col,
        }
    }

    /// A diagnostic at a byte span of this file.
    pub fn error(&self, span: Range<usize>, message: impl Into<String>) -> Diagnostic {
        let (line, col) = self.line_col(span.start);
        Diagnostic {
            file: self.path.clone(),
            line,
            col,
            message: message.into(),
        }
    }
}

/// A config error with its location.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Diagnostic {
    /// File path.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub col: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            // Not about a place in the file (it could not be read).
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file, self.line, self.col, self.message
            )
        }
    }
}

/// Where something is declared: `FILE:LINE:COL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// File path.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub col: usize,
}

impl Location {
    /// A diagnostic at this location.
    pub fn error(&self, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            file: self.file.clone(),
            line: self.line,
            col: self.col,
            message: message.into(),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// The closest of `candidates` to `name`, if close enough to be a likely typo.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (name.chars().count() / 2).max(2);
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, c)| *d <= limit && *c != name)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// ` (did you mean `x`?)` or nothing.
pub fn suggestion<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(name, candidates)
        .map(|c| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column() {
        let s = SourceText::new("a.toml", "x = 1\n  y = é2\n");
        assert_eq!(s.line_col(0), (1, 1));
        assert_eq!(s.line_col(8), (2, 3));
        assert_eq!(s.error(12..13, "bad").to_string(), "a.toml:2:7: bad");
    }

    #[test]
    fn suggestions() {
        assert_eq!(
            did_you_mean("thrRottle", ["throttle", "sample"]),
            Some("throttle")
        );
        assert_eq!(did_you_mean("zzz", ["throttle", "sample"]), None);
    }
}

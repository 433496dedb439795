//! Scratch directories for tests that write files (pipelines, logs, output files), so
//! that a test run leaves nothing behind in the system's temporary directory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh directory under [`std::env::temp_dir`], removed with everything in it when the
/// guard is dropped.
///
/// Keep the guard alive for as long as the directory is used, and drop it only after
/// every process writing into it has stopped (declare it before the process's own guard:
/// locals drop in reverse order; in a struct, put it after: fields drop in order).
///
/// ```
/// use patchbay_testkit::scratch::ScratchDir;
///
/// let dir = ScratchDir::new("example");
/// std::fs::write(dir.join("pipeline.toml"), "").unwrap();
/// let path = dir.path().to_owned();
/// drop(dir);
/// assert!(!path.exists());
/// ```
#[derive(Debug)]
pub struct ScratchDir {
    /// Empty once [`ScratchDir::keep`] has handed the directory over.
    path: PathBuf,
}

impl ScratchDir {
    /// Creates `patchbay-<label>-<pid>-<n>` under the temporary directory, `n` counting
    /// the directories of this process, so the name is unique across the threads of one
    /// test binary and across test binaries running at once. A leftover of that name
    /// (from an earlier process with the same pid) is removed first.
    ///
    /// Panics if the directory cannot be created: a test cannot go on without it.
    pub fn new(label: &str) -> ScratchDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("patchbay-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("scratch dir {}: {e}", path.display()));
        ScratchDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory, e.g. `dir.join("pipeline.toml")`.
    pub fn join(&self, relative: impl AsRef<Path>) -> PathBuf {
        self.path.join(relative)
    }

    /// Gives up the guard without removing the directory, and returns its path: for a
    /// directory that must outlive the guard (it is then the caller's to remove).
    pub fn keep(mut self) -> PathBuf {
        std::mem::take(&mut self.path)
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        // Best effort: a failure to clean up must not fail (or double-panic) a test.
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_fresh_unique_and_removed_on_drop() {
        let a = ScratchDir::new("scratch-test");
        let b = ScratchDir::new("scratch-test");
        assert_ne!(a.path(), b.path());
        assert!(a.path().starts_with(std::env::temp_dir()));
        let name = a.path().file_name().unwrap().to_string_lossy().into_owned();
        let prefix = format!("patchbay-scratch-test-{}-", std::process::id());
        assert!(name.starts_with(&prefix), "{name}");
        assert!(name[prefix.len()..].parse::<u64>().is_ok(), "{name}");
        assert_eq!(std::fs::read_dir(a.path()).unwrap().count(), 0, "empty");

        std::fs::create_dir_all(a.join("sub")).unwrap();
        std::fs::write(a.join("sub/file.txt"), "x").unwrap();
        let path = a.path().to_owned();
        drop(a);
        assert!(!path.exists(), "removed with its contents");
        assert!(b.path().is_dir(), "another guard's directory stays");
    }

    #[test]
    fn unique_across_threads() {
        let paths: Vec<PathBuf> = (0..8)
            .map(|_| std::thread::spawn(|| ScratchDir::new("scratch-threads").keep()))
            .map(|t| t.join().unwrap())
            .collect();
        let unique: std::collections::BTreeSet<&PathBuf> = paths.iter().collect();
        assert_eq!(unique.len(), paths.len());
        for path in &paths {
            assert!(path.is_dir(), "kept");
            std::fs::remove_dir_all(path).unwrap();
        }
    }

    #[test]
    fn kept_directories_stay() {
        let dir = ScratchDir::new("scratch-keep");
        let path = dir.keep();
        assert!(path.is_dir());
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_vanished_directory_is_no_error() {
        let dir = ScratchDir::new("scratch-gone");
        std::fs::remove_dir_all(dir.path()).unwrap();
        drop(dir);
    }
}

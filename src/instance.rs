//! One daemon per instance: a lock file that a second `patchbay run` of the same instance
//! finds taken, so that two daemons never fight over one port or one MIDI device.
//!
//! The lock is `$XDG_RUNTIME_DIR/patchbay/INSTANCE.lock` (else a `patchbay-$USER` folder
//! in the temporary directory), held with an advisory lock for the life of the process and
//! holding its PID. The operating system releases it when the process ends, however it
//! ends, so a crashed daemon never leaves a stale lock behind.

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// A held instance lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
    path: PathBuf,
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another daemon of this instance runs.
    #[error(
        "another patchbay runs instance `{instance}`{} (lock {}); stop it, or give this one another --instance",
        pid.map(|p| format!(" as pid {p}")).unwrap_or_default(),
        path.display()
    )]
    Taken {
        /// The instance.
        instance: String,
        /// The running daemon's PID, when its lock file says it.
        pid: Option<u32>,
        /// The lock file.
        path: PathBuf,
    },
    /// The lock file cannot be created or locked.
    #[error("cannot take the instance lock {}: {source}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl InstanceLock {
    /// Takes the lock of `instance` in `dir`, or says who holds it.
    pub fn acquire(dir: &Path, instance: &str) -> Result<InstanceLock, LockError> {
        let path = dir.join(format!("{}.lock", file_name(instance)));
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(LockError::Taken {
                    instance: instance.to_owned(),
                    pid: text.trim().parse().ok(),
                    path,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(InstanceLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The folder of instance locks: `$XDG_RUNTIME_DIR/patchbay`, else
/// `<temp>/patchbay-$USER`.
pub fn lock_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("patchbay"),
        None => {
            let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
            std::env::temp_dir().join(format!("patchbay-{}", file_name(&user)))
        }
    }
}

/// The instance of a run that names none: `default` for the default pipeline (with its
/// sidecar address when `--listen` moves it), else one derived from the config paths, so
/// that the same configs are the same instance and other configs another one.
pub fn derived_name(configs: &[PathBuf], listen: Option<&str>) -> String {
    use std::hash::{Hash, Hasher};
    if configs.is_empty() {
        return match listen {
            Some(address) => format!("default-{address}"),
            None => "default".into(),
        };
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for path in configs {
        std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.clone())
            .hash(&mut hasher);
    }
    listen.hash(&mut hasher);
    let stem = configs[0]
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config".into());
    format!("{stem}-{:016x}", hasher.finish())
}

/// `name` with anything but letters, digits, `-`, `_` and `.` replaced, for a file name.
pub(crate) fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_of_one_instance_names_the_first_pid() {
        let dir = std::env::temp_dir().join(format!("pb-instance-{}", std::process::id()));
        let first = InstanceLock::acquire(&dir, "default-127.0.0.1:7878").unwrap();
        assert!(first.path().ends_with("default-127.0.0.1_7878.lock"));
        let second = InstanceLock::acquire(&dir, "default-127.0.0.1:7878").unwrap_err();
        match &second {
            LockError::Taken { pid, .. } => assert_eq!(*pid, Some(std::process::id())),
            other => panic!("{other}"),
        }
        assert!(
            second
                .to_string()
                .contains("another patchbay runs instance")
        );
        let other = InstanceLock::acquire(&dir, "other");
        assert!(other.is_ok(), "another instance is free");
        drop(first);
        assert!(InstanceLock::acquire(&dir, "default-127.0.0.1:7878").is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn instances_follow_the_configs() {
        let a = [PathBuf::from("a.toml")];
        assert_eq!(derived_name(&[], None), "default");
        assert_eq!(derived_name(&[], Some("0.0.0.0:80")), "default-0.0.0.0:80");
        assert_eq!(derived_name(&a, None), derived_name(&a, None));
        assert_ne!(
            derived_name(&a, None),
            derived_name(&[PathBuf::from("b.toml")], None)
        );
        assert!(derived_name(&a, None).starts_with("a-"));
    }
}

//! Exclusive, crash-safe access to the MIDI system from several components of one process.
//!
//! Why: libjack (jack2) frees every client of a dead server the next time any client is
//! opened in the process (`JackLibGlobals::Init` cleans up "clients still allocated").
//! midir keeps raw client pointers, so touching, or even dropping, a midir object after
//! that is a use-after-free (a segfault, measured). So:
//!
//! - every call that touches a client (open, list, connect, close) runs inside
//!   [`with_session`], one at a time in the process;
//! - each session first checks whether the JACK server died or was replaced since the last
//!   session, by connecting to its request socket (`/dev/shm/jack_SERVER_UID_0`). If so, an
//!   epoch counter moves on, and every midir object of the old epoch (kept as [`Held`]) is
//!   forgotten, never touched or dropped again: libjack frees it;
//! - while the server is down no client is opened at all, which also keeps libjack's
//!   error chatter out of the log.
//!
//! With the ALSA backend nothing dies under patchbay's feet and the epoch never moves; a
//! session only checks that the sequencer device exists.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// The current epoch; objects of older epochs belong to a dead server.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// Serializes sessions and remembers the server last seen.
static SYSTEM: Mutex<ServerWatch> = Mutex::new(ServerWatch::new());

/// A session: exclusive access to the MIDI system.
pub(crate) struct Session {
    epoch: u64,
    down: Option<String>,
}

impl Session {
    /// Why the MIDI system is known to be unreachable (the JACK server is not running, the
    /// ALSA sequencer device does not exist), if it is; then no client should be opened.
    pub(crate) fn down(&self) -> Option<&str> {
        self.down.as_deref()
    }
}

/// Runs `f` with exclusive access to the MIDI system (after checking the JACK server).
/// Blocks while another session runs.
pub(crate) fn with_session<R>(f: impl FnOnce(&Session) -> R) -> R {
    let mut watch = SYSTEM.lock().unwrap_or_else(PoisonError::into_inner);
    let down = watch.check();
    let session = Session {
        epoch: EPOCH.load(Ordering::Acquire),
        down,
    };
    f(&session)
}

/// A midir object of one epoch. Dropped normally while its epoch is current; forgotten
/// once the epoch has moved on (its server is gone and libjack frees it). Drop it inside a
/// session.
pub(crate) struct Held<T> {
    epoch: u64,
    inner: ManuallyDrop<T>,
}

impl<T> Held<T> {
    /// Keeps `value`, made during `session`.
    pub(crate) fn new(session: &Session, value: T) -> Self {
        Held {
            epoch: session.epoch,
            inner: ManuallyDrop::new(value),
        }
    }

    /// Whether the object still belongs to the running server.
    pub(crate) fn is_current(&self) -> bool {
        self.epoch == EPOCH.load(Ordering::Acquire)
    }

    /// The object, if it still belongs to the running server.
    pub(crate) fn get(&self, _session: &Session) -> Option<&T> {
        self.is_current().then_some(&*self.inner)
    }

    /// The object, mutably, if it still belongs to the running server. Outside a session
    /// only for what touches no client (midir's output ring buffer).
    pub(crate) fn get_mut(&mut self) -> Option<&mut T> {
        if self.is_current() {
            Some(&mut *self.inner)
        } else {
            None
        }
    }
}

impl<T> Drop for Held<T> {
    #[allow(unsafe_code)] // `inner` is a ManuallyDrop: it is dropped by hand, once.
    fn drop(&mut self) {
        if self.is_current() {
            // SAFETY: dropped once, here; `inner` is not used afterwards.
            unsafe { ManuallyDrop::drop(&mut self.inner) }
        }
        // Otherwise leaked on purpose: libjack frees (or has freed) what it points to.
    }
}

/// What is known of the JACK server.
struct ServerWatch {
    /// The identity (device, inode) of the server's socket when it last answered.
    known: Option<(u64, u64)>,
    /// Whether it answered at the last check.
    alive: bool,
}

impl ServerWatch {
    const fn new() -> Self {
        ServerWatch {
            known: None,
            alive: false,
        }
    }

    /// Checks the server and moves the epoch on when it died or was replaced. Returns why
    /// it is down, if it is.
    #[cfg(feature = "jack")]
    fn check(&mut self) -> Option<String> {
        self.check_socket(&jack_socket_path())
    }

    /// [`ServerWatch::check`] on the socket at `path`.
    #[cfg(feature = "jack")]
    fn check_socket(&mut self, path: &std::path::Path) -> Option<String> {
        match probe(path) {
            Ok(identity) => {
                let replaced = self.known.is_some_and(|k| k != identity);
                if replaced || (self.known.is_some() && !self.alive) {
                    EPOCH.fetch_add(1, Ordering::AcqRel);
                }
                self.known = Some(identity);
                self.alive = true;
                None
            }
            Err(err) => {
                if self.alive {
                    EPOCH.fetch_add(1, Ordering::AcqRel);
                }
                self.alive = false;
                Some(format!(
                    "the JACK server `{}` is not running ({}: {err})",
                    jack_server_name(),
                    path.display()
                ))
            }
        }
    }

    /// ALSA: nothing dies under patchbay's feet; only check the sequencer device exists
    /// (opening it when it does not makes alsa-lib print an error on stderr every rescan).
    #[cfg(not(feature = "jack"))]
    fn check(&mut self) -> Option<String> {
        let _ = (self.known, self.alive);
        let device = std::path::Path::new(ALSA_SEQUENCER);
        (!device.exists()).then(|| {
            format!(
                "cannot open the ALSA sequencer {ALSA_SEQUENCER}: it does not exist (no sound \
                 hardware, or the snd-seq kernel module is not loaded)"
            )
        })
    }
}

/// The ALSA sequencer device.
#[cfg(not(feature = "jack"))]
const ALSA_SEQUENCER: &str = "/dev/snd/seq";

/// The JACK server clients talk to: `$JACK_DEFAULT_SERVER`, else `default`.
#[cfg(feature = "jack")]
pub(crate) fn jack_server_name() -> String {
    std::env::var("JACK_DEFAULT_SERVER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".to_owned())
}

/// jack2's request socket on Linux: `/dev/shm/jack_SERVER_UID_0`.
#[cfg(feature = "jack")]
fn jack_socket_path() -> std::path::PathBuf {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0);
    std::path::PathBuf::from(format!("/dev/shm/jack_{}_{uid}_0", jack_server_name()))
}

/// Connects to the socket (a dead server leaves its socket file behind, so existing is not
/// enough) and returns its identity.
#[cfg(feature = "jack")]
fn probe(path: &std::path::Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let stream = std::os::unix::net::UnixStream::connect(path)?;
    drop(stream);
    let meta = std::fs::metadata(path)?;
    Ok((meta.dev(), meta.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// These tests move and read the process-wide epoch: one at a time.
    static EPOCH_TESTS: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        EPOCH_TESTS.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(feature = "jack")]
    #[test]
    fn a_dead_or_replaced_server_moves_the_epoch_on() {
        let _serial = serial();
        use std::os::unix::net::UnixListener;
        let path = std::env::temp_dir().join(format!("pb-session-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut watch = ServerWatch::new();
        let epoch = || EPOCH.load(Ordering::Acquire);
        let start = epoch();

        // Never seen: down, nothing to forget.
        assert!(watch.check_socket(&path).is_some());
        assert_eq!(epoch(), start);
        // Up: same epoch.
        let listener = UnixListener::bind(&path).unwrap();
        assert_eq!(watch.check_socket(&path), None);
        assert_eq!(watch.check_socket(&path), None);
        assert_eq!(epoch(), start);
        // Killed (the socket file stays, nobody accepts): the epoch moves on once.
        drop(listener);
        assert!(watch.check_socket(&path).is_some());
        assert!(watch.check_socket(&path).is_some());
        assert_eq!(epoch(), start + 1);
        // Back (a new socket): the epoch moves on again.
        std::fs::remove_file(&path).unwrap();
        let listener = UnixListener::bind(&path).unwrap();
        assert_eq!(watch.check_socket(&path), None);
        assert_eq!(epoch(), start + 2);
        // Replaced between two checks, never seen down: still noticed (new inode).
        drop(listener);
        std::fs::remove_file(&path).unwrap();
        let _other = std::fs::File::create(path.with_extension("keep")).unwrap();
        let _listener = UnixListener::bind(&path).unwrap();
        assert_eq!(watch.check_socket(&path), None);
        assert_eq!(epoch(), start + 3);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(path.with_extension("keep"));
    }

    #[test]
    fn stale_values_are_forgotten_not_dropped() {
        let _serial = serial();
        use std::rc::Rc;
        let value = Rc::new(());
        let held = with_session(|session| Held::new(session, Rc::clone(&value)));
        EPOCH.fetch_add(1, Ordering::AcqRel);
        assert!(!held.is_current());
        drop(held);
        // Leaked on purpose: the clone was never dropped.
        assert_eq!(Rc::strong_count(&value), 2);
    }

    #[test]
    fn held_values_drop_while_current() {
        let _serial = serial();
        use std::rc::Rc;
        let value = Rc::new(());
        with_session(|session| {
            let held = Held::new(session, Rc::clone(&value));
            assert!(held.get(session).is_some());
            assert_eq!(Rc::strong_count(&value), 2);
            drop(held);
        });
        assert_eq!(Rc::strong_count(&value), 1);
    }
}

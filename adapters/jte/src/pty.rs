//! The pseudo-terminal plumbing `patchbay wrap` needs, over `libc` (no extra crate): open a
//! pseudo-terminal, start a program on it as the leader of its own session, copy window
//! sizes, put the user's terminal in raw mode and restore it.
//!
//! Every `unsafe` block is one libc call on file descriptors this module owns or on the
//! process's standard streams, with its result checked.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Stdio;

/// A terminal window size: rows and columns (pixels are copied as they are).
pub type WinSize = libc::winsize;

/// Both ends of a new pseudo-terminal.
#[derive(Debug)]
pub struct Pty {
    /// The side patchbay reads the program's output from and writes its input to.
    pub master: OwnedFd,
    /// The side the program gets as its terminal.
    pub slave: OwnedFd,
}

/// Opens a pseudo-terminal of the given size. Both descriptors are close-on-exec: the
/// program gets the slave side through its standard streams only.
pub fn open_pty(size: Option<WinSize>) -> io::Result<Pty> {
    let mut master: libc::c_int = -1;
    let mut slave: libc::c_int = -1;
    let size_ptr = size
        .as_ref()
        .map_or(std::ptr::null(), |s| s as *const WinSize);
    // SAFETY: the out-pointers are valid for writes; name and termios are optional (null).
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            size_ptr,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openpty succeeded, so both are fresh descriptors nobody else owns.
    let pty = unsafe {
        Pty {
            master: OwnedFd::from_raw_fd(master),
            slave: OwnedFd::from_raw_fd(slave),
        }
    };
    set_cloexec(pty.master.as_raw_fd())?;
    set_cloexec(pty.slave.as_raw_fd())?;
    Ok(pty)
}

fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes reads and writes on `fd` return `WouldBlock` instead of waiting (for tokio's
/// `AsyncFd`).
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A command set up to run on the pseudo-terminal's slave side as the leader of a new
/// session whose controlling terminal is that slave: job control, Ctrl-C and window-size
/// changes then work in the program as in any terminal, and its process group id is its
/// pid (so signals can be forwarded to the whole group).
pub fn command_on(
    program: &str,
    args: &[String],
    slave: &OwnedFd,
) -> io::Result<tokio::process::Command> {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave.try_clone()?));
    // SAFETY: the closure runs in the forked child before exec and only calls
    // async-signal-safe functions (setsid, ioctl). Std has already installed the slave as
    // fds 0/1/2 when pre_exec closures run.
    unsafe {
        command.as_std_mut().pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(command)
}

/// The window size of the terminal on `fd`, if it is one.
pub fn window_size(fd: RawFd) -> Option<WinSize> {
    let mut size = WinSize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into the valid pointer.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ as _, &mut size) };
    (rc == 0 && size.ws_row > 0 && size.ws_col > 0).then_some(size)
}

/// Sets the window size of the pseudo-terminal (the kernel then sends `SIGWINCH` to the
/// program's foreground process group).
pub fn set_window_size(master: RawFd, size: &WinSize) -> io::Result<()> {
    // SAFETY: TIOCSWINSZ reads one winsize from the valid pointer.
    if unsafe { libc::ioctl(master, libc::TIOCSWINSZ as _, size as *const WinSize) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `fd` is a terminal.
pub fn is_tty(fd: RawFd) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

/// Sends `signal` to every process of the group `pgid` (the wrapped program's session).
pub fn signal_group(pgid: u32, signal: libc::c_int) -> io::Result<()> {
    let pgid = libc::pid_t::try_from(pgid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill with a negative pid signals a process group; no memory is involved.
    if unsafe { libc::kill(-pgid, signal) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The user's terminal in raw mode for as long as this guard lives: every key (Ctrl-C
/// included) goes to the wrapped program, whose own pseudo-terminal does the line editing
/// and signal keys. Dropping the guard restores the saved settings, on every exit path
/// (normal return, error, panic unwinding).
#[derive(Debug)]
pub struct RawMode {
    fd: RawFd,
    saved: libc::termios,
}

impl RawMode {
    /// Puts the terminal on `fd` in raw mode.
    pub fn enable(fd: RawFd) -> io::Result<RawMode> {
        // SAFETY: termios is plain data; tcgetattr fills it.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer to a termios.
        if unsafe { libc::tcgetattr(fd, &mut saved) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut raw = saved;
        // SAFETY: valid pointer to a termios.
        unsafe { libc::cfmakeraw(&mut raw) };
        // SAFETY: valid pointer to a termios.
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &raw) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(RawMode { fd, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `enable`; nothing to do if it fails.
        unsafe {
            libc::tcsetattr(self.fd, libc::TCSADRAIN, &self.saved);
        }
    }
}

/// Reads from a raw descriptor into `buf` (no ownership taken).
pub fn read_fd(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Writes `buf` to a raw descriptor, returning how much was written.
pub fn write_fd(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for reads of buf.len() bytes.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pty_carries_bytes_and_its_window_size() {
        let size = WinSize {
            ws_row: 33,
            ws_col: 101,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = open_pty(Some(size)).expect("openpty");
        let got = window_size(pty.slave.as_raw_fd()).expect("slave size");
        assert_eq!((got.ws_row, got.ws_col), (33, 101));
        let bigger = WinSize {
            ws_row: 50,
            ws_col: 200,
            ..size
        };
        set_window_size(pty.master.as_raw_fd(), &bigger).expect("resize");
        let got = window_size(pty.slave.as_raw_fd()).expect("slave size");
        assert_eq!((got.ws_row, got.ws_col), (50, 200));
        assert!(is_tty(pty.slave.as_raw_fd()));

        // Raw mode on the slave, then bytes written to it arrive unchanged on the master.
        {
            let _raw = RawMode::enable(pty.slave.as_raw_fd()).expect("raw");
            write_fd(pty.slave.as_raw_fd(), b"a\nb").expect("write");
            let mut buf = [0u8; 16];
            let n = read_fd(pty.master.as_raw_fd(), &mut buf).expect("read");
            assert_eq!(buf.get(..n), Some(&b"a\nb"[..]));
        }
        // Restored: output processing turns \n into \r\n again.
        write_fd(pty.slave.as_raw_fd(), b"c\n").expect("write");
        let mut buf = [0u8; 16];
        let n = read_fd(pty.master.as_raw_fd(), &mut buf).expect("read");
        assert_eq!(buf.get(..n), Some(&b"c\r\n"[..]));
    }
}

//! The MIDI system patchbay talks to through midir: ALSA by default, JACK with the `jack`
//! cargo feature. Everything here may block for a few milliseconds (it opens clients of
//! the MIDI system), so async code calls it from `spawn_blocking`.

use std::fmt;

use midir::{MidiInput, MidiOutput};

use crate::session::{Session, with_session};

/// The MIDI system this build of patchbay uses: `"jack"` (cargo feature `jack`) or
/// `"alsa"`.
pub const BACKEND: &str = if cfg!(feature = "jack") {
    "jack"
} else {
    "alsa"
};

/// The client name patchbay uses by default (its ports show as `patchbay:NAME`).
pub const DEFAULT_CLIENT_NAME: &str = "patchbay";

/// The longest client name accepted: JACK truncates or refuses longer ones.
pub const MAX_CLIENT_NAME: usize = 32;

/// Why a MIDI operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MidiError {
    /// No MIDI system could be reached (no ALSA sequencer, no JACK server).
    #[error("no MIDI system available: {0}")]
    NoSystem(String),
    /// The `port` pattern does not compile.
    #[error(transparent)]
    Pattern(#[from] crate::PortPatternError),
    /// No port matches the pattern.
    #[error("no MIDI {direction} port matches `{pattern}` (available: {})", list_or_none(.available))]
    NoPort {
        /// `input` or `output`.
        direction: &'static str,
        /// The pattern.
        pattern: String,
        /// The ports of that direction that exist.
        available: Vec<String>,
    },
    /// The port exists but connecting to it or creating it failed.
    #[error("cannot open MIDI port `{port}`: {reason}")]
    Open {
        /// The port name.
        port: String,
        /// What the MIDI system said.
        reason: String,
    },
    /// Sending a message failed.
    #[error("cannot send to MIDI port `{port}`: {reason}")]
    Send {
        /// The port name.
        port: String,
        /// What the MIDI system said.
        reason: String,
    },
    /// A name given to the MIDI system cannot be used.
    #[error("invalid MIDI {what} `{name}`: {reason}")]
    InvalidName {
        /// `client name` or `port name`.
        what: &'static str,
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// The wait ended (learn with a timeout, or the input went away).
    #[error("{0}")]
    Ended(String),
}

/// `a, b, c` or `none`.
fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// The message that says which MIDI system is missing and how to get it.
fn no_system(detail: &dyn fmt::Display) -> MidiError {
    #[cfg(feature = "jack")]
    let hint = format!(
        "cannot connect to the JACK server `{}` (is jackd running?)",
        crate::session::jack_server_name()
    );
    #[cfg(not(feature = "jack"))]
    let hint = {
        "cannot open the ALSA sequencer /dev/snd/seq (no sound hardware, or the snd-seq \
         module is not loaded)"
            .to_owned()
    };
    MidiError::NoSystem(format!("{hint}: {detail}"))
}

/// Checks a client name before midir sees it (midir panics on a NUL byte).
pub(crate) fn check_client_name(name: &str) -> Result<(), MidiError> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > MAX_CLIENT_NAME {
        "it is longer than 32 bytes"
    } else if name.contains(['\0', ':']) {
        "it contains `:` or a NUL byte"
    } else {
        return Ok(());
    };
    Err(MidiError::InvalidName {
        what: "client name",
        name: name.to_owned(),
        reason,
    })
}

/// midir panics on a NUL byte in a name: refuse it before.
fn check_nul(name: &str) -> Result<(), MidiError> {
    if name.contains('\0') {
        return Err(MidiError::InvalidName {
            what: "client name",
            name: name.replace('\0', "\\0"),
            reason: "it contains a NUL byte",
        });
    }
    Ok(())
}

/// A local port name midir can use: NUL bytes and `:` replaced (midir panics on NUL; JACK
/// splits names at `:`), never empty.
pub(crate) fn local_port_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if c == '\0' || c == ':' { '_' } else { c })
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "in".to_owned()
    } else {
        cleaned
    }
}

/// The name of the clients that only list ports: `CLIENT-scan`, so they do not take the
/// `CLIENT` name that patchbay's ports show under (they have no ports of their own).
pub(crate) fn scan_client_name(client_name: &str) -> String {
    format!("{client_name}-scan")
}

/// Opens an input client (not at all while the JACK server is known to be down).
pub(crate) fn input_client(session: &Session, client_name: &str) -> Result<MidiInput, MidiError> {
    check_nul(client_name)?;
    if let Some(reason) = session.down() {
        return Err(MidiError::NoSystem(reason.to_owned()));
    }
    MidiInput::new(client_name).map_err(|e| no_system(&e))
}

/// Opens an output client (not at all while the JACK server is known to be down).
pub(crate) fn output_client(session: &Session, client_name: &str) -> Result<MidiOutput, MidiError> {
    check_nul(client_name)?;
    if let Some(reason) = session.down() {
        return Err(MidiError::NoSystem(reason.to_owned()));
    }
    MidiOutput::new(client_name).map_err(|e| no_system(&e))
}

/// The names of the ports an input client can read from.
pub(crate) fn input_names(input: &MidiInput) -> Vec<String> {
    input
        .ports()
        .iter()
        .filter_map(|p| input.port_name(p).ok())
        .collect()
}

/// The names of the ports an output client can write to.
pub(crate) fn output_names(output: &MidiOutput) -> Vec<String> {
    output
        .ports()
        .iter()
        .filter_map(|p| output.port_name(p).ok())
        .collect()
}

/// The MIDI ports of the system.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PortList {
    /// The MIDI system (`alsa` or `jack`).
    pub backend: &'static str,
    /// Ports patchbay can read from (controllers' outputs).
    pub inputs: Vec<String>,
    /// Ports patchbay can write to (controllers' inputs: LEDs, motorized faders).
    pub outputs: Vec<String>,
}

impl fmt::Display for PortList {
    /// The text of `patchbay midi list`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "MIDI backend: {}", self.backend)?;
        for (title, names) in [("inputs", &self.inputs), ("outputs", &self.outputs)] {
            writeln!(f, "{title}:")?;
            if names.is_empty() {
                writeln!(f, "  (none)")?;
            }
            for name in names {
                writeln!(f, "  {name}")?;
            }
        }
        Ok(())
    }
}

/// Lists the MIDI input and output ports (`patchbay midi list`, discovery). Blocks briefly.
///
/// Fails with [`MidiError::NoSystem`] when there is no MIDI system to ask: the message
/// names the backend and what is missing.
pub fn list_ports() -> Result<PortList, MidiError> {
    list_ports_as(&format!("{DEFAULT_CLIENT_NAME}-list"))
}

/// [`list_ports`] with the client name to open the MIDI system with.
pub fn list_ports_as(client_name: &str) -> Result<PortList, MidiError> {
    with_session(|session| {
        let input = input_client(session, client_name)?;
        let inputs = input_names(&input);
        drop(input);
        let output = output_client(session, client_name)?;
        let outputs = output_names(&output);
        Ok(PortList {
            backend: BACKEND,
            inputs,
            outputs,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_names_are_checked() {
        assert!(check_client_name("patchbay").is_ok());
        for bad in ["", "a\0b", "a:b", &"x".repeat(33)] {
            let err = check_client_name(bad).unwrap_err();
            assert!(
                err.to_string().starts_with("invalid MIDI client name"),
                "{err}"
            );
        }
    }

    #[test]
    fn local_port_names_are_usable() {
        assert_eq!(local_port_name("pads"), "pads");
        assert_eq!(local_port_name("a:b\0c"), "a_b_c");
        assert_eq!(local_port_name(""), "in");
    }

    #[test]
    fn port_list_text() {
        let list = PortList {
            backend: "jack",
            inputs: vec!["ctl:pad".into()],
            outputs: vec![],
        };
        assert_eq!(
            list.to_string(),
            "MIDI backend: jack\ninputs:\n  ctl:pad\noutputs:\n  (none)\n"
        );
    }

    #[test]
    fn no_port_error_lists_what_exists() {
        let err = MidiError::NoPort {
            direction: "input",
            pattern: "pad".into(),
            available: vec![],
        };
        assert_eq!(
            err.to_string(),
            "no MIDI input port matches `pad` (available: none)"
        );
    }
}

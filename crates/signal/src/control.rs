//! Control signals: what UIs and controllers send to agents.
//!
//! Control outputs (Escapement, Codelia, OpenClaw, Palyra, JSON terminal escapes) consume
//! these types; each maps them onto its own protocol.

/// `control.pause`: stop the agent at its next step.
pub const PAUSE: &str = "control.pause";
/// `control.step {n}`: let the agent run `n` steps (default 1), then pause.
pub const STEP: &str = "control.step";
/// `control.continue`: resume a paused agent.
pub const CONTINUE: &str = "control.continue";
/// `control.arm`: arm breakpoints (pause at the next debug point).
pub const ARM: &str = "control.arm";
/// `control.interrupt`: interrupt the current run.
pub const INTERRUPT: &str = "control.interrupt";
/// `control.quit`: ask the agent to quit.
pub const QUIT: &str = "control.quit";
/// `control.cancel`: cancel the current run.
pub const CANCEL: &str = "control.cancel";
/// `control.answer {promptId, value | cancelled}`: answer a pending prompt or approval.
pub const ANSWER: &str = "control.answer";

/// Every control type.
pub const ALL: [&str; 8] = [PAUSE, STEP, CONTINUE, ARM, INTERRUPT, QUIT, CANCEL, ANSWER];

/// Why a control signal's payload cannot be sent: a field the protocol needs is missing,
/// or its value is unusable. Each control output's encode error wraps it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    /// A field the message needs is missing from the payload.
    #[error("`{kind}` needs `payload.{field}`")]
    Missing {
        /// The signal type.
        kind: String,
        /// The payload field.
        field: &'static str,
    },
    /// A payload field has an unusable value.
    #[error("`{kind}`: `payload.{field}` must be {expected}")]
    Invalid {
        /// The signal type.
        kind: String,
        /// The payload field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
}

/// Whether `kind` is a control type (`control.*`).
pub fn is_control(kind: &str) -> bool {
    kind.starts_with("control.")
}

//! What the machine and an attempt tell each other: where a delivery goes
//! ([`Target`]), an attempt refused before it is sent ([`Refusal`]), and how work
//! on a source record ended ([`Finished`]). The dispatcher's `attempt` module
//! does the POST; these are the words of the decisions around it.

use hookline_core::FailureKind;

/// Where the subscription said to send it, read at attempt time.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub secret_ref: String,
}

/// An attempt refused before it is sent, decided by the engine's machine; it
/// is classified and followed up (dead-lettered) like any other failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: FailureKind,
    pub detail: String,
}

impl Refusal {
    /// A payload over `--max-payload-bytes`.
    pub fn payload_too_large(len: usize, limit: usize) -> Self {
        Self {
            kind: FailureKind::PayloadTooLarge,
            detail: format!("payload of {len} bytes exceeds --max-payload-bytes {limit}"),
        }
    }
}

/// How work on a source record ended, for the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// Delivered, or its follow-up is in a transaction: finish the source offset.
    Durable,
    /// Given up: leave the offset unfinished.
    Abandoned,
}

//! Hand-offs: the records an attempt or a quarantine decision leaves to write
//! (a retry on its tier, a dead letter, a quarantined record), each with the
//! source record it finishes. They are not produced where they are decided:
//! the engine commits them together with the source partitions' offsets in a
//! Kafka transaction (`engine/commit.rs`), so a crash or a zombie replica can
//! neither write one twice nor lose one, and a retry chain never forks.

use hookline_core::DeadLetterReason;
use hookline_envelope::{QuarantineReason, QuarantinedEvent};

use crate::{events, part::Key};

/// A record to write in the next transaction, and the source record it finishes.
#[derive(Debug, Clone)]
pub(crate) struct Handoff {
    /// The source record, finished by the transaction that writes this.
    pub key: Key,
    pub topic: String,
    pub record_key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    /// What to count and log once the transaction commits.
    pub written: Written,
}

/// What a hand-off is, for the events emitted once it is committed.
#[derive(Debug, Clone)]
pub(crate) enum Written {
    Retry {
        tier: String,
        delivery_id: String,
    },
    Dead {
        reason: DeadLetterReason,
        delivery_id: String,
    },
    Quarantined {
        reason: QuarantineReason,
        record: Box<QuarantinedEvent>,
    },
}

impl Handoff {
    /// Bytes this hand-off holds (its key and value), for the batch bound.
    pub(crate) fn bytes(&self) -> usize {
        self.value.len() + self.record_key.as_ref().map_or(0, Vec::len)
    }

    /// Counts and logs the record as written (its transaction committed).
    pub(crate) fn emit_written(&self) {
        match &self.written {
            Written::Retry { tier, delivery_id } => {
                events::RetryWritten { tier, delivery_id }.emit()
            }
            Written::Dead {
                reason,
                delivery_id,
            } => events::DeadLettered {
                reason: *reason,
                delivery_id,
            }
            .emit(),
            Written::Quarantined { reason, record } => events::Quarantined {
                topic: &self.topic,
                record,
                reason: *reason,
            }
            .emit(),
        }
    }
}

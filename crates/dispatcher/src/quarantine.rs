//! Records on `deliveries` or a retry tier that are not a `Delivery` (garbage,
//! truncated Avro, an unknown writer fingerprint, another record type, a
//! tombstone) go to the quarantine topic as a `QuarantinedEvent`, built by the
//! same envelope code fanout uses, with the reason, the detail and the source
//! coordinates; the dlq-sink archives them and `replay --quarantine` returns
//! them to the topic they came from.
//!
//! Guarantees: the quarantined record is a hand-off (`handoff.rs`): it commits
//! in one transaction with the source offset, so it is written exactly once
//! for a `read_committed` reader, crash or not. Until its transaction is
//! built the record counts as a pending write (`Hold::Writes`); records behind
//! it are attempted meanwhile; only the committed offset waits.

use hookline_envelope::{encode, QuarantineReason, QuarantinedEvent};

use crate::{
    handoff::{Handoff, Written},
    part::Key,
};

/// The hand-off that writes `record` (the source record at `key`) to `topic`.
pub(crate) fn handoff(
    key: Key,
    topic: &str,
    record: QuarantinedEvent,
    reason: QuarantineReason,
) -> Handoff {
    Handoff {
        key,
        topic: topic.to_owned(),
        partition: None,
        record_key: record.key.clone(),
        value: encode(&record),
        headers: Vec::new(),
        written: Written::Quarantined {
            reason,
            record: Box::new(record),
        },
        disable: None,
        log: Vec::new(),
    }
}

//! Records on `deliveries` or a retry tier that are not a `Delivery` (garbage,
//! truncated Avro, an unknown writer fingerprint, another record type, a
//! tombstone) go to the quarantine topic as a `QuarantinedEvent`, built by the
//! same envelope code fanout uses, with the reason, the detail and the source
//! coordinates; the dlq-sink archives them and `replay --quarantine` returns
//! them to the topic they came from.
//!
//! Guarantees: the source offset is finished only once the quarantine write is
//! acknowledged (`Finished::Durable`); a failed write is retried until it is,
//! or until the partition is revoked or the dispatcher drains, and then the
//! record stays unfinished and whoever reads it next quarantines it again — at
//! least once, never lost. Records behind it are attempted meanwhile; only the
//! committed offset waits.

use std::sync::Arc;

use hookline_envelope::{encode, QuarantineReason, QuarantinedEvent};
use tokio_util::sync::CancellationToken;

use crate::{
    attempt::{produce_until_durable, AttemptContext, Finished},
    events,
};

/// In-flight quarantine writes per partition at which the partition is paused
/// (resumed at half), so a flood of bad records while the quarantine topic is
/// unavailable cannot hold unbounded memory.
pub(crate) const PARTITION_PENDING_CAP: usize = 64;

/// Writes `record` to the quarantine topic until acknowledged or cancelled.
pub(crate) async fn run(
    ctx: Arc<AttemptContext>,
    record: QuarantinedEvent,
    reason: QuarantineReason,
    cancel: CancellationToken,
) -> Finished {
    let value = encode(&record);
    let topic = ctx.topics.quarantine();
    let finished =
        produce_until_durable(&ctx.producer, topic, record.key.as_deref(), &value, &cancel).await;
    if finished == Finished::Durable {
        events::Quarantined {
            topic,
            record: &record,
            reason,
        }
        .emit();
    }
    finished
}

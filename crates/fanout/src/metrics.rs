//! Recording of fanout metrics; the names live in `metric_names`.

use std::time::Duration;

use hookline_core::admission::PayloadMatch;
use hookline_runtime::metric_names::{self as m, label};

/// Counts of one committed transaction.
#[derive(Debug, Default)]
pub(crate) struct TxnCounts {
    pub consumed: usize,
    pub produced: usize,
    pub unmatched: usize,
    pub quarantined: Vec<String>,
    /// Duplicates within the admission window: same payload, changed payload.
    pub duplicates: [usize; 2],
    /// Deliveries written to an overflow lane (of `produced`).
    pub routed: usize,
}

impl TxnCounts {
    pub(crate) fn duplicate(&mut self, payload: PayloadMatch) {
        self.duplicates[payload as usize] += 1;
    }
}

/// Zeroes the labelled series so dashboards show them before the first event.
pub(crate) fn describe() {
    for reason in hookline_envelope::QuarantineReason::ALL {
        metrics::counter!(m::FANOUT_EVENTS_QUARANTINED, label::REASON => reason.as_str())
            .absolute(0);
    }
    for payload in PayloadMatch::ALL {
        metrics::counter!(m::FANOUT_DUPLICATES, label::PAYLOAD => payload.as_str()).absolute(0);
    }
    metrics::counter!(m::FANOUT_DEDUP_EVICTED_EARLY).absolute(0);
    for outcome in ["done", "failed"] {
        metrics::counter!(m::FANOUT_DEDUP_REBUILDS, label::OUTCOME => outcome).absolute(0);
    }
    metrics::counter!(m::FANOUT_DEDUP_REBUILD_RECORDS).absolute(0);
    metrics::counter!(m::FANOUT_OVERFLOW_ROUTED).absolute(0);
    for change in ["routed", "back"] {
        metrics::counter!(m::FANOUT_OVERFLOW_CHANGES, label::CHANGE => change).absolute(0);
    }
    metrics::gauge!(m::FANOUT_OVERFLOW_ROUTING).set(0.0);
    metrics::gauge!(m::FANOUT_OVERFLOW_WAITING).set(0.0);
}

/// The burst router's changes and state (`hookline_core::burst`).
pub(crate) fn routing(routed: bool, routing: usize, waiting: usize) {
    let change = if routed { "routed" } else { "back" };
    metrics::counter!(m::FANOUT_OVERFLOW_CHANGES, label::CHANGE => change).increment(1);
    routing_state(routing, waiting);
}

pub(crate) fn routing_state(routing: usize, waiting: usize) {
    metrics::gauge!(m::FANOUT_OVERFLOW_ROUTING).set(routing as f64);
    metrics::gauge!(m::FANOUT_OVERFLOW_WAITING).set(waiting as f64);
}

/// Records a committed transaction's counts (never an aborted one's).
pub(crate) fn committed(counts: &TxnCounts) {
    metrics::counter!(m::FANOUT_EVENTS_CONSUMED).increment(counts.consumed as u64);
    metrics::counter!(m::FANOUT_DELIVERIES_PRODUCED).increment(counts.produced as u64);
    metrics::counter!(m::FANOUT_EVENTS_UNMATCHED).increment(counts.unmatched as u64);
    metrics::counter!(m::FANOUT_OVERFLOW_ROUTED).increment(counts.routed as u64);
    for reason in &counts.quarantined {
        metrics::counter!(m::FANOUT_EVENTS_QUARANTINED, label::REASON => reason.clone())
            .increment(1);
    }
    for payload in PayloadMatch::ALL {
        metrics::counter!(m::FANOUT_DUPLICATES, label::PAYLOAD => payload.as_str())
            .increment(counts.duplicates[payload as usize] as u64);
    }
}

/// Live keys of an admission window evicted before their time by the cap.
pub(crate) fn evicted_early(n: usize) {
    if n > 0 {
        metrics::counter!(m::FANOUT_DEDUP_EVICTED_EARLY).increment(n as u64);
    }
}

/// One rebuild of a partition's admission window: logged and counted.
pub(crate) fn rebuild(
    partition: i32,
    outcome: Result<(u64, i64, i64, Duration), &dyn std::fmt::Display>,
) {
    match outcome {
        Ok((records, start, end, took)) => {
            tracing::info!(
                partition,
                records,
                start,
                end,
                took_ms = took.as_millis() as u64,
                "rebuilt the duplicate-admission window"
            );
            metrics::counter!(m::FANOUT_DEDUP_REBUILDS, label::OUTCOME => "done").increment(1);
            metrics::counter!(m::FANOUT_DEDUP_REBUILD_RECORDS).increment(records);
        }
        Err(error) => {
            tracing::warn!(partition, %error, "rebuilding the duplicate-admission window failed; retrying, the partition waits");
            metrics::counter!(m::FANOUT_DEDUP_REBUILDS, label::OUTCOME => "failed").increment(1);
        }
    }
}

pub(crate) fn transaction(outcome: &'static str, took: Duration) {
    metrics::counter!(m::FANOUT_TRANSACTIONS, label::OUTCOME => outcome).increment(1);
    metrics::histogram!(m::FANOUT_TRANSACTION_DURATION, label::OUTCOME => outcome)
        .record(took.as_secs_f64());
}

//! Recording of fanout metrics; the names live in `metric_names`. Labels come
//! from fixed sets: outcome, reason, payload, change, error kind ([`ErrorKind`]).
//! Notable events are recorded through `events`, which also logs them.

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
    /// Events a back reader took (of `consumed`).
    pub read_past: usize,
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
    for change in ["started", "ended", "refused"] {
        metrics::counter!(m::FANOUT_READ_PAST_CHANGES, label::CHANGE => change).absolute(0);
    }
    metrics::counter!(m::FANOUT_READ_PAST_EVENTS).absolute(0);
    read_past(0, 0);
    metrics::counter!(m::FANOUT_OVERFLOW_ROUTED).absolute(0);
    for change in ["routed", "back"] {
        metrics::counter!(m::FANOUT_OVERFLOW_CHANGES, label::CHANGE => change).absolute(0);
    }
    metrics::gauge!(m::FANOUT_OVERFLOW_ROUTING).set(0.0);
    metrics::gauge!(m::FANOUT_OVERFLOW_WAITING).set(0.0);
    metrics::counter!(m::FANOUT_DEDUP_FROM_NOW).absolute(0);
    metrics::counter!(m::FANOUT_REVOKED_DROPPED).absolute(0);
    for kind in ErrorKind::ALL {
        metrics::counter!(m::FANOUT_ERRORS, label::KIND => kind.as_str()).absolute(0);
    }
}

/// The `kind` label of `hookline_fanout_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ErrorKind {
    /// The events consumer reported an error.
    ConsumerError,
    /// A transaction failed; its batch goes into the next one.
    CommitFailed,
    /// A partition's admission window could not be rebuilt; it is tried again.
    RebuildFailed,
    /// A partition's committed checkpoint could not be read; it is tried again.
    CheckpointUnread,
    /// A back reader could not be started; it is tried again.
    BackReaderFailed,
}

impl ErrorKind {
    /// Every kind, for pre-registering the series.
    pub(crate) const ALL: [Self; 5] = [
        Self::ConsumerError,
        Self::CommitFailed,
        Self::RebuildFailed,
        Self::CheckpointUnread,
        Self::BackReaderFailed,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::ConsumerError => "consumer_error",
            Self::CommitFailed => "commit_failed",
            Self::RebuildFailed => "rebuild_failed",
            Self::CheckpointUnread => "checkpoint_unread",
            Self::BackReaderFailed => "back_reader_failed",
        }
    }
}

/// One error event (see `events`).
pub(crate) fn error(kind: ErrorKind) {
    metrics::counter!(m::FANOUT_ERRORS, label::KIND => kind.as_str()).increment(1);
}

/// Events of a revoked partition dropped from the uncommitted batch.
pub(crate) fn revoked_dropped(n: usize) {
    metrics::counter!(m::FANOUT_REVOKED_DROPPED).increment(n as u64);
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

/// Reading past a tenant started, ended or was refused.
pub(crate) fn read_past_change(change: &'static str) {
    metrics::counter!(m::FANOUT_READ_PAST_CHANGES, label::CHANGE => change).increment(1);
}

/// Tenants read past and records the front is ahead, over all partitions.
pub(crate) fn read_past(tenants: usize, ahead: i64) {
    metrics::gauge!(m::FANOUT_READ_PAST_TENANTS).set(tenants as f64);
    metrics::gauge!(m::FANOUT_READ_PAST_AHEAD).set(ahead as f64);
}

/// Records a committed transaction's counts (never an aborted one's).
pub(crate) fn committed(counts: &TxnCounts) {
    metrics::counter!(m::FANOUT_EVENTS_CONSUMED).increment(counts.consumed as u64);
    metrics::counter!(m::FANOUT_DELIVERIES_PRODUCED).increment(counts.produced as u64);
    metrics::counter!(m::FANOUT_EVENTS_UNMATCHED).increment(counts.unmatched as u64);
    metrics::counter!(m::FANOUT_OVERFLOW_ROUTED).increment(counts.routed as u64);
    metrics::counter!(m::FANOUT_READ_PAST_EVENTS).increment(counts.read_past as u64);
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

/// One rebuild of a partition's admission window: the records it read, or
/// `None` when it failed.
pub(crate) fn rebuild(records: Option<u64>) {
    match records {
        Some(records) => {
            metrics::counter!(m::FANOUT_DEDUP_REBUILDS, label::OUTCOME => "done").increment(1);
            metrics::counter!(m::FANOUT_DEDUP_REBUILD_RECORDS).increment(records);
        }
        None => {
            metrics::counter!(m::FANOUT_DEDUP_REBUILDS, label::OUTCOME => "failed").increment(1)
        }
    }
}

/// A rebuild that found no committed stream time and reached back from now.
pub(crate) fn rebuilt_from_now() {
    metrics::counter!(m::FANOUT_DEDUP_FROM_NOW).increment(1);
}

pub(crate) fn transaction(outcome: &'static str, took: Duration) {
    metrics::counter!(m::FANOUT_TRANSACTIONS, label::OUTCOME => outcome).increment(1);
    metrics::histogram!(m::FANOUT_TRANSACTION_DURATION, label::OUTCOME => outcome)
        .record(took.as_secs_f64());
}

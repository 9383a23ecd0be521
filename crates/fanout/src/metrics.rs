//! Recording of fanout metrics; the names live in `metric_names`.

use std::time::Duration;

use hookline_runtime::metric_names::{self as m, label};

/// Counts of one committed transaction.
#[derive(Debug, Default)]
pub(crate) struct TxnCounts {
    pub consumed: usize,
    pub produced: usize,
    pub unmatched: usize,
    pub quarantined: Vec<String>,
}

/// Zeroes the labelled series so dashboards show them before the first event.
pub(crate) fn describe() {
    for reason in hookline_envelope::QuarantineReason::ALL {
        metrics::counter!(m::FANOUT_EVENTS_QUARANTINED, label::REASON => reason.as_str())
            .absolute(0);
    }
}

/// Records a committed transaction's counts (never an aborted one's).
pub(crate) fn committed(counts: &TxnCounts) {
    metrics::counter!(m::FANOUT_EVENTS_CONSUMED).increment(counts.consumed as u64);
    metrics::counter!(m::FANOUT_DELIVERIES_PRODUCED).increment(counts.produced as u64);
    metrics::counter!(m::FANOUT_EVENTS_UNMATCHED).increment(counts.unmatched as u64);
    for reason in &counts.quarantined {
        metrics::counter!(m::FANOUT_EVENTS_QUARANTINED, label::REASON => reason.clone())
            .increment(1);
    }
}

pub(crate) fn transaction(outcome: &'static str, took: Duration) {
    metrics::counter!(m::FANOUT_TRANSACTIONS, label::OUTCOME => outcome).increment(1);
    metrics::histogram!(m::FANOUT_TRANSACTION_DURATION, label::OUTCOME => outcome)
        .record(took.as_secs_f64());
}

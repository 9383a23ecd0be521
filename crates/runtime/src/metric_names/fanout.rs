//! The fanout stage.

/// events consumed and committed.
pub const FANOUT_EVENTS_CONSUMED: &str = "hookline_fanout_events_consumed_total";
/// deliveries written and committed.
pub const FANOUT_DELIVERIES_PRODUCED: &str = "hookline_fanout_deliveries_produced_total";
/// events no subscription wanted.
pub const FANOUT_EVENTS_UNMATCHED: &str = "hookline_fanout_events_unmatched_total";
/// events quarantined, by reason.
pub const FANOUT_EVENTS_QUARANTINED: &str = "hookline_fanout_events_quarantined_total";
/// transactions by outcome (`committed`, `aborted`, `fenced`).
pub const FANOUT_TRANSACTIONS: &str = "hookline_fanout_transactions_total";
/// time from begin to commit or abort of one transaction.
pub const FANOUT_TRANSACTION_DURATION: &str = "hookline_fanout_transaction_duration_seconds";

pub(super) fn describe() {
    metrics::describe_counter!(FANOUT_EVENTS_CONSUMED, "Events consumed and committed.");
    metrics::describe_counter!(
        FANOUT_DELIVERIES_PRODUCED,
        "Deliveries written and committed."
    );
    metrics::describe_counter!(FANOUT_EVENTS_UNMATCHED, "Events no subscription wanted.");
    metrics::describe_counter!(FANOUT_EVENTS_QUARANTINED, "Events quarantined, by reason.");
    metrics::describe_counter!(FANOUT_TRANSACTIONS, "Fan-out transactions by outcome.");
    metrics::describe_histogram!(
        FANOUT_TRANSACTION_DURATION,
        metrics::Unit::Seconds,
        "Time from begin to commit or abort of one fan-out transaction."
    );
}

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
/// events dropped or quarantined as duplicates within the admission window, by
/// `payload` (`same`, `changed`).
pub const FANOUT_DUPLICATES: &str = "hookline_fanout_duplicates_total";
/// admission-window keys evicted before their time by `--dedup-max-keys`.
pub const FANOUT_DEDUP_EVICTED_EARLY: &str = "hookline_fanout_dedup_evicted_early_total";
/// rebuilds of a partition's admission window by outcome (`done`, `failed`).
pub const FANOUT_DEDUP_REBUILDS: &str = "hookline_fanout_dedup_rebuilds_total";
/// records read to rebuild admission windows.
pub const FANOUT_DEDUP_REBUILD_RECORDS: &str = "hookline_fanout_dedup_rebuild_records_total";
/// deliveries written straight to an overflow lane (a routed burst) and committed.
pub const FANOUT_OVERFLOW_ROUTED: &str = "hookline_fanout_overflow_routed_total";
/// tenants whose unordered deliveries fanout writes to their lane now.
pub const FANOUT_OVERFLOW_ROUTING: &str = "hookline_fanout_overflow_routing";
/// tenants that qualify for routing but find every lane taken.
pub const FANOUT_OVERFLOW_WAITING: &str = "hookline_fanout_overflow_waiting";
/// routing changes by `change` (`routed`, `back`).
pub const FANOUT_OVERFLOW_CHANGES: &str = "hookline_fanout_overflow_changes_total";
/// admission-window rebuilds that found no stream time committed with the offset
/// and reached back from now.
pub const FANOUT_DEDUP_FROM_NOW: &str = "hookline_fanout_dedup_rebuilds_from_now_total";
/// events dropped from an uncommitted batch when their partition was revoked
/// (the new owner reads them again).
pub const FANOUT_REVOKED_DROPPED: &str = "hookline_fanout_revoked_events_dropped_total";
/// error events by bounded `kind` (`consumer_error`, `commit_failed`,
/// `rebuild_failed`; see the fanout's `events` module). Each is also logged.
pub const FANOUT_ERRORS: &str = "hookline_fanout_errors_total";

/// tenants read past now (their records left to a back reader), all partitions.
pub const FANOUT_READ_PAST_TENANTS: &str = "hookline_fanout_read_past_tenants";
/// records the front reader is ahead of the committed watermark, all partitions.
pub const FANOUT_READ_PAST_AHEAD: &str = "hookline_fanout_read_past_ahead_records";
/// reading past a tenant by `change` (`started`, `ended`, `refused`).
pub const FANOUT_READ_PAST_CHANGES: &str = "hookline_fanout_read_past_changes_total";
/// events fanned out by back readers and committed.
pub const FANOUT_READ_PAST_EVENTS: &str = "hookline_fanout_read_past_events_total";

pub(super) fn describe() {
    metrics::describe_counter!(FANOUT_EVENTS_CONSUMED, "Events consumed and committed.");
    metrics::describe_counter!(
        FANOUT_DELIVERIES_PRODUCED,
        "Deliveries written and committed."
    );
    metrics::describe_counter!(FANOUT_EVENTS_UNMATCHED, "Events no subscription wanted.");
    metrics::describe_counter!(FANOUT_EVENTS_QUARANTINED, "Events quarantined, by reason.");
    metrics::describe_counter!(FANOUT_TRANSACTIONS, "Fan-out transactions by outcome.");
    metrics::describe_counter!(
        FANOUT_DUPLICATES,
        "Events not fanned out again because their event_id was seen within the admission window, by payload (same: dropped, changed: quarantined)."
    );
    metrics::describe_counter!(
        FANOUT_DEDUP_EVICTED_EARLY,
        "Admission-window keys evicted before their time by --dedup-max-keys (their window was shortened)."
    );
    metrics::describe_counter!(
        FANOUT_DEDUP_REBUILDS,
        "Rebuilds of a partition's admission window on assignment, by outcome."
    );
    metrics::describe_counter!(
        FANOUT_DEDUP_REBUILD_RECORDS,
        "Records read to rebuild admission windows."
    );
    metrics::describe_counter!(
        FANOUT_OVERFLOW_ROUTED,
        "Deliveries of a bursting tenant written straight to its overflow lane and committed."
    );
    metrics::describe_gauge!(
        FANOUT_OVERFLOW_ROUTING,
        "Tenants whose unordered deliveries are written to their overflow lane now."
    );
    metrics::describe_gauge!(
        FANOUT_OVERFLOW_WAITING,
        "Tenants that qualify for routing to a lane but find every lane taken."
    );
    metrics::describe_counter!(
        FANOUT_OVERFLOW_CHANGES,
        "Routing changes by change (routed: to its lane, back: to deliveries)."
    );
    metrics::describe_counter!(
        FANOUT_DEDUP_FROM_NOW,
        "Admission-window rebuilds that found no stream time committed with the offset and reached back from now."
    );
    metrics::describe_counter!(
        FANOUT_REVOKED_DROPPED,
        "Events dropped from an uncommitted batch when their partition was revoked (its new owner reads them again)."
    );
    metrics::describe_gauge!(
        FANOUT_READ_PAST_TENANTS,
        "Tenants read past now: the front reader leaves their records to a back reader."
    );
    metrics::describe_gauge!(
        FANOUT_READ_PAST_AHEAD,
        "Records the front reader is ahead of the committed watermark (re-read after a crash)."
    );
    metrics::describe_counter!(
        FANOUT_READ_PAST_CHANGES,
        "Reading past a tenant by change (started, ended, refused: its id does not fit the offset metadata)."
    );
    metrics::describe_counter!(
        FANOUT_READ_PAST_EVENTS,
        "Events fanned out by back readers (read-past tenants') and committed."
    );
    metrics::describe_counter!(
        FANOUT_ERRORS,
        "Error events of the fanout (each also logged), by kind."
    );
    metrics::describe_histogram!(
        FANOUT_TRANSACTION_DURATION,
        metrics::Unit::Seconds,
        "Time from begin to commit or abort of one fan-out transaction."
    );
}

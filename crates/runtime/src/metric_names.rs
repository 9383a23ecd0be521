//! The one home of metric names: `hookline_<stage>_<what>_<unit>`, counters
//! ending in `_total`, labels from small fixed sets (never tenant, URL or ids).

/// Label keys used across stages.
pub mod label {
    /// The stage (`fanout`, `dispatcher`, `dlq_sink`).
    pub const STAGE: &str = "stage";
    /// A logical topic name without prefix (`events`, `deliveries`, ...).
    pub const TOPIC: &str = "topic";
    /// A retry tier name (`retry-10s`, ...).
    pub const TIER: &str = "tier";
    /// A bounded attempt outcome (`delivered`, `http_5xx`, `timeout`, ...).
    pub const OUTCOME: &str = "outcome";
    /// An HTTP status class (`2xx`, `4xx`, `5xx`, `none`).
    pub const STATUS_CLASS: &str = "status_class";
    /// A bounded reason (`not_avro`, `exhausted`, ...).
    pub const REASON: &str = "reason";
}

/// Seconds the service has been up, set by every stage.
pub const BUILD_INFO: &str = "hookline_build_info";

/// Subscriptions held in the live table.
pub const SUBSCRIPTIONS_LOADED: &str = "hookline_subscriptions_loaded";
/// Records between the table's position and the topic's end.
pub const SUBSCRIPTIONS_LAG: &str = "hookline_subscriptions_table_lag_records";
/// Subscription records skipped because they could not be used, by reason.
pub const SUBSCRIPTIONS_INVALID: &str = "hookline_subscriptions_invalid_total";

/// fanout: events consumed and committed.
pub const FANOUT_EVENTS_CONSUMED: &str = "hookline_fanout_events_consumed_total";
/// fanout: deliveries written and committed.
pub const FANOUT_DELIVERIES_PRODUCED: &str = "hookline_fanout_deliveries_produced_total";
/// fanout: events no subscription wanted.
pub const FANOUT_EVENTS_UNMATCHED: &str = "hookline_fanout_events_unmatched_total";
/// fanout: events quarantined, by reason.
pub const FANOUT_EVENTS_QUARANTINED: &str = "hookline_fanout_events_quarantined_total";
/// fanout: transactions by outcome (`committed`, `aborted`, `fenced`).
pub const FANOUT_TRANSACTIONS: &str = "hookline_fanout_transactions_total";
/// fanout: time from begin to commit or abort of one transaction.
pub const FANOUT_TRANSACTION_DURATION: &str = "hookline_fanout_transaction_duration_seconds";

/// Registers help texts so `/metrics` is self-describing.
pub fn describe_all() {
    metrics::describe_gauge!(BUILD_INFO, "Always 1; labels carry version and stage.");
    metrics::describe_gauge!(
        SUBSCRIPTIONS_LOADED,
        "Subscriptions held in the live table."
    );
    metrics::describe_gauge!(
        SUBSCRIPTIONS_LAG,
        "Records between the subscription table's position and the topic's end."
    );
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
    metrics::describe_counter!(
        SUBSCRIPTIONS_INVALID,
        "Subscription records skipped because they could not be decoded or used."
    );
}

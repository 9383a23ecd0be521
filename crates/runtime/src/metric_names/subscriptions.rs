//! The live subscription table, shared by fanout and dispatcher.

/// Subscriptions held in the live table.
pub const SUBSCRIPTIONS_LOADED: &str = "hookline_subscriptions_loaded";
/// Records between the table's position and the topic's end.
pub const SUBSCRIPTIONS_LAG: &str = "hookline_subscriptions_table_lag_records";
/// Subscription records skipped because they could not be used, by reason: a
/// decode failure's quarantine reason (`not_avro`, `unknown_fingerprint`,
/// `wrong_record`, `bad_datum`), or `bad_key`, `key_mismatch`, `bad_pattern`.
pub const SUBSCRIPTIONS_INVALID: &str = "hookline_subscriptions_invalid_total";

pub(super) fn describe() {
    metrics::describe_gauge!(
        SUBSCRIPTIONS_LOADED,
        "Subscriptions held in the live table."
    );
    metrics::describe_gauge!(
        SUBSCRIPTIONS_LAG,
        "Records between the subscription table's position and the topic's end."
    );
    metrics::describe_counter!(
        SUBSCRIPTIONS_INVALID,
        "Subscription records skipped because they could not be decoded or used."
    );
}

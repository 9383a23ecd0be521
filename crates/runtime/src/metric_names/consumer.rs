//! Group consumers of every stage (`group_watch`), labelled by stage and by
//! the consumer's name (`events`, `deliveries`, a tier name, `dead-letters`).

/// Seconds the consumer has had lag on assigned, unpaused partitions without
/// fetching anything; 0 while it makes progress or has no lag.
pub const CONSUMER_STALLED: &str = "hookline_consumer_stalled_seconds";
/// Seconds the consumer has had no partition assigned; 0 while it has some.
pub const CONSUMER_UNASSIGNED: &str = "hookline_consumer_unassigned_seconds";
/// Records between the consumer's positions and the high watermarks of its
/// assigned, unpaused partitions.
pub const CONSUMER_LAG: &str = "hookline_consumer_lag_records";
/// Partitions assigned to the consumer now.
pub const CONSUMER_ASSIGNED: &str = "hookline_consumer_assigned_partitions";

/// Changes in what holds a stage's Kafka writes up (partitions below
/// `min.insync.replicas` or without a leader), each logged once
/// (`kafka::replicas`), labelled by stage.
pub const KAFKA_WRITES_REFUSED: &str = "hookline_kafka_writes_refused_total";

pub(super) fn describe() {
    metrics::describe_counter!(
        KAFKA_WRITES_REFUSED,
        "Changes in the partitions that hold the stage's writes up (below min.insync.replicas or leaderless)."
    );
    metrics::describe_gauge!(
        CONSUMER_STALLED,
        metrics::Unit::Seconds,
        "Seconds the consumer has had lag on unpaused partitions without fetching anything."
    );
    metrics::describe_gauge!(
        CONSUMER_UNASSIGNED,
        metrics::Unit::Seconds,
        "Seconds the consumer has had no partition assigned."
    );
    metrics::describe_gauge!(
        CONSUMER_LAG,
        "Records between the consumer's positions and the high watermarks of its unpaused partitions."
    );
    metrics::describe_gauge!(
        CONSUMER_ASSIGNED,
        "Partitions assigned to the consumer now."
    );
}

//! The dispatcher stage.

/// Attempts by outcome (bounded, see `hookline_core::OUTCOMES`) and status class
/// (`hookline_core::StatusClass`: `1xx`..`5xx`, `invalid`, `none`).
pub const DISPATCHER_ATTEMPTS: &str = "hookline_dispatcher_attempts_total";
/// Time of one attempt: connect, send, read the capped response.
pub const DISPATCHER_ATTEMPT_DURATION: &str = "hookline_dispatcher_attempt_duration_seconds";
/// Attempts in flight now.
pub const DISPATCHER_IN_FLIGHT: &str = "hookline_dispatcher_in_flight";
/// Attempts in flight now by `class`: `first_attempt` (read from `deliveries`)
/// or `retry` (read from a retry tier).
pub const DISPATCHER_IN_FLIGHT_BY_CLASS: &str = "hookline_dispatcher_attempts_in_flight";
/// Lanes (per subscription, first attempts and retries apart) with queued records.
pub const DISPATCHER_LANES: &str = "hookline_dispatcher_lanes";
/// Subscriptions with queued records held back by their `rate_limit_per_s` now.
pub const DISPATCHER_RATE_LIMITED_SUBSCRIPTIONS: &str =
    "hookline_dispatcher_rate_limited_subscriptions";
/// Records buffered (queued and in flight).
pub const DISPATCHER_BUFFERED_RECORDS: &str = "hookline_dispatcher_buffered_records";
/// Age of the oldest ready record not yet attempted, by topic.
pub const DISPATCHER_OLDEST_READY_AGE: &str = "hookline_dispatcher_oldest_ready_age_seconds";
/// Deliveries written to a tier without an attempt, by the `tier` written to and
/// `reason`: `not_due` (its tier released it before its due time: a `Retry-After`
/// longer than the tier) or `breaker_open` (its subscription's breaker is open).
pub const DISPATCHER_PARKED: &str = "hookline_dispatcher_parked_total";
/// Strictly ordered deliveries held at the head of their lane, by `reason`:
/// `backoff` (an attempt failed; the retry waits in place) or `breaker_open`.
pub const DISPATCHER_STRICT_HELD: &str = "hookline_dispatcher_strict_held_total";
/// Subscriptions whose circuit breaker is open (or probing) on this replica.
pub const DISPATCHER_BREAKERS_OPEN: &str = "hookline_dispatcher_breakers_open";
/// Circuit breaker transitions, by the `state` entered (`open`, `closed`).
pub const DISPATCHER_BREAKER_TRANSITIONS: &str = "hookline_dispatcher_breaker_transitions_total";
/// Subscriptions the dispatcher wrote back disabled, by `reason` (`gone`).
pub const DISPATCHER_SUBSCRIPTIONS_DISABLED: &str =
    "hookline_dispatcher_subscriptions_disabled_total";
/// Attempts refused by the egress policy.
pub const DISPATCHER_EGRESS_DENIED: &str = "hookline_dispatcher_egress_denied_total";
/// Follow-up records (retry, dead letter, quarantined record) whose
/// transaction failed; they go into the next one.
pub const DISPATCHER_FOLLOW_UP_ERRORS: &str = "hookline_dispatcher_follow_up_errors_total";
/// Transactions of follow-ups and offsets, by `outcome` (`committed`,
/// `aborted`, `fenced`).
pub const DISPATCHER_TRANSACTIONS: &str = "hookline_dispatcher_transactions_total";
/// Attempt-log records committed to `deliveries.attempts`.
pub const DISPATCHER_ATTEMPT_RECORDS: &str = "hookline_dispatcher_attempt_records_total";
/// How long a transaction took, by `outcome`.
pub const DISPATCHER_TRANSACTION_DURATION: &str =
    "hookline_dispatcher_transaction_duration_seconds";
/// Error events of the dispatcher that have no counter of their own, by `kind`
/// (a fixed set: `commit_failed`, `watermark_refused`,
/// `attempt_panicked`, `consumer_error`, `pause_failed`, `no_retry_tier`,
/// `secret_unavailable`, ...; see the dispatcher's `events` module). Each is also
/// logged; a steady rate of any kind is worth a look.
pub const DISPATCHER_ERRORS: &str = "hookline_dispatcher_errors_total";
/// Records on `deliveries` or a retry tier that are not a `Delivery`, written to
/// `events.quarantine`, by reason (`not_avro`, `unknown_fingerprint`,
/// `wrong_record`, `bad_datum`); counted once the quarantine write is acknowledged.
pub const DISPATCHER_QUARANTINED: &str = "hookline_dispatcher_records_quarantined_total";
/// Times a partition was paused, by the reason that first held it (`buffer`:
/// its class's buffer or its own is full; `writes`, `not_due`, `rewinding`) and
/// its consumer (`deliveries`, `strict`, a tier).
pub const DISPATCHER_BACKPRESSURE_PAUSES: &str = "hookline_dispatcher_backpressure_pauses_total";
/// Per retry tier: how far past its due time the most overdue record not yet
/// attempted is (a paused head whose timer did not fire, or a due record waiting
/// for a slot); 0 when none is overdue. A stalled scheduler shows here.
pub const DISPATCHER_TIER_OLDEST_DUE_AGE: &str = "hookline_dispatcher_tier_oldest_due_age_seconds";
/// Per retry tier: records buffered or in flight, plus one per paused head.
pub const DISPATCHER_TIER_WAITING_RECORDS: &str = "hookline_dispatcher_tier_waiting_records";
/// Per retry tier: records due and not yet started (fetched ones, plus a held
/// head past due).
pub const DISPATCHER_TIER_DUE_RECORDS: &str = "hookline_dispatcher_tier_due_records";
/// Per retry tier: partitions fetched again because their held head fell due
/// (promotions); their rate is the tier's resume rate.
pub const DISPATCHER_TIER_PROMOTIONS: &str = "hookline_dispatcher_tier_promotions_total";
/// Per retry tier: partitions paused until their head is due.
pub const DISPATCHER_TIER_PAUSED_PARTITIONS: &str = "hookline_dispatcher_tier_paused_partitions";
/// Retry records written, by tier.
pub const DISPATCHER_RETRIES_WRITTEN: &str = "hookline_dispatcher_retries_written_total";
/// Dead letters written, by reason (`exhausted`, `rejected_4xx`, ...).
pub const DISPATCHER_DEAD_LETTERS: &str = "hookline_dispatcher_dead_letters_total";
/// How long after its `due_at` a retry was attempted, by tier.
pub const DISPATCHER_RETRY_LATENESS: &str = "hookline_dispatcher_retry_lateness_seconds";

/// (Partition, tenant) pairs promoted to an overflow lane on this replica.
pub const DISPATCHER_OVERFLOW_PROMOTED: &str = "hookline_dispatcher_overflow_promoted";
/// The most that may be promoted at once (`--overflow-lanes`).
pub const DISPATCHER_OVERFLOW_CEILING: &str = "hookline_dispatcher_overflow_ceiling";
/// Tenants whose backlog qualifies for a lane while every lane is taken.
pub const DISPATCHER_OVERFLOW_WAITING: &str = "hookline_dispatcher_overflow_waiting";
/// Records moved from `deliveries` to an overflow lane, by lane.
pub const DISPATCHER_OVERFLOW_MOVED: &str = "hookline_dispatcher_overflow_moved_total";
/// Promotions and demotions, by change (`promoted`, `demoted`).
pub const DISPATCHER_OVERFLOW_CHANGES: &str = "hookline_dispatcher_overflow_changes_total";

pub(super) fn describe() {
    metrics::describe_gauge!(
        DISPATCHER_OVERFLOW_PROMOTED,
        "Subscriptions (per deliveries partition) promoted to an overflow lane on this replica."
    );
    metrics::describe_gauge!(
        DISPATCHER_OVERFLOW_CEILING,
        "The most subscriptions that may be promoted at once (--overflow-lanes)."
    );
    metrics::describe_gauge!(
        DISPATCHER_OVERFLOW_WAITING,
        "Subscriptions whose backlog qualifies for an overflow lane while every lane is taken."
    );
    metrics::describe_counter!(
        DISPATCHER_OVERFLOW_MOVED,
        "Records moved from deliveries to an overflow lane, by lane."
    );
    metrics::describe_counter!(
        DISPATCHER_OVERFLOW_CHANGES,
        "Overflow promotions and demotions, by change (promoted, demoted)."
    );
    metrics::describe_gauge!(
        DISPATCHER_TIER_OLDEST_DUE_AGE,
        metrics::Unit::Seconds,
        "Per retry tier, how far past due the most overdue unattempted record is."
    );
    metrics::describe_gauge!(
        DISPATCHER_TIER_WAITING_RECORDS,
        "Per retry tier, records buffered or in flight plus paused heads."
    );
    metrics::describe_counter!(
        DISPATCHER_TIER_PROMOTIONS,
        "Per retry tier, partitions fetched again because their held head fell due."
    );
    metrics::describe_gauge!(
        DISPATCHER_TIER_DUE_RECORDS,
        "Per retry tier, records due and not yet started (fetched, or a held head past due)."
    );
    metrics::describe_gauge!(
        DISPATCHER_TIER_PAUSED_PARTITIONS,
        "Per retry tier, partitions paused until their head is due."
    );
    metrics::describe_counter!(
        DISPATCHER_RETRIES_WRITTEN,
        "Retry records written, by tier."
    );
    metrics::describe_counter!(DISPATCHER_DEAD_LETTERS, "Dead letters written, by reason.");
    metrics::describe_histogram!(
        DISPATCHER_RETRY_LATENESS,
        metrics::Unit::Seconds,
        "How long after its due time a retry was attempted, by tier."
    );
    metrics::describe_counter!(
        DISPATCHER_ATTEMPTS,
        "Delivery attempts by outcome and HTTP status class."
    );
    metrics::describe_histogram!(
        DISPATCHER_ATTEMPT_DURATION,
        metrics::Unit::Seconds,
        "Duration of one attempt: connect, send and read the capped response."
    );
    metrics::describe_gauge!(DISPATCHER_IN_FLIGHT, "Attempts in flight.");
    metrics::describe_gauge!(
        DISPATCHER_IN_FLIGHT_BY_CLASS,
        "Attempts in flight by class: first_attempt or retry."
    );
    metrics::describe_gauge!(DISPATCHER_LANES, "Lanes with queued records.");
    metrics::describe_gauge!(
        DISPATCHER_RATE_LIMITED_SUBSCRIPTIONS,
        "Subscriptions with queued records held back by their rate limit."
    );
    metrics::describe_gauge!(
        DISPATCHER_BUFFERED_RECORDS,
        "Records buffered, queued or in flight."
    );
    metrics::describe_gauge!(
        DISPATCHER_OLDEST_READY_AGE,
        metrics::Unit::Seconds,
        "Age of the oldest buffered record that is ready but not yet attempted."
    );
    metrics::describe_counter!(
        DISPATCHER_PARKED,
        "Deliveries parked on a tier without an attempt, by tier and reason (not_due, breaker_open)."
    );
    metrics::describe_counter!(
        DISPATCHER_STRICT_HELD,
        "Strictly ordered deliveries held in place at the head of their lane, by reason (backoff, breaker_open)."
    );
    metrics::describe_gauge!(
        DISPATCHER_BREAKERS_OPEN,
        "Subscriptions whose circuit breaker is open or probing on this replica."
    );
    metrics::describe_counter!(
        DISPATCHER_BREAKER_TRANSITIONS,
        "Circuit breaker transitions, by the state entered (open, closed)."
    );
    metrics::describe_counter!(
        DISPATCHER_SUBSCRIPTIONS_DISABLED,
        "Subscriptions written back disabled by the dispatcher, by reason."
    );
    metrics::describe_counter!(
        DISPATCHER_EGRESS_DENIED,
        "Attempts refused by the egress policy."
    );
    metrics::describe_counter!(
        DISPATCHER_ERRORS,
        "Error events of the dispatcher (each also logged), by kind."
    );
    metrics::describe_counter!(
        DISPATCHER_FOLLOW_UP_ERRORS,
        "Retry, dead-letter or quarantined records whose transaction failed (they go into the next)."
    );
    metrics::describe_counter!(
        DISPATCHER_ATTEMPT_RECORDS,
        "Attempt-log records committed to deliveries.attempts."
    );
    metrics::describe_counter!(
        DISPATCHER_TRANSACTIONS,
        "Transactions of follow-ups and offsets, by outcome."
    );
    metrics::describe_histogram!(
        DISPATCHER_TRANSACTION_DURATION,
        metrics::Unit::Seconds,
        "Duration of a transaction of follow-ups and offsets, by outcome."
    );
    metrics::describe_counter!(
        DISPATCHER_QUARANTINED,
        "Input records that are not a Delivery, written to the quarantine topic, by reason."
    );
    metrics::describe_counter!(
        DISPATCHER_BACKPRESSURE_PAUSES,
        "Partitions paused, by the reason that first held them and their consumer."
    );
}

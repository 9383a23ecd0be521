//! Recording of dispatcher metrics; the names live in `metric_names`. Labels come
//! from fixed sets only, each the `as_str` of an enum: outcome
//! (`hookline_core::Outcome`), status class (`StatusClass`), topic label
//! (`deliveries` or a tier name), tier, dead-letter reason (`DeadLetterReason`),
//! quarantine reason, error kind ([`ErrorKind`]) — never tenant, URL or ids.
//! Notable events are recorded through `events`, which also logs them.

use std::time::Duration;

use hookline_core::{Classification, FailureKind, Outcome, Transition};

use crate::part::ParkReason;
use hookline_envelope::QuarantineReason;
use hookline_runtime::{
    metric_names::{self as m, label},
    subscriptions::DisabledReason,
};

use hookline_core::DeadLetterReason;

/// Zeroes labelled counters so dashboards show them before the first event.
pub(crate) fn describe() {
    for (outcome, class) in Outcome::labels() {
        metrics::counter!(m::DISPATCHER_ATTEMPTS, label::OUTCOME => outcome, label::STATUS_CLASS => class.as_str())
            .absolute(0);
    }
    metrics::counter!(m::DISPATCHER_EGRESS_DENIED).absolute(0);
    metrics::counter!(m::DISPATCHER_ATTEMPT_RECORDS).absolute(0);
    metrics::counter!(m::DISPATCHER_FOLLOW_UP_ERRORS).absolute(0);
    for reason in QuarantineReason::ALL {
        metrics::counter!(m::DISPATCHER_QUARANTINED, label::REASON => reason.as_str()).absolute(0);
    }
    for reason in DeadLetterReason::ALL.into_iter() {
        metrics::counter!(m::DISPATCHER_DEAD_LETTERS, label::REASON => reason.as_str()).absolute(0);
    }
    for reason in ["backoff", "breaker_open"] {
        metrics::counter!(m::DISPATCHER_STRICT_HELD, label::REASON => reason).absolute(0);
    }
    for state in ["open", "closed"] {
        metrics::counter!(m::DISPATCHER_BREAKER_TRANSITIONS, label::STATE => state).absolute(0);
    }
    for reason in DisabledReason::ALL {
        metrics::counter!(m::DISPATCHER_SUBSCRIPTIONS_DISABLED, label::REASON => reason.as_str())
            .absolute(0);
    }
    for kind in ErrorKind::ALL {
        metrics::counter!(m::DISPATCHER_ERRORS, label::KIND => kind.as_str()).absolute(0);
    }
}

/// Zeroes the per-tier counters.
pub(crate) fn describe_tiers(tiers: &[&'static str]) {
    for tier in tiers {
        metrics::counter!(m::DISPATCHER_RETRIES_WRITTEN, label::TIER => *tier).absolute(0);
        metrics::counter!(m::DISPATCHER_TIER_PROMOTIONS, label::TIER => *tier).absolute(0);
        for reason in ParkReason::ALL {
            metrics::counter!(m::DISPATCHER_PARKED, label::TIER => *tier, label::REASON => reason.as_str())
                .absolute(0);
        }
    }
}

pub(crate) fn retry_written(tier: &str) {
    metrics::counter!(m::DISPATCHER_RETRIES_WRITTEN, label::TIER => tier.to_owned()).increment(1);
}

pub(crate) fn dead_letter(reason: DeadLetterReason) {
    metrics::counter!(m::DISPATCHER_DEAD_LETTERS, label::REASON => reason.as_str()).increment(1);
}

pub(crate) fn parked(tier: &str, reason: ParkReason) {
    metrics::counter!(m::DISPATCHER_PARKED, label::TIER => tier.to_owned(), label::REASON => reason.as_str())
        .increment(1);
}

/// A strict head held in place: `breaker_open`, or else `backoff`.
pub(crate) fn strict_held(breaker: bool) {
    let reason = if breaker { "breaker_open" } else { "backoff" };
    metrics::counter!(m::DISPATCHER_STRICT_HELD, label::REASON => reason).increment(1);
}

pub(crate) fn breaker_transition(t: Transition) {
    metrics::counter!(m::DISPATCHER_BREAKER_TRANSITIONS, label::STATE => t.label()).increment(1);
}

pub(crate) fn subscription_disabled(reason: DisabledReason) {
    metrics::counter!(m::DISPATCHER_SUBSCRIPTIONS_DISABLED, label::REASON => reason.as_str())
        .increment(1);
}

/// Zeroes the overflow counters of lanes `0..lanes`.
pub(crate) fn describe_lanes(lanes: usize) {
    for lane in 0..lanes {
        metrics::counter!(m::DISPATCHER_OVERFLOW_MOVED, label::LANE => lane_label(lane))
            .absolute(0);
    }
    for change in ["promoted", "demoted"] {
        metrics::counter!(m::DISPATCHER_OVERFLOW_CHANGES, label::CHANGE => change).absolute(0);
    }
}

/// `lane-N`: an overflow lane's label (also its input's topic label).
pub(crate) fn lane_label(lane: usize) -> &'static str {
    const LABELS: [&str; hookline_envelope::OVERFLOW_LANES] = [
        "lane-0", "lane-1", "lane-2", "lane-3", "lane-4", "lane-5", "lane-6", "lane-7",
    ];
    LABELS.get(lane).copied().unwrap_or("lane-other")
}

/// A record moved to overflow lane `lane` (its transaction committed).
pub(crate) fn moved(lane: usize) {
    metrics::counter!(m::DISPATCHER_OVERFLOW_MOVED, label::LANE => lane_label(lane)).increment(1);
}

/// A tenant promoted to, or demoted from, an overflow lane.
pub(crate) fn overflow_change(promoted: bool) {
    let change = if promoted { "promoted" } else { "demoted" };
    metrics::counter!(m::DISPATCHER_OVERFLOW_CHANGES, label::CHANGE => change).increment(1);
}

/// The overflow gauges: promoted now, the ceiling, and those waiting for a lane.
pub(crate) fn overflow_gauges(promoted: usize, ceiling: usize, waiting: usize) {
    metrics::gauge!(m::DISPATCHER_OVERFLOW_PROMOTED).set(promoted as f64);
    metrics::gauge!(m::DISPATCHER_OVERFLOW_CEILING).set(ceiling as f64);
    metrics::gauge!(m::DISPATCHER_OVERFLOW_WAITING).set(waiting as f64);
}

pub(crate) fn promoted(tier: &'static str) {
    metrics::counter!(m::DISPATCHER_TIER_PROMOTIONS, label::TIER => tier).increment(1);
}

pub(crate) fn retry_lateness(tier: &'static str, late: Duration) {
    metrics::histogram!(m::DISPATCHER_RETRY_LATENESS, label::TIER => tier)
        .record(late.as_secs_f64());
}

pub(crate) fn attempt(c: &Classification, took: Duration) {
    let outcome = c.outcome.as_str();
    metrics::counter!(m::DISPATCHER_ATTEMPTS, label::OUTCOME => outcome, label::STATUS_CLASS => c.status_class().as_str())
        .increment(1);
    metrics::histogram!(m::DISPATCHER_ATTEMPT_DURATION, label::OUTCOME => outcome)
        .record(took.as_secs_f64());
    if c.outcome == Outcome::Failed(FailureKind::EgressDenied) {
        metrics::counter!(m::DISPATCHER_EGRESS_DENIED).increment(1);
    }
}

/// One error event without a counter of its own (see `events`).
pub(crate) fn error(kind: ErrorKind) {
    metrics::counter!(m::DISPATCHER_ERRORS, label::KIND => kind.as_str()).increment(1);
}

/// Follow-ups whose transaction failed (they go into the next one).
pub(crate) fn follow_up_failed(handoffs: usize) {
    metrics::counter!(m::DISPATCHER_FOLLOW_UP_ERRORS).increment(handoffs as u64);
}

/// A transaction ended: `committed`, `aborted` or `fenced`.
pub(crate) fn transaction(outcome: &'static str, took: Duration) {
    metrics::counter!(m::DISPATCHER_TRANSACTIONS, label::OUTCOME => outcome).increment(1);
    metrics::histogram!(m::DISPATCHER_TRANSACTION_DURATION, label::OUTCOME => outcome)
        .record(took.as_secs_f64());
}

pub(crate) fn attempt_log_written(records: usize) {
    metrics::counter!(m::DISPATCHER_ATTEMPT_RECORDS).increment(records as u64);
}

pub(crate) fn quarantined(reason: QuarantineReason) {
    metrics::counter!(m::DISPATCHER_QUARANTINED, label::REASON => reason.as_str()).increment(1);
}

/// A partition of `consumer` (`deliveries`, `strict` or a tier) was paused, first
/// held by `reason` (`buffer`, `writes`, `not_due`, `rewinding`).
pub(crate) fn paused(reason: &'static str, consumer: &'static str) {
    metrics::counter!(m::DISPATCHER_BACKPRESSURE_PAUSES, label::REASON => reason, label::CONSUMER => consumer)
        .increment(1);
}

/// The engine's gauges, set on every tick.
pub(crate) struct Gauges {
    pub in_flight: usize,
    /// `(class, attempts)`: `first_attempt` (from `deliveries` and
    /// `deliveries.strict`), `retry` (from a tier) and `overflow` (from an
    /// overflow lane).
    pub in_flight_by_class: [(&'static str, usize); 3],
    pub lanes: usize,
    pub rate_limited: usize,
    pub buffered: usize,
    pub breakers_open: usize,
    /// Oldest ready-but-unattempted record age per input (topic label, age).
    pub oldest_ready: Vec<(&'static str, Duration)>,
    pub tiers: Vec<TierGauges>,
}

/// One retry tier's gauges.
pub(crate) struct TierGauges {
    pub tier: &'static str,
    pub oldest_due_age: Duration,
    pub waiting: usize,
    pub due: usize,
    pub paused: usize,
}

pub(crate) fn gauges(g: &Gauges) {
    metrics::gauge!(m::DISPATCHER_IN_FLIGHT).set(g.in_flight as f64);
    for (class, n) in g.in_flight_by_class {
        metrics::gauge!(m::DISPATCHER_IN_FLIGHT_BY_CLASS, label::CLASS => class).set(n as f64);
    }
    metrics::gauge!(m::DISPATCHER_LANES).set(g.lanes as f64);
    metrics::gauge!(m::DISPATCHER_RATE_LIMITED_SUBSCRIPTIONS).set(g.rate_limited as f64);
    metrics::gauge!(m::DISPATCHER_BUFFERED_RECORDS).set(g.buffered as f64);
    metrics::gauge!(m::DISPATCHER_BREAKERS_OPEN).set(g.breakers_open as f64);
    for (topic, age) in &g.oldest_ready {
        metrics::gauge!(m::DISPATCHER_OLDEST_READY_AGE, label::TOPIC => *topic)
            .set(age.as_secs_f64());
    }
    for t in &g.tiers {
        metrics::gauge!(m::DISPATCHER_TIER_OLDEST_DUE_AGE, label::TIER => t.tier)
            .set(t.oldest_due_age.as_secs_f64());
        metrics::gauge!(m::DISPATCHER_TIER_WAITING_RECORDS, label::TIER => t.tier)
            .set(t.waiting as f64);
        metrics::gauge!(m::DISPATCHER_TIER_PAUSED_PARTITIONS, label::TIER => t.tier)
            .set(t.paused as f64);
        metrics::gauge!(m::DISPATCHER_TIER_DUE_RECORDS, label::TIER => t.tier).set(t.due as f64);
    }
}

#[cfg(test)]
mod tests {
    use hookline_core::OUTCOMES;

    use super::*;

    #[test]
    fn every_outcome_has_a_known_class() {
        let labels: Vec<_> = Outcome::labels().collect();
        assert_eq!(labels.len(), OUTCOMES.len());
        for (outcome, class) in labels {
            assert!(OUTCOMES.contains(&outcome), "{outcome}");
            let class = class.as_str();
            assert!(
                ["1xx", "2xx", "3xx", "4xx", "5xx", "invalid", "none"].contains(&class),
                "{outcome}"
            );
            assert_eq!(outcome.starts_with("http_"), class != "none", "{outcome}");
        }
    }
}

/// The `kind` label of `hookline_dispatcher_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ErrorKind {
    /// The ladder picked a tier that has no topic.
    NoRetryTier,
    /// A subscription's `secret_ref` cannot be loaded (the attempt retries).
    SecretUnavailable,
    /// A record from a topic the dispatcher does not consume.
    UnexpectedTopic,
    /// A record of a partition not assigned here (dropped; its owner reads it).
    NotAssigned,
    /// A record at an offset already tracked (a refetch the watermark refused).
    AlreadyTracked,
    /// The lanes refused a record (it is dropped from the buffer, refetched later).
    LanesRefusedRecord,
    /// The lanes refused a completion.
    LanesRefusedCompletion,
    /// The lanes started a record the engine does not hold.
    StartedNotHeld,
    /// An attempt task panicked; its delivery is queued again.
    AttemptPanicked,
    /// The consumer reported an error.
    ConsumerError,
    /// A partition could not be paused.
    PauseFailed,
    /// A partition could not be resumed.
    ResumeFailed,
    /// The poller thread of a consumer is gone.
    PollerGone,
    /// A transaction of follow-ups and offsets failed; it goes again.
    CommitFailed,
    /// The watermark refused to finish an offset.
    WatermarkRefused,
    /// The engine did not confirm a revoke within the revoke wait.
    RevokeNotConfirmed,
    /// A partition could not be paused or sought back to a head not yet due.
    RewindFailed,
    /// An overflow lane's partition could not be assigned or unassigned.
    LaneAssignFailed,
    /// A record of the shared breakers' topic could not be used (skipped).
    UnusableBreakerRecord,
}

impl ErrorKind {
    /// Every kind, for pre-registering the series.
    pub(crate) const ALL: [Self; 19] = [
        Self::NoRetryTier,
        Self::SecretUnavailable,
        Self::UnexpectedTopic,
        Self::NotAssigned,
        Self::AlreadyTracked,
        Self::LanesRefusedRecord,
        Self::LanesRefusedCompletion,
        Self::StartedNotHeld,
        Self::AttemptPanicked,
        Self::ConsumerError,
        Self::PauseFailed,
        Self::ResumeFailed,
        Self::PollerGone,
        Self::CommitFailed,
        Self::WatermarkRefused,
        Self::RevokeNotConfirmed,
        Self::RewindFailed,
        Self::LaneAssignFailed,
        Self::UnusableBreakerRecord,
    ];

    /// The metric label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::NoRetryTier => "no_retry_tier",
            Self::SecretUnavailable => "secret_unavailable",
            Self::UnexpectedTopic => "unexpected_topic",
            Self::NotAssigned => "not_assigned",
            Self::AlreadyTracked => "already_tracked",
            Self::LanesRefusedRecord => "lanes_refused_record",
            Self::LanesRefusedCompletion => "lanes_refused_completion",
            Self::StartedNotHeld => "started_not_held",
            Self::AttemptPanicked => "attempt_panicked",
            Self::ConsumerError => "consumer_error",
            Self::PauseFailed => "pause_failed",
            Self::ResumeFailed => "resume_failed",
            Self::PollerGone => "poller_gone",
            Self::CommitFailed => "commit_failed",
            Self::WatermarkRefused => "watermark_refused",
            Self::RevokeNotConfirmed => "revoke_not_confirmed",
            Self::RewindFailed => "rewind_failed",
            Self::LaneAssignFailed => "lane_assign_failed",
            Self::UnusableBreakerRecord => "unusable_breaker_record",
        }
    }
}

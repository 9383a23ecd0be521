//! Recording of dispatcher metrics; the names live in `metric_names`. Labels come
//! from fixed sets only, each the `as_str` of an enum: outcome
//! (`hookline_core::Outcome`), status class (`StatusClass`), topic label
//! (`deliveries` or a tier name), tier, dead-letter reason (`DeadLetterReason`),
//! quarantine reason, error kind (`events::ErrorKind`) — never tenant, URL or ids.
//! Notable events are recorded through `events`, which also logs them.

use std::time::Duration;

use hookline_core::{Classification, FailureKind, Outcome};
use hookline_envelope::QuarantineReason;
use hookline_runtime::metric_names::{self as m, label};

use hookline_core::DeadLetterReason;

use crate::events::ErrorKind;

/// Zeroes labelled counters so dashboards show them before the first event.
pub(crate) fn describe() {
    for (outcome, class) in Outcome::labels() {
        metrics::counter!(m::DISPATCHER_ATTEMPTS, label::OUTCOME => outcome, label::STATUS_CLASS => class.as_str())
            .absolute(0);
    }
    metrics::counter!(m::DISPATCHER_CANCELLED).absolute(0);
    metrics::counter!(m::DISPATCHER_EGRESS_DENIED).absolute(0);
    metrics::counter!(m::DISPATCHER_FOLLOW_UP_ERRORS).absolute(0);
    for reason in QuarantineReason::ALL {
        metrics::counter!(m::DISPATCHER_QUARANTINED, label::REASON => reason.as_str()).absolute(0);
    }
    for reason in DeadLetterReason::ALL.into_iter() {
        metrics::counter!(m::DISPATCHER_DEAD_LETTERS, label::REASON => reason.as_str()).absolute(0);
    }
    for kind in ErrorKind::ALL {
        metrics::counter!(m::DISPATCHER_ERRORS, label::KIND => kind.as_str()).absolute(0);
    }
}

/// Zeroes the per-tier counters.
pub(crate) fn describe_tiers(tiers: &[&'static str]) {
    for tier in tiers {
        metrics::counter!(m::DISPATCHER_RETRIES_WRITTEN, label::TIER => *tier).absolute(0);
    }
}

pub(crate) fn retry_written(tier: &str) {
    metrics::counter!(m::DISPATCHER_RETRIES_WRITTEN, label::TIER => tier.to_owned()).increment(1);
}

pub(crate) fn dead_letter(reason: DeadLetterReason) {
    metrics::counter!(m::DISPATCHER_DEAD_LETTERS, label::REASON => reason.as_str()).increment(1);
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

pub(crate) fn cancelled() {
    metrics::counter!(m::DISPATCHER_CANCELLED).increment(1);
}

pub(crate) fn follow_up_failed() {
    metrics::counter!(m::DISPATCHER_FOLLOW_UP_ERRORS).increment(1);
}

pub(crate) fn quarantined(reason: QuarantineReason) {
    metrics::counter!(m::DISPATCHER_QUARANTINED, label::REASON => reason.as_str()).increment(1);
}

pub(crate) fn paused() {
    metrics::counter!(m::DISPATCHER_BACKPRESSURE_PAUSES).increment(1);
}

/// The engine's gauges, set on every tick.
pub(crate) struct Gauges {
    pub in_flight: usize,
    pub lanes: usize,
    pub rate_limited: usize,
    pub buffered: usize,
    /// Oldest ready-but-unattempted record age per input (topic label, age).
    pub oldest_ready: Vec<(&'static str, Duration)>,
    pub tiers: Vec<TierGauges>,
}

/// One retry tier's gauges.
pub(crate) struct TierGauges {
    pub tier: &'static str,
    pub oldest_due_age: Duration,
    pub waiting: usize,
    pub paused: usize,
}

pub(crate) fn gauges(g: &Gauges) {
    metrics::gauge!(m::DISPATCHER_IN_FLIGHT).set(g.in_flight as f64);
    metrics::gauge!(m::DISPATCHER_LANES).set(g.lanes as f64);
    metrics::gauge!(m::DISPATCHER_RATE_LIMITED_SUBSCRIPTIONS).set(g.rate_limited as f64);
    metrics::gauge!(m::DISPATCHER_BUFFERED_RECORDS).set(g.buffered as f64);
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

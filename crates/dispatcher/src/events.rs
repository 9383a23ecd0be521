//! The dispatcher's notable events, one struct each, as Vector's
//! `internal_events`: `emit()` both logs the event and counts it, so no error
//! path or skip is invisible to the dashboards. Error events without a counter
//! of their own count in `hookline_dispatcher_errors_total{kind}`, `kind` from
//! the fixed [`ErrorKind`] set; the others keep the counter dashboards already
//! read (attempts, follow-up errors, dead letters, retries, quarantined).
//!
//! Fields that name engine-side types (a partition, a lane key, an error) are
//! taken as `&dyn Debug` / `&dyn Display`, so an event does not tie this module
//! to how the engine spells them.

use std::{
    fmt::{Debug, Display},
    time::{Duration, SystemTime},
};

use hookline_core::{DeadLetterReason, Transition, Verdict};
use hookline_envelope::{DeadLetter, Delivery, QuarantineReason, QuarantinedEvent, Subscription};
use hookline_runtime::subscriptions::DisabledReason;

use crate::{
    handoff::{Handoff, Written},
    metrics::{self, ErrorKind},
    outcome::AttemptFacts,
    part::ParkReason,
};

// --- attempt.rs, quarantine.rs, lib.rs -------------------------------------

/// An attempt ended: its outcome is logged (debug when delivered, info when a
/// retry follows, warn when rejected) and counted by outcome and status class.
pub(crate) struct AttemptEnded<'a> {
    pub delivery: &'a Delivery,
    pub facts: &'a AttemptFacts<'a>,
    /// Measured on the monotonic clock.
    pub took: Duration,
}

impl AttemptEnded<'_> {
    pub(crate) fn emit(self) {
        let d = self.delivery;
        let c = &self.facts.classification;
        let outcome = c.outcome.as_str();
        let took_ms = self.facts.now_ms - self.facts.started_ms;
        // The event's trace id, so a log line joins the producer's trace.
        let trace_id = d
            .traceparent
            .as_deref()
            .and_then(hookline_core::trace::trace_id)
            .unwrap_or_default();
        match c.verdict {
            Verdict::Delivered => tracing::debug!(
                delivery_id = %d.delivery_id,
                trace_id,
                outcome,
                took_ms,
                "delivered"
            ),
            Verdict::Retry { .. } => tracing::info!(
                delivery_id = %d.delivery_id,
                subscription_id = %d.subscription_id,
                trace_id,
                attempt = d.attempt + 1,
                outcome,
                took_ms,
                "attempt failed; scheduling a retry"
            ),
            Verdict::Rejected { reason } => tracing::warn!(
                delivery_id = %d.delivery_id,
                subscription_id = %d.subscription_id,
                trace_id,
                outcome,
                reason = reason.as_str(),
                "attempt rejected; dead-lettering"
            ),
        }
        metrics::attempt(c, self.took);
    }
}

/// A delivery cannot be signed: its secret is not loaded (the attempt is a
/// `missing_secret` failure and retries).
pub(crate) struct SecretUnavailable<'a> {
    pub delivery: &'a Delivery,
    pub error: &'a dyn Display,
}

impl SecretUnavailable<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            delivery_id = %self.delivery.delivery_id,
            subscription_id = %self.delivery.subscription_id,
            error = %self.error,
            "cannot sign: secret unavailable"
        );
        metrics::error(ErrorKind::SecretUnavailable);
    }
}

/// The ladder picked a tier with no topic; the record stays unfinished.
pub(crate) struct NoSuchRetryTier {
    pub tier: usize,
}

impl NoSuchRetryTier {
    pub(crate) fn emit(self) {
        tracing::error!(
            tier = self.tier,
            "no such retry tier; leaving the record unfinished"
        );
        metrics::error(ErrorKind::NoRetryTier);
    }
}

/// Counts and logs a hand-off as written (its transaction committed).
pub(crate) fn written(handoff: &Handoff) {
    match &handoff.written {
        Written::Retry { tier, delivery_id } => RetryWritten { tier, delivery_id }.emit(),
        Written::Dead {
            reason,
            delivery_id,
            ..
        } => DeadLettered {
            reason: *reason,
            delivery_id,
        }
        .emit(),
        Written::Quarantined { reason, record } => Quarantined {
            topic: &handoff.topic,
            record,
            reason: *reason,
        }
        .emit(),
        Written::Reparked { tier, reason } => Parked {
            tier,
            reason: *reason,
        }
        .emit(),
        Written::Moved { lane } => metrics::moved(*lane),
    }
    if let Some(d) = &handoff.disable {
        SubscriptionDisabled {
            record: &d.record,
            reason: d.reason,
        }
        .emit();
    }
}

/// A hand-off's tier or lane has no topic (unreachable while the ladder, the
/// lanes and the topics come from the same settings): a tier is counted as
/// [`NoSuchRetryTier`]; a lane only logs.
pub(crate) fn missing_topic(missing: hookline_dispatch_core::build::Missing) {
    use hookline_dispatch_core::build::Missing;
    match missing {
        Missing::Tier(tier) => NoSuchRetryTier { tier }.emit(),
        Missing::Lane(lane) => {
            tracing::error!(lane, "no such overflow lane; leaving the record unfinished")
        }
    }
}

/// A transaction (follow-ups and offsets) failed: it is aborted and its
/// hand-offs go into the next one, after a back-off.
pub(crate) struct TransactionFailed<'a> {
    pub error: &'a dyn Display,
    pub handoffs: usize,
    /// `aborted`, or `fenced` when the producer had to be re-created.
    pub outcome: &'static str,
}

impl TransactionFailed<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            error = %self.error,
            handoffs = self.handoffs,
            outcome = self.outcome,
            "transaction failed; its follow-ups and offsets go into the next one"
        );
        metrics::follow_up_failed(self.handoffs);
        metrics::error(ErrorKind::CommitFailed);
    }
}

/// A retry record is committed on its tier.
pub(crate) struct RetryWritten<'a> {
    pub tier: &'a str,
    pub delivery_id: &'a str,
}

impl RetryWritten<'_> {
    pub(crate) fn emit(self) {
        tracing::debug!(
            delivery_id = %self.delivery_id,
            tier = self.tier,
            "retry record written"
        );
        metrics::retry_written(self.tier);
    }
}

/// A delivery parked unattempted (not due yet, or its breaker is open) is
/// committed on a tier.
pub(crate) struct Parked<'a> {
    pub tier: &'a str,
    pub reason: ParkReason,
}

impl Parked<'_> {
    pub(crate) fn emit(self) {
        tracing::debug!(tier = %self.tier, reason = self.reason.as_str(), "parked a delivery without an attempt");
        metrics::parked(self.tier, self.reason);
    }
}

/// A strictly ordered delivery waits in place at the head of its lane.
pub(crate) struct StrictHeld<'a> {
    pub subscription_id: &'a str,
    pub attempt: i32,
    pub until: SystemTime,
    pub breaker: bool,
}

impl StrictHeld<'_> {
    pub(crate) fn emit(self) {
        let wait_ms = self
            .until
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            .as_millis();
        tracing::debug!(
            subscription_id = %self.subscription_id,
            attempt = self.attempt,
            wait_ms = u64::try_from(wait_ms).unwrap_or(u64::MAX),
            breaker_open = self.breaker,
            "strict head held in place; the subscription's later deliveries wait behind it"
        );
        metrics::strict_held(self.breaker);
    }
}

/// A subscription's circuit breaker opened or closed.
pub(crate) struct BreakerChanged<'a> {
    pub subscription_id: &'a str,
    pub transition: Transition,
}

impl BreakerChanged<'_> {
    pub(crate) fn emit(self) {
        match self.transition {
            Transition::Opened => tracing::warn!(
                subscription_id = %self.subscription_id,
                "circuit breaker opened: nothing is sent to the endpoint until a probe succeeds; its deliveries are parked"
            ),
            Transition::Reopened { for_ } => tracing::info!(
                subscription_id = %self.subscription_id,
                open_for_ms = u64::try_from(for_.as_millis()).unwrap_or(u64::MAX),
                "circuit breaker probe failed; open again"
            ),
            Transition::Closed => tracing::info!(
                subscription_id = %self.subscription_id,
                "circuit breaker closed: the probe succeeded"
            ),
        }
        metrics::breaker_transition(self.transition);
    }
}

/// A record of `subscriptions.health` could not be used: skipped (every
/// replica re-reads the topic; the fix is a correct record under its key).
pub(crate) struct UnusableBreakerRecord<'a> {
    pub partition: i32,
    pub offset: i64,
    pub why: &'a dyn Display,
}

impl UnusableBreakerRecord<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            partition = self.partition,
            offset = self.offset,
            why = %self.why,
            "skipping an unusable shared circuit-breaker record"
        );
        metrics::error(ErrorKind::UnusableBreakerRecord);
    }
}

/// A dead letter is committed on the DLQ.
pub(crate) struct DeadLettered<'a> {
    pub reason: DeadLetterReason,
    pub delivery_id: &'a str,
}

impl DeadLettered<'_> {
    pub(crate) fn emit(self) {
        tracing::debug!(
            delivery_id = %self.delivery_id,
            reason = self.reason.as_str(),
            "dead letter written"
        );
        metrics::dead_letter(self.reason);
    }
}

/// A delivery is kept unattempted (its subscription is disabled, deleted or another
/// tenant's); counted as a dead letter once its transaction commits.
pub(crate) struct NotAttempted<'a> {
    pub letter: &'a DeadLetter,
    pub reason: DeadLetterReason,
}

impl NotAttempted<'_> {
    pub(crate) fn emit(self) {
        let d = &self.letter.delivery;
        tracing::info!(
            delivery_id = %d.delivery_id,
            subscription_id = %d.subscription_id,
            reason = self.reason.as_str(),
            detail = self.letter.detail.as_deref().unwrap_or_default(),
            "not attempting the delivery: it is kept as a dead letter"
        );
    }
}

/// A subscription written back disabled is committed on the subscriptions topic.
pub(crate) struct SubscriptionDisabled<'a> {
    pub record: &'a Subscription,
    pub reason: DisabledReason,
}

impl SubscriptionDisabled<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            subscription_id = %self.record.subscription_id,
            tenant_id = %self.record.tenant_id,
            reason = self.reason.as_str(),
            version = self.record.version,
            "subscription disabled; its deliveries are kept as dead letters until it is enabled again (hookline-fanout subscriptions enable)"
        );
        metrics::subscription_disabled(self.reason);
    }
}

/// A record that is not a `Delivery` is committed on the quarantine topic.
pub(crate) struct Quarantined<'a> {
    pub topic: &'a str,
    pub record: &'a QuarantinedEvent,
    pub reason: QuarantineReason,
}

impl Quarantined<'_> {
    pub(crate) fn emit(self) {
        tracing::debug!(
            topic = %self.topic,
            source_topic = %self.record.source_topic,
            source_partition = self.record.source_partition,
            source_offset = self.record.source_offset,
            reason = self.reason.as_str(),
            "quarantined record committed"
        );
        metrics::quarantined(self.reason);
    }
}

// --- engine/ and machine/ ----------------------------------------------------

/// A record from a topic the dispatcher does not consume; skipped.
pub(crate) struct UnexpectedTopic<'a> {
    pub topic: &'a str,
}

impl UnexpectedTopic<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(topic = self.topic, "message from an unexpected topic");
        metrics::error(ErrorKind::UnexpectedTopic);
    }
}

/// A record of a partition not assigned here; skipped (its owner reads it).
pub(crate) struct NotAssigned<'a> {
    pub part: &'a dyn Debug,
    pub offset: i64,
}

impl NotAssigned<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(part = ?self.part, offset = self.offset, "skipping a record of a partition not assigned here");
        metrics::error(ErrorKind::NotAssigned);
    }
}

/// A record at an offset the watermark already tracks; skipped.
pub(crate) struct AlreadyTracked<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub error: &'a dyn Display,
}

impl AlreadyTracked<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(
            topic = self.topic,
            partition = self.partition,
            offset = self.offset,
            error = %self.error,
            "skipping a record already tracked"
        );
        metrics::error(ErrorKind::AlreadyTracked);
    }
}

/// The lanes refused a record; it is dropped from the buffer.
pub(crate) struct LanesRefusedRecord<'a> {
    pub error: &'a dyn Display,
}

impl LanesRefusedRecord<'_> {
    pub(crate) fn emit(self) {
        tracing::error!(error = %self.error, "lanes refused a record");
        metrics::error(ErrorKind::LanesRefusedRecord);
    }
}

/// The lanes refused a completion.
pub(crate) struct LanesRefusedCompletion<'a> {
    pub error: &'a dyn Display,
}

impl LanesRefusedCompletion<'_> {
    pub(crate) fn emit(self) {
        tracing::error!(error = %self.error, "lanes refused a completion");
        metrics::error(ErrorKind::LanesRefusedCompletion);
    }
}

/// The lanes started a record the engine does not hold.
pub(crate) struct StartedNotHeld<'a> {
    pub key: &'a dyn Debug,
}

impl StartedNotHeld<'_> {
    pub(crate) fn emit(self) {
        tracing::error!(key = ?self.key, "started a record that is not held");
        metrics::error(ErrorKind::StartedNotHeld);
    }
}

/// An attempt task panicked; its delivery is queued again (its offset stays
/// unfinished until an attempt ends durably).
pub(crate) struct AttemptPanicked<'a> {
    pub key: &'a dyn Debug,
}

impl AttemptPanicked<'_> {
    pub(crate) fn emit(self) {
        tracing::error!(key = ?self.key, "attempt task panicked; the delivery is queued again");
        metrics::error(ErrorKind::AttemptPanicked);
    }
}

/// The consumer reported an error.
pub(crate) struct ConsumerError<'a> {
    pub error: &'a dyn Display,
}

impl ConsumerError<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(error = %self.error, "consumer error");
        metrics::error(ErrorKind::ConsumerError);
    }
}

/// A partition could not be paused (`pause`) or resumed.
pub(crate) struct PauseFailed<'a> {
    pub part: &'a dyn Debug,
    pub pause: bool,
    pub error: &'a dyn Display,
}

impl PauseFailed<'_> {
    pub(crate) fn emit(self) {
        tracing::warn!(part = ?self.part, pause = self.pause, error = %self.error, "cannot pause/resume a partition");
        metrics::error(if self.pause {
            ErrorKind::PauseFailed
        } else {
            ErrorKind::ResumeFailed
        });
    }
}

/// An overflow lane's partition could not be (un)assigned with its partition
/// of `deliveries`: until it is, ordered subscriptions of that partition keep
/// moving to the lane (never out of order), and nobody here reads it.
pub(crate) struct LaneAssignFailed<'a> {
    pub part: &'a dyn Debug,
    pub error: &'a dyn Display,
}

impl LaneAssignFailed<'_> {
    pub(crate) fn emit(self) {
        tracing::error!(part = ?self.part, error = %self.error, "cannot assign or unassign an overflow lane's partition");
        metrics::error(ErrorKind::LaneAssignFailed);
    }
}

/// A subscription promoted to, or demoted from, an overflow lane.
pub(crate) struct OverflowChanged<'a> {
    pub partition: i32,
    pub tenant_id: &'a str,
    pub lane: usize,
    pub promoted: bool,
}

impl OverflowChanged<'_> {
    pub(crate) fn emit(self) {
        if self.promoted {
            tracing::info!(partition = self.partition, tenant_id = %self.tenant_id, lane = self.lane,
                "tenant promoted: its records of this partition move to an overflow lane");
        } else {
            tracing::info!(partition = self.partition, tenant_id = %self.tenant_id, lane = self.lane,
                "tenant demoted: its records of this partition are buffered in place again");
        }
        metrics::overflow_change(self.promoted);
    }
}

/// The poller of a consumer is gone, so a command (a rewind) was not sent.
pub(crate) struct PollerGone<'a> {
    pub part: &'a dyn Debug,
    /// What was not done, e.g. `rewinding`.
    pub skipped: &'static str,
}

impl PollerGone<'_> {
    pub(crate) fn emit(self) {
        tracing::debug!(part = ?self.part, skipped = self.skipped, "poller gone");
        metrics::error(ErrorKind::PollerGone);
    }
}

// --- offsets.rs ----------------------------------------------------------------

/// The watermark refused to finish an offset.
pub(crate) struct WatermarkRefused<'a> {
    pub part: &'a dyn Debug,
    pub offset: i64,
    pub error: &'a dyn Display,
}

impl WatermarkRefused<'_> {
    pub(crate) fn emit(self) {
        tracing::error!(part = ?self.part, offset = self.offset, error = %self.error, "watermark refused a finish");
        metrics::error(ErrorKind::WatermarkRefused);
    }
}

// --- consumer.rs ---------------------------------------------------------------

/// The rebalance callback stopped waiting for the engine to confirm a revoke;
/// the partitions are handed over uncommitted (the next owner re-attempts).
pub(crate) struct RevokeNotConfirmed {
    pub waited: Duration,
}

impl RevokeNotConfirmed {
    pub(crate) fn emit(self) {
        tracing::warn!(waited = ?self.waited, "engine did not confirm the revoke in time; handing over");
        metrics::error(ErrorKind::RevokeNotConfirmed);
    }
}

/// A tier partition could not be paused, or sought back to its head, to wait
/// for the head's due time.
pub(crate) struct RewindFailed<'a> {
    pub topic: &'a str,
    pub partition: i32,
    /// The head's offset when the seek failed; `None` when the pause did.
    pub offset: Option<i64>,
    pub error: &'a dyn Display,
}

impl RewindFailed<'_> {
    pub(crate) fn emit(self) {
        match self.offset {
            None => {
                tracing::warn!(topic = self.topic, partition = self.partition, error = %self.error, "cannot pause a partition to wait for its due time")
            }
            Some(offset) => {
                tracing::warn!(topic = self.topic, partition = self.partition, offset, error = %self.error, "cannot seek back to a record not yet due")
            }
        }
        metrics::error(ErrorKind::RewindFailed);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use hookline_runtime::{metric_names as m, telemetry::metrics_recorder};

    use super::*;

    /// The value of `name{kind="…"}` in the process's `/metrics` text.
    fn errors(kind: ErrorKind) -> f64 {
        let text = metrics_recorder().unwrap().render();
        let series = format!("{}{{kind=\"{}\"}} ", m::DISPATCHER_ERRORS, kind.as_str());
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }

    #[test]
    fn kinds_have_distinct_snake_case_labels() {
        let labels: BTreeSet<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(labels.len(), ErrorKind::ALL.len());
        for l in labels {
            assert!(
                l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{l}"
            );
        }
    }

    #[test]
    fn every_error_event_counts_its_kind() {
        let e: &dyn Display = &"boom";
        let part: &dyn Debug = &(0_u16, 3_i32);
        // Each event once, then the count of its kind must have grown by one.
        let cases: Vec<(ErrorKind, Box<dyn Fn()>)> = vec![
            (
                ErrorKind::NoRetryTier,
                Box::new(|| NoSuchRetryTier { tier: 9 }.emit()),
            ),
            (
                ErrorKind::UnexpectedTopic,
                Box::new(|| UnexpectedTopic { topic: "x" }.emit()),
            ),
            (
                ErrorKind::AlreadyTracked,
                Box::new(move || {
                    AlreadyTracked {
                        topic: "t",
                        partition: 1,
                        offset: 2,
                        error: e,
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::NotAssigned,
                Box::new(move || NotAssigned { part, offset: 3 }.emit()),
            ),
            (
                ErrorKind::LanesRefusedRecord,
                Box::new(move || LanesRefusedRecord { error: e }.emit()),
            ),
            (
                ErrorKind::LanesRefusedCompletion,
                Box::new(move || LanesRefusedCompletion { error: e }.emit()),
            ),
            (
                ErrorKind::StartedNotHeld,
                Box::new(move || StartedNotHeld { key: part }.emit()),
            ),
            (
                ErrorKind::AttemptPanicked,
                Box::new(move || AttemptPanicked { key: part }.emit()),
            ),
            (
                ErrorKind::ConsumerError,
                Box::new(move || ConsumerError { error: e }.emit()),
            ),
            (
                ErrorKind::PauseFailed,
                Box::new(move || {
                    PauseFailed {
                        part,
                        pause: true,
                        error: e,
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::ResumeFailed,
                Box::new(move || {
                    PauseFailed {
                        part,
                        pause: false,
                        error: e,
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::PollerGone,
                Box::new(move || {
                    PollerGone {
                        part,
                        skipped: "rewinding",
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::CommitFailed,
                Box::new(move || {
                    TransactionFailed {
                        error: e,
                        handoffs: 2,
                        outcome: "aborted",
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::WatermarkRefused,
                Box::new(move || {
                    WatermarkRefused {
                        part,
                        offset: 7,
                        error: e,
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::RevokeNotConfirmed,
                Box::new(|| {
                    RevokeNotConfirmed {
                        waited: Duration::from_secs(30),
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::RewindFailed,
                Box::new(move || {
                    RewindFailed {
                        topic: "t",
                        partition: 0,
                        offset: None,
                        error: e,
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::RewindFailed,
                Box::new(move || {
                    RewindFailed {
                        topic: "t",
                        partition: 0,
                        offset: Some(4),
                        error: e,
                    }
                    .emit()
                }),
            ),
            (
                ErrorKind::LaneAssignFailed,
                Box::new(move || LaneAssignFailed { part, error: e }.emit()),
            ),
            (
                ErrorKind::UnusableBreakerRecord,
                Box::new(|| {
                    UnusableBreakerRecord {
                        partition: 0,
                        offset: 9,
                        why: &"not_avro",
                    }
                    .emit()
                }),
            ),
        ];
        let mut seen = BTreeSet::new();
        for (kind, emit) in cases {
            let before = errors(kind);
            emit();
            assert_eq!(errors(kind), before + 1.0, "{kind:?}");
            seen.insert(kind.as_str());
        }
        // SecretUnavailable needs a Delivery; every other kind is covered here.
        let missing: Vec<&str> = ErrorKind::ALL
            .iter()
            .map(|k| k.as_str())
            .filter(|k| !seen.contains(k) && *k != "secret_unavailable")
            .collect();
        assert!(missing.is_empty(), "untested kinds: {missing:?}");
    }
}

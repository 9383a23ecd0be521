//! What follows an attempt, decided purely from the delivery, its classification
//! and `now`: nothing (delivered), a retry record for a tier topic, or a dead
//! letter. The source record is finished only after the follow-up is durable.
//!
//! Until the retry ladder (issue #5) plugs in here, every retry goes to the first
//! tier with `due_at = now + INTERIM_RETRY_DELAY`; the ladder replaces
//! [`RetryPolicy::FirstTier`] with `Ladder::decide` (tier choice, `Retry-After`,
//! exhaustion) without the engine changing.

use std::time::Duration;

use hookline_core::{Classification, Verdict};
use hookline_envelope::{bounded_detail, DeadLetter, Delivery};

/// Delay of the first retry tier until the ladder decides it.
pub(crate) const INTERIM_RETRY_DELAY: Duration = Duration::from_secs(10);

/// Written to `policy_version` of retries and dead letters this engine decides.
pub(crate) const POLICY_VERSION: &str = "dispatcher-v1-first-tier";

/// How retries are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryPolicy {
    /// Every retry to tier 0 after a fixed delay.
    FirstTier { delay: Duration },
}

/// The follow-up of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FollowUp {
    /// Delivered: finish the source record.
    Done,
    /// Write `record` to retry tier `tier` (index into the ladder), then finish.
    Retry { tier: usize, record: Box<Delivery> },
    /// Write the dead letter to the DLQ, then finish.
    Dead(Box<DeadLetter>),
}

/// When and how an attempt went, for the follow-up records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttemptFacts<'a> {
    pub classification: Classification,
    /// When the attempt started, ms since the epoch.
    pub started_ms: i64,
    /// When it ended, ms since the epoch.
    pub now_ms: i64,
    /// A short, secret-free explanation for a dead letter (error text or body start).
    pub detail: Option<&'a str>,
}

/// Decides the follow-up of an attempt on `delivery`.
pub(crate) fn plan(delivery: &Delivery, facts: &AttemptFacts<'_>, policy: RetryPolicy) -> FollowUp {
    let c = &facts.classification;
    let attempted = after_attempt(delivery, facts);
    match c.verdict {
        Verdict::Delivered => FollowUp::Done,
        Verdict::Retry { retry_after: _ } => match policy {
            RetryPolicy::FirstTier { delay } => {
                let mut record = attempted;
                record.due_at = facts.now_ms.saturating_add(millis(delay));
                record.policy_version = Some(POLICY_VERSION.to_owned());
                FollowUp::Retry {
                    tier: 0,
                    record: Box::new(record),
                }
            }
        },
        Verdict::Rejected { reason } => FollowUp::Dead(Box::new(DeadLetter {
            delivery: attempted,
            reason: reason.as_str().to_owned(),
            last_status: c.status.map(i32::from),
            dead_at: facts.now_ms,
            policy_version: POLICY_VERSION.to_owned(),
            detail: facts.detail.map(bounded_detail),
        })),
    }
}

/// The delivery with this attempt recorded: one more attempt, its times and outcome.
fn after_attempt(delivery: &Delivery, facts: &AttemptFacts<'_>) -> Delivery {
    let mut next = delivery.clone();
    next.attempt = next.attempt.saturating_add(1);
    next.first_attempt_at = Some(next.first_attempt_at.unwrap_or(facts.started_ms));
    next.last_attempt_at = Some(facts.started_ms);
    next.last_outcome = Some(facts.classification.outcome.to_owned());
    next
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use hookline_core::{classify, AttemptResult, FailureKind};

    use super::*;

    fn delivery() -> Delivery {
        Delivery {
            delivery_id: "msg_1".into(),
            event_id: "evt_1".into(),
            tenant_id: "acme".into(),
            subscription_id: "sub_1".into(),
            event_type: "invoice.paid".into(),
            occurred_at: 1_000,
            content_type: "application/json".into(),
            payload: b"{}".to_vec(),
            attributes: Default::default(),
            attempt: 0,
            created_at: 2_000,
            due_at: 2_000,
            first_attempt_at: None,
            last_attempt_at: None,
            last_outcome: None,
            policy_version: None,
            replay_of: None,
        }
    }

    fn facts(result: AttemptResult) -> AttemptFacts<'static> {
        AttemptFacts {
            classification: classify(&result, SystemTime::UNIX_EPOCH),
            started_ms: 10_000,
            now_ms: 10_250,
            detail: Some("detail"),
        }
    }

    const POLICY: RetryPolicy = RetryPolicy::FirstTier {
        delay: Duration::from_secs(10),
    };

    fn status(code: u16) -> AttemptResult {
        AttemptResult::Response {
            status: code,
            retry_after: None,
        }
    }

    #[test]
    fn delivered_needs_nothing_more() {
        assert_eq!(
            plan(&delivery(), &facts(status(204)), POLICY),
            FollowUp::Done
        );
    }

    #[test]
    fn retry_goes_to_the_first_tier_with_the_attempt_recorded() {
        let cases = [
            (status(503), "http_503"),
            (status(429), "http_429"),
            (AttemptResult::Failed(FailureKind::Timeout), "timeout"),
            (
                AttemptResult::Failed(FailureKind::MissingSecret),
                "missing_secret",
            ),
        ];
        for (result, outcome) in cases {
            let FollowUp::Retry { tier, record } = plan(&delivery(), &facts(result), POLICY) else {
                panic!("{outcome}: expected a retry");
            };
            assert_eq!(tier, 0);
            assert_eq!(record.attempt, 1);
            assert_eq!(record.first_attempt_at, Some(10_000));
            assert_eq!(record.last_attempt_at, Some(10_000));
            assert_eq!(record.last_outcome.as_deref(), Some(outcome));
            assert_eq!(record.due_at, 20_250, "now + 10 s");
            assert_eq!(record.delivery_id, "msg_1", "the id never changes");
            assert_eq!(record.payload, b"{}");
        }
    }

    #[test]
    fn a_later_attempt_keeps_its_first_attempt_time() {
        let mut d = delivery();
        d.attempt = 3;
        d.first_attempt_at = Some(5_000);
        let FollowUp::Retry { record, .. } = plan(&d, &facts(status(500)), POLICY) else {
            panic!("expected a retry");
        };
        assert_eq!(record.attempt, 4);
        assert_eq!(record.first_attempt_at, Some(5_000));
        assert_eq!(record.last_attempt_at, Some(10_000));
    }

    #[test]
    fn rejections_become_dead_letters_with_reason_and_status() {
        let cases = [
            (status(404), "rejected_4xx", Some(404)),
            (status(301), "redirect", Some(301)),
            (
                AttemptResult::Failed(FailureKind::EgressDenied),
                "egress_denied",
                None,
            ),
            (
                AttemptResult::Failed(FailureKind::PayloadTooLarge),
                "payload_too_large",
                None,
            ),
        ];
        for (result, reason, last_status) in cases {
            let FollowUp::Dead(dl) = plan(&delivery(), &facts(result), POLICY) else {
                panic!("{reason}: expected a dead letter");
            };
            assert_eq!(dl.reason, reason);
            assert_eq!(dl.last_status, last_status);
            assert_eq!(dl.dead_at, 10_250);
            assert_eq!(dl.delivery.attempt, 1);
            assert_eq!(dl.detail.as_deref(), Some("detail"));
            assert_eq!(dl.policy_version, POLICY_VERSION);
        }
    }
}

//! What follows an attempt, decided purely from the delivery, its classification,
//! `now` and a jitter draw: nothing (delivered), a retry record for the tier the
//! ladder picks (`Retry-After` honoured exactly; never due earlier than the ladder
//! step, except a throttle, which waits its hint alone),
//! or a dead letter — rejected, or exhausted by `max_attempts` / `max_age`. The
//! source record is finished only after the follow-up is durable (`crates/dispatcher/src/attempt.rs`).

use hookline_core::{epoch, Classification, DeadLetterReason, Ladder, RetryDecision, Verdict};
use hookline_envelope::{bounded_detail, DeadLetter, Delivery};

use crate::part::NoTarget;

/// How retries are scheduled: the ladder, and the version string stamped on every
/// retry and dead letter it decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    ladder: Ladder,
    version: String,
}

impl RetryPolicy {
    pub fn new(ladder: Ladder) -> Self {
        let version = policy_version(&ladder);
        Self { ladder, version }
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    pub fn ladder(&self) -> &Ladder {
        &self.ladder
    }
}

/// `ladder-` and 8 hex digits of a hash of the ladder's configuration (tier names
/// and delays, max attempts, max age, jitter, and max retry-after when it is not
/// the default): equal ladders give equal versions on
/// every replica and every release, so a dead letter says which policy decided it.
pub fn policy_version(ladder: &Ladder) -> String {
    let mut canonical = String::new();
    for t in ladder.tiers() {
        canonical.push_str(&format!("{}={}ms,", t.name, t.delay.as_millis()));
    }
    canonical.push_str(&format!(
        "max_attempts={};max_age={}ms;jitter={}ms",
        ladder.max_attempts(),
        ladder.max_age().as_millis(),
        ladder.max_jitter().as_millis()
    ));
    // Only when set: the versions of ladders from before the flag stay as they were.
    if ladder.max_retry_after() != hookline_core::DEFAULT_MAX_RETRY_AFTER {
        canonical.push_str(&format!(
            ";max_retry_after={}ms",
            ladder.max_retry_after().as_millis()
        ));
    }
    // FNV-1a 64: stable across Rust versions, unlike `DefaultHasher`.
    let hash = canonical.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("ladder-{:08x}", hash >> 32)
}

/// The follow-up of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowUp {
    /// Delivered: finish the source record.
    Done,
    /// Write `record` to retry tier `tier` (index into the ladder), then finish.
    Retry { tier: usize, record: Box<Delivery> },
    /// A strictly ordered delivery's retry: keep `record` (this attempt counted,
    /// due at `record.due_at`) at the head of its lane, holding the later ones
    /// behind it; nothing is written, nothing finished.
    Hold { record: Box<Delivery> },
    /// Write the dead letter (its `reason` is `reason.as_str()`) to the DLQ, then finish.
    Dead {
        reason: DeadLetterReason,
        letter: Box<DeadLetter>,
    },
}

/// When and how an attempt went, for the follow-up records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptFacts<'a> {
    pub classification: Classification,
    /// When the attempt started, ms since the epoch.
    pub started_ms: i64,
    /// When it ended, ms since the epoch.
    pub now_ms: i64,
    /// A short, secret-free explanation for a dead letter (error text or body start).
    pub detail: Option<&'a str>,
}

/// Decides the follow-up of an attempt on `delivery`; `jitter_unit` in [0, 1]
/// picks the retry's jitter (see `Ladder::decide`).
pub fn plan(
    delivery: &Delivery,
    facts: &AttemptFacts<'_>,
    policy: &RetryPolicy,
    jitter_unit: f64,
) -> FollowUp {
    let c = &facts.classification;
    let dead =
        |delivery: Delivery, reason: DeadLetterReason, detail: Option<String>| FollowUp::Dead {
            reason,
            letter: Box::new(DeadLetter {
                delivery,
                reason: reason.as_str().to_owned(),
                last_status: c.status.map(i32::from),
                dead_at: facts.now_ms,
                policy_version: policy.version.clone(),
                detail: detail.as_deref().map(bounded_detail),
            }),
        };
    match c.verdict {
        // Delivered needs no record: no copy of the delivery (payload
        // included) on the path every successful attempt takes.
        Verdict::Delivered => FollowUp::Done,
        Verdict::Retry { retry_after } => {
            let attempted = after_attempt(delivery, facts);
            let first = attempted.first_attempt_at.unwrap_or(facts.started_ms);
            let decision = policy.ladder.decide(
                u32::try_from(attempted.attempt).unwrap_or(0),
                epoch::from_millis(first),
                epoch::from_millis(facts.now_ms),
                retry_after,
                is_throttle(c.status, retry_after.is_some()),
                jitter_unit,
            );
            match decision {
                RetryDecision::Retry { tier, due_at } => {
                    let mut record = attempted;
                    record.due_at = epoch::millis(due_at);
                    record.policy_version = Some(policy.version.clone());
                    FollowUp::Retry {
                        tier,
                        record: Box::new(record),
                    }
                }
                RetryDecision::Exhausted { reason } => {
                    let mut detail = format!(
                        "{}: {} attempts, the first at {first} ms, last outcome {}",
                        reason.as_str(),
                        attempted.attempt,
                        c.outcome
                    );
                    if let Some(d) = facts.detail {
                        detail.push_str(": ");
                        detail.push_str(d);
                    }
                    dead(attempted, DeadLetterReason::Exhausted, Some(detail))
                }
            }
        }
        Verdict::Rejected { reason } => dead(
            after_attempt(delivery, facts),
            DeadLetterReason::Rejected(reason),
            facts.detail.map(str::to_owned),
        ),
    }
}

/// The follow-up of an attempt on a strictly ordered delivery: a retry is held in
/// place (due when the ladder says, so `Retry-After` and the ladder's steps hold
/// as they do on the tiers), unless being due then would leave it at the head
/// longer than `head_wait` after its first attempt: then it is dead-lettered
/// `head_wait`, and the next goes. Anything else is as [`plan`] decided.
pub fn strict(
    follow_up: FollowUp,
    facts: &AttemptFacts<'_>,
    policy: &RetryPolicy,
    head_wait: std::time::Duration,
) -> FollowUp {
    let FollowUp::Retry { record, .. } = follow_up else {
        return follow_up;
    };
    let first = record.first_attempt_at.unwrap_or(facts.started_ms);
    let limit = i64::try_from(head_wait.as_millis()).unwrap_or(i64::MAX);
    if record.due_at.saturating_sub(first) <= limit {
        return FollowUp::Hold { record };
    }
    let mut detail = format!(
        "head_wait: {} attempts since {first} ms; the next would be due at {} ms, after --strict-head-wait {}s",
        record.attempt,
        record.due_at,
        head_wait.as_secs()
    );
    if let Some(d) = facts.detail {
        detail.push_str(": ");
        detail.push_str(d);
    }
    let mut delivery = *record;
    // As it was last attempted: not due at a time nobody will wait for.
    delivery.due_at = delivery.last_attempt_at.unwrap_or(delivery.due_at);
    FollowUp::Dead {
        reason: DeadLetterReason::HeadWait,
        letter: Box::new(DeadLetter {
            delivery,
            reason: DeadLetterReason::HeadWait.as_str().to_owned(),
            last_status: facts.classification.status.map(i32::from),
            dead_at: facts.now_ms,
            policy_version: policy.version.clone(),
            detail: Some(bounded_detail(&detail)),
        }),
    }
}

/// The dead letter of a delivery not attempted because its subscription has gone
/// (`why`: disabled, deleted, another tenant's): the delivery as it came, no attempt
/// added, so that `replay` sends it exactly as it would have been sent.
pub fn unattempted(
    delivery: Delivery,
    why: &NoTarget,
    policy: &RetryPolicy,
    now_ms: i64,
) -> (DeadLetterReason, DeadLetter) {
    let reason = why.reason();
    let detail = why.detail(&delivery.subscription_id);
    let letter = DeadLetter {
        delivery,
        reason: reason.as_str().to_owned(),
        last_status: None,
        dead_at: now_ms,
        policy_version: policy.version.clone(),
        detail: Some(bounded_detail(&detail)),
    };
    (reason, letter)
}

/// A throttle, which waits its hint without climbing the ladder: a 429, or a 503
/// that says when to come back.
pub fn is_throttle(status: Option<u16>, has_hint: bool) -> bool {
    matches!(status, Some(429)) || (matches!(status, Some(503)) && has_hint)
}

/// The delivery with this attempt recorded: one more attempt, its times and outcome.
fn after_attempt(delivery: &Delivery, facts: &AttemptFacts<'_>) -> Delivery {
    let mut next = delivery.clone();
    next.attempt = next.attempt.saturating_add(1);
    next.first_attempt_at = Some(next.first_attempt_at.unwrap_or(facts.started_ms));
    next.last_attempt_at = Some(facts.started_ms);
    next.last_outcome = Some(facts.classification.outcome.as_str().to_owned());
    next
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hookline_core::{classify, AttemptResult, FailureKind, Tier};
    use hookline_envelope::fixtures::DeliveryBuilder;

    use super::*;

    fn delivery() -> Delivery {
        DeliveryBuilder::new("msg_1", "acme", "sub_1")
            .event_id("evt_1")
            .event_type("invoice.paid")
            .at(2_000)
            .occurred_at(1_000)
            .build()
    }

    const STARTED: i64 = 1_700_000_000_000;
    const NOW: i64 = STARTED + 250;

    fn facts(result: AttemptResult) -> AttemptFacts<'static> {
        AttemptFacts {
            classification: classify(&result, epoch::from_millis(NOW)),
            started_ms: STARTED,
            now_ms: NOW,
            detail: Some("detail"),
        }
    }

    /// The default ladder without jitter: 10 s, 1 m, 15 m, 2 h; 15 attempts; 24 h.
    fn policy() -> RetryPolicy {
        let d = Ladder::default();
        RetryPolicy::new(Ladder::new(d.tiers().to_vec(), 15, d.max_age(), Duration::ZERO).unwrap())
    }

    fn status(code: u16) -> AttemptResult {
        AttemptResult::Response {
            status: code,
            retry_after: None,
        }
    }

    fn retry_after(code: u16, value: &str) -> AttemptResult {
        AttemptResult::Response {
            status: code,
            retry_after: Some(value.to_owned()),
        }
    }

    #[test]
    fn delivered_needs_nothing_more() {
        assert_eq!(
            plan(&delivery(), &facts(status(204)), &policy(), 0.0),
            FollowUp::Done
        );
    }

    #[test]
    fn a_first_failure_goes_to_the_first_tier_with_the_attempt_recorded() {
        let cases = [
            (status(503), "http_503"),
            (status(429), "http_429"),
            (AttemptResult::Failed(FailureKind::Timeout), "timeout"),
            (
                AttemptResult::Failed(FailureKind::MissingSecret),
                "missing_secret",
            ),
        ];
        let p = policy();
        for (result, outcome) in cases {
            let FollowUp::Retry { tier, record } = plan(&delivery(), &facts(result), &p, 0.0)
            else {
                panic!("{outcome}: expected a retry");
            };
            assert_eq!(tier, 0);
            assert_eq!(record.attempt, 1);
            assert_eq!(record.first_attempt_at, Some(STARTED));
            assert_eq!(record.last_attempt_at, Some(STARTED));
            assert_eq!(record.last_outcome.as_deref(), Some(outcome));
            assert_eq!(record.due_at, NOW + 10_000, "now + 10 s");
            assert_eq!(record.policy_version.as_deref(), Some(p.version()));
            assert_eq!(record.delivery_id, "msg_1", "the id never changes");
            assert_eq!(record.payload, b"{}");
        }
    }

    #[test]
    fn tier_follows_the_attempt_count_and_retry_after() {
        // (attempts already made, result, tier, delay in s)
        let cases: &[(i32, AttemptResult, usize, i64)] = &[
            (1, status(500), 1, 60),
            (2, status(500), 2, 900),
            (3, status(500), 3, 7200),
            (9, status(500), 3, 7200),
            // A failure waits the step or the hint, whichever is longer, exactly.
            (0, retry_after(500, "30"), 0, 30),
            (2, retry_after(500, "30"), 2, 900),
            (2, retry_after(500, "1000"), 2, 1000),
            // A throttle (429, or 503 with a hint) waits its hint, however many
            // attempts were made: it does not climb the ladder.
            (0, retry_after(429, "5"), 0, 10),
            (0, retry_after(429, "30"), 0, 30),
            (0, retry_after(503, "600"), 1, 600),
            (1, retry_after(429, "3"), 0, 10),
            (6, retry_after(429, "3"), 0, 10),
            (6, retry_after(503, "61"), 1, 61),
            // A 503 without a hint is a failure.
            (6, status(503), 3, 7200),
            // Longer than the last tier: on the last, due at the hint (re-parked).
            (0, retry_after(429, "80000"), 3, 80_000),
        ];
        for (made, result, tier, delay) in cases {
            let mut d = delivery();
            d.attempt = *made;
            d.first_attempt_at = (*made > 0).then_some(STARTED - 1_000);
            let FollowUp::Retry { tier: got, record } =
                plan(&d, &facts(result.clone()), &policy(), 0.0)
            else {
                panic!("{made} {result:?}: expected a retry");
            };
            assert_eq!(got, *tier, "{made} {result:?}");
            assert_eq!(record.due_at, NOW + delay * 1000, "{made} {result:?}");
            assert_eq!(record.attempt, made + 1);
        }
    }

    #[test]
    fn jitter_only_delays_and_is_bounded() {
        let d = Ladder::default();
        let p = RetryPolicy::new(d.clone());
        for (unit, extra) in [(0.0, 0), (0.5, 250), (1.0, 500)] {
            let FollowUp::Retry { record, .. } = plan(&delivery(), &facts(status(503)), &p, unit)
            else {
                panic!("expected a retry");
            };
            assert_eq!(record.due_at, NOW + 10_000 + extra, "unit {unit}");
        }
    }

    #[test]
    fn a_later_attempt_keeps_its_first_attempt_time() {
        let mut d = delivery();
        d.attempt = 3;
        d.first_attempt_at = Some(STARTED - 5_000);
        let FollowUp::Retry { record, .. } = plan(&d, &facts(status(500)), &policy(), 0.0) else {
            panic!("expected a retry");
        };
        assert_eq!(record.attempt, 4);
        assert_eq!(record.first_attempt_at, Some(STARTED - 5_000));
        assert_eq!(record.last_attempt_at, Some(STARTED));
    }

    #[test]
    fn exhausted_deliveries_are_dead_letters_with_every_field() {
        let tiers = vec![Tier::new("a", Duration::from_secs(1))];
        let p = RetryPolicy::new(
            Ladder::new(tiers, 3, Duration::from_secs(60), Duration::ZERO).unwrap(),
        );
        // (attempts already made, first attempt ms before STARTED, sub-reason)
        let cases = [(2, 10_000, "max_attempts"), (1, 59_500, "max_age")];
        for (made, age, sub) in cases {
            let mut d = delivery();
            d.attempt = made;
            d.first_attempt_at = Some(STARTED - age);
            let FollowUp::Dead { letter: dl, .. } = plan(&d, &facts(status(503)), &p, 0.0) else {
                panic!("{sub}: expected a dead letter");
            };
            assert_eq!(dl.reason, DeadLetterReason::Exhausted.as_str());
            assert_eq!(dl.last_status, Some(503));
            assert_eq!(dl.dead_at, NOW);
            assert_eq!(dl.policy_version, p.version());
            assert_eq!(dl.delivery.attempt, made + 1);
            assert_eq!(dl.delivery.first_attempt_at, Some(STARTED - age));
            assert_eq!(dl.delivery.last_attempt_at, Some(STARTED));
            assert_eq!(dl.delivery.last_outcome.as_deref(), Some("http_503"));
            let detail = dl.detail.unwrap();
            assert!(detail.starts_with(&format!("{sub}: ")), "{detail}");
            assert!(detail.ends_with("http_503: detail"), "{detail}");
        }
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
        let p = policy();
        for (result, reason, last_status) in cases {
            let FollowUp::Dead { letter: dl, .. } = plan(&delivery(), &facts(result), &p, 0.0)
            else {
                panic!("{reason}: expected a dead letter");
            };
            assert_eq!(dl.reason, reason);
            assert_eq!(dl.last_status, last_status);
            assert_eq!(dl.dead_at, NOW);
            assert_eq!(dl.delivery.attempt, 1);
            assert_eq!(dl.detail.as_deref(), Some("detail"));
            assert_eq!(dl.policy_version, p.version());
        }
    }

    #[test]
    fn the_dead_reason_is_the_letters_reason() {
        let tiers = vec![Tier::new("a", Duration::from_secs(1))];
        let p = RetryPolicy::new(
            Ladder::new(tiers, 1, Duration::from_secs(60), Duration::ZERO).unwrap(),
        );
        let cases = [
            (status(503), DeadLetterReason::Exhausted),
            (
                status(404),
                DeadLetterReason::Rejected(hookline_core::RejectReason::Http4xx),
            ),
        ];
        for (result, want) in cases {
            let FollowUp::Dead { reason, letter } = plan(&delivery(), &facts(result), &p, 0.0)
            else {
                panic!("{want:?}: expected a dead letter");
            };
            assert_eq!(reason, want);
            assert_eq!(letter.reason, want.as_str());
        }
    }

    #[test]
    fn the_policy_version_names_the_ladder() {
        let a = policy_version(&Ladder::default());
        assert_eq!(a, policy_version(&Ladder::default()), "deterministic");
        assert!(a.starts_with("ladder-") && a.len() == 15, "{a}");
        let d = Ladder::default();
        let other = [
            Ladder::new(d.tiers().to_vec(), 14, d.max_age(), d.max_jitter()).unwrap(),
            Ladder::new(
                d.tiers().to_vec(),
                15,
                Duration::from_secs(3600),
                d.max_jitter(),
            )
            .unwrap(),
            Ladder::new(d.tiers()[..3].to_vec(), 15, d.max_age(), d.max_jitter()).unwrap(),
        ];
        for l in other {
            assert_ne!(policy_version(&l), a, "{l:?}");
        }
    }

    #[test]
    fn a_strict_retry_is_held_at_the_time_the_ladder_picked_within_the_head_wait() {
        let f = facts(retry_after(429, "30"));
        let planned = plan(&delivery(), &f, &policy(), 0.0);
        let FollowUp::Retry { record: tiered, .. } = planned.clone() else {
            panic!("a 429 is retried: {planned:?}");
        };
        match strict(planned, &f, &policy(), Duration::from_secs(3600)) {
            FollowUp::Hold { record } => assert_eq!(record, tiered, "same attempt, same due time"),
            other => panic!("held: {other:?}"),
        }
    }

    #[test]
    fn a_strict_head_due_past_its_head_wait_is_dead_lettered_so_the_next_goes() {
        let mut earlier = delivery();
        earlier.attempt = 3;
        earlier.first_attempt_at = Some(STARTED - 50_000);
        let f = facts(status(503));
        let planned = plan(&earlier, &f, &policy(), 0.0);
        match strict(planned, &f, &policy(), Duration::from_secs(60)) {
            FollowUp::Dead { reason, letter } => {
                assert_eq!(reason, DeadLetterReason::HeadWait);
                assert_eq!(letter.reason, "head_wait");
                assert_eq!(letter.last_status, Some(503));
                assert_eq!(letter.delivery.attempt, 4, "the attempt is counted");
                assert_eq!(letter.delivery.first_attempt_at, Some(STARTED - 50_000));
                assert!(letter.detail.unwrap().starts_with("head_wait: 4 attempts"));
            }
            other => panic!("dead-lettered: {other:?}"),
        }
    }

    #[test]
    fn strict_changes_nothing_but_retries() {
        for result in [status(200), status(400), status(410)] {
            let f = facts(result);
            let planned = plan(&delivery(), &f, &policy(), 0.0);
            assert_eq!(
                strict(planned.clone(), &f, &policy(), Duration::ZERO),
                planned
            );
        }
    }
}

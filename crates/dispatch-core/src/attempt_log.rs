//! The attempt log: one `AttemptRecord` on `deliveries.attempts` (key: the
//! tenant) per attempt, parking and dead-lettering, built here from what the
//! engine decided, purely (time is passed in).
//!
//! Guarantees (carried out by `crates/dispatcher/src/engine/commit.rs`):
//! - the record of an attempt or parking with a follow-up (a retry, a park, a
//!   dead letter) is written in the same Kafka transaction as that follow-up
//!   and the source offset: exactly once for a `read_committed` reader;
//! - the record of a delivered attempt is queued before its source record is
//!   finished, and every transaction takes the whole queue before it computes
//!   its offsets, so it commits in the transaction that first moves the
//!   committed offset past its record, or an earlier one: never lost relative
//!   to the committed offset. A crash before that commit re-attempts the
//!   delivery, and the re-attempt writes its own record (at least once);
//! - no record carries a secret, a URL, a payload or a response body: `detail`
//!   is set only for an attempt that got no response (the transport error) or
//!   a dead-lettering without one, at most 256 bytes.

use hookline_core::{trace, AttemptResult};
use hookline_envelope::{
    encode, truncate_detail, AttemptRecord, DeadLetter, Delivery, MAX_ATTEMPT_DETAIL_BYTES,
};

use crate::{
    outcome::{AttemptFacts, FollowUp},
    part::ParkReason,
};

/// One attempt-log record to write: its topic, key and encoded value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub topic: String,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

impl Logged {
    pub fn bytes(&self) -> usize {
        self.key.len() + self.value.len()
    }
}

/// Where attempt records go, or `None` with `--attempt-log=false`.
#[derive(Debug, Clone)]
pub struct AttemptLog {
    topic: String,
    policy_version: String,
}

/// What an attempt was, for its record.
#[derive(Debug, Clone, Copy)]
pub struct Attempted<'a> {
    /// The delivery as it was read (before this attempt).
    pub delivery: &'a Delivery,
    pub facts: &'a AttemptFacts<'a>,
    /// Whether the attempt got a response (then `detail` is left out: it is
    /// the response body's start).
    pub responded: bool,
    pub took_ms: i64,
    pub follow_up: &'a FollowUp,
    /// The tier name of a retry.
    pub tier: Option<&'a str>,
    pub from_tier: Option<&'a str>,
}

impl AttemptLog {
    pub fn new(topic: &str, policy_version: &str) -> Self {
        Self {
            topic: topic.to_owned(),
            policy_version: policy_version.to_owned(),
        }
    }

    fn base(
        &self,
        d: &Delivery,
        kind: &str,
        outcome: &str,
        attempt: i32,
        at: i64,
    ) -> AttemptRecord {
        AttemptRecord {
            delivery_id: d.delivery_id.clone(),
            event_id: d.event_id.clone(),
            tenant_id: d.tenant_id.clone(),
            subscription_id: d.subscription_id.clone(),
            event_type: d.event_type.clone(),
            kind: kind.to_owned(),
            outcome: outcome.to_owned(),
            attempt,
            at,
            duration_ms: None,
            classification: None,
            status: None,
            detail: None,
            from_tier: None,
            tier: None,
            next_due_at: None,
            replay_of: d.replay_of.clone(),
            trace_id: d
                .traceparent
                .as_deref()
                .and_then(trace::trace_id)
                .map(str::to_owned),
            policy_version: Some(self.policy_version.clone()),
            // Every record carries it, so `trace` shows the fanned-out step
            // from whichever of the delivery's records it reads.
            created_at: Some(d.created_at),
        }
    }

    /// The records of one attempt: the attempt, then its dead-lettering if it
    /// was the last.
    pub fn attempted(&self, a: &Attempted<'_>) -> Vec<AttemptRecord> {
        let facts = a.facts;
        let outcome = match a.follow_up {
            FollowUp::Done => "delivered",
            FollowUp::Retry { .. } => "retried",
            FollowUp::Hold { .. } => "held",
            FollowUp::Dead {
                reason: hookline_core::DeadLetterReason::Exhausted,
                ..
            } => "exhausted",
            FollowUp::Dead { .. } => "rejected",
        };
        let mut r = self.base(
            a.delivery,
            AttemptRecord::ATTEMPTED,
            outcome,
            a.delivery.attempt.saturating_add(1),
            facts.started_ms,
        );
        r.duration_ms = Some(a.took_ms);
        r.classification = Some(facts.classification.outcome.as_str().to_owned());
        r.status = facts.classification.status.map(i32::from);
        r.detail = (!a.responded)
            .then_some(facts.detail)
            .flatten()
            .map(|d| truncate_detail(d, MAX_ATTEMPT_DETAIL_BYTES));
        r.from_tier = a.from_tier.map(str::to_owned);
        let mut out = Vec::with_capacity(2);
        match a.follow_up {
            FollowUp::Done => out.push(r),
            FollowUp::Retry { record, .. } => {
                r.tier = a.tier.map(str::to_owned);
                r.next_due_at = Some(record.due_at);
                out.push(r);
            }
            // A strictly ordered delivery waits in place, at the head of its lane.
            FollowUp::Hold { record } => {
                r.next_due_at = Some(record.due_at);
                out.push(r);
            }
            FollowUp::Dead { letter, .. } => {
                out.push(r);
                out.push(self.dead_lettered(letter, a.from_tier));
            }
        }
        out
    }

    /// The record of a dead letter (after an attempt, or without one: its
    /// subscription is gone).
    pub fn dead_lettered(&self, letter: &DeadLetter, from_tier: Option<&str>) -> AttemptRecord {
        let d = &letter.delivery;
        let mut r = self.base(
            d,
            AttemptRecord::DEAD_LETTERED,
            &letter.reason,
            d.attempt,
            letter.dead_at,
        );
        r.status = letter.last_status;
        // With a status, the detail quotes the response body: left out.
        r.detail = letter
            .detail
            .as_deref()
            .filter(|_| letter.last_status.is_none())
            .map(|d| truncate_detail(d, MAX_ATTEMPT_DETAIL_BYTES));
        r.from_tier = from_tier.map(str::to_owned);
        r
    }

    /// The record of a delivery parked on `tier` until `due_ms` without an attempt.
    pub fn parked(
        &self,
        d: &Delivery,
        reason: ParkReason,
        (tier, due_ms): (&str, i64),
        now_ms: i64,
        from_tier: Option<&str>,
    ) -> AttemptRecord {
        let mut r = self.base(d, AttemptRecord::PARKED, reason.as_str(), d.attempt, now_ms);
        r.tier = Some(tier.to_owned());
        r.next_due_at = Some(due_ms);
        r.from_tier = from_tier.map(str::to_owned);
        r
    }

    /// `record` ready to write.
    pub fn logged(&self, record: &AttemptRecord) -> Logged {
        Logged {
            topic: self.topic.clone(),
            key: record.tenant_id.as_bytes().to_vec(),
            value: encode(record),
        }
    }
}

/// Whether the attempt's result was a response (its detail is then the body).
pub fn responded(result: &AttemptResult) -> bool {
    matches!(result, AttemptResult::Response { .. })
}

#[cfg(test)]
mod tests {
    use hookline_core::{classify, epoch, DeadLetterReason, FailureKind, RejectReason};
    use hookline_envelope::{decode, fixtures::DeliveryBuilder};

    use super::*;

    fn delivery() -> Delivery {
        DeliveryBuilder::new("msg_1", "acme", "sub_1")
            .event_id("evt_1")
            .event_type("invoice.paid")
            .at(2_000)
            .occurred_at(1_000)
            .payload(b"{\"card\":\"4242\"}")
            .attempted(1, 2_000, 2_000, "http_503")
            .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .build()
    }

    fn log() -> AttemptLog {
        AttemptLog::new("p.deliveries.attempts", "ladder-1")
    }

    const T: i64 = 1_700_000_000_000;

    fn facts(result: &AttemptResult, detail: Option<&'static str>) -> AttemptFacts<'static> {
        AttemptFacts {
            classification: classify(result, epoch::from_millis(T + 40)),
            started_ms: T,
            now_ms: T + 40,
            detail,
        }
    }

    #[test]
    fn a_delivered_attempt_is_one_record_with_number_status_and_duration() {
        let d = delivery();
        let result = AttemptResult::Response {
            status: 204,
            retry_after: None,
        };
        let f = facts(&result, Some("the receiver's body"));
        let records = log().attempted(&Attempted {
            delivery: &d,
            facts: &f,
            responded: responded(&result),
            took_ms: 40,
            follow_up: &FollowUp::Done,
            tier: None,
            from_tier: Some("retry-10s"),
        });
        assert_eq!(records.len(), 1);
        let r = &records[0];
        assert_eq!(
            (r.kind.as_str(), r.outcome.as_str()),
            ("attempted", "delivered")
        );
        assert_eq!(r.attempt, 2, "the second attempt: one was made before");
        assert_eq!((r.at, r.duration_ms, r.status), (T, Some(40), Some(204)));
        assert_eq!(r.classification.as_deref(), Some("http_204"));
        assert_eq!(r.detail, None, "never the response body");
        assert_eq!(r.from_tier.as_deref(), Some("retry-10s"));
        assert_eq!(
            r.trace_id.as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        let logged = log().logged(r);
        assert_eq!(logged.key, b"acme");
        assert_eq!(logged.topic, "p.deliveries.attempts");
        assert_eq!(&decode::<AttemptRecord>(&logged.value).unwrap(), r);
    }

    #[test]
    fn a_retried_attempt_names_its_tier_and_due_time() {
        let d = delivery();
        let result = AttemptResult::Failed(FailureKind::Timeout);
        let f = facts(&result, Some("timed out after 10s"));
        let mut next = d.clone();
        next.due_at = T + 10_040;
        let follow_up = FollowUp::Retry {
            tier: 1,
            record: Box::new(next),
        };
        let records = log().attempted(&Attempted {
            delivery: &d,
            facts: &f,
            responded: responded(&result),
            took_ms: 10_000,
            follow_up: &follow_up,
            tier: Some("retry-1m"),
            from_tier: None,
        });
        let [r] = records.as_slice() else {
            panic!("{records:?}")
        };
        assert_eq!(r.outcome, "retried");
        assert_eq!(r.tier.as_deref(), Some("retry-1m"));
        assert_eq!(r.next_due_at, Some(T + 10_040));
        assert_eq!(r.status, None);
        assert_eq!(
            r.detail.as_deref(),
            Some("timed out after 10s"),
            "no response: the error"
        );
    }

    #[test]
    fn a_rejected_attempt_is_followed_by_its_dead_lettering_without_the_body() {
        let d = delivery();
        let result = AttemptResult::Response {
            status: 404,
            retry_after: None,
        };
        let f = facts(&result, Some("not found: secret stuff"));
        let letter = DeadLetter {
            delivery: d.clone(),
            reason: "rejected_4xx".into(),
            last_status: Some(404),
            dead_at: T + 40,
            policy_version: "ladder-1".into(),
            detail: Some("not found: secret stuff".into()),
        };
        let follow_up = FollowUp::Dead {
            reason: DeadLetterReason::Rejected(RejectReason::Http4xx),
            letter: Box::new(letter),
        };
        let records = log().attempted(&Attempted {
            delivery: &d,
            facts: &f,
            responded: true,
            took_ms: 3,
            follow_up: &follow_up,
            tier: None,
            from_tier: None,
        });
        let kinds: Vec<_> = records
            .iter()
            .map(|r| (r.kind.as_str(), r.outcome.as_str(), r.detail.as_deref()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("attempted", "rejected", None),
                ("dead_lettered", "rejected_4xx", None)
            ]
        );
        assert_eq!(records[1].status, Some(404));
    }

    #[test]
    fn details_are_bounded() {
        let d = delivery();
        let mut letter = DeadLetter {
            delivery: d,
            reason: "cancelled".into(),
            last_status: None,
            dead_at: T,
            policy_version: "ladder-1".into(),
            detail: Some("é".repeat(1000)),
        };
        let r = log().dead_lettered(&letter, None);
        assert!(r.detail.as_ref().unwrap().len() <= MAX_ATTEMPT_DETAIL_BYTES);
        assert_eq!(
            (r.kind.as_str(), r.outcome.as_str()),
            ("dead_lettered", "cancelled")
        );
        letter.detail = None;
        assert_eq!(log().dead_lettered(&letter, None).detail, None);
    }

    #[test]
    fn a_parking_keeps_the_attempt_count_and_says_why() {
        let d = delivery();
        let r = log().parked(
            &d,
            ParkReason::BreakerOpen,
            ("retry-10s", T + 10_000),
            T,
            None,
        );
        assert_eq!(
            (r.kind.as_str(), r.outcome.as_str()),
            ("parked", "breaker_open")
        );
        assert_eq!(r.attempt, 1);
        assert_eq!(
            (r.tier.as_deref(), r.next_due_at),
            (Some("retry-10s"), Some(T + 10_000))
        );
        assert_eq!(r.duration_ms, None);
    }
}

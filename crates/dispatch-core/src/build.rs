//! The building of every [`Handoff`]: for each decision that leaves a record to
//! write — an attempt's retry or dead letter, a delivery with nowhere to go, a
//! delivery parked by its breaker or re-parked by its tier, a record moved to an
//! overflow lane, a record quarantined — which topic it goes to, its key, value
//! and headers, the attempt-log records that go with it, and what to count once
//! it is written. One home, so every hand-off is keyed and logged the same way;
//! the engine only defers what this returns to its next transaction.
//!
//! Keys: a delivery, a retry or a dead letter is keyed by its tenant, so a
//! tenant's records stay in one partition of every topic; a re-parked record and
//! a moved one keep the key they were read with (the same tenant key, as read);
//! a moved record also keeps its partition, so a lane partition holds exactly
//! the subscriptions of the `deliveries` partition it drains.

use hookline_envelope::{
    decode, encode, DeadLetter, Delivery, QuarantineReason, QuarantinedEvent, Topics,
};

use crate::{
    attempt_log::{AttemptLog, Attempted, Logged},
    handoff::{Disable, Handoff, Written},
    outcome::{self, AttemptFacts, FollowUp, RetryPolicy},
    part::{Key, NoTarget, ParkReason},
};

/// Header of a record moved to an overflow lane: its offset in `deliveries`.
pub const MOVED_FROM: &str = "hookline-moved-from";

/// A retry tier or an overflow lane the topics do not have. Unreachable while
/// the ladder, the lanes and the topics are built from the same settings; the
/// engine counts it and leaves the source record unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    Tier(usize),
    Lane(usize),
}

/// What an attempt leaves to do once its follow-up is decided.
#[derive(Debug)]
pub enum AfterAttempt {
    /// Delivered: nothing to write but its attempt-log records, queued before
    /// the source offset is finished.
    Done(Vec<Logged>),
    /// A strictly ordered delivery to hold in place (this attempt counted).
    Hold(Box<Delivery>, Vec<Logged>),
    /// A retry or a dead letter, to commit with the source offset.
    Handoff(Box<Handoff>),
}

/// Builds hand-offs for one dispatcher: where each goes, and its attempt log.
#[derive(Debug, Clone)]
pub struct HandoffBuilder {
    topics: Topics,
    /// `None` with `--attempt-log=false`.
    attempt_log: Option<AttemptLog>,
    /// Per engine input (indexed like them): its retry tier's name, `None` for
    /// `deliveries`, `deliveries.strict` and the lanes.
    input_tiers: Vec<Option<&'static str>>,
}

impl HandoffBuilder {
    pub fn new(
        topics: Topics,
        attempt_log: Option<AttemptLog>,
        input_tiers: Vec<Option<&'static str>>,
    ) -> Self {
        Self {
            topics,
            attempt_log,
            input_tiers,
        }
    }

    pub fn topics(&self) -> &Topics {
        &self.topics
    }

    /// The retry tier the record at `key` was read from; `None` for
    /// `deliveries`, `deliveries.strict` and the lanes.
    pub fn tier_read_from(&self, key: Key) -> Option<&'static str> {
        self.input_tiers
            .get(usize::from(key.0.input))
            .copied()
            .flatten()
    }

    fn log(
        &self,
        record: impl FnOnce(&AttemptLog) -> hookline_envelope::AttemptRecord,
    ) -> Vec<Logged> {
        self.attempt_log
            .as_ref()
            .map_or_else(Vec::new, |log| vec![log.logged(&record(log))])
    }

    /// The hand-off (or the hold, or nothing) an attempt of `delivery`, the
    /// record at `key`, leaves after `follow_up` was decided; `responded` and
    /// `took_ms` are for its attempt-log records.
    pub fn after_attempt(
        &self,
        key: Key,
        delivery: Delivery,
        facts: &AttemptFacts<'_>,
        follow_up: FollowUp,
        (responded, took_ms): (bool, i64),
    ) -> Result<AfterAttempt, Missing> {
        let log = self.attempt_log.as_ref().map_or_else(Vec::new, |log| {
            let tier = match &follow_up {
                FollowUp::Retry { tier, .. } => self.topics.retries().nth(*tier).map(|(n, _)| n),
                _ => None,
            };
            log.attempted(&Attempted {
                delivery: &delivery,
                facts,
                responded,
                took_ms,
                follow_up: &follow_up,
                tier,
                from_tier: self.tier_read_from(key),
            })
            .iter()
            .map(|r| log.logged(r))
            .collect()
        });
        let (topic, value, written) = match follow_up {
            FollowUp::Done => return Ok(AfterAttempt::Done(log)),
            FollowUp::Hold { record } => return Ok(AfterAttempt::Hold(record, log)),
            FollowUp::Retry { tier, record } => {
                let (name, topic) = self.topics.retries().nth(tier).ok_or(Missing::Tier(tier))?;
                let written = Written::Retry {
                    tier: name.to_owned(),
                    delivery_id: delivery.delivery_id.clone(),
                };
                (topic.to_owned(), encode(record.as_ref()), written)
            }
            FollowUp::Dead { reason, letter } => (
                self.topics.dlq().to_owned(),
                encode(letter.as_ref()),
                Written::Dead {
                    reason,
                    delivery_id: delivery.delivery_id.clone(),
                    subscription_id: delivery.subscription_id.clone(),
                    tenant_id: delivery.tenant_id.clone(),
                },
            ),
        };
        Ok(AfterAttempt::Handoff(Box::new(Handoff {
            key,
            topic,
            partition: None,
            record_key: Some(delivery.tenant_id.into_bytes()),
            value,
            headers: Vec::new(),
            written,
            disable: None,
            log,
        })))
    }

    /// The dead letter of `delivery` (the record at `key`), not attempted
    /// because it has nowhere to go (`why`), and the letter itself, for its event.
    pub fn unattempted(
        &self,
        key: Key,
        delivery: Delivery,
        why: &NoTarget,
        policy: &RetryPolicy,
        now_ms: i64,
    ) -> (Handoff, DeadLetter) {
        let record_key = Some(delivery.tenant_id.as_bytes().to_vec());
        let (delivery_id, subscription_id, tenant_id) = (
            delivery.delivery_id.clone(),
            delivery.subscription_id.clone(),
            delivery.tenant_id.clone(),
        );
        let (reason, letter) = outcome::unattempted(delivery, why, policy, now_ms);
        let log = self.log(|log| log.dead_lettered(&letter, self.tier_read_from(key)));
        let handoff = Handoff {
            key,
            topic: self.topics.dlq().to_owned(),
            partition: None,
            record_key,
            value: encode(&letter),
            headers: Vec::new(),
            written: Written::Dead {
                reason,
                delivery_id,
                subscription_id,
                tenant_id,
            },
            disable: None,
            log,
        };
        (handoff, letter)
    }

    /// A tier head its tier released before it was due (a long `Retry-After`),
    /// written as it was read (`record_key`, `value`: no attempt) to `tier`, the
    /// tier that fits what is left of its wait.
    pub fn repark(
        &self,
        key: Key,
        (record_key, value): (Option<Vec<u8>>, Vec<u8>),
        tier: usize,
        now_ms: i64,
    ) -> Result<Handoff, Missing> {
        let (name, topic) = self.topics.retries().nth(tier).ok_or(Missing::Tier(tier))?;
        // The machine decoded it to decide; decoded again only for its record.
        let log = match (&self.attempt_log, decode::<Delivery>(&value)) {
            (Some(log), Ok(d)) => vec![log.logged(&log.parked(
                &d,
                ParkReason::NotDue,
                (name, d.due_at),
                now_ms,
                self.tier_read_from(key),
            ))],
            _ => Vec::new(),
        };
        Ok(Handoff {
            key,
            topic: topic.to_owned(),
            partition: None,
            record_key,
            value,
            headers: Vec::new(),
            written: Written::Reparked {
                tier: name.to_owned(),
                reason: ParkReason::NotDue,
            },
            disable: None,
            log,
        })
    }

    /// A delivery its breaker holds back, written unattempted to `tier`, due
    /// at `until_ms`, its attempts unspent; with `disable`, the record that
    /// disables its subscription (its breaker has been open too long).
    pub fn park(
        &self,
        key: Key,
        mut delivery: Delivery,
        (tier, until_ms): (usize, i64),
        disable: Option<Box<Disable>>,
        now_ms: i64,
    ) -> Result<Handoff, Missing> {
        let (name, topic) = self.topics.retries().nth(tier).ok_or(Missing::Tier(tier))?;
        delivery.due_at = until_ms;
        let log = self.log(|log| {
            log.parked(
                &delivery,
                ParkReason::BreakerOpen,
                (name, delivery.due_at),
                now_ms,
                self.tier_read_from(key),
            )
        });
        Ok(Handoff {
            key,
            topic: topic.to_owned(),
            partition: None,
            record_key: Some(delivery.tenant_id.as_bytes().to_vec()),
            value: encode(&delivery),
            headers: Vec::new(),
            written: Written::Reparked {
                tier: name.to_owned(),
                reason: ParkReason::BreakerOpen,
            },
            disable,
            log,
        })
    }

    /// A record of `deliveries` (its bytes as read) moved to overflow lane
    /// `lane`, same partition, with its source offset in a [`MOVED_FROM`] header.
    pub fn moved(
        &self,
        key: Key,
        lane: usize,
        (record_key, value): (Option<Vec<u8>>, Vec<u8>),
    ) -> Result<Handoff, Missing> {
        let topic = self.topics.lanes().nth(lane).ok_or(Missing::Lane(lane))?;
        Ok(Handoff {
            key,
            topic: topic.to_owned(),
            partition: Some(key.0.partition),
            record_key,
            value,
            headers: vec![(MOVED_FROM, key.1.to_string())],
            written: Written::Moved { lane },
            disable: None,
            log: Vec::new(),
        })
    }

    /// A record that is not a `Delivery`, written to the quarantine topic with
    /// the reason, keyed as it came.
    pub fn quarantined(
        &self,
        key: Key,
        record: QuarantinedEvent,
        reason: QuarantineReason,
    ) -> Handoff {
        Handoff {
            key,
            topic: self.topics.quarantine().to_owned(),
            partition: None,
            record_key: record.key.clone(),
            value: encode(&record),
            headers: Vec::new(),
            written: Written::Quarantined {
                reason,
                record: Box::new(record),
            },
            disable: None,
            log: Vec::new(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use hookline_core::{classify, AttemptResult, DeadLetterReason, Ladder, RejectReason};
    use hookline_envelope::{
        fixtures::{self, DeliveryBuilder},
        subscription_state::DisabledReason,
        AttemptRecord, Subscription,
    };

    use super::*;
    use crate::{disable::Disabling, part::Part};

    const KEY: Key = (
        Part {
            input: 1,
            partition: 3,
        },
        42,
    );

    pub(crate) fn delivery(subscription: &str, tenant: &str) -> Delivery {
        DeliveryBuilder::new(&format!("d-{subscription}"), tenant, subscription)
            .at(1_000)
            .build()
    }

    pub(crate) fn subscription(id: &str, tenant: &str) -> Subscription {
        Subscription {
            version: 3,
            ..fixtures::subscription(
                id,
                tenant,
                &["order.*"],
                &format!("https://{tenant}.example.com/hook"),
            )
        }
    }

    fn builder(log: bool) -> HandoffBuilder {
        let topics = Topics::new("", &["retry-10s", "retry-1m"]).expect("topics");
        let attempt_log = log.then(|| AttemptLog::new(topics.attempts(), "ladder-1"));
        // Input 0 is `deliveries`, input 1 the first tier.
        HandoffBuilder::new(
            topics,
            attempt_log,
            vec![None, Some("retry-10s"), Some("retry-1m")],
        )
    }

    fn logged(h: &[Logged]) -> Vec<AttemptRecord> {
        h.iter()
            .map(|l| hookline_envelope::decode(&l.value).expect("an attempt record"))
            .collect()
    }

    fn facts(status: u16) -> AttemptFacts<'static> {
        let result = AttemptResult::Response {
            status,
            retry_after: None,
        };
        AttemptFacts {
            classification: classify(&result, std::time::UNIX_EPOCH),
            started_ms: 2_000,
            now_ms: 2_050,
            detail: None,
        }
    }

    #[test]
    fn a_retry_goes_to_its_tier_keyed_by_tenant_with_its_attempt_record() {
        let b = builder(true);
        let d = delivery("s", "acme");
        let mut record = d.clone();
        record.attempt = 1;
        let follow_up = FollowUp::Retry {
            tier: 1,
            record: Box::new(record.clone()),
        };
        let AfterAttempt::Handoff(h) = b
            .after_attempt(KEY, d, &facts(503), follow_up, (true, 50))
            .expect("tier exists")
        else {
            panic!("a retry is a hand-off");
        };
        assert_eq!((h.key, h.topic.as_str()), (KEY, "deliveries.retry-1m"));
        assert_eq!(h.record_key.as_deref(), Some(&b"acme"[..]));
        assert_eq!(decode::<Delivery>(&h.value).expect("delivery"), record);
        assert!(matches!(&h.written, Written::Retry { tier, .. } if tier == "retry-1m"));
        let log = logged(&h.log);
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].tier.as_deref(), Some("retry-1m"));
        assert_eq!(log[0].from_tier.as_deref(), Some("retry-10s"));
    }

    #[test]
    fn a_retry_to_a_tier_the_topics_lack_is_missing() {
        let b = builder(false);
        let d = delivery("s", "acme");
        let follow_up = FollowUp::Retry {
            tier: 7,
            record: Box::new(d.clone()),
        };
        let got = b.after_attempt(KEY, d, &facts(503), follow_up, (true, 50));
        assert_eq!(got.err(), Some(Missing::Tier(7)));
    }

    #[test]
    fn delivered_and_held_write_nothing_but_their_log() {
        let b = builder(true);
        let d = delivery("s", "acme");
        let done = b.after_attempt(KEY, d.clone(), &facts(200), FollowUp::Done, (true, 5));
        assert!(matches!(done, Ok(AfterAttempt::Done(log)) if log.len() == 1));
        let hold = FollowUp::Hold {
            record: Box::new(d.clone()),
        };
        let held = b.after_attempt(KEY, d, &facts(503), hold, (true, 5));
        assert!(matches!(held, Ok(AfterAttempt::Hold(_, log)) if log.len() == 1));
    }

    #[test]
    fn a_delivery_with_nowhere_to_go_is_a_dead_letter_as_it_came() {
        let b = builder(true);
        let d = delivery("s", "acme");
        let policy = RetryPolicy::new(Ladder::default());
        let why = NoTarget::Disabled {
            reason: Some("operator".into()),
        };
        let (h, letter) = b.unattempted(KEY, d.clone(), &why, &policy, 9_000);
        assert_eq!(h.topic, "deliveries.dlq");
        assert_eq!(letter.delivery, d, "not attempted: the delivery as it came");
        assert_eq!(letter.reason, "subscription_disabled");
        assert_eq!(decode::<DeadLetter>(&h.value).expect("letter"), letter);
        assert!(matches!(
            &h.written,
            Written::Dead { reason: DeadLetterReason::SubscriptionDisabled, tenant_id, .. } if tenant_id == "acme"
        ));
        assert_eq!(logged(&h.log)[0].from_tier.as_deref(), Some("retry-10s"));
    }

    #[test]
    fn a_parked_delivery_goes_unattempted_to_its_tier_due_when_its_breaker_probes() {
        let b = builder(true);
        let d = delivery("s", "acme");
        let h = b
            .park(KEY, d.clone(), (0, 31_000), None, 1_000)
            .expect("tier exists");
        assert_eq!(h.topic, "deliveries.retry-10s");
        let parked: Delivery = decode(&h.value).expect("delivery");
        assert_eq!((parked.attempt, parked.due_at), (d.attempt, 31_000));
        assert!(matches!(
            &h.written,
            Written::Reparked {
                reason: ParkReason::BreakerOpen,
                ..
            }
        ));
        assert!(h.disable.is_none());
        assert_eq!(logged(&h.log)[0].next_due_at, Some(31_000));
    }

    #[test]
    fn a_park_after_the_breaker_stayed_open_too_long_disables_the_subscription() {
        let b = builder(false);
        let d = delivery("s", "acme");
        let s = subscription("s", "acme");
        let mut disabling = Disabling::default();
        let disable = disabling.on_disable(
            Some(&s),
            ("s", "acme"),
            DisabledReason::BreakerOpen,
            b.topics().subscriptions(),
            5_000,
        );
        let h = b
            .park(KEY, d, (0, 31_000), disable, 5_000)
            .expect("tier exists");
        let disable = h.disable.expect("disables with the park");
        assert_eq!(disable.topic, "subscriptions");
        assert_eq!(
            (disable.record.enabled, disable.record.version),
            (false, s.version + 1)
        );
        assert_eq!(
            disable.record.disabled_reason.as_deref(),
            Some("breaker_open")
        );
        // A second park of the same subscription does not disable it again.
        let again = disabling.on_disable(
            Some(&s),
            ("s", "acme"),
            DisabledReason::BreakerOpen,
            "subscriptions",
            5_001,
        );
        assert!(again.is_none());
    }

    #[test]
    fn a_reparked_head_keeps_its_bytes_and_key() {
        let b = builder(true);
        let d = delivery("s", "acme");
        let value = encode(&d);
        let h = b
            .repark(KEY, (Some(b"acme".to_vec()), value.clone()), 1, 3_000)
            .expect("tier exists");
        assert_eq!(
            (h.topic.as_str(), &h.value),
            ("deliveries.retry-1m", &value)
        );
        assert!(matches!(
            &h.written,
            Written::Reparked {
                reason: ParkReason::NotDue,
                ..
            }
        ));
        assert_eq!(logged(&h.log).len(), 1);
        // Bytes that do not decode are re-parked all the same, without a log record.
        let h = b
            .repark(KEY, (None, b"junk".to_vec()), 1, 3_000)
            .expect("tier exists");
        assert!(h.log.is_empty());
    }

    #[test]
    fn a_moved_record_keeps_its_partition_and_names_its_source_offset() {
        let b = builder(false);
        let h = b
            .moved(KEY, 1, (Some(b"acme".to_vec()), b"v".to_vec()))
            .expect("lane exists");
        assert_eq!(h.topic, "deliveries.lane-1");
        assert_eq!(h.partition, Some(3));
        assert_eq!(h.headers, vec![(MOVED_FROM, "42".to_owned())]);
        assert_eq!(
            b.moved(KEY, 99, (None, Vec::new())).err(),
            Some(Missing::Lane(99))
        );
    }

    #[test]
    fn a_gone_endpoints_dead_letter_disables_its_subscription_once() {
        let b = builder(false);
        let d = delivery("s", "acme");
        let s = subscription("s", "acme");
        let letter = DeadLetter {
            delivery: d.clone(),
            reason: "rejected_410".into(),
            last_status: Some(410),
            dead_at: 2_050,
            policy_version: "ladder-1".into(),
            detail: None,
        };
        let dead = FollowUp::Dead {
            reason: DeadLetterReason::Rejected(RejectReason::Gone),
            letter: Box::new(letter),
        };
        let Ok(AfterAttempt::Handoff(mut h)) =
            b.after_attempt(KEY, d.clone(), &facts(410), dead, (true, 5))
        else {
            panic!("a dead letter is a hand-off");
        };
        assert_eq!(Disabling::dead_letter_subscription(&h), Some("s"));
        let mut disabling = Disabling::default();
        disabling.disable_if_gone(&mut h, Some(&s), ("subscriptions", 2_050));
        let disable = h.disable.as_ref().expect("the 410 disables it");
        assert_eq!(disable.reason, DisabledReason::Gone);
        assert_eq!(disable.record.disabled_reason.as_deref(), Some("gone"));
        // The next 410 of the same subscription finds it being disabled already.
        let mut again = (*h).clone();
        again.disable = None;
        disabling.disable_if_gone(&mut again, Some(&s), ("subscriptions", 2_060));
        assert!(again.disable.is_none());
        // A subscription that now belongs to another tenant is not disabled.
        let mut other = Disabling::default();
        let mut h2 = (*h).clone();
        h2.disable = None;
        other.disable_if_gone(
            &mut h2,
            Some(&subscription("s", "globex")),
            ("subscriptions", 1),
        );
        assert!(h2.disable.is_none());
    }

    #[test]
    fn a_quarantined_record_keeps_its_key() {
        let b = builder(false);
        let record = QuarantinedEvent {
            key: Some(b"acme".to_vec()),
            value: b"junk".to_vec(),
            headers: Vec::new(),
            reason: QuarantineReason::NotAvro.as_str().into(),
            detail: "not single-object Avro".into(),
            source_topic: "deliveries".into(),
            source_partition: 3,
            source_offset: 42,
            quarantined_at: 1,
        };
        let h = b.quarantined(KEY, record, QuarantineReason::NotAvro);
        assert_eq!(h.topic, "events.quarantine");
        assert_eq!(h.record_key.as_deref(), Some(&b"acme"[..]));
    }
}

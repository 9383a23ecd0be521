//! What the dispatcher replicas share per subscription, as records: a
//! breaker's [`Shared`] state, and a strict subscription's [`HeldHead`], go
//! to `subscriptions.health` as one [`EndpointHealth`] (keyed by subscription)
//! when either changes here, and every replica adopts what it reads there
//! (`Machine::adopt`). See docs/design.md#circuit-breaker and
//! docs/design.md#strict-ordering.

use std::time::Duration;

use hookline_core::{epoch, Opened, Shared};
use hookline_envelope::EndpointHealth;

/// A strict subscription's head waiting in place after a failed attempt: what
/// its partition's next owner needs to go on with it rather than start over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldHead {
    pub delivery_id: String,
    /// Attempts so far.
    pub attempt: i32,
    pub first_attempt_at: Option<i64>,
    pub last_attempt_at: Option<i64>,
    /// When it may be attempted again, ms since the Unix epoch.
    pub due_at: i64,
    pub last_outcome: Option<String>,
}

impl HeldHead {
    /// The head `delivery` is, after its failed attempt (as the retry record
    /// would hold it).
    pub fn of(delivery: &hookline_envelope::Delivery) -> Self {
        Self {
            delivery_id: delivery.delivery_id.clone(),
            attempt: delivery.attempt,
            first_attempt_at: delivery.first_attempt_at,
            last_attempt_at: delivery.last_attempt_at,
            due_at: delivery.due_at,
            last_outcome: delivery.last_outcome.clone(),
        }
    }

    /// Gives `delivery`, read again from the start of its partition, the
    /// attempts and due time this head had, if it is this head and has not
    /// come further. Returns whether it did.
    pub fn restore(&self, delivery: &mut hookline_envelope::Delivery) -> bool {
        if delivery.delivery_id != self.delivery_id || delivery.attempt >= self.attempt {
            return false;
        }
        delivery.attempt = self.attempt;
        delivery.first_attempt_at = self.first_attempt_at;
        delivery.last_attempt_at = self.last_attempt_at;
        delivery.due_at = self.due_at;
        delivery.last_outcome.clone_from(&self.last_outcome);
        true
    }
}

/// The record of `subscription_id`'s breaker state and strict head, written
/// by `written_by`.
pub fn record(
    subscription_id: &str,
    shared: &Shared,
    head: Option<&HeldHead>,
    written_by: &str,
) -> EndpointHealth {
    let open = shared.open.as_ref();
    EndpointHealth {
        subscription_id: subscription_id.to_owned(),
        open_since: open.map(|o| epoch::millis(o.since)),
        open_until: open.map(|o| epoch::millis(o.until)),
        open_period_ms: open.map_or(0, |o| {
            i64::try_from(o.period.as_millis()).unwrap_or(i64::MAX)
        }),
        changed_at: epoch::millis(shared.changed_at),
        written_by: written_by.to_owned(),
        head_delivery_id: head.map(|h| h.delivery_id.clone()),
        head_attempt: head.map_or(0, |h| h.attempt),
        head_first_attempt_at: head.and_then(|h| h.first_attempt_at),
        head_last_attempt_at: head.and_then(|h| h.last_attempt_at),
        head_due_at: head.map(|h| h.due_at),
        head_last_outcome: head.and_then(|h| h.last_outcome.clone()),
    }
}

/// The strict head a record holds, if any.
pub fn head(record: &EndpointHealth) -> Option<HeldHead> {
    Some(HeldHead {
        delivery_id: record.head_delivery_id.clone()?,
        attempt: record.head_attempt,
        first_attempt_at: record.head_first_attempt_at,
        last_attempt_at: record.head_last_attempt_at,
        due_at: record.head_due_at.unwrap_or_default(),
        last_outcome: record.head_last_outcome.clone(),
    })
}

/// The state a record holds. Open needs both times; a record with only one
/// of them (not written by hookline) is read as open until the one it has.
pub fn shared(record: &EndpointHealth) -> Shared {
    let open = match (record.open_since, record.open_until) {
        (None, None) => None,
        (since, until) => {
            let (since, until) = (
                since.or(until).unwrap_or_default(),
                until.or(since).unwrap_or_default(),
            );
            Some(Opened {
                since: epoch::from_millis(since),
                until: epoch::from_millis(until),
                period: Duration::from_millis(u64::try_from(record.open_period_ms).unwrap_or(0)),
            })
        }
    };
    Shared {
        open,
        changed_at: epoch::from_millis(record.changed_at),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use super::*;

    fn t(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_700_000_000_000 + ms)
    }

    #[test]
    fn a_state_survives_its_record() {
        for shared in [
            Shared {
                open: Some(Opened {
                    since: t(0),
                    until: t(60_000),
                    period: Duration::from_secs(60),
                }),
                changed_at: t(30_000),
            },
            Shared {
                open: None,
                changed_at: t(90_000),
            },
        ] {
            let held = HeldHead {
                delivery_id: "msg_1".into(),
                attempt: 2,
                first_attempt_at: Some(1_700_000_000_000),
                last_attempt_at: Some(1_700_000_001_000),
                due_at: 1_700_000_021_000,
                last_outcome: Some("http_503".into()),
            };
            for head in [None, Some(&held)] {
                let r = record("sub-1", &shared, head, "hookline-dispatcher-0");
                assert_eq!(r.subscription_id, "sub-1");
                assert_eq!(r.written_by, "hookline-dispatcher-0");
                let back =
                    hookline_envelope::decode::<EndpointHealth>(&hookline_envelope::encode(&r))
                        .unwrap();
                assert_eq!(super::shared(&back), shared);
                assert_eq!(super::head(&back).as_ref(), head);
            }
        }
    }

    #[test]
    fn a_record_with_one_time_is_open_until_it() {
        let r = EndpointHealth {
            subscription_id: "s".into(),
            open_since: None,
            open_until: Some(1_700_000_060_000),
            open_period_ms: 0,
            changed_at: 1_700_000_000_000,
            written_by: String::new(),
            head_delivery_id: None,
            head_attempt: 0,
            head_first_attempt_at: None,
            head_last_attempt_at: None,
            head_due_at: None,
            head_last_outcome: None,
        };
        let open = shared(&r).open.unwrap();
        assert_eq!((open.since, open.until), (t(60_000), t(60_000)));
        assert_eq!(head(&r), None);
    }

    #[test]
    fn a_head_read_again_goes_on_with_its_attempts_only_if_it_is_that_head() {
        let held = HeldHead {
            delivery_id: "msg_1".into(),
            attempt: 2,
            first_attempt_at: Some(10),
            last_attempt_at: Some(20),
            due_at: 30,
            last_outcome: Some("http_503".into()),
        };
        let mut again =
            hookline_envelope::fixtures::DeliveryBuilder::new("msg_1", "t", "s").build();
        assert!(held.restore(&mut again));
        assert_eq!(
            (again.attempt, again.first_attempt_at, again.due_at),
            (2, Some(10), 30)
        );
        assert!(!held.restore(&mut again), "already as far");
        let mut other =
            hookline_envelope::fixtures::DeliveryBuilder::new("msg_2", "t", "s").build();
        assert!(!held.restore(&mut other), "another delivery");
    }
}

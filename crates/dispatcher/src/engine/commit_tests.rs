//! The engine's commit bookkeeping without a broker: the machine's watermark
//! and the hand-offs waiting for a transaction, driven as `commit.rs` drives
//! them, so that no committed offset passes a record whose follow-up was not
//! written — also when a transaction fails while its partitions are revoked.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hookline_core::{BreakerSettings, Ladder, LaneLimits, LaneSettings, OverflowSettings, Signal};
use hookline_envelope::{encode, fixtures::DeliveryBuilder, Delivery};
use tokio::time::Instant;

use super::commit::{finish_ready, put_back};
use crate::{
    attempt::Target,
    handoff::{Handoff, Pending, Written},
    machine::{Action, Directory, Machine},
    part::{Input, Key, NoTarget, Part},
};

/// A partition of the only input, `deliveries`.
const D: Part = Part {
    input: 0,
    partition: 0,
};

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// Every subscription exists, eight in flight.
struct Dir;

impl Directory for Dir {
    fn settings(&self, _: &str) -> LaneSettings {
        LaneSettings::unlimited_rate(8)
    }

    fn target(&self, _: &Delivery) -> Result<Target, NoTarget> {
        Ok(Target {
            url: "https://example.test/s".into(),
            secret_ref: "secret".into(),
        })
    }
}

fn machine() -> Machine {
    let inputs = vec![Input {
        topic: "deliveries".into(),
        label: "deliveries",
        tier: None,
        strict: false,
        lane: None,
    }];
    let mut m = Machine::new(
        inputs,
        LaneLimits::DEFAULT,
        1 << 20,
        Ladder::default(),
        (BreakerSettings::DEFAULT, OverflowSettings::DEFAULT),
    )
    .expect("valid limits");
    m.assign(&[D]);
    m.take_actions();
    m
}

fn delivery(offset: i64) -> Vec<u8> {
    let at = i64::try_from(now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap();
    encode(
        &DeliveryBuilder::new(&format!("d-{offset}"), "t", "s")
            .at(at)
            .build(),
    )
}

/// A retry of the record at `key`, as a failed attempt leaves it.
fn retry(key: Key) -> Handoff {
    Handoff {
        key,
        topic: "deliveries.r1".into(),
        partition: None,
        record_key: None,
        value: delivery(key.1),
        headers: Vec::new(),
        written: Written::Retry {
            tier: "r1".into(),
            delivery_id: format!("d-{}", key.1),
        },
        disable: None,
        log: Vec::new(),
    }
}

/// Records 0..n of `D` fetched and attempted, each failed with a retry to
/// write, the hand-offs finished into `pending` as before a transaction.
fn attempted_with_retries(m: &mut Machine, pending: &mut Pending, n: i64) {
    for offset in 0..n {
        m.on_record(D, offset, (Some(&delivery(offset)), None), now(), &Dir);
    }
    m.start_ready(now(), &Dir);
    let started: Vec<Key> = m
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Attempt { key, .. } => Some(key),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), usize::try_from(n).unwrap());
    for key in started {
        m.attempted(key, now(), Signal::Failure);
        m.attempt_ended(key);
        pending.defer(retry(key));
    }
    finish_ready(m, pending);
}

#[test]
fn a_failed_transaction_during_a_revoke_keeps_the_offset_below_its_hand_offs() {
    let mut m = machine();
    let mut pending = Pending::default();
    attempted_with_retries(&mut m, &mut pending, 2);
    let at = Instant::now();
    let batch = pending.take(at.into_std());
    assert_eq!(batch.handoffs.len(), 2);
    assert_eq!(m.offsets_mut().to_commit(|p| pending.cap(p)), vec![(D, 2)]);
    // The broker restarts: the session is lost, the partition revoked, and
    // the transaction in progress fails while the revoke flushes.
    m.revoke(&[D]);
    put_back(&m, &mut pending, batch, at);
    // The flush's next transaction (the consumer back in the group, its
    // generation valid again) must not pass the retries it did not write.
    assert_eq!(
        m.offsets_mut().to_commit(|p| pending.cap(p)),
        vec![(D, 0)],
        "the offset passed records whose retries were never written"
    );
    // Tried again alone after its back-off, they commit with the offset.
    let later = pending.next_retry().expect("the partition is suspect");
    let solo = pending.take(later);
    assert_eq!(solo.solo, Some(D));
    assert_eq!(solo.handoffs.len(), 2);
    assert_eq!(m.offsets_mut().to_commit(|p| pending.cap(p)), vec![(D, 2)]);
}

#[test]
fn a_failed_transaction_after_the_revoke_drops_the_forgotten_partitions_hand_offs() {
    let mut m = machine();
    let mut pending = Pending::default();
    attempted_with_retries(&mut m, &mut pending, 2);
    let at = Instant::now();
    let batch = pending.take(at.into_std());
    // The revoke ended (its flush ran out of time) before the transaction did.
    m.revoke(&[D]);
    m.forget(&[D]);
    pending.forget(|k| k.0 == D);
    put_back(&m, &mut pending, batch, at);
    assert!(pending.is_empty(), "the next owner re-reads those records");
    assert_eq!(pending.next_retry(), None);
    assert!(m.offsets_mut().to_commit(|p| pending.cap(p)).is_empty());
}

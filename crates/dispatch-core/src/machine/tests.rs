//! The machine without a broker: what starts, what is finished, what is held
//! and released, across rewinds, revokes mid-flight, quarantine writes,
//! cancellations and panicked attempts. Time is an argument throughout.

use std::{
    collections::HashMap,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use hookline_core::{
    BreakerSettings, Ladder, LaneLimits, LaneSettings, Opened, OverflowSettings, Shared, Signal,
    Transition,
};
use hookline_envelope::{encode, fixtures::DeliveryBuilder, Delivery};

use super::{Action, Directory, GateAction, Hold, Intake, Machine, Note, WriteCap};
use crate::{
    attempt::{Finished, Refusal, Target},
    part::{Input, Key, NoTarget, Part},
};

/// A partition of `deliveries` and one of the tier.
const D: Part = Part {
    input: 0,
    partition: 0,
};
const R: Part = Part {
    input: 1,
    partition: 2,
};
/// A partition of `deliveries.strict` (assigned by [`strict_machine`]).
const S: Part = Part {
    input: 2,
    partition: 1,
};

/// `--max-payload-bytes` in these tests.
const MAX_PAYLOAD: usize = 64;

pub(super) fn t(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_millis(ms)
}

fn epoch_ms(t: SystemTime) -> i64 {
    i64::try_from(t.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// Subscriptions: max in flight, enabled.
#[derive(Default)]
pub(super) struct Dir(HashMap<String, (u32, bool)>);

impl Dir {
    pub(super) fn with(subs: &[(&str, u32, bool)]) -> Self {
        Self(
            subs.iter()
                .map(|(id, max, enabled)| ((*id).to_owned(), (*max, *enabled)))
                .collect(),
        )
    }
}

impl Directory for Dir {
    fn settings(&self, subscription_id: &str) -> LaneSettings {
        LaneSettings::unlimited_rate(self.0.get(subscription_id).map_or(1, |s| s.0))
    }

    fn target(&self, d: &Delivery) -> Result<Target, NoTarget> {
        let (_, enabled) = self.0.get(&d.subscription_id).ok_or(NoTarget::Deleted)?;
        if !enabled {
            return Err(NoTarget::Disabled { reason: None });
        }
        Ok(Target {
            url: format!("https://example.test/{}", d.subscription_id),
            secret_ref: "secret".into(),
        })
    }
}

fn machine(partition_records: usize) -> Machine {
    let inputs = vec![
        Input {
            topic: "deliveries".into(),
            label: "deliveries",
            tier: None,
            strict: false,
            lane: None,
        },
        Input {
            topic: "retry-10s".into(),
            label: "retry-10s",
            tier: Some(0),
            strict: false,
            lane: None,
        },
        Input {
            topic: "deliveries.strict".into(),
            label: "strict",
            tier: None,
            strict: true,
            lane: None,
        },
    ];
    let limits = LaneLimits {
        global_in_flight: 64,
        tenant_in_flight: 64,
        retry_share_percent: 50,
        overflow_share_percent: 50,
        partition_records,
        partition_bytes: 1 << 20,
        total_records: 10_000,
        total_bytes: 1 << 30,
        ..LaneLimits::DEFAULT
    };
    let mut m = Machine::new(
        inputs,
        limits,
        MAX_PAYLOAD,
        Ladder::default(),
        (BreakerSettings::DEFAULT, OverflowSettings::DEFAULT),
    )
    .expect("valid limits");
    m.assign(&[D, R]);
    let resumed = gates(&mut m);
    assert_eq!(resumed, vec![GateAction::Resume(D), GateAction::Resume(R)]);
    m
}

pub(super) fn delivery(subscription: &str, due: SystemTime) -> Vec<u8> {
    delivery_of(subscription, due, b"{}")
}

fn delivery_of(subscription: &str, due: SystemTime, payload: &[u8]) -> Vec<u8> {
    tenant_delivery("t", subscription, due, payload)
}

/// A delivery of `tenant`'s `subscription`.
pub(super) fn tenant_delivery(
    tenant: &str,
    subscription: &str,
    due: SystemTime,
    payload: &[u8],
) -> Vec<u8> {
    encode(
        &DeliveryBuilder::new(
            &format!("d-{subscription}-{}", epoch_ms(due)),
            tenant,
            subscription,
        )
        .at(epoch_ms(t(0)))
        .due_at(epoch_ms(due))
        .payload(payload)
        .build(),
    )
}

fn gates(m: &mut Machine) -> Vec<GateAction> {
    m.take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Gate(g) => Some(g),
            Action::Attempt { .. }
            | Action::Unattempted { .. }
            | Action::Park { .. }
            | Action::Move { .. } => None,
        })
        .collect()
}

/// Starts what may start at `now`; returns the attempted keys (gate actions are dropped).
pub(super) fn start(m: &mut Machine, now: SystemTime, dir: &Dir) -> Vec<Key> {
    m.start_ready(now, dir);
    m.take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Attempt { key, .. } => Some(key),
            Action::Gate(_)
            | Action::Unattempted { .. }
            | Action::Park { .. }
            | Action::Move { .. } => None,
        })
        .collect()
}

fn push(
    m: &mut Machine,
    part: Part,
    offset: i64,
    payload: &[u8],
    now: SystemTime,
    dir: &Dir,
) -> Intake {
    m.on_record(part, offset, (Some(payload), None), now, dir)
}

#[test]
fn offset_is_finished_only_when_the_attempt_is_durable() {
    let dir = Dir::with(&[("s", 1, true)]);
    let mut m = machine(100);
    for offset in 0..3 {
        assert!(matches!(
            push(&mut m, D, offset, &delivery("s", t(0)), t(0), &dir),
            Intake::Queued
        ));
    }
    assert_eq!(start(&mut m, t(0), &dir), vec![(D, 0)], "max_in_flight 1");
    assert_eq!(m.offsets_mut().committable(D), Some(0));
    m.complete((D, 0), Finished::Abandoned);
    assert_eq!(
        m.offsets_mut().committable(D),
        Some(0),
        "an abandoned attempt finished its offset"
    );
    // Abandoned: the record stays unfinished; the lanes start the next one.
    assert_eq!(start(&mut m, t(0), &dir), vec![(D, 1)]);
    m.complete((D, 1), Finished::Durable);
    assert_eq!(
        m.offsets_mut().committable(D),
        Some(0),
        "passed an unfinished record"
    );
    assert_eq!(start(&mut m, t(0), &dir), vec![(D, 2)]);
    m.complete((D, 2), Finished::Durable);
    assert_eq!(m.offsets_mut().committable(D), Some(0));
    assert!(m.take_notes().is_empty());
}

#[test]
fn an_attempt_with_a_follow_up_frees_its_slot_but_not_its_offset() {
    let dir = Dir::with(&[("s", 1, true)]);
    let mut m = machine(100);
    for offset in 0..2 {
        push(&mut m, D, offset, &delivery("s", t(0)), t(0), &dir);
    }
    assert_eq!(start(&mut m, t(0), &dir), vec![(D, 0)], "max_in_flight 1");
    m.attempt_ended((D, 0));
    assert_eq!(start(&mut m, t(0), &dir), vec![(D, 1)], "its slot is free");
    assert_eq!(m.lowest_unfinished(D), Some(0), "its offset is not");
    assert!(m.is_running(|k| *k == (D, 0)), "a pending write");
    assert_eq!(m.running_attempts(), 1);
    assert_eq!(
        m.running_attempts_by_class(),
        (1, 0, 0),
        "a pending write is no attempt"
    );
    m.complete((D, 0), Finished::Durable);
    assert_eq!(m.lowest_unfinished(D), Some(1));
    // An abandoned follow-up (a revoke) leaves its offset unfinished.
    m.attempt_ended((D, 1));
    assert_eq!(m.abandon(|k| *k == (D, 1)), vec![(D, 1)]);
    assert_eq!(m.lowest_unfinished(D), Some(1));
    assert!(m.take_notes().is_empty());
}

#[test]
fn pending_follow_ups_hold_the_partition_from_the_cap_to_half() {
    let dir = Dir::with(&[("s", 1_000, true)]);
    let mut m = machine(WriteCap::PARTITION.records);
    let cap = i64::try_from(WriteCap::PARTITION.records).unwrap();
    for offset in 0..cap {
        push(&mut m, D, offset, &delivery("s", t(0)), t(0), &dir);
    }
    // Each ended attempt frees its slot, so the caps never stop the next.
    let mut ended = 0;
    while ended < WriteCap::PARTITION.records {
        let started = start(&mut m, t(0), &dir);
        assert!(!started.is_empty(), "stuck after {ended}");
        for key in started {
            m.attempt_ended(key);
            ended += 1;
        }
    }
    assert!(m.gate().holds(D, Hold::Writes));
    for offset in 0..cap / 2 {
        m.complete((D, offset), Finished::Durable);
    }
    assert!(!m.gate().holds(D, Hold::Writes), "released at half");
}

#[test]
fn full_buffer_holds_the_partition_until_the_lanes_drain_below_half() {
    let dir = Dir::with(&[("s", 1, true)]);
    let mut m = machine(4);
    for offset in 0..6 {
        push(&mut m, D, offset, &delivery("s", t(0)), t(0), &dir);
    }
    assert_eq!(
        gates(&mut m),
        vec![GateAction::Pause {
            part: D,
            reason: Hold::Buffer
        }],
        "one pause for a full buffer"
    );
    let mut resumed_at = None;
    for offset in 0..6 {
        assert_eq!(start(&mut m, t(0), &dir), vec![(D, offset)]);
        m.complete((D, offset), Finished::Durable);
        m.on_tick();
        let actions = gates(&mut m);
        let buffered = m.lanes().partition_buffered(&D).0;
        if actions.contains(&GateAction::Resume(D)) {
            assert!(
                buffered <= 2,
                "resumed with {buffered} buffered (low water 2)"
            );
            assert!(resumed_at.is_none(), "resumed twice");
            resumed_at = Some(offset);
        } else if resumed_at.is_none() {
            assert!(buffered > 2, "not resumed at {buffered} buffered");
            assert!(m.gate().holds(D, Hold::Buffer));
        }
    }
    assert!(resumed_at.is_some());
    assert_eq!(m.offsets_mut().committable(D), Some(6));
}

/// Tier `R` is the default ladder's first (10 s). A head due long after its tier
/// releases it waits for the tier, then is re-parked without an attempt, on the
/// tier that fits what is left; the records behind it flow on.
#[test]
fn a_head_its_tier_released_early_is_reparked_not_attempted_and_does_not_hold_the_partition() {
    let dir = Dir::with(&[("s", 4, true)]);
    let mut m = machine(100);
    let written = t(0);
    let due = t(100_000);
    let head = delivery("s", due);
    // Before its tier releases it (written + 10 s): held until then, not until due.
    assert!(matches!(
        m.on_record(R, 5, (Some(&head), Some(written)), t(1_000), &dir),
        Intake::NotDue
    ));
    let generation = match gates(&mut m)[..] {
        [GateAction::Rewind { generation, .. }] => generation,
        ref other => panic!("expected a rewind: {other:?}"),
    };
    m.rewound(R, generation, true);
    assert_eq!(
        m.next_wakeup(),
        Some(t(10_000)),
        "the tier's release, not the due time"
    );
    m.on_due(t(10_000));
    assert_eq!(gates(&mut m), vec![GateAction::Resume(R)]);
    // Released with 90 s left: re-parked on retry-1m (60 s ≤ 90 s < 15 m).
    assert!(matches!(
        m.on_record(R, 5, (Some(&head), Some(written)), t(10_000), &dir),
        Intake::Repark { tier: 1 }
    ));
    // The record behind it is due: attempted while the re-park is pending.
    let behind = delivery("s", t(9_000));
    assert!(matches!(
        m.on_record(R, 6, (Some(&behind), Some(written)), t(10_000), &dir),
        Intake::Queued
    ));
    assert_eq!(
        start(&mut m, t(10_000), &dir),
        vec![(R, 6)],
        "the head is not attempted"
    );
    m.complete((R, 6), Finished::Durable);
    assert_eq!(
        m.offsets_mut().committable(R),
        Some(5),
        "the re-park is not written yet"
    );
    m.complete((R, 5), Finished::Durable);
    assert_eq!(m.offsets_mut().committable(R), Some(7));
    // Re-fetched with at most the first tier's delay left: waits in place until due.
    let soon = delivery("s", t(15_000));
    assert!(matches!(
        m.on_record(R, 7, (Some(&soon), Some(written)), t(10_000), &dir),
        Intake::NotDue
    ));
}

#[test]
fn tier_head_not_due_is_rewound_and_released_at_its_due_time() {
    let dir = Dir::with(&[("s", 4, true)]);
    let mut m = machine(100);
    let due = t(10_000);
    assert!(matches!(
        push(&mut m, R, 5, &delivery("s", due), t(0), &dir),
        Intake::NotDue
    ));
    let generation = match gates(&mut m)[..] {
        [GateAction::Rewind {
            part: R,
            offset: 5,
            generation,
        }] => generation,
        ref other => panic!("expected a rewind to 5: {other:?}"),
    };
    // Fetched before the seek: dropped, fetched again later.
    assert!(matches!(
        push(&mut m, R, 6, &delivery("s", t(0)), t(1), &dir),
        Intake::Dropped
    ));
    assert!(
        start(&mut m, t(1), &dir).is_empty(),
        "attempted a record fetched before the rewind"
    );
    assert!(
        m.offsets_mut().committable(R).is_none_or(|c| c <= 5),
        "the committed offset passed the head not yet due"
    );
    m.rewound(R, generation, true);
    assert!(gates(&mut m).is_empty(), "resumed before the head is due");
    assert_eq!(m.next_wakeup(), Some(due));
    m.on_due(t(9_999));
    assert!(gates(&mut m).is_empty(), "resumed early");
    m.on_due(due);
    assert_eq!(gates(&mut m), vec![GateAction::Resume(R)]);
    assert!(matches!(
        push(&mut m, R, 5, &delivery("s", due), due, &dir),
        Intake::Queued
    ));
    assert_eq!(start(&mut m, due, &dir), vec![(R, 5)]);
    let notes = m.take_notes();
    assert_eq!(
        notes,
        vec![
            Note::Promoted { label: "retry-10s" },
            Note::RetryLate {
                label: "retry-10s",
                late: Duration::ZERO
            }
        ]
    );
}

#[test]
fn quarantine_writes_hold_the_partition_from_the_cap_to_half() {
    let dir = Dir::default();
    let mut m = machine(1_000);
    let cap = i64::try_from(WriteCap::PARTITION.records).unwrap();
    for offset in 0..cap {
        assert!(matches!(
            m.on_record(D, offset, (Some(b"not avro"), None), t(0), &dir),
            Intake::Quarantine(_)
        ));
    }
    assert_eq!(
        gates(&mut m),
        vec![GateAction::Pause {
            part: D,
            reason: Hold::Writes
        }]
    );
    for offset in 0..cap {
        m.complete((D, offset), Finished::Durable);
        let actions = gates(&mut m);
        let pending = cap - offset - 1;
        if pending == cap / 2 {
            assert_eq!(actions, vec![GateAction::Resume(D)], "at half");
        } else {
            assert!(actions.is_empty(), "{pending} pending: {actions:?}");
        }
    }
    assert_eq!(m.offsets_mut().committable(D), Some(cap));
}

#[test]
fn buffer_and_quarantine_release_only_together() {
    let dir = Dir::with(&[("s", 1, true)]);
    let mut m = machine(2);
    let cap = i64::try_from(WriteCap::PARTITION.records).unwrap();
    for offset in 0..cap {
        m.on_record(D, offset, (Some(b"junk"), None), t(0), &dir);
    }
    push(&mut m, D, cap, &delivery("s", t(0)), t(0), &dir);
    push(&mut m, D, cap + 1, &delivery("s", t(0)), t(0), &dir);
    let held = gates(&mut m);
    assert_eq!(held.len(), 1, "paused once for two reasons: {held:?}");
    assert!(m.gate().holds(D, Hold::Buffer) && m.gate().holds(D, Hold::Writes));
    for offset in 0..cap {
        m.complete((D, offset), Finished::Durable);
    }
    assert!(
        gates(&mut m).is_empty(),
        "quarantine released while the buffer is full"
    );
    for offset in [cap, cap + 1] {
        assert_eq!(start(&mut m, t(0), &dir), vec![(D, offset)]);
        m.complete((D, offset), Finished::Durable);
    }
    m.on_tick();
    assert_eq!(gates(&mut m), vec![GateAction::Resume(D)]);
}

#[test]
fn revoke_mid_flight_drops_queued_and_never_resumes_the_partition() {
    let dir = Dir::with(&[("s", 1, true)]);
    let mut m = machine(2);
    for offset in 0..4 {
        push(&mut m, D, offset, &delivery("s", t(0)), t(0), &dir);
    }
    assert_eq!(start(&mut m, t(0), &dir), vec![(D, 0)]);
    gates(&mut m);
    assert_eq!(m.revoke(&[D]), 3, "three queued records dropped");
    assert!(
        m.is_running(|k| k.0 == D),
        "the attempt in flight is still ours to wait for"
    );
    // The attempt in flight may still finish; the lanes let nothing else start.
    m.complete((D, 0), Finished::Durable);
    m.on_tick();
    m.on_due(t(100_000));
    assert!(start(&mut m, t(0), &dir).is_empty());
    assert!(gates(&mut m).is_empty(), "a revoked partition was resumed");
    assert_eq!(
        m.offsets_mut().committable(D),
        Some(1),
        "the finished attempt is stored on revoke"
    );
    m.forget(&[D]);
    assert!(matches!(
        push(&mut m, D, 4, &delivery("s", t(0)), t(0), &dir),
        Intake::Dropped
    ));
    assert_eq!(m.take_notes(), vec![Note::NotAssigned(D, 4)]);
}

#[test]
fn abandoned_work_is_released_and_a_late_completion_ignored() {
    let dir = Dir::with(&[("s", 2, true)]);
    let mut m = machine(100);
    push(&mut m, D, 0, &delivery("s", t(0)), t(0), &dir);
    m.on_record(D, 1, (Some(b"junk"), None), t(0), &dir);
    assert_eq!(start(&mut m, t(0), &dir), vec![(D, 0)]);
    m.revoke(&[D]);
    assert_eq!(m.abandon(|k| k.0 == D), vec![(D, 0), (D, 1)]);
    assert!(!m.is_running(|_| true));
    m.complete((D, 0), Finished::Durable);
    assert_eq!(
        m.offsets_mut().committable(D),
        Some(0),
        "a completion after abandon finished"
    );
    assert!(m.take_notes().is_empty(), "{:?}", m.take_notes());
    assert_eq!(
        m.lanes().in_flight(),
        0,
        "the lanes still count the abandoned attempt"
    );
}

#[test]
fn disabled_or_deleted_subscription_is_kept_unattempted_and_finished_only_when_written() {
    // One slot per lane: each kept delivery frees its slot at once, so both of
    // `off` are handed on in one pass.
    let dir = Dir::with(&[("off", 1, false), ("on", 1, true)]);
    let mut m = machine(100);
    push(&mut m, D, 0, &delivery("off", t(0)), t(0), &dir);
    push(&mut m, D, 1, &delivery("gone", t(0)), t(0), &dir);
    push(&mut m, D, 2, &delivery("off", t(0)), t(0), &dir);
    push(&mut m, D, 3, &delivery("on", t(0)), t(0), &dir);
    m.start_ready(t(0), &dir);
    let mut kept = Vec::new();
    let mut attempted = Vec::new();
    for action in m.take_actions() {
        match action {
            Action::Unattempted {
                key, delivery, why, ..
            } => {
                kept.push((key, delivery.subscription_id.clone(), why));
            }
            Action::Attempt { key, .. } => attempted.push(key),
            Action::Gate(_) | Action::Park { .. } | Action::Move { .. } => {}
        }
    }
    assert_eq!(attempted, vec![(D, 3)], "only the enabled one is attempted");
    let disabled = NoTarget::Disabled { reason: None };
    assert_eq!(
        kept,
        vec![
            ((D, 0), "off".to_owned(), disabled.clone()),
            ((D, 1), "gone".to_owned(), NoTarget::Deleted),
            ((D, 2), "off".to_owned(), disabled),
        ]
    );
    assert_eq!(m.lanes().in_flight(), 1, "kept deliveries hold no slot");
    // Not finished until their dead letters are in a transaction.
    assert_eq!(m.offsets_mut().committable(D), Some(0));
    for offset in 0..3 {
        m.complete((D, offset), Finished::Durable);
    }
    assert_eq!(m.offsets_mut().committable(D), Some(3));
    m.complete((D, 3), Finished::Durable);
    assert_eq!(m.offsets_mut().committable(D), Some(4));
    assert!(m.take_notes().is_empty(), "{:?}", m.take_notes());
}

#[test]
fn panicked_attempt_is_queued_again_and_not_finished() {
    let dir = Dir::with(&[("s", 1, true)]);
    let mut m = machine(100);
    push(&mut m, D, 0, &delivery("s", t(0)), t(0), &dir);
    assert_eq!(start(&mut m, t(0), &dir), vec![(D, 0)]);
    m.panicked((D, 0), t(1), &dir);
    assert_eq!(m.take_notes(), vec![Note::Panicked((D, 0))]);
    assert_eq!(m.offsets_mut().committable(D), Some(0));
    assert_eq!(
        start(&mut m, t(1), &dir),
        vec![(D, 0)],
        "not attempted again"
    );
    m.complete((D, 0), Finished::Durable);
    assert_eq!(m.offsets_mut().committable(D), Some(1));
}

#[test]
fn duplicate_offset_is_dropped_and_noted() {
    let dir = Dir::with(&[("s", 1, true)]);
    let mut m = machine(100);
    push(&mut m, D, 0, &delivery("s", t(0)), t(0), &dir);
    assert!(matches!(
        push(&mut m, D, 0, &delivery("s", t(0)), t(0), &dir),
        Intake::Dropped
    ));
    assert_eq!(m.take_notes(), vec![Note::AlreadyTracked(D, 0)]);
    assert_eq!(start(&mut m, t(0), &dir), vec![(D, 0)]);
    assert!(start(&mut m, t(0), &dir).is_empty(), "attempted twice");
}

#[test]
fn reassignment_releases_every_hold_and_reads_afresh() {
    let dir = Dir::with(&[("s", 1, true)]);
    let mut m = machine(1);
    push(&mut m, R, 0, &delivery("s", t(5_000)), t(0), &dir);
    gates(&mut m);
    m.revoke(&[R]);
    m.forget(&[R]);
    m.assign(&[R]);
    assert_eq!(gates(&mut m), vec![GateAction::Resume(R)]);
    assert_eq!(
        m.next_wakeup(),
        None,
        "the old due time survived the rebalance"
    );
    assert!(matches!(
        push(&mut m, R, 0, &delivery("s", t(0)), t(1), &dir),
        Intake::Queued
    ));
}

#[test]
fn waiting_counts_include_a_head_past_due() {
    let dir = Dir::with(&[("s", 1, true)]);
    let mut m = machine(100);
    push(&mut m, D, 0, &delivery("s", t(0)), t(0), &dir);
    push(&mut m, D, 1, &delivery("s", t(0)), t(0), &dir);
    start(&mut m, t(0), &dir);
    push(&mut m, R, 0, &delivery("s", t(1_000)), t(0), &dir);
    let counts = m.counts(t(2_000));
    assert_eq!(counts[0].waiting, 2, "one queued, one in flight");
    assert_eq!(
        counts[0].due, 1,
        "the queued one; in flight is not waiting to start"
    );
    assert_eq!(counts[1].due, 1, "the head past due");
    assert_eq!(m.counts(t(500))[1].due, 0, "the head before its due time");
    assert_eq!(counts[0].oldest_ready, Some(t(0)));
    assert_eq!(counts[1].not_due, 1);
    assert_eq!(counts[1].waiting, 1);
    assert_eq!(
        counts[1].oldest_ready,
        Some(t(1_000)),
        "a head past due is ready"
    );
    assert_eq!(m.running_attempts(), 1);
}

#[test]
fn payload_over_the_cap_is_refused_without_being_sent() {
    let dir = Dir::with(&[("s", 2, true)]);
    let mut m = machine(100);
    let at_cap = delivery_of("s", t(0), &[b'x'; MAX_PAYLOAD]);
    let over = delivery_of("s", t(0), &[b'x'; MAX_PAYLOAD + 1]);
    push(&mut m, D, 0, &at_cap, t(0), &dir);
    push(&mut m, D, 1, &over, t(0), &dir);
    m.start_ready(t(0), &dir);
    let refusals: Vec<(Key, Option<Refusal>)> = m
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Attempt { key, refusal, .. } => Some((key, refusal)),
            Action::Gate(_)
            | Action::Unattempted { .. }
            | Action::Park { .. }
            | Action::Move { .. } => None,
        })
        .collect();
    assert_eq!(
        refusals,
        vec![
            ((D, 0), None),
            (
                (D, 1),
                Some(Refusal::payload_too_large(MAX_PAYLOAD + 1, MAX_PAYLOAD))
            )
        ],
        "at the cap is sent, over it is refused"
    );
}

/// The actions of one `start_ready`: attempted keys and parked (key, tier, until).
fn start_or_park(
    m: &mut Machine,
    now: SystemTime,
    dir: &Dir,
) -> (Vec<Key>, Vec<(Key, usize, SystemTime)>) {
    m.start_ready(now, dir);
    let (mut attempted, mut parked) = (Vec::new(), Vec::new());
    for action in m.take_actions() {
        match action {
            Action::Attempt { key, .. } => attempted.push(key),
            Action::Park {
                key, tier, until, ..
            } => parked.push((key, tier, until)),
            Action::Gate(_) | Action::Unattempted { .. } | Action::Move { .. } => {}
        }
    }
    (attempted, parked)
}

/// Ten failures in a row open `s`'s breaker: its next deliveries are parked on a
/// tier until the breaker may probe (slots freed, attempts unspent), another
/// subscription's go on; one probe at the open period's end, and its success
/// closes the breaker.
#[test]
fn an_open_breaker_parks_its_deliveries_then_one_probe_closes_it() {
    let dir = Dir::with(&[("s", 1, true), ("o", 1, true)]);
    let mut m = machine(100);
    let mut now = t(0);
    for offset in 0..10 {
        push(&mut m, D, offset, &delivery("s", t(0)), now, &dir);
        assert_eq!(start(&mut m, now, &dir), vec![(D, offset)]);
        m.attempted((D, offset), now, Signal::Failure);
        m.attempt_ended((D, offset));
        m.complete((D, offset), Finished::Durable);
        now += Duration::from_millis(10);
    }
    let opened = now - Duration::from_millis(10);
    let notes = m.take_notes();
    assert!(
        notes.contains(&Note::Breaker {
            subscription_id: "s".into(),
            transition: Transition::Opened,
        }),
        "{notes:?}"
    );
    assert!(
        notes.contains(&Note::Share {
            subscription_id: "s".into(),
            shared: Shared {
                open: Some(Opened {
                    since: opened,
                    until: opened + BreakerSettings::DEFAULT.open_for,
                    period: BreakerSettings::DEFAULT.open_for,
                }),
                changed_at: opened,
            },
            head: None,
        }),
        "shared with the other replicas: {notes:?}"
    );
    assert_eq!(m.breakers_open(), 1);
    // Parked on retry-10s (the longest within 30 s), due when it may probe.
    push(&mut m, D, 10, &delivery("s", t(0)), now, &dir);
    push(&mut m, D, 11, &delivery("o", t(0)), now, &dir);
    let until = opened + BreakerSettings::DEFAULT.open_for;
    let (attempted, parked) = start_or_park(&mut m, now, &dir);
    assert_eq!(attempted, vec![(D, 11)], "the other subscription goes on");
    assert_eq!(parked, vec![((D, 10), 0, until)]);
    assert_eq!(m.lanes().in_flight(), 1, "a parked delivery holds no slot");
    m.complete((D, 10), Finished::Durable);
    // At its end: one probe; the next is parked meanwhile.
    push(&mut m, R, 0, &delivery("s", until), until, &dir);
    push(&mut m, R, 1, &delivery("s", until), until, &dir);
    let (attempted, _) = start_or_park(&mut m, until, &dir);
    assert_eq!(attempted, vec![(R, 0)], "one probe");
    m.attempted((R, 0), until, Signal::Success);
    m.complete((R, 0), Finished::Durable);
    let closed = Note::Breaker {
        subscription_id: "s".into(),
        transition: Transition::Closed,
    };
    let shared = Note::Share {
        subscription_id: "s".into(),
        shared: Shared {
            open: None,
            changed_at: until,
        },
        head: None,
    };
    let notes = m.take_notes();
    assert!(
        notes.contains(&closed) && notes.contains(&shared),
        "{notes:?}"
    );
    assert_eq!(m.breakers_open(), 0);
    let (attempted, parked) = start_or_park(&mut m, until, &dir);
    assert_eq!(
        (attempted, parked),
        (vec![(R, 1)], vec![]),
        "closed: sent again"
    );
}

/// A probe that never answers (its task panicked) does not leave the breaker
/// waiting for it forever: the next delivery probes.
#[test]
fn a_lost_probe_lets_the_next_delivery_probe() {
    let dir = Dir::with(&[("s", 1, true)]);
    let mut m = machine(100);
    for offset in 0..10 {
        push(&mut m, D, offset, &delivery("s", t(0)), t(0), &dir);
        assert_eq!(start(&mut m, t(0), &dir), vec![(D, offset)]);
        m.attempted((D, offset), t(0), Signal::Failure);
        m.attempt_ended((D, offset));
        m.complete((D, offset), Finished::Durable);
    }
    let probe_at = t(0) + BreakerSettings::DEFAULT.open_for;
    push(&mut m, D, 10, &delivery("s", t(0)), probe_at, &dir);
    assert_eq!(start(&mut m, probe_at, &dir), vec![(D, 10)]);
    m.panicked((D, 10), probe_at, &dir);
    // Queued again and started again: as the probe, not parked.
    assert_eq!(start(&mut m, probe_at, &dir), vec![(D, 10)]);
}

/// Ten failures of `s` in a row from `t(0)`: its breaker opens. Returns when it may probe.
fn open_breaker(m: &mut Machine, dir: &Dir) -> SystemTime {
    for offset in 0..10 {
        push(m, D, offset, &delivery("s", t(0)), t(0), dir);
        assert_eq!(start(m, t(0), dir), vec![(D, offset)]);
        m.attempted((D, offset), t(0), Signal::Failure);
        m.attempt_ended((D, offset));
        m.complete((D, offset), Finished::Durable);
    }
    assert_eq!(m.breakers_open(), 1);
    t(0) + BreakerSettings::DEFAULT.open_for
}

/// While the probe is out, the subscription's other due deliveries wait for its
/// answer in memory — nothing is parked or written — and its success sends them
/// at once, up to `max_in_flight`, not an open period later.
#[test]
fn a_successful_probe_releases_what_waited_for_it_at_once() {
    let dir = Dir::with(&[("s", 4, true)]);
    let mut m = machine(100);
    let probe_at = open_breaker(&mut m, &dir);
    for offset in 0..4 {
        push(&mut m, R, offset, &delivery("s", probe_at), probe_at, &dir);
    }
    let (attempted, parked) = start_or_park(&mut m, probe_at, &dir);
    assert_eq!(attempted, vec![(R, 0)], "one probe");
    assert_eq!(parked, vec![], "the rest waits, written nowhere");
    assert!(
        m.next_wakeup().is_some_and(|at| at > probe_at),
        "a wait is bounded"
    );
    let answered = probe_at + Duration::from_millis(80);
    assert_eq!(
        start(&mut m, answered, &dir),
        vec![],
        "nothing passes the probe"
    );
    m.attempted((R, 0), answered, Signal::Success);
    m.complete((R, 0), Finished::Durable);
    assert_eq!(m.breakers_open(), 0);
    let (attempted, parked) = start_or_park(&mut m, answered, &dir);
    assert_eq!(
        (attempted, parked),
        (vec![(R, 1), (R, 2), (R, 3)], vec![]),
        "released the moment the probe closed the breaker"
    );
}

/// A failed probe opens the breaker again: what waited for it is parked until
/// the next probe, twice the open period later.
#[test]
fn a_failed_probe_parks_what_waited_for_it_until_the_next_probe() {
    let dir = Dir::with(&[("s", 4, true)]);
    let mut m = machine(100);
    let probe_at = open_breaker(&mut m, &dir);
    for offset in 0..3 {
        push(&mut m, R, offset, &delivery("s", probe_at), probe_at, &dir);
    }
    assert_eq!(start(&mut m, probe_at, &dir), vec![(R, 0)]);
    m.attempted((R, 0), probe_at, Signal::Failure);
    m.attempt_ended((R, 0));
    m.complete((R, 0), Finished::Durable);
    let next = probe_at + 2 * BreakerSettings::DEFAULT.open_for;
    let (attempted, parked) = start_or_park(&mut m, probe_at, &dir);
    assert_eq!(attempted, vec![]);
    assert_eq!(
        parked
            .iter()
            .map(|(k, _, until)| (*k, *until))
            .collect::<Vec<_>>(),
        vec![((R, 1), next), ((R, 2), next)]
    );
}

/// A lost probe (its task panicked) wakes what waited for it: the next probes.
#[test]
fn a_lost_probe_wakes_what_waited_for_it() {
    let dir = Dir::with(&[("s", 4, true)]);
    let mut m = machine(100);
    let probe_at = open_breaker(&mut m, &dir);
    for offset in 0..2 {
        push(&mut m, R, offset, &delivery("s", probe_at), probe_at, &dir);
    }
    assert_eq!(start(&mut m, probe_at, &dir), vec![(R, 0)]);
    let (_, parked) = start_or_park(&mut m, probe_at, &dir);
    assert_eq!(parked, vec![]);
    let lost = m.abandon(|k| *k == (R, 0));
    assert_eq!(lost, vec![(R, 0)]);
    assert_eq!(
        start(&mut m, probe_at, &dir),
        vec![(R, 1)],
        "the next probes"
    );
}

/// A replica that restarts (or another replica) takes the open breaker the
/// shared topic holds: its first delivery is parked until the probe time, not
/// sent; a shared closing releases what waited for a probe here.
#[test]
fn an_adopted_open_breaker_parks_at_once_and_an_adopted_closing_releases() {
    let dir = Dir::with(&[("s", 4, true)]);
    let mut m = machine(100);
    let until = t(30_000);
    m.adopt(
        "s",
        Shared {
            open: Some(Opened {
                since: t(0),
                until,
                period: BreakerSettings::DEFAULT.open_for,
            }),
            changed_at: t(0),
        },
        None,
    );
    assert_eq!(m.breakers_open(), 1);
    push(&mut m, D, 0, &delivery("s", t(1)), t(1), &dir);
    let (attempted, parked) = start_or_park(&mut m, t(1), &dir);
    assert_eq!(attempted, vec![]);
    assert_eq!(parked, vec![((D, 0), 0, until)]);
    m.complete((D, 0), Finished::Durable);
    // At the probe time: one probes, the next waits for it.
    push(&mut m, R, 0, &delivery("s", until), until, &dir);
    push(&mut m, R, 1, &delivery("s", until), until, &dir);
    assert_eq!(start(&mut m, until, &dir), vec![(R, 0)]);
    assert_eq!(start(&mut m, until, &dir), vec![]);
    // Another replica's probe closed it meanwhile.
    m.adopt(
        "s",
        Shared {
            open: None,
            changed_at: until + Duration::from_millis(5),
        },
        None,
    );
    assert_eq!(m.breakers_open(), 0);
    assert_eq!(start(&mut m, until, &dir), vec![(R, 1)], "released");
}

#[test]
fn attempts_in_flight_are_counted_by_class() {
    let dir = Dir::with(&[("a", 4, true), ("b", 4, true)]);
    let mut m = machine(100);
    push(&mut m, D, 0, &delivery("a", t(0)), t(0), &dir);
    push(&mut m, D, 1, &delivery("a", t(1)), t(0), &dir);
    push(&mut m, R, 0, &delivery("b", t(0)), t(0), &dir);
    let started = start(&mut m, t(10), &dir);
    assert_eq!(started.len(), 3, "{started:?}");
    assert_eq!(m.running_attempts_by_class(), (2, 1, 0));
    m.complete((R, 0), Finished::Durable);
    m.complete((D, 0), Finished::Durable);
    assert_eq!(m.running_attempts_by_class(), (1, 0, 0));
    assert_eq!(m.running_attempts(), 1);
}

fn strict_machine() -> Machine {
    let mut m = machine(100);
    m.assign(&[S]);
    assert_eq!(gates(&mut m), vec![GateAction::Resume(S)]);
    m
}

/// The retry record an attempt at `at` would hold: one more attempt, due at `due`.
fn retried(payload: &[u8], at: SystemTime, due: SystemTime) -> Delivery {
    let mut d: Delivery = hookline_envelope::decode(payload).unwrap();
    d.attempt += 1;
    d.first_attempt_at = Some(d.first_attempt_at.unwrap_or(epoch_ms(at)));
    d.last_attempt_at = Some(epoch_ms(at));
    d.due_at = epoch_ms(due);
    d
}

/// A strict head that fails waits in place until its retry is due: nothing
/// behind it of its subscription starts meanwhile (another subscription's
/// records on the same partition do), its slot is free, its offset unfinished;
/// at the due time it starts again, first, with its attempt counted.
#[test]
fn a_strict_head_in_backoff_holds_its_subscription_in_place() {
    let dir = Dir::with(&[("s", 1, true), ("o", 1, true)]);
    let mut m = strict_machine();
    let head = delivery("s", t(0));
    push(&mut m, S, 0, &head, t(0), &dir);
    push(&mut m, S, 1, &delivery("s", t(1)), t(0), &dir);
    push(&mut m, S, 2, &delivery("o", t(0)), t(0), &dir);
    assert_eq!(start(&mut m, t(0), &dir), vec![(S, 0), (S, 2)]);
    m.attempted((S, 0), t(5), Signal::Failure);
    let due = t(10_000);
    m.hold((S, 0), retried(&head, t(0), due));
    assert!(m.take_notes().contains(&Note::Held {
        subscription_id: "s".into(),
        attempt: 1,
        until: due,
        breaker: false,
    }));
    assert_eq!(m.lanes().in_flight(), 1, "only `o` holds a slot");
    assert_eq!(m.next_wakeup(), Some(due));
    m.complete((S, 2), Finished::Durable);
    assert_eq!(
        start(&mut m, t(9_999), &dir),
        vec![],
        "nothing of `s` passes its head"
    );
    assert_eq!(m.lowest_unfinished(S), Some(0));
    m.start_ready(due, &dir);
    let again: Vec<(Key, i32)> = m
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Attempt {
                key,
                delivery,
                strict,
                ..
            } => {
                assert!(strict);
                Some((key, delivery.attempt))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        again,
        vec![((S, 0), 1)],
        "the head again, its attempt counted"
    );
    m.attempted((S, 0), due, Signal::Success);
    m.complete((S, 0), Finished::Durable);
    assert_eq!(start(&mut m, due, &dir), vec![(S, 1)], "then the next");
    assert_eq!(m.lowest_unfinished(S), Some(1));
}

/// A strict head held in place is shared (its attempts and due time), and
/// cleared once it is done; a new owner that reads the same delivery again
/// goes on from there: it waits for the due time, then attempts it with its
/// attempts counted, instead of attempting it at once as a first attempt.
#[test]
fn a_held_strict_head_is_shared_and_a_new_owner_goes_on_from_it() {
    let dir = Dir::with(&[("s", 1, true)]);
    let mut m = strict_machine();
    let head = delivery("s", t(0));
    push(&mut m, S, 0, &head, t(0), &dir);
    assert_eq!(start(&mut m, t(0), &dir), vec![(S, 0)]);
    m.attempted((S, 0), t(5), Signal::Failure);
    let due = t(20_000);
    let retried = retried(&head, t(0), due);
    m.hold((S, 0), retried.clone());
    let held = crate::health::HeldHead::of(&retried);
    let shares: Vec<Note> = m
        .take_notes()
        .into_iter()
        .filter(|n| matches!(n, Note::Share { .. }))
        .collect();
    assert_eq!(
        shares,
        vec![Note::Share {
            subscription_id: "s".into(),
            shared: Shared {
                open: None,
                changed_at: std::time::UNIX_EPOCH
            },
            head: Some(held.clone()),
        }]
    );
    // It succeeds at its due time: shared as done.
    assert_eq!(start(&mut m, due, &dir), vec![(S, 0)]);
    m.attempted((S, 0), due, Signal::Success);
    m.complete((S, 0), Finished::Durable);
    assert!(m
        .take_notes()
        .iter()
        .any(|n| matches!(n, Note::Share { head: None, .. })));

    // Another replica, before it: the partition's new owner after a crash.
    let mut next = strict_machine();
    next.adopt(
        "s",
        Shared {
            open: None,
            changed_at: std::time::UNIX_EPOCH,
        },
        Some(held),
    );
    push(&mut next, S, 0, &head, t(1_000), &dir);
    assert_eq!(
        start(&mut next, t(1_000), &dir),
        vec![],
        "not attempted before its due time"
    );
    assert_eq!(next.next_wakeup(), Some(due));
    next.start_ready(due, &dir);
    let attempts: Vec<i32> = next
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Attempt { delivery, .. } => Some(delivery.attempt),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, vec![1], "its attempt counted");
}

/// An open breaker holds a strict head in place (no attempt spent, nothing
/// written) until it may probe, and the head is that probe.
#[test]
fn an_open_breaker_holds_a_strict_head_in_place_and_it_probes() {
    let dir = Dir::with(&[("s", 1, true)]);
    let mut m = strict_machine();
    for offset in 0..10 {
        push(&mut m, D, offset, &delivery("s", t(0)), t(0), &dir);
        assert_eq!(start(&mut m, t(0), &dir), vec![(D, offset)]);
        m.attempted((D, offset), t(0), Signal::Failure);
        m.attempt_ended((D, offset));
        m.complete((D, offset), Finished::Durable);
    }
    assert_eq!(m.breakers_open(), 1);
    push(&mut m, S, 0, &delivery("s", t(0)), t(1), &dir);
    push(&mut m, S, 1, &delivery("s", t(0)), t(1), &dir);
    let (attempted, parked) = start_or_park(&mut m, t(1), &dir);
    assert_eq!(
        (attempted, parked),
        (vec![], vec![]),
        "held, not parked on a tier"
    );
    let probe_at = t(0) + BreakerSettings::DEFAULT.open_for;
    assert!(m.take_notes().contains(&Note::Held {
        subscription_id: "s".into(),
        attempt: 0,
        until: probe_at,
        breaker: true,
    }));
    assert_eq!(m.next_wakeup(), Some(probe_at));
    assert_eq!(
        start(&mut m, probe_at, &dir),
        vec![(S, 0)],
        "the head probes"
    );
}

/// A revoke drops a held head with its partition (unfinished: the new owner
/// reads it again) and a hold that ends after a revoke is dropped too.
#[test]
fn a_revoke_drops_held_heads_unfinished() {
    let dir = Dir::with(&[("s", 1, true)]);
    let mut m = strict_machine();
    let head = delivery("s", t(0));
    push(&mut m, S, 0, &head, t(0), &dir);
    push(&mut m, S, 1, &head, t(0), &dir);
    assert_eq!(start(&mut m, t(0), &dir), vec![(S, 0)]);
    m.hold((S, 0), retried(&head, t(0), t(10_000)));
    assert_eq!(m.revoke(&[S]), 2, "the held head and the one behind it");
    assert_eq!(m.next_wakeup(), None);
    assert!(m.lanes().is_idle());

    let mut m = strict_machine();
    push(&mut m, S, 0, &head, t(0), &dir);
    assert_eq!(start(&mut m, t(0), &dir), vec![(S, 0)]);
    assert_eq!(m.revoke(&[S]), 0);
    m.hold((S, 0), retried(&head, t(0), t(10_000)));
    assert!(m.lanes().is_idle(), "its slot is freed, nothing queued");
    assert_eq!(m.next_wakeup(), None);
}

/// What the gauges peek at (`backlog.rs`): a partition held for its full
/// buffer, at the offset it fetches next; not one held until its head is due,
/// nor one that fetches.
#[test]
fn a_partition_held_for_its_buffer_is_behind_at_its_next_offset_a_head_not_due_is_not() {
    let dir = Dir::with(&[("s", 4, true)]);
    let mut m = machine(4);
    for offset in 10..14 {
        push(&mut m, D, offset, &delivery("s", t(0)), t(0), &dir);
    }
    push(&mut m, R, 3, &delivery("s", t(10_000)), t(0), &dir);
    gates(&mut m);
    assert_eq!(m.unfetched_behind(), vec![(D, 14)]);
    assert_eq!((m.next_to_fetch(D), m.next_to_fetch(R)), (Some(14), None));
    // Started, all four still buffered: still behind.
    assert_eq!(start(&mut m, t(0), &dir).len(), 4);
    assert_eq!(m.unfetched_behind(), vec![(D, 14)]);
    for offset in 10..14 {
        m.complete((D, offset), Finished::Durable);
    }
    m.on_tick();
    assert_eq!(gates(&mut m), vec![GateAction::Resume(D)]);
    assert!(m.unfetched_behind().is_empty(), "fetching again");
    assert_eq!(m.next_to_fetch(D), Some(14));
    m.revoke(&[D]);
    assert_eq!(m.next_to_fetch(D), None, "not assigned");
}

//! Overflow lanes in the machine, without a broker: promotion moves a hot
//! tenant's queued records (in order) and frees its partition; the partition
//! behind it keeps flowing; an ordered subscription's records enter the
//! scheduler in source order across promotion, demotion and reassignment.
//!
//! Each subscription `x` here belongs to tenant `x-co`, unless a test says
//! otherwise with [`push_of`].

use std::time::Duration;

use hookline_core::{BreakerSettings, Ladder, LaneLimits, OverflowSettings};

use super::tests::{start, t, tenant_delivery, Dir};
use super::{Action, GateAction, Intake, Machine, Note};
use crate::{attempt::Finished, part::Input, part::Key, part::Part};

const D: Part = Part {
    input: 0,
    partition: 0,
};

/// The tenant of subscription `sub` in these tests.
fn tenant_of(sub: &str) -> String {
    format!("{sub}-co")
}

/// Partition 0 of the lane of `sub`'s tenant.
fn lane_part(m: &Machine, sub: &str) -> Part {
    let lane = m.overflow().lane_for(&tenant_of(sub));
    m.overflow().lane_part(lane, 0).unwrap()
}

fn machine(lanes: usize) -> Machine {
    // At once off: these tests walk the hysteresis.
    machine_at_once(lanes, 0)
}

fn machine_at_once(lanes: usize, promote_at_once_records: usize) -> Machine {
    let mut inputs = vec![Input {
        topic: "deliveries".into(),
        label: "deliveries",
        tier: None,
        strict: false,
        lane: None,
    }];
    for lane in 0..2 {
        inputs.push(Input {
            topic: format!("deliveries.lane-{lane}"),
            label: "lane",
            tier: None,
            strict: false,
            lane: Some(lane),
        });
    }
    let limits = LaneLimits {
        global_in_flight: 64,
        tenant_in_flight: 64,
        retry_share_percent: 50,
        overflow_share_percent: 50,
        partition_records: 10,
        partition_bytes: 1 << 20,
        total_records: 10_000,
        total_bytes: 1 << 30,
        ..LaneLimits::DEFAULT
    };
    let overflow = OverflowSettings {
        lanes,
        promote_records: 3,
        promote_after: Duration::from_secs(1),
        promote_at_once_records,
        demote_records: 1,
        demote_after: Duration::from_secs(5),
    };
    let mut m = Machine::new(
        inputs,
        limits,
        1 << 20,
        Ladder::default(),
        (BreakerSettings::DEFAULT, overflow),
    )
    .unwrap();
    let lanes = [
        Part {
            input: 1,
            partition: 0,
        },
        Part {
            input: 2,
            partition: 0,
        },
    ];
    m.assign(&[D, lanes[0], lanes[1]]);
    for lane in lanes {
        m.lane_eof(lane);
    }
    m.take_actions();
    m
}

fn push(m: &mut Machine, part: Part, offset: i64, sub: &str, dir: &Dir) -> Intake {
    push_of(m, part, offset, &tenant_of(sub), sub, dir)
}

fn push_of(m: &mut Machine, part: Part, offset: i64, tenant: &str, sub: &str, dir: &Dir) -> Intake {
    let record = tenant_delivery(tenant, sub, t(0), b"{}");
    m.on_record(part, offset, (Some(&record), None), t(0), dir)
}

/// Offsets the machine moved (Action::Move), in order.
fn moves(m: &mut Machine) -> Vec<Key> {
    m.take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Move { key, .. } => Some(key),
            _ => None,
        })
        .collect()
}

/// A burst whose records reach the at-once threshold is promoted by the
/// record that reaches it, without waiting for the next tick's look: its
/// queued records move in order, and its next record goes straight to the
/// lane. A tenant below the threshold is not looked at.
#[test]
fn a_burst_at_the_at_once_threshold_is_promoted_by_its_own_record() {
    let dir = Dir::with(&[("w", 1, true), ("s", 4, true)]);
    let mut m = machine_at_once(2, 5);
    assert!(matches!(push(&mut m, D, 0, "s", &dir), Intake::Queued));
    for offset in 1..5 {
        assert!(matches!(push(&mut m, D, offset, "w", &dir), Intake::Queued));
    }
    assert!(
        moves(&mut m).is_empty(),
        "4 records of w: below the threshold"
    );
    // The fifth, at the same instant: no tick, no time passed.
    assert!(matches!(push(&mut m, D, 5, "w", &dir), Intake::Queued));
    assert_eq!(moves(&mut m), (1..6).map(|o| (D, o)).collect::<Vec<_>>());
    assert!(m.take_notes().iter().any(|n| matches!(
        n,
        Note::Overflow { promoted: true, tenant_id, .. } if tenant_id == "w-co"
    )));
    assert!(matches!(
        push(&mut m, D, 6, "w", &dir),
        Intake::Move { lane } if lane == m.overflow().lane_for("w-co")
    ));
    // The small tenant stayed, and starts from the partition.
    assert_eq!(start(&mut m, t(0), &dir), vec![(D, 0)]);
}

/// Arrivals are counted from the last look: a tenant whose records are
/// spread over looks is left to the hysteresis, however many it has.
#[test]
fn arrivals_count_from_the_last_look() {
    let dir = Dir::with(&[("w", 1, true)]);
    let mut m = machine_at_once(2, 5);
    for offset in 0..4 {
        push(&mut m, D, offset, "w", &dir);
    }
    m.observe_backlog(t(0));
    for offset in 4..8 {
        push(&mut m, D, offset, "w", &dir);
    }
    assert!(
        moves(&mut m).is_empty(),
        "4 + 4 arrivals around a look: no look at once"
    );
    // The look of the tick sees the whole backlog (8 ≥ 5): promoted there.
    m.observe_backlog(t(0));
    assert_eq!(moves(&mut m), (0..8).map(|o| (D, o)).collect::<Vec<_>>());
}

/// A whale w (ordered) fills partition 0; promoted, its queued records are
/// moved in order and the partition resumes; the small s behind it starts at
/// once; w's lane records start in source order after its in-flight one.
#[test]
fn promotion_moves_the_queued_records_in_order_and_frees_the_partition() {
    let dir = Dir::with(&[("w", 1, true), ("s", 4, true)]);
    let mut m = machine(2);
    for offset in 0..10 {
        assert!(matches!(push(&mut m, D, offset, "w", &dir), Intake::Queued));
    }
    assert!(m
        .take_actions()
        .iter()
        .any(|a| matches!(a, Action::Gate(GateAction::Pause { part: D, .. }))));
    assert_eq!(start(&mut m, t(0), &dir), vec![(D, 0)]);
    m.observe_backlog(t(0));
    assert!(moves(&mut m).is_empty(), "not for a whole second yet");
    m.observe_backlog(t(1_000));
    assert_eq!(moves(&mut m), (1..10).map(|o| (D, o)).collect::<Vec<_>>());
    assert!(m.take_notes().iter().any(|n| matches!(
        n,
        Note::Overflow { promoted: true, tenant_id, .. } if tenant_id == "w-co"
    )));
    m.on_tick();
    assert!(
        m.take_actions()
            .iter()
            .any(|a| matches!(a, Action::Gate(GateAction::Resume(D)))),
        "the withdrawn records freed the partition"
    );
    // Further records of w move as they come; s behind it starts at once.
    assert!(matches!(
        push(&mut m, D, 10, "w", &dir),
        Intake::Move { .. }
    ));
    assert!(matches!(push(&mut m, D, 11, "s", &dir), Intake::Queued));
    assert_eq!(start(&mut m, t(1_000), &dir), vec![(D, 11)]);
    // The moves commit; the lane gives them back, behind w's in-flight head.
    for offset in 1..=10 {
        m.complete((D, offset), Finished::Durable);
    }
    let lane = lane_part(&m, "w");
    for (lane_offset, source) in (1..=10).enumerate() {
        m.lane_record(lane, Some(source));
        let lane_offset = i64::try_from(lane_offset).unwrap();
        assert!(matches!(
            push(&mut m, lane, lane_offset, "w", &dir),
            Intake::Queued
        ));
    }
    assert!(
        start(&mut m, t(1_000), &dir).is_empty(),
        "w@0 still in flight"
    );
    m.complete((D, 0), Finished::Durable);
    let mut order = Vec::new();
    for _ in 0..10 {
        let started = start(&mut m, t(1_000), &dir);
        assert_eq!(started.len(), 1, "one at a time");
        assert_eq!(
            m.running_attempts_by_class().2,
            1,
            "a lane's record draws on the overflow share"
        );
        order.push(started[0]);
        m.complete(started[0], Finished::Durable);
    }
    assert_eq!(order, (0..10).map(|o| (lane, o)).collect::<Vec<_>>());
}

/// After demotion an ordered subscription goes back to `deliveries` only once
/// its lane gave back everything moved there; until then it keeps moving.
#[test]
fn an_ordered_subscription_returns_only_when_its_lane_is_in_sync() {
    let dir = Dir::with(&[("w", 1, true)]);
    let mut m = machine(2);
    for offset in 0..5 {
        let _ = push(&mut m, D, offset, "w", &dir);
    }
    m.observe_backlog(t(0));
    m.observe_backlog(t(1_000));
    assert_eq!(moves(&mut m).len(), 5, "nothing was in flight");
    for offset in 0..5 {
        m.complete((D, offset), Finished::Durable);
    }
    // Backlog 0 for the demotion time: demoted.
    m.observe_backlog(t(2_000));
    m.observe_backlog(t(7_000));
    assert!(m.take_notes().iter().any(|n| matches!(
        n,
        Note::Overflow {
            promoted: false,
            ..
        }
    )));
    // Not yet in sync: only 3 of the 5 moved records are fetched back.
    let lane = lane_part(&m, "w");
    for source in 0..3 {
        m.lane_record(lane, Some(source));
        let _ = push(&mut m, lane, source, "w", &dir);
    }
    assert!(
        matches!(push(&mut m, D, 5, "w", &dir), Intake::Move { .. }),
        "behind the two not fetched back"
    );
    m.complete((D, 5), Finished::Durable);
    for source in [3, 4, 5] {
        m.lane_record(lane, Some(source));
        let _ = push(&mut m, lane, source, "w", &dir);
    }
    assert!(
        matches!(push(&mut m, D, 6, "w", &dir), Intake::Queued),
        "in sync"
    );
    // And it starts after everything of the lane, in order.
    let mut order = Vec::new();
    while let Some(key) = start(&mut m, t(8_000), &dir).first().copied() {
        order.push(key);
        m.complete(key, Finished::Durable);
    }
    let mut want: Vec<Key> = (0..6).map(|o| (lane, o)).collect();
    want.push((D, 6));
    assert_eq!(order, want);
}

/// A partition reassigned: until each lane was read to its end, an ordered
/// subscription's records move (an earlier owner may have left older ones
/// there); an unordered one's are buffered in place.
#[test]
fn after_an_assignment_ordered_records_move_until_the_lane_was_read_to_its_end() {
    let dir = Dir::with(&[("w", 1, true), ("u", 8, true)]);
    let mut m = machine(2);
    m.revoke(&[D]);
    m.assign(&[D]);
    let lane = lane_part(&m, "w");
    m.revoke(&[lane]);
    m.assign(&[lane]);
    assert!(matches!(push(&mut m, D, 0, "w", &dir), Intake::Move { .. }));
    assert!(matches!(push(&mut m, D, 1, "u", &dir), Intake::Queued));
    m.complete((D, 0), Finished::Durable);
    m.lane_eof(lane);
    assert!(
        matches!(push(&mut m, D, 2, "w", &dir), Intake::Move { .. }),
        "its own move is not fetched back yet"
    );
    m.complete((D, 2), Finished::Durable);
    m.lane_record(lane, Some(0));
    m.lane_record(lane, Some(2));
    assert!(matches!(push(&mut m, D, 3, "w", &dir), Intake::Queued));
}

/// The lane ceiling: of two whales, one is promoted and the other waits.
#[test]
fn the_ceiling_holds_and_lanes_zero_moves_nothing() {
    let dir = Dir::with(&[("a", 8, true), ("b", 8, true)]);
    let mut m = machine(1);
    for offset in 0..8 {
        let sub = if offset < 5 { "a" } else { "b" };
        let _ = push(&mut m, D, offset, sub, &dir);
    }
    m.observe_backlog(t(0));
    m.observe_backlog(t(1_000));
    assert_eq!(moves(&mut m).len(), 5, "a, the larger, is promoted");
    assert_eq!(m.overflow().promoted_count(), 1);
    assert_eq!(m.overflow().waiting(), 1);

    let mut m = machine(0);
    for offset in 0..8 {
        assert!(matches!(push(&mut m, D, offset, "a", &dir), Intake::Queued));
    }
    m.observe_backlog(t(0));
    m.observe_backlog(t(10_000));
    assert!(moves(&mut m).is_empty());
}

/// The unit promoted is the tenant: a whale spreading its backlog over four
/// subscriptions, none of them at the threshold alone, is moved as one, in
/// source order, to its tenant's lane; another tenant on the partition stays.
#[test]
fn a_tenant_is_promoted_by_its_whole_backlog_however_many_subscriptions_share_it() {
    let dir = Dir::with(&[
        ("w1", 1, true),
        ("w2", 4, true),
        ("w3", 4, true),
        ("w4", 4, true),
        ("s", 4, true),
    ]);
    let mut m = machine(2);
    let mut whale_offsets = Vec::new();
    for offset in 0..9 {
        if offset == 4 {
            let _ = push_of(&mut m, D, offset, "small-co", "s", &dir);
            continue;
        }
        let sub = ["w1", "w2", "w3", "w4"][usize::try_from(offset % 4).unwrap()];
        assert!(matches!(
            push_of(&mut m, D, offset, "whale-co", sub, &dir),
            Intake::Queued
        ));
        whale_offsets.push((D, offset));
    }
    m.observe_backlog(t(0));
    m.observe_backlog(t(1_000));
    assert_eq!(moves(&mut m), whale_offsets, "all of the whale, in order");
    let promoted: Vec<_> = m.overflow().promoted().map(|(k, _)| k.clone()).collect();
    assert_eq!(promoted, vec![(0, "whale-co".to_owned())]);
    // Its later records move to its tenant's lane, whichever subscription;
    // the small tenant's stay.
    let lane = m.overflow().lane_for("whale-co");
    assert!(matches!(
        push_of(&mut m, D, 9, "whale-co", "w3", &dir),
        Intake::Move { lane: l } if l == lane
    ));
    assert!(matches!(
        push_of(&mut m, D, 10, "small-co", "s", &dir),
        Intake::Queued
    ));
    assert_eq!(start(&mut m, t(1_000), &dir), vec![(D, 4), (D, 10)]);
}

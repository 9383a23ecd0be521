//! The gate without a broker: every combination of hold reasons, released in
//! every order, resumes exactly once and only after the last; a random walk of
//! holds, releases, rewinds, due times and rebalances never resumes a held
//! partition and never leaves a free one paused.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;

use super::gate::{Gate, GateAction, Hold, WriteCap};
use crate::part::Part;

const P: Part = Part {
    input: 1,
    partition: 3,
};
const CAP: usize = 4;
/// Bytes never bind in the tests of the records cap.
const RECORDS_ONLY: WriteCap = WriteCap {
    records: CAP,
    bytes: usize::MAX,
};

fn t(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_millis(ms)
}

fn assigned() -> Gate {
    let mut gate = Gate::new(RECORDS_ONLY);
    let mut out = Vec::new();
    gate.assign(P, &mut out);
    assert_eq!(out, vec![GateAction::Resume(P)]);
    gate
}

/// Holds `part` for `reason`; returns the generation of a rewind it asked for.
fn hold(gate: &mut Gate, reason: Hold, out: &mut Vec<GateAction>) -> Option<u64> {
    match reason {
        Hold::Buffer => gate.hold_buffer(P, out),
        Hold::Writes => {
            for _ in 0..CAP {
                gate.write_started(P, 1, out);
            }
        }
        // A head not due asks for a rewind: both reasons at once.
        Hold::NotDue | Hold::Rewinding => {
            if !gate.holds(P, Hold::NotDue) {
                gate.hold_until(P, 7, t(1_000), out);
            }
        }
    }
    out.iter().rev().find_map(|a| match a {
        GateAction::Rewind { generation, .. } => Some(*generation),
        _ => None,
    })
}

fn release(gate: &mut Gate, reason: Hold, generation: Option<u64>, out: &mut Vec<GateAction>) {
    match reason {
        Hold::Buffer => gate.release_buffer(P, out),
        Hold::Writes => {
            for _ in 0..CAP - CAP / 2 {
                gate.write_ended(P, 1, out);
            }
        }
        Hold::NotDue => gate.due(t(1_000), out),
        Hold::Rewinding => gate.rewound(P, generation.expect("a rewind was asked"), true, out),
    }
}

fn resumes(out: &[GateAction]) -> usize {
    out.iter()
        .filter(|a| matches!(a, GateAction::Resume(_)))
        .count()
}

fn permutations(items: &[Hold]) -> Vec<Vec<Hold>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut all = Vec::new();
    for i in 0..items.len() {
        let mut rest = items.to_vec();
        let first = rest.remove(i);
        for mut tail in permutations(&rest) {
            tail.insert(0, first);
            all.push(tail);
        }
    }
    all
}

#[test]
fn every_reason_combination_resumes_once_after_the_last_release() {
    for mask in 1u8..16 {
        let mut reasons: Vec<Hold> = Hold::ALL
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, r)| *r)
            .collect();
        // A head not due is held for both: its due time and its rewind.
        if reasons.contains(&Hold::NotDue) != reasons.contains(&Hold::Rewinding) {
            continue;
        }
        let mut gate = assigned();
        let mut out = Vec::new();
        let mut generation = None;
        for reason in &reasons {
            generation = hold(&mut gate, *reason, &mut out).or(generation);
        }
        let pauses = out
            .iter()
            .filter(|a| matches!(a, GateAction::Pause { .. }))
            .count();
        assert!(pauses <= 1 && resumes(&out) == 0, "{reasons:?}: {out:?}");
        for reason in Hold::ALL {
            assert_eq!(
                gate.holds(P, reason),
                reasons.contains(&reason),
                "{reason:?}"
            );
        }
        reasons.sort();
        for order in permutations(&reasons) {
            let mut gate = assigned();
            let mut out = Vec::new();
            for reason in &reasons {
                hold(&mut gate, *reason, &mut out);
            }
            let mut left = order.clone();
            for reason in &order {
                out.clear();
                release(&mut gate, *reason, generation, &mut out);
                left.retain(|r| r != reason);
                let expected = usize::from(left.is_empty());
                assert_eq!(
                    resumes(&out),
                    expected,
                    "{order:?}: after {reason:?}, {left:?} left: {out:?}"
                );
                assert_eq!(
                    gate.is_paused(P),
                    !left.is_empty(),
                    "{order:?} after {reason:?}"
                );
            }
        }
    }
}

#[test]
fn quarantine_holds_from_the_cap_until_half() {
    let mut gate = assigned();
    let mut out = Vec::new();
    for _ in 0..CAP - 1 {
        gate.write_started(P, 1, &mut out);
    }
    assert!(out.is_empty(), "below the cap: {out:?}");
    gate.write_started(P, 1, &mut out);
    assert_eq!(
        out,
        vec![GateAction::Pause {
            part: P,
            reason: Hold::Writes
        }]
    );
    out.clear();
    gate.write_ended(P, 1, &mut out);
    assert!(out.is_empty(), "above half: {out:?}");
    gate.write_ended(P, 1, &mut out);
    assert_eq!(out, vec![GateAction::Resume(P)]);
}

#[test]
fn due_time_does_not_resume_while_the_rewind_is_unanswered() {
    let mut gate = assigned();
    let mut out = Vec::new();
    gate.hold_until(P, 7, t(500), &mut out);
    let generation = match out[..] {
        [GateAction::Rewind {
            part: P,
            offset: 7,
            generation,
        }] => generation,
        _ => panic!("expected one rewind: {out:?}"),
    };
    out.clear();
    gate.due(t(499), &mut out);
    assert!(out.is_empty());
    gate.due(t(500), &mut out);
    assert!(out.is_empty(), "resumed before the seek was done: {out:?}");
    gate.rewound(P, generation + 1, true, &mut out);
    assert!(out.is_empty(), "a stale answer released the rewind");
    gate.rewound(P, generation, true, &mut out);
    assert_eq!(out, vec![GateAction::Resume(P)]);
}

#[test]
fn refused_rewind_is_asked_again_only_while_assigned() {
    let mut gate = assigned();
    let mut out = Vec::new();
    gate.hold_until(P, 7, t(500), &mut out);
    let GateAction::Rewind { generation, .. } = out[0] else {
        panic!("{out:?}")
    };
    out.clear();
    gate.rewound(P, generation, false, &mut out);
    assert!(out.is_empty());
    gate.retry_rewinds(&mut out);
    assert_eq!(
        out,
        vec![GateAction::Rewind {
            part: P,
            offset: 7,
            generation
        }]
    );
    out.clear();
    gate.retry_rewinds(&mut out);
    assert!(out.is_empty(), "asked twice for one refusal");
    gate.rewound(P, generation, false, &mut out);
    gate.revoke(P);
    gate.retry_rewinds(&mut out);
    gate.due(t(10_000), &mut out);
    assert!(out.is_empty(), "a revoked partition was acted on: {out:?}");
    assert!(!gate.is_assigned(P) && !gate.is_held(P));
}

#[test]
fn assignment_resumes_and_forgets_every_reason() {
    let mut gate = assigned();
    let mut out = Vec::new();
    gate.hold_buffer(P, &mut out);
    gate.hold_until(P, 7, t(500), &mut out);
    for _ in 0..CAP {
        gate.write_started(P, 1, &mut out);
    }
    assert!(gate.is_held(P));
    out.clear();
    gate.assign(P, &mut out);
    assert_eq!(out, vec![GateAction::Resume(P)]);
    assert!(!gate.is_held(P));
    assert_eq!(gate.next_wakeup(), None, "the old due timer survived");
}

#[derive(Debug, Clone)]
enum Op {
    HoldBuffer,
    ReleaseBuffer,
    QuarantineStarted,
    QuarantineEnded,
    HoldUntil(u64),
    Rewound { done: bool, stale: bool },
    RetryRewinds,
    Advance(u64),
    Reassign,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::HoldBuffer),
        Just(Op::ReleaseBuffer),
        Just(Op::QuarantineStarted),
        Just(Op::QuarantineEnded),
        (1u64..2_000).prop_map(Op::HoldUntil),
        (any::<bool>(), any::<bool>()).prop_map(|(done, stale)| Op::Rewound { done, stale }),
        Just(Op::RetryRewinds),
        (1u64..1_000).prop_map(Op::Advance),
        Just(Op::Reassign),
    ]
}

/// The reasons, tracked the simple way.
#[derive(Debug, Default)]
struct Model {
    buffer: bool,
    pending: usize,
    quarantine: bool,
    until: Option<u64>,
    rewind: Option<u64>,
}

impl Model {
    fn held(&self) -> bool {
        self.buffer || self.quarantine || self.until.is_some() || self.rewind.is_some()
    }
}

proptest! {
    #[test]
    fn paused_exactly_while_some_reason_holds(ops in prop::collection::vec(op(), 1..80)) {
        let mut gate = assigned();
        let mut model = Model::default();
        let mut now = 0u64;
        let mut generation = 0u64;
        for op in ops {
            let was_paused = gate.is_paused(P);
            let mut out = Vec::new();
            match op {
                Op::HoldBuffer => { gate.hold_buffer(P, &mut out); model.buffer = true; }
                Op::ReleaseBuffer => { gate.release_buffer(P, &mut out); model.buffer = false; }
                Op::QuarantineStarted => {
                    gate.write_started(P, 1, &mut out);
                    model.pending += 1;
                    model.quarantine |= model.pending >= CAP;
                }
                Op::QuarantineEnded => {
                    gate.write_ended(P, 1, &mut out);
                    model.pending = model.pending.saturating_sub(1);
                    model.quarantine &= model.pending > CAP / 2;
                }
                Op::HoldUntil(d) => {
                    gate.hold_until(P, 7, t(now + d), &mut out);
                    generation = match out.last() {
                        Some(GateAction::Rewind { generation, .. }) => *generation,
                        other => panic!("no rewind: {other:?}"),
                    };
                    model.until = Some(now + d);
                    model.rewind = Some(generation);
                }
                Op::Rewound { done, stale } => {
                    let answered = if stale { generation.wrapping_sub(1) } else { generation };
                    gate.rewound(P, answered, done, &mut out);
                    if done && model.rewind == Some(answered) {
                        model.rewind = None;
                    }
                }
                Op::RetryRewinds => gate.retry_rewinds(&mut out),
                Op::Advance(d) => {
                    now += d;
                    gate.due(t(now), &mut out);
                    if model.until.is_some_and(|u| u <= now) {
                        model.until = None;
                    }
                }
                Op::Reassign => {
                    gate.revoke(P);
                    gate.assign(P, &mut out);
                    model = Model::default();
                }
            }
            prop_assert_eq!(gate.is_held(P), model.held(), "{:?}", model);
            prop_assert_eq!(gate.is_paused(P), model.held(), "{:?}", model);
            for action in &out {
                match action {
                    GateAction::Resume(_) => prop_assert!(!model.held(), "resumed while held: {:?}", model),
                    GateAction::Pause { .. } => prop_assert!(!was_paused, "paused twice"),
                    GateAction::Rewind { .. } => {}
                }
            }
            if was_paused && !model.held() {
                prop_assert_eq!(resumes(&out), 1, "released without a resume");
            }
        }
    }
}

/// The bytes bound holds a partition on its own (a few large records) and
/// releases it only when records and bytes are both at half.
#[test]
fn pending_bytes_hold_the_partition_until_records_and_bytes_are_at_half() {
    let mut gate = Gate::new(WriteCap {
        records: 100,
        bytes: 1_000,
    });
    let mut out = Vec::new();
    gate.assign(P, &mut out);
    out.clear();
    gate.write_started(P, 600, &mut out);
    assert!(!gate.holds(P, Hold::Writes));
    gate.write_started(P, 400, &mut out);
    assert!(gate.holds(P, Hold::Writes), "1,000 bytes pending");
    assert_eq!(
        out,
        vec![GateAction::Pause {
            part: P,
            reason: Hold::Writes
        }]
    );
    out.clear();
    gate.write_ended(P, 400, &mut out);
    assert!(gate.holds(P, Hold::Writes), "600 bytes are above half");
    gate.write_started(P, 10, &mut out);
    gate.write_ended(P, 600, &mut out);
    assert!(!gate.holds(P, Hold::Writes));
    assert_eq!(out, vec![GateAction::Resume(P)]);
}

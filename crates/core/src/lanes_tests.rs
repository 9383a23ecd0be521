use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;

use super::*;

fn at(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

/// A job of `bytes` for `sub` of `tenant` (shared with the sibling test modules).
pub(super) fn job(
    partition: u8,
    offset: i64,
    sub: &str,
    tenant: &str,
    retry: bool,
    bytes: usize,
) -> Job<u8> {
    Job {
        partition,
        offset,
        lane: LaneKey {
            subscription_id: sub.to_owned(),
        },
        tenant_id: tenant.to_owned(),
        retry,
        overflow: false,
        bytes,
    }
}

/// Caps as given, buffers large enough never to matter.
fn caps(global: u32, tenant: u32, retry_pct: u8) -> LaneLimits {
    LaneLimits {
        global_in_flight: global,
        tenant_in_flight: tenant,
        retry_share_percent: retry_pct,
        overflow_share_percent: 100,
        partition_records: 1 << 20,
        partition_bytes: 1 << 30,
        total_records: 1 << 20,
        total_bytes: 1 << 30,
        retry_total_records: 1 << 20,
        retry_total_bytes: 1 << 30,
        tenant_weights: TenantWeights::NONE,
    }
}

fn started_ids(lanes: &mut Lanes<u8>) -> Vec<(String, i64)> {
    std::iter::from_fn(|| lanes.pop_ready())
        .map(|s| (s.job.lane.subscription_id, s.job.offset))
        .collect()
}

fn ids(list: &[(&str, i64)]) -> Vec<(String, i64)> {
    list.iter().map(|(s, o)| (s.to_string(), *o)).collect()
}

#[test]
fn limits_validation_table() {
    let ok = LaneLimits::default();
    let cases: Vec<(LaneLimits, Option<&str>)> = vec![
        (ok.clone(), None),
        (
            LaneLimits {
                global_in_flight: 0,
                ..ok.clone()
            },
            Some("global_in_flight"),
        ),
        (
            LaneLimits {
                tenant_in_flight: 0,
                ..ok.clone()
            },
            Some("tenant_in_flight"),
        ),
        (
            LaneLimits {
                partition_records: 0,
                ..ok.clone()
            },
            Some("partition_records"),
        ),
        (
            LaneLimits {
                partition_bytes: 0,
                ..ok.clone()
            },
            Some("partition_bytes"),
        ),
        (
            LaneLimits {
                total_records: 0,
                ..ok.clone()
            },
            Some("total_records"),
        ),
        (
            LaneLimits {
                total_bytes: 0,
                ..ok.clone()
            },
            Some("total_bytes"),
        ),
        (
            LaneLimits {
                retry_share_percent: 0,
                ..ok.clone()
            },
            Some("retry_share_percent"),
        ),
        (
            LaneLimits {
                retry_share_percent: 101,
                ..ok.clone()
            },
            Some("retry_share_percent"),
        ),
        (
            LaneLimits {
                retry_share_percent: 100,
                ..ok.clone()
            },
            None,
        ),
        (
            LaneLimits {
                overflow_share_percent: 0,
                ..ok.clone()
            },
            Some("overflow_share_percent"),
        ),
        (
            LaneLimits {
                overflow_share_percent: 101,
                ..ok.clone()
            },
            Some("overflow_share_percent"),
        ),
    ];
    for (limits, field) in cases {
        let got = Lanes::<u8>::new(limits.clone()).err().map(|e| match e {
            LaneError::InvalidLimit { field, .. } => field,
            other => panic!("unexpected {other:?}"),
        });
        assert_eq!(got, field, "{limits:?}");
    }
}

#[test]
fn retry_slots_are_exact_ceilings() {
    // (global, percent, slots): 10 × 30 % is 3, not the 4 float rounding would give.
    let cases = [
        (10, 30, 3),
        (10, 50, 5),
        (10, 51, 6),
        (1, 1, 1),
        (3, 50, 2),
        (256, 100, 256),
        (7, 1, 1),
    ];
    for (global, pct, slots) in cases {
        let limits = caps(global, global, pct);
        assert_eq!(limits.retry_slots(), slots, "{global} × {pct}%");
    }
}

#[test]
fn caps_table() {
    // (limits, pushes as (sub, tenant, retry, max_in_flight), expected starts before None)
    type Push = (&'static str, &'static str, bool, u32);
    type Case = (
        &'static str,
        LaneLimits,
        Vec<Push>,
        Vec<(&'static str, i64)>,
    );
    let cases: Vec<Case> = vec![
        (
            "global cap",
            caps(2, 10, 100),
            vec![
                ("a", "t", false, 10),
                ("a", "t", false, 10),
                ("a", "t", false, 10),
            ],
            vec![("a", 0), ("a", 1)],
        ),
        (
            "subscription cap of one",
            caps(10, 10, 100),
            vec![
                ("a", "t", false, 1),
                ("a", "t", false, 1),
                ("b", "u", false, 1),
            ],
            vec![("a", 0), ("b", 2)],
        ),
        (
            "max_in_flight 0 means 1",
            caps(10, 10, 100),
            vec![("a", "t", false, 0), ("a", "t", false, 0)],
            vec![("a", 0)],
        ),
        (
            "tenant cap across subscriptions",
            caps(10, 2, 100),
            vec![
                ("a", "t", false, 5),
                ("b", "t", false, 5),
                ("a", "t", false, 5),
                ("c", "u", false, 5),
            ],
            // Tenants take turns (t, u, t), then t's lanes in turn (a, b).
            vec![("a", 0), ("c", 3), ("b", 1)],
        ),
        (
            "retry share: 4 × 50 % = 2 retry slots, first attempts unaffected",
            caps(4, 10, 50),
            vec![
                ("a", "t", true, 5),
                ("a", "t", true, 5),
                ("a", "t", true, 5),
                ("b", "u", false, 5),
            ],
            vec![("a", 0), ("b", 3), ("a", 1)],
        ),
    ];
    for (name, limits, pushes, expected) in cases {
        let mut lanes = Lanes::new(limits).unwrap();
        for (i, (sub, tenant, retry, mif)) in pushes.into_iter().enumerate() {
            let _ = lanes
                .push(job(0, i as i64, sub, tenant, retry, 1), mif, at(0))
                .unwrap();
        }
        assert_eq!(started_ids(&mut lanes), ids(&expected), "{name}");
    }
}

#[test]
fn lanes_take_turns_round_robin() {
    let mut lanes = Lanes::new(caps(100, 100, 100)).unwrap();
    let pushes = [("a", 0), ("a", 1), ("a", 2), ("b", 3), ("c", 4), ("c", 5)];
    for (sub, offset) in pushes {
        let _ = lanes
            .push(job(0, offset, sub, sub, false, 1), 10, at(0))
            .unwrap();
    }
    assert_eq!(lanes.lane_count(), 3);
    let order = ids(&[("a", 0), ("b", 3), ("c", 4), ("a", 1), ("c", 5), ("a", 2)]);
    assert_eq!(started_ids(&mut lanes), order);
    assert_eq!(lanes.lane_count(), 0);
}

#[test]
fn max_in_flight_one_starts_in_order_one_at_a_time() {
    let mut lanes = Lanes::new(caps(100, 100, 100)).unwrap();
    for offset in 0..4 {
        let _ = lanes
            .push(job(0, offset, "a", "t", false, 1), 1, at(0))
            .unwrap();
    }
    for expected in 0..4 {
        let s = lanes.pop_ready().unwrap();
        assert_eq!(s.job.offset, expected);
        assert_eq!(
            lanes.pop_ready(),
            None,
            "a second record started alongside {expected}"
        );
        lanes.complete(&s).unwrap();
    }
    assert!(lanes.is_idle());
}

#[test]
fn lowering_max_in_flight_holds_new_starts_until_below() {
    let mut lanes = Lanes::new(caps(100, 100, 100)).unwrap();
    for offset in 0..3 {
        let _ = lanes
            .push(job(0, offset, "a", "t", false, 1), 3, at(0))
            .unwrap();
    }
    let first: Vec<_> = std::iter::from_fn(|| lanes.pop_ready()).collect();
    assert_eq!(first.len(), 3);
    for offset in 3..5 {
        let _ = lanes
            .push(job(0, offset, "a", "t", false, 1), 1, at(0))
            .unwrap();
    }
    assert_eq!(lanes.pop_ready(), None);
    lanes.complete(&first[0]).unwrap();
    lanes.complete(&first[1]).unwrap();
    assert_eq!(
        lanes.pop_ready(),
        None,
        "one still in flight against the new cap of 1"
    );
    lanes.complete(&first[2]).unwrap();
    assert_eq!(lanes.pop_ready().map(|s| s.job.offset), Some(3));
    assert_eq!(lanes.subscription_in_flight("a"), 1);
}

#[test]
fn first_attempts_not_blocked_by_retry_backlog() {
    // One retry slot, held by another subscription's retry.
    let mut lanes = Lanes::new(caps(10, 10, 10)).unwrap();
    let _ = lanes
        .push(job(1, 0, "other", "u", true, 1), 10, at(0))
        .unwrap();
    assert!(lanes.pop_ready().unwrap().job.retry);
    // Subscription a: a retry backlog pushed before its first attempts.
    for offset in 0..5 {
        let _ = lanes
            .push(job(2, offset, "a", "t", true, 1), 10, at(0))
            .unwrap();
    }
    for offset in 0..3 {
        let _ = lanes
            .push(job(0, offset, "a", "t", false, 1), 10, at(0))
            .unwrap();
    }
    let started = started_ids(&mut lanes);
    assert_eq!(started, ids(&[("a", 0), ("a", 1), ("a", 2)]));
    assert_eq!(lanes.retry_in_flight(), 1);
    assert_eq!(lanes.queued_records(), 5);
}

#[test]
fn overflow_lanes_together_hold_at_most_their_share_and_give_slots_back() {
    // 10 slots, overflow share 30 %: 3 slots for records read from lanes.
    let mut lanes = Lanes::new(LaneLimits {
        overflow_share_percent: 30,
        ..caps(10, 10, 100)
    })
    .unwrap();
    assert_eq!(lanes.limits().overflow_slots(), 3);
    let lane_job = |partition: u8, offset: i64, sub: &str, tenant: &str| Job {
        overflow: true,
        ..job(partition, offset, sub, tenant, false, 1)
    };
    // Three promoted subscriptions of three tenants, 5 records each.
    for (p, (sub, tenant)) in [("w1", "a"), ("w2", "b"), ("w3", "c")].iter().enumerate() {
        for offset in 0..5 {
            let _ = lanes
                .push(lane_job(10 + p as u8, offset, sub, tenant), 10, at(0))
                .unwrap();
        }
    }
    // A small tenant's first attempts, pushed after the whales' backlog.
    for offset in 0..4 {
        let _ = lanes
            .push(job(0, offset, "small", "s", false, 1), 10, at(0))
            .unwrap();
    }
    let started: Vec<_> = std::iter::from_fn(|| lanes.pop_ready()).collect();
    let overflow = started.iter().filter(|s| s.job.overflow).count();
    let small = started
        .iter()
        .filter(|s| s.job.lane.subscription_id == "small")
        .count();
    assert_eq!(overflow, 3, "lanes hold exactly their share");
    assert_eq!(small, 4, "the rest of the slots stay for everyone else");
    assert_eq!(lanes.overflow_in_flight(), 3);
    // One lane record completes: its slot goes to the next lane record, and
    // a deferred one gives its slot back too.
    let done = started.iter().find(|s| s.job.overflow).unwrap();
    lanes.complete(done).unwrap();
    let next = lanes.pop_ready().unwrap();
    assert!(next.job.overflow);
    assert!(lanes.pop_ready().is_none());
    lanes.defer(next, at(1_000)).unwrap();
    assert_eq!(lanes.overflow_in_flight(), 2);
    let again = lanes.pop_ready().unwrap();
    assert!(
        again.job.overflow,
        "another lane's head takes the freed slot"
    );
    assert_eq!(lanes.overflow_in_flight(), 3);
}

#[test]
fn small_tenant_not_blocked_by_whale() {
    let mut lanes = Lanes::new(caps(8, 4, 100)).unwrap();
    let mut offset = 0;
    for sub in ["w1", "w2", "w3"] {
        for _ in 0..1000 {
            let _ = lanes
                .push(job(0, offset, sub, "whale", false, 1), 100, at(0))
                .unwrap();
            offset += 1;
        }
    }
    assert_eq!(started_ids(&mut lanes).len(), 4);
    assert_eq!(lanes.tenant_in_flight("whale"), 4);
    let _ = lanes
        .push(job(1, 0, "s", "small", false, 1), 1, at(0))
        .unwrap();
    let s = lanes.pop_ready().unwrap();
    assert_eq!((s.job.tenant_id.as_str(), s.job.offset), ("small", 0));
}

#[test]
fn backpressure_pauses_at_the_limit_and_resumes_at_half() {
    let limits = LaneLimits {
        partition_records: 4,
        ..caps(100, 100, 100)
    };
    let mut lanes = Lanes::new(limits).unwrap();
    let flows: Vec<Flow> = (0..5)
        .map(|o| {
            lanes
                .push(job(0, o, "a", "t", false, 1), 100, at(0))
                .unwrap()
        })
        .collect();
    use Flow::*;
    assert_eq!(flows, [Continue, Continue, Continue, Pause, Pause]);
    assert!(lanes.is_paused(&0));
    let started: Vec<_> = std::iter::from_fn(|| lanes.pop_ready()).collect();
    assert_eq!(started.len(), 5);
    assert!(
        !lanes.should_resume(&0),
        "in-flight records still hold memory"
    );
    for (i, s) in started.iter().enumerate() {
        lanes.complete(s).unwrap();
        let held = 4 - i;
        assert_eq!(
            lanes.should_resume(&0),
            held <= 2,
            "after {} completions",
            i + 1
        );
        if held == 3 {
            assert_eq!(lanes.take_resumable(), Vec::<u8>::new());
            // Hysteresis: still paused below the limit, so late pushes keep saying Pause.
            assert_eq!(
                lanes
                    .push(job(0, 100, "a", "t", false, 1), 100, at(0))
                    .unwrap(),
                Pause
            );
            let late = lanes.pop_ready().unwrap();
            lanes.complete(&late).unwrap();
        }
    }
    assert_eq!(lanes.take_resumable(), vec![0]);
    assert_eq!(lanes.take_resumable(), Vec::<u8>::new());
    assert!(!lanes.is_paused(&0));
}

#[test]
fn oversized_record_is_accepted_and_pauses() {
    let limits = LaneLimits {
        partition_bytes: 10,
        ..caps(100, 100, 100)
    };
    let mut lanes = Lanes::new(limits).unwrap();
    assert_eq!(
        lanes
            .push(job(3, 0, "a", "t", false, 1_000), 1, at(0))
            .unwrap(),
        Flow::Pause
    );
    assert_eq!(lanes.buffered_bytes(), 1_000);
    let s = lanes.pop_ready().unwrap();
    lanes.complete(&s).unwrap();
    assert_eq!(lanes.take_resumable(), vec![3]);
    assert!(lanes.is_idle());
}

#[test]
fn total_limit_pauses_the_pushing_partition_and_resumes_it_when_drained() {
    let limits = LaneLimits {
        total_records: 4,
        ..caps(100, 100, 100)
    };
    let mut lanes = Lanes::new(limits).unwrap();
    let pushes = [
        (0, Flow::Continue),
        (0, Flow::Continue),
        (1, Flow::Continue),
        (1, Flow::Pause),
    ];
    for (offset, (partition, flow)) in pushes.into_iter().enumerate() {
        let got = lanes
            .push(
                job(partition, offset as i64, "a", "t", false, 1),
                100,
                at(0),
            )
            .unwrap();
        assert_eq!(got, flow, "push {offset}");
    }
    assert!(!lanes.is_paused(&0));
    let started: Vec<_> = std::iter::from_fn(|| lanes.pop_ready()).collect();
    lanes.complete(&started[0]).unwrap();
    assert!(!lanes.should_resume(&1), "3 of 4 held; the low water is 2");
    lanes.complete(&started[1]).unwrap();
    assert_eq!(lanes.take_resumable(), vec![1]);
}

#[test]
fn drop_partition_returns_queued_offsets_and_keeps_in_flight() {
    let mut lanes = Lanes::new(caps(100, 100, 100)).unwrap();
    for offset in 0..5 {
        let _ = lanes
            .push(job(0, offset, "a", "t", false, 10), 2, at(0))
            .unwrap();
    }
    for offset in 0..3 {
        let _ = lanes
            .push(job(1, offset, "a", "t", true, 1), 2, at(0))
            .unwrap();
        let _ = lanes
            .push(job(0, 10 + offset, "b", "u", true, 100), 2, at(0))
            .unwrap();
    }
    let started: Vec<_> = std::iter::from_fn(|| lanes.pop_ready()).collect();
    let started_p0: Vec<i64> = started
        .iter()
        .filter(|s| s.job.partition == 0)
        .map(|s| s.job.offset)
        .collect();
    // a's cap of 2 is shared by its first-attempt and retry lanes.
    assert_eq!(started_p0, [0, 10, 11]);
    assert!(lanes.push(job(0, 20, "c", "u", false, 1), 1, at(0)).is_ok());
    assert_eq!(lanes.drop_partition(&0), vec![1, 2, 3, 4, 12, 20]);
    assert_eq!(lanes.drop_partition(&0), Vec::<i64>::new());
    assert_eq!(lanes.drop_partition(&9), Vec::<i64>::new());
    assert_eq!(lanes.partition_buffered(&0), (3, 10 + 100 + 100));
    assert_eq!(lanes.in_flight(), 4);
    assert_eq!(lanes.queued_records(), 2); // p1 offsets 1 and 2
    assert_eq!(lanes.lane_count(), 1);
    for s in &started {
        lanes.complete(s).unwrap();
    }
    assert_eq!(
        lanes.pop_ready().map(|s| (s.job.partition, s.job.offset)),
        Some((1, 1))
    );
    assert_eq!(lanes.partition_buffered(&0), (0, 0));
    assert_eq!(lanes.buffered_records(), 2);
}

#[test]
fn duplicates_and_unknown_completions_are_refused_without_change() {
    let mut lanes = Lanes::new(caps(10, 10, 100)).unwrap();
    let _ = lanes.push(job(0, 7, "a", "t", false, 5), 1, at(0)).unwrap();
    assert_eq!(
        lanes.push(job(0, 7, "b", "u", true, 9), 1, at(0)),
        Err(LaneError::Duplicate { offset: 7 })
    );
    assert_eq!(lanes.buffered_bytes(), 5);
    let s = lanes.pop_ready().unwrap();
    assert_eq!(
        lanes.push(job(0, 7, "a", "t", false, 5), 1, at(0)),
        Err(LaneError::Duplicate { offset: 7 })
    );
    let never = Started {
        job: job(0, 8, "a", "t", false, 5),
        enqueued_at: at(0),
    };
    assert_eq!(
        lanes.complete(&never),
        Err(LaneError::NotInFlight { offset: 8 })
    );
    lanes.complete(&s).unwrap();
    assert_eq!(
        lanes.complete(&s),
        Err(LaneError::NotInFlight { offset: 7 })
    );
    assert!(lanes.is_idle());
    assert_eq!(
        (
            lanes.tenant_in_flight("t"),
            lanes.subscription_in_flight("a")
        ),
        (0, 0)
    );
}

#[test]
fn oldest_enqueued_tracks_queued_records_only() {
    let mut lanes = Lanes::new(caps(10, 10, 100)).unwrap();
    assert_eq!(lanes.oldest_enqueued(&0), None);
    let _ = lanes
        .push(job(0, 0, "a", "t", false, 1), 1, at(500))
        .unwrap();
    let _ = lanes
        .push(job(0, 1, "b", "t", false, 1), 1, at(300))
        .unwrap();
    let _ = lanes
        .push(job(0, 2, "a", "t", false, 1), 1, at(900))
        .unwrap();
    assert_eq!(lanes.oldest_enqueued(&0), Some(at(300)));
    let a0 = lanes.pop_ready().unwrap();
    assert_eq!(a0.enqueued_at, at(500));
    let b1 = lanes.pop_ready().unwrap();
    assert_eq!(lanes.oldest_enqueued(&0), Some(at(900)));
    lanes.complete(&a0).unwrap();
    lanes.complete(&b1).unwrap();
    assert_eq!(lanes.pop_ready().map(|s| s.job.offset), Some(2));
    assert_eq!(lanes.oldest_enqueued(&0), None);
}

#[path = "lanes_props.rs"]
mod props;

#[test]
fn a_deferred_head_holds_its_lane_until_due_and_frees_its_slots() {
    let mut lanes = Lanes::new(caps(1, 1, 100)).unwrap();
    for offset in 0..3 {
        let _ = lanes
            .push(job(0, offset, "strict", "t1", false, 10), 1, at(0))
            .unwrap();
    }
    let _ = lanes
        .push(job(0, 3, "other", "t2", false, 10), 1, at(0))
        .unwrap();
    let head = lanes.pop_ready_at(at(0)).unwrap();
    assert_eq!(head.job.offset, 0);
    lanes.defer(head, at(500)).unwrap();
    // Its global slot is free: another subscription starts; nothing behind the head does.
    assert_eq!(lanes.in_flight(), 0);
    assert_eq!(
        lanes.buffered_records(),
        4,
        "the deferred head stays buffered"
    );
    let other = lanes.pop_ready_at(at(100)).unwrap();
    assert_eq!(other.job.lane.subscription_id, "other");
    lanes.complete(&other).unwrap();
    assert!(
        lanes.pop_ready_at(at(499)).is_none(),
        "nothing starts before the head is due"
    );
    assert_eq!(lanes.next_deferred_wakeup(), Some(at(500)));
    let again = lanes.pop_ready_at(at(500)).unwrap();
    assert_eq!(again.job.offset, 0, "the head starts again first");
    assert_eq!(lanes.next_deferred_wakeup(), None);
    lanes.complete(&again).unwrap();
    assert_eq!(started_ids(&mut lanes), ids(&[("strict", 1)]));
}

#[test]
fn a_deferred_head_is_dropped_with_its_partition() {
    let mut lanes = Lanes::new(caps(4, 4, 100)).unwrap();
    let _ = lanes
        .push(job(0, 0, "s", "t", false, 10), 1, at(0))
        .unwrap();
    let _ = lanes
        .push(job(0, 1, "s", "t", false, 10), 1, at(0))
        .unwrap();
    let head = lanes.pop_ready_at(at(0)).unwrap();
    lanes.defer(head.clone(), at(1_000)).unwrap();
    assert_eq!(lanes.drop_partition(&0), vec![0, 1]);
    assert!(lanes.is_idle());
    assert_eq!(lanes.next_deferred_wakeup(), None);
    assert!(lanes.defer(head, at(0)).is_err(), "no longer in flight");
    // Pushed again (fetched afresh), it starts at once.
    let _ = lanes
        .push(job(0, 0, "s", "t", false, 10), 1, at(2))
        .unwrap();
    assert_eq!(lanes.pop_ready_at(at(2)).map(|s| s.job.offset), Some(0));
}

#[test]
fn withdraw_takes_one_subscriptions_queued_first_attempts_of_one_partition() {
    let mut limits = caps(10, 10, 50);
    limits.partition_records = 6;
    let mut lanes = Lanes::new(limits).unwrap();
    let t = at(0);
    // Partition 0: whale w (five queued, one in flight), small s, a retry of w.
    for offset in 0..6 {
        let _ = lanes
            .push(job(0, offset, "w", "tw", false, 10), 1, t)
            .unwrap();
    }
    assert_eq!(
        lanes.push(job(0, 6, "s", "ts", false, 5), 4, t).unwrap(),
        Flow::Pause
    );
    let _ = lanes.push(job(1, 0, "w", "tw", false, 10), 1, t).unwrap();
    let _ = lanes.push(job(2, 0, "w", "tw", true, 10), 1, t).unwrap();
    let first = lanes.pop_ready().unwrap();
    assert_eq!((first.job.partition, first.job.offset), (0, 0));

    assert_eq!(lanes.withdraw(&0, "w"), vec![1, 2, 3, 4, 5]);
    assert_eq!(lanes.withdraw(&0, "w"), Vec::<i64>::new(), "once");
    assert_eq!(
        lanes.partition_buffered(&0),
        (2, 15),
        "w@0 in flight and s@6"
    );
    assert_eq!(lanes.buffered_records(), 4);
    assert_eq!(lanes.take_resumable(), vec![0], "below its low water now");
    // w's other partition and its retry lane are untouched; s starts now.
    lanes.complete(&first).unwrap();
    let rest: BTreeSet<(String, i64)> = started_ids(&mut lanes).into_iter().collect();
    let want: BTreeSet<(String, i64)> = ids(&[("s", 6), ("w", 0)]).into_iter().collect();
    assert_eq!(
        rest, want,
        "s@6 and w's record of partition 1; w's retry waits its cap"
    );
}

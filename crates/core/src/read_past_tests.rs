use proptest::prelude::*;

use super::*;
use crate::admission::PayloadMatch;

/// Reads `log[from..to]` at the front; the offsets it fans out.
fn front_reads(rp: &mut ReadPast, log: &[&str], from: usize, to: usize) -> Vec<i64> {
    (from..to)
        .filter_map(|o| {
            let o64 = o as i64;
            (rp.front(o64, log[o], (Some(o64), Some(o64 + 1))) == FrontVerdict::FanOut)
                .then_some(o64)
        })
        .collect()
}

#[test]
fn nothing_read_past_is_the_plain_in_order_loop() {
    let log = ["a", "b", "a", "c"];
    let mut rp = ReadPast::default();
    assert_eq!(rp.watermark(), None);
    assert_eq!(front_reads(&mut rp, &log, 0, 4), vec![0, 1, 2, 3]);
    assert_eq!(rp.watermark(), Some(4));
    assert_eq!(rp.back_from(), None);
    let c = rp.checkpoint().expect("read something");
    assert_eq!((c.watermark, c.front, c.tenants.len()), (4, 4, 0));
}

#[test]
fn a_promoted_tenants_records_go_to_the_back_and_hold_the_watermark() {
    let log = ["w", "w", "s", "w", "s", "w"];
    let mut rp = ReadPast::default();
    assert_eq!(front_reads(&mut rp, &log, 0, 2), vec![0, 1]);
    assert!(rp.promote("w"));
    assert!(!rp.promote("w"), "once");
    // The small tenant's records are fanned out at once; the whale's wait.
    assert_eq!(front_reads(&mut rp, &log, 2, 6), vec![2, 4]);
    assert_eq!(rp.watermark(), Some(2), "the whale's first record left");
    assert_eq!(rp.back_from(), Some(2));
    assert_eq!(rp.back(2, "s"), BackVerdict::Skip);
    assert_eq!(rp.back(3, "w"), BackVerdict::FanOut(Admission::Admit));
    assert_eq!(rp.watermark(), Some(4));
    assert_eq!(rp.back(4, "s"), BackVerdict::Skip);
    assert_eq!(rp.back(5, "w"), BackVerdict::FanOut(Admission::Admit));
    assert_eq!(rp.watermark(), Some(6));
    assert_eq!(
        rp.back(6, "w"),
        BackVerdict::Wait,
        "not read by the front yet"
    );
}

#[test]
fn the_back_carries_out_the_fronts_verdict() {
    let log = ["w", "w", "w"];
    let mut rp = ReadPast::default();
    front_reads(&mut rp, &log, 0, 1);
    rp.promote("w");
    assert_eq!(rp.front(1, "w", (None, None)), FrontVerdict::Back);
    rp.judged(1, Admission::Duplicate(PayloadMatch::Same));
    assert_eq!(rp.front(2, "w", (None, None)), FrontVerdict::Back);
    rp.judged(2, Admission::Admit);
    assert_eq!(
        rp.back(1, "w"),
        BackVerdict::FanOut(Admission::Duplicate(PayloadMatch::Same))
    );
    assert_eq!(rp.back(2, "w"), BackVerdict::FanOut(Admission::Admit));
}

#[test]
fn a_tenant_leaves_the_back_only_once_caught_up_and_calm() {
    let log = ["w", "w", "s"];
    let mut rp = ReadPast::default();
    front_reads(&mut rp, &log, 0, 1);
    rp.promote("w");
    front_reads(&mut rp, &log, 1, 3);
    assert!(rp.settle(|_| false).is_empty(), "record 1 is not taken yet");
    assert_eq!(rp.back(1, "w"), BackVerdict::FanOut(Admission::Admit));
    assert!(rp.settle(|_| true).is_empty(), "still bursting: kept");
    assert!(rp.is_behind("w"));
    // Caught up (the back passed 2, the front's last) and calm: released.
    assert_eq!(rp.back(2, "s"), BackVerdict::Skip);
    assert_eq!(rp.settle(|_| false), vec!["w".to_owned()]);
    assert_eq!(rp.front(3, "w", (None, None)), FrontVerdict::FanOut);
}

#[test]
fn the_front_is_ahead_by_what_the_back_has_not_taken() {
    let log = ["w"; 10];
    let mut rp = ReadPast::default();
    front_reads(&mut rp, &log, 0, 1);
    rp.promote("w");
    front_reads(&mut rp, &log, 1, 4);
    assert_eq!(rp.ahead(), 3);
    assert!(rp.has_read(3) && !rp.has_read(4));
    rp.back(1, "w");
    assert_eq!(rp.ahead(), 2);
}

#[test]
fn a_checkpoint_names_what_is_done_above_the_watermark() {
    let log = ["w", "s", "w", "s", "x"];
    let mut rp = ReadPast::default();
    front_reads(&mut rp, &log, 0, 1);
    rp.promote("w");
    front_reads(&mut rp, &log, 1, 5);
    let c = rp.checkpoint().expect("checkpoint");
    assert_eq!(c.watermark, 1);
    assert_eq!(c.front, 5);
    assert_eq!(c.tenants, vec![("w".to_owned(), 1)]);
    // A new owner reads again from the watermark: only the whale's records
    // are left to do, by its back.
    let mut next = ReadPast::restore(Some(c));
    assert_eq!(front_reads(&mut next, &log, 1, 5), Vec::<i64>::new());
    assert_eq!(next.back_from(), Some(1));
    assert_eq!(next.back(1, "s"), BackVerdict::Skip);
    assert_eq!(next.back(2, "w"), BackVerdict::FanOut(Admission::Admit));
}

#[test]
fn a_checkpoints_stream_time_is_at_or_before_the_watermark() {
    let n = (3 * CHECKPOINT_EVERY) as usize;
    let log: Vec<&str> = (0..n).map(|i| if i % 2 == 0 { "w" } else { "s" }).collect();
    let mut rp = ReadPast::default();
    front_reads(&mut rp, &log, 0, 1);
    rp.promote("w");
    front_reads(&mut rp, &log, 1, n);
    // The back takes the whale up to offset 1,500.
    for o in 1..=1_500 {
        rp.back(o, log[o as usize]);
    }
    let c = rp.checkpoint().expect("checkpoint");
    assert_eq!(c.watermark, 1_501, "the back has not read 1,501 yet");
    // Stream times equal offsets here: the rebuild reaches back from at most
    // the watermark's, and not more than a checkpoint's stride before it.
    let st = c.stream_time.expect("a stream time");
    assert!(
        st <= c.watermark && st > c.watermark - CHECKPOINT_EVERY as i64 - 1,
        "{st}"
    );
}

#[test]
fn a_restored_tenant_above_the_front_is_not_read_past() {
    let c = Checkpoint {
        watermark: 5,
        front: 5,
        tenants: vec![("w".into(), 9)],
        stream_time: None,
    };
    let mut rp = ReadPast::restore(Some(c));
    assert!(!rp.is_behind("w"));
    assert_eq!(rp.front(5, "w", (None, None)), FrontVerdict::FanOut);
}

// --- the promise, under crashes -------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Front,
    Back,
    Promote(usize),
    Settle,
    Commit,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Front),
        4 => Just(Op::Back),
        1 => (0..3usize).prop_map(Op::Promote),
        1 => Just(Op::Settle),
        2 => Just(Op::Commit),
        1 => Just(Op::Crash),
    ]
}

const TENANTS: [&str; 3] = ["a", "b", "c"];

/// Drives both readers over `log` as fanout does (a back reader created at
/// `back_from` and reading on in order), committing and crashing as `ops`
/// say, then runs to the end. Returns the offsets fanned out, as committed.
fn run(log: &[usize], ops: &[Op]) -> Vec<i64> {
    let mut rp = ReadPast::default();
    let mut committed: (Option<Checkpoint>, usize) = (None, 0);
    let mut out: Vec<i64> = Vec::new();
    let (mut front, mut back): (i64, Option<i64>) = (0, None);
    let n = log.len() as i64;
    let step_back = |rp: &mut ReadPast, back: &mut Option<i64>, out: &mut Vec<i64>| {
        if back.is_none() {
            *back = rp.back_from();
        }
        let Some(at) = *back else { return };
        if at >= n {
            return;
        }
        match rp.back(at, TENANTS[log[at as usize]]) {
            BackVerdict::Wait => {}
            BackVerdict::Skip => *back = Some(at + 1),
            BackVerdict::FanOut(_) => {
                out.push(at);
                *back = Some(at + 1);
            }
        }
        if rp.back_from().is_none() {
            *back = None;
        }
    };
    for op in ops {
        match op {
            Op::Front if front < n => {
                if rp.front(
                    front,
                    TENANTS[log[front as usize]],
                    (Some(front), Some(front + 1)),
                ) == FrontVerdict::FanOut
                {
                    out.push(front);
                }
                front += 1;
            }
            Op::Front => {}
            Op::Back => step_back(&mut rp, &mut back, &mut out),
            Op::Promote(t) => {
                rp.promote(TENANTS[*t]);
            }
            Op::Settle => {
                rp.settle(|_| false);
                if rp.back_from().is_none() {
                    back = None;
                }
            }
            Op::Commit => committed = (rp.checkpoint(), out.len()),
            Op::Crash => {
                out.truncate(committed.1);
                rp = ReadPast::restore(committed.0.clone());
                front = committed.0.as_ref().map_or(0, |c| c.watermark);
                back = None;
            }
        }
    }
    // To the end: the front reads everything, the back catches up.
    while front < n {
        if rp.front(
            front,
            TENANTS[log[front as usize]],
            (Some(front), Some(front + 1)),
        ) == FrontVerdict::FanOut
        {
            out.push(front);
        }
        front += 1;
    }
    for _ in 0..(2 * n + 2) {
        step_back(&mut rp, &mut back, &mut out);
        rp.settle(|_| false);
    }
    assert_eq!(rp.behind(), 0, "every tenant caught up");
    assert_eq!(rp.watermark(), Some(n).filter(|_| n > 0).or(rp.watermark()));
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Every record is fanned out exactly once, and each tenant's in offset
    /// order, whatever is promoted, settled, committed and crashed when.
    #[test]
    fn every_record_once_and_each_tenant_in_order(
        log in prop::collection::vec(0..3usize, 0..60),
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let out = run(&log, &ops);
        let mut sorted = out.clone();
        sorted.sort_unstable();
        let all: Vec<i64> = (0..log.len() as i64).collect();
        prop_assert_eq!(&sorted, &all, "each exactly once: {:?}", out);
        for t in 0..TENANTS.len() {
            let mine: Vec<i64> = out.iter().copied().filter(|&o| log[o as usize] == t).collect();
            prop_assert!(mine.windows(2).all(|w| w[0] < w[1]), "tenant {} out of order: {:?}", t, mine);
        }
    }
}

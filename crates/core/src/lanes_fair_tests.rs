//! Worker-seconds fairness (deficit round robin) and the two buffer budgets.
//!
//! The fairness tests run a discrete-event simulation: every tenant keeps a
//! backlog, each started attempt holds its slot for its tenant's duration, and
//! the test sums the slot time each tenant actually got (its own bookkeeping,
//! not the lanes' accounts).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use proptest::prelude::*;

use super::tests::job;
use super::*;
use crate::fair::{MIN_WEIGHT, QUANTUM};

fn at_us(us: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_micros(us)
}

fn limits(slots: u32, weights: &[(&str, f64)]) -> LaneLimits {
    let mut tenant_weights = TenantWeights::NONE;
    for (t, w) in weights {
        tenant_weights.set(t, *w).unwrap();
    }
    LaneLimits {
        global_in_flight: slots,
        tenant_in_flight: slots,
        retry_share_percent: 100,
        overflow_share_percent: 100,
        partition_records: 1 << 20,
        partition_bytes: 1 << 30,
        total_records: 1 << 20,
        total_bytes: 1 << 30,
        retry_total_records: 1 << 20,
        retry_total_bytes: 1 << 30,
        tenant_weights,
    }
}

/// A backlogged tenant: its weight, and how long each of its attempts holds a slot.
#[derive(Debug, Clone)]
struct Tenant {
    name: String,
    weight: f64,
    attempt: Duration,
}

struct Outcome {
    /// Slot time each tenant got, in seconds.
    worker_seconds: BTreeMap<String, f64>,
    /// Per tenant, the longest wait between two of its starts.
    longest_gap: BTreeMap<String, Duration>,
    lanes: Lanes<u8>,
}

/// Runs `tenants` (each one subscription on its own partition, always `2 × slots`
/// records queued) on `slots` slots for `run`, charging each attempt at its end.
fn simulate(tenants: &[Tenant], slots: u32, run: Duration) -> Outcome {
    let weights: Vec<(&str, f64)> = tenants
        .iter()
        .map(|t| (t.name.as_str(), t.weight))
        .collect();
    let mut lanes = Lanes::new(limits(slots, &weights)).unwrap();
    let mut next_offset = vec![0i64; tenants.len()];
    let mut queued = vec![0u32; tenants.len()];
    let mut ends: BinaryHeap<Reverse<(u64, u8, i64)>> = BinaryHeap::new();
    let mut running: BTreeMap<(u8, i64), Started<u8>> = BTreeMap::new();
    let mut worker_seconds: BTreeMap<String, f64> = BTreeMap::new();
    let mut last_start: BTreeMap<String, u64> = BTreeMap::new();
    let mut longest_gap: BTreeMap<String, Duration> = BTreeMap::new();
    let end = u64::try_from(run.as_micros()).unwrap();
    let mut now = 0u64;
    while now < end {
        for (i, t) in tenants.iter().enumerate() {
            while queued[i] < 2 * slots {
                let p = u8::try_from(i).unwrap();
                let j = job(
                    p,
                    next_offset[i],
                    &format!("sub-{}", t.name),
                    &t.name,
                    false,
                    1,
                );
                next_offset[i] += 1;
                queued[i] += 1;
                let _ = lanes.push(j, slots, at_us(now)).unwrap();
            }
        }
        while let Some(s) = lanes.pop_ready_at(at_us(now)) {
            let i = usize::from(s.job.partition);
            queued[i] -= 1;
            let t = &tenants[i];
            let prev = last_start.insert(t.name.clone(), now).unwrap_or(0);
            let gap = longest_gap.entry(t.name.clone()).or_default();
            *gap = (*gap).max(Duration::from_micros(now - prev));
            let done = now + u64::try_from(t.attempt.as_micros()).unwrap();
            ends.push(Reverse((done, s.job.partition, s.job.offset)));
            running.insert((s.job.partition, s.job.offset), s);
        }
        let Reverse((t_end, p, o)) = ends.pop().expect("something runs");
        now = t_end;
        let s = running.remove(&(p, o)).unwrap();
        let t = &tenants[usize::from(p)];
        *worker_seconds.entry(t.name.clone()).or_default() += t.attempt.as_secs_f64();
        lanes.charge(&s, at_us(now)).unwrap();
        lanes.complete(&s).unwrap();
    }
    for (name, start) in &last_start {
        let gap = longest_gap.entry(name.clone()).or_default();
        *gap = (*gap).max(Duration::from_micros(now - start));
    }
    Outcome {
        worker_seconds,
        longest_gap,
        lanes,
    }
}

/// Each tenant's share of the worker time, against its share of the weights.
fn shares(tenants: &[Tenant], got: &BTreeMap<String, f64>) -> Vec<(String, f64, f64)> {
    let total: f64 = got.values().sum();
    let weights: f64 = tenants.iter().map(|t| t.weight).sum();
    tenants
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                got.get(&t.name).copied().unwrap_or(0.0) / total,
                t.weight / weights,
            )
        })
        .collect()
}

fn tenant(name: &str, weight: f64, attempt_ms: u64) -> Tenant {
    Tenant {
        name: name.to_owned(),
        weight,
        attempt: Duration::from_millis(attempt_ms),
    }
}

#[test]
fn equal_weights_share_worker_seconds_equally_whatever_the_attempt_durations() {
    // Plain round robin would give the 2 s tenant 200 times the 10 ms one's time.
    let tenants = [
        tenant("fast", 1.0, 10),
        tenant("mid", 1.0, 150),
        tenant("slow", 1.0, 2_000),
    ];
    let out = simulate(&tenants, 8, Duration::from_secs(600));
    for (name, got, want) in shares(&tenants, &out.worker_seconds) {
        assert!(
            (got - want).abs() < 0.02,
            "{name}: {got:.3} of the time, weight share {want:.3}"
        );
    }
}

#[test]
fn worker_seconds_converge_to_the_weights() {
    let tenants = [
        tenant("a", 1.0, 20),
        tenant("b", 3.0, 50),
        tenant("c", 0.5, 400),
        tenant("d", 2.0, 5),
    ];
    let out = simulate(&tenants, 16, Duration::from_secs(600));
    for (name, got, want) in shares(&tenants, &out.worker_seconds) {
        assert!(
            (got - want).abs() < 0.02 * want.max(0.1) * 5.0,
            "{name}: {got:.3} of the time, weight share {want:.3}"
        );
    }
    let usage = out.lanes.usage(at_us(600_000_000));
    let names: Vec<_> = usage.tenants.iter().map(|t| t.tenant_id.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
    assert!(usage
        .tenants
        .iter()
        .all(|t| t.worker_seconds > 0.0 && t.buffered_records > 0));
    assert_eq!(usage.tenants[1].weight, 3.0);
}

#[test]
fn a_tenant_at_the_floor_weight_is_served_and_never_starves() {
    let tenants = [
        tenant("whale-1", 100.0, 1_000),
        tenant("whale-2", 100.0, 30),
        tenant("floor", MIN_WEIGHT, 10),
    ];
    let out = simulate(&tenants, 4, Duration::from_secs(3_600));
    let shares = shares(&tenants, &out.worker_seconds);
    let (_, got, want) = &shares[2];
    // It gets its (tiny) weighted share, within a quarter of it.
    assert!(
        (got - want).abs() < want * 0.25,
        "floor: {got:.6} vs {want:.6}"
    );
    // And it is never kept waiting without bound: between two of its starts the
    // others can use at most what their weights buy while it earns one attempt
    // (its attempt over its quantum rounds, each worth (100 + 100) × QUANTUM of
    // worker time across 4 slots), plus a round of slack.
    let rounds = (1.0 / (MIN_WEIGHT * QUANTUM.as_secs_f64())).ceil() + 1.0;
    let bound = Duration::from_secs_f64(rounds * 200.0 * QUANTUM.as_secs_f64() / 4.0 + 2.0);
    let gap = out.longest_gap["floor"];
    assert!(
        gap <= bound,
        "floor tenant waited {gap:?} (bound {bound:?})"
    );
}

#[test]
fn a_newcomer_starts_at_once_even_when_the_others_are_in_debt() {
    // Two tenants with long attempts fill the slots and run into debt; a new
    // tenant comes with a quantum of credit and starts at the next free slot.
    let mut lanes = Lanes::new(limits(2, &[])).unwrap();
    for o in 0..10 {
        let _ = lanes
            .push(job(0, o, "w", "whale", false, 1), 2, at_us(0))
            .unwrap();
    }
    let a = lanes.pop_ready_at(at_us(0)).unwrap();
    let b = lanes.pop_ready_at(at_us(0)).unwrap();
    lanes.charge(&a, at_us(5_000_000)).unwrap();
    lanes.complete(&a).unwrap();
    assert!(lanes.tenant_deficit("whale").unwrap() < -4.0);
    let _ = lanes
        .push(job(1, 0, "s", "small", false, 1), 1, at_us(5_000_000))
        .unwrap();
    let s = lanes.pop_ready_at(at_us(5_000_000)).unwrap();
    assert_eq!(s.job.tenant_id, "small");
    // Alone again, the whale in debt is credited rounds until it may start: work
    // conserving, a free slot never idles while something could start.
    lanes.charge(&s, at_us(5_001_000)).unwrap();
    lanes.complete(&s).unwrap();
    let w = lanes.pop_ready_at(at_us(5_001_000)).unwrap();
    assert_eq!(w.job.tenant_id, "whale");
    assert!(lanes.tenant_deficit("whale").unwrap() > 0.0);
    lanes.complete(&b).unwrap();
}

#[test]
fn charge_and_complete_charge_slot_time_once() {
    let mut lanes = Lanes::new(limits(4, &[])).unwrap();
    let _ = lanes
        .push(job(0, 0, "s", "t", false, 1), 4, at_us(0))
        .unwrap();
    let _ = lanes
        .push(job(0, 1, "s", "t", false, 1), 4, at_us(0))
        .unwrap();
    let a = lanes.pop_ready_at(at_us(1_000_000)).unwrap();
    let b = lanes.pop_ready_at(at_us(1_000_000)).unwrap();
    lanes.charge(&a, at_us(3_000_000)).unwrap();
    lanes.charge(&a, at_us(3_000_000)).unwrap();
    lanes.complete(&a).unwrap();
    // `b` was never charged: complete charges it up to the lanes' clock (1 s in).
    let _ = lanes
        .push(job(0, 2, "s", "t", false, 1), 4, at_us(4_000_000))
        .unwrap();
    lanes.complete(&b).unwrap();
    let usage = lanes.usage(at_us(4_000_000));
    let decay = |age_s: f64| (-age_s / 60.0).exp2();
    let want = 2.0 * decay(1.0) + 3.0;
    let got = usage.tenants[0].worker_seconds;
    assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    assert_eq!(usage.subscriptions[0].buffered_records, 1);
    assert_eq!(usage.tenants[0].buffered_records, 1);
    assert_eq!(
        lanes.charge(&a, at_us(5_000_000)),
        Err(LaneError::NotInFlight { offset: 0 })
    );
}

#[test]
fn a_deferred_head_is_charged_its_slot_time() {
    let mut lanes = Lanes::new(limits(4, &[])).unwrap();
    let _ = lanes
        .push(job(0, 0, "s", "t", false, 1), 1, at_us(0))
        .unwrap();
    let a = lanes.pop_ready_at(at_us(0)).unwrap();
    lanes.charge(&a, at_us(700_000)).unwrap();
    lanes.defer(a, at_us(10_000_000)).unwrap();
    assert!((lanes.tenant_deficit("t").unwrap() - (QUANTUM.as_secs_f64() - 0.7)).abs() < 1e-9);
    let got = lanes.usage(at_us(700_000)).tenants[0].worker_seconds;
    assert!((got - 0.7).abs() < 1e-9);
}

// --- Separate budgets: retries never pause a first-attempt partition. ---

/// Partitions 0 and 1 are first-attempt partitions, 2 and 3 retry tiers.
fn budget_limits() -> LaneLimits {
    LaneLimits {
        partition_records: 2_000,
        total_records: 1_500,
        retry_total_records: 1_200,
        ..limits(8, &[])
    }
}

#[test]
fn a_flood_of_retries_pauses_only_the_tiers() {
    let mut lanes = Lanes::new(budget_limits()).unwrap();
    // 50,000 due retries for a broken tenant across two tier partitions, pushed
    // whenever their partition is not paused (as the consumer would fetch).
    let mut pushed = 0;
    let mut offsets = [0i64; 4];
    while pushed < 50_000 {
        for p in [2u8, 3] {
            if lanes.is_paused(&p) {
                continue;
            }
            let j = job(p, offsets[usize::from(p)], "broken", "broken", true, 100);
            offsets[usize::from(p)] += 1;
            let _ = lanes.push(j, 100, at_us(0)).unwrap();
            pushed += 1;
        }
        if lanes.is_paused(&2) && lanes.is_paused(&3) {
            // Drain some retries: they start and complete (the endpoint fails fast).
            while let Some(s) = lanes.pop_ready_at(at_us(0)) {
                lanes.complete(&s).unwrap();
                if lanes.class_buffered(true).0 < 500 {
                    break;
                }
            }
            let _ = lanes.take_resumable();
        }
        // First attempts of other tenants keep arriving and are never paused.
        let p = u8::try_from(pushed % 2).unwrap();
        let j = job(p, offsets[usize::from(p)], "small", "small", false, 100);
        offsets[usize::from(p)] += 1;
        assert_eq!(lanes.push(j, 100, at_us(0)).unwrap(), Flow::Continue);
        let s = lanes.pop_ready_at(at_us(0));
        if let Some(s) = s {
            lanes.complete(&s).unwrap();
        }
        assert!(!lanes.is_paused(&0) && !lanes.is_paused(&1));
    }
    assert!(lanes.class_buffered(true).0 <= 1_200);
}

#[test]
fn each_class_pauses_on_its_own_totals_and_resumes_at_its_own_low_water() {
    let mut lanes = Lanes::new(budget_limits()).unwrap();
    // 1,199 retries: below the retry total, nothing paused.
    for o in 0..1_199 {
        let p = 2 + u8::try_from(o % 2).unwrap();
        assert_eq!(
            lanes
                .push(job(p, o, "r", "r", true, 1), 1, at_us(0))
                .unwrap(),
            Flow::Continue
        );
    }
    assert_eq!(
        lanes
            .push(job(2, 10_000, "r", "r", true, 1), 1, at_us(0))
            .unwrap(),
        Flow::Pause
    );
    // First attempts: 1,499 fit beside the 1,200 retries (one budget would have
    // paused them long ago).
    for o in 0..1_499 {
        let p = u8::try_from(o % 2).unwrap();
        assert_eq!(
            lanes
                .push(job(p, o, "f", "f", false, 1), 1, at_us(0))
                .unwrap(),
            Flow::Continue
        );
    }
    assert_eq!(
        lanes
            .push(job(1, 10_000, "f", "f", false, 1), 1, at_us(0))
            .unwrap(),
        Flow::Pause
    );
    assert_eq!(lanes.class_buffered(false).0, 1_500);
    assert_eq!(lanes.class_buffered(true).0, 1_200);
    // Draining the first attempts to half resumes their partition, not the tier.
    let f_offsets: Vec<i64> = lanes.drop_partition(&0);
    assert_eq!(f_offsets.len(), 750);
    assert_eq!(lanes.take_resumable(), vec![1]);
    assert!(lanes.is_paused(&2));
    // And the retries' low water is the retry total's half.
    assert_eq!(lanes.drop_partition(&3).len(), 599);
    assert!(!lanes.should_resume(&2), "601 retries held, above 600");
    let s = lanes.pop_ready_at(at_us(0)).unwrap();
    lanes.complete(&s).unwrap();
    while lanes.class_buffered(true).0 > 600 {
        let s = lanes.pop_ready_at(at_us(0)).unwrap();
        lanes.complete(&s).unwrap();
    }
    assert!(lanes.should_resume(&2));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the weights, durations and slot count, backlogged tenants' slot
    /// time converges to their weights, and none is starved.
    #[test]
    fn worker_second_shares_converge_to_the_weights(
        specs in prop::collection::vec((prop_oneof![Just(0.25), Just(0.5), Just(1.0), Just(2.0), Just(4.0)], 1u64..800), 2..5),
        slots in 1u32..12,
    ) {
        let tenants: Vec<Tenant> = specs
            .iter()
            .enumerate()
            .map(|(i, (w, ms))| tenant(&format!("t{i}"), *w, *ms))
            .collect();
        let out = simulate(&tenants, slots, Duration::from_secs(1_800));
        for (name, got, want) in shares(&tenants, &out.worker_seconds) {
            prop_assert!((got - want).abs() <= want * 0.1 + 0.01, "{}: {:.3} vs {:.3}", name, got, want);
        }
    }

    /// With every cap in place, a flood of retries on the tiers never pauses a
    /// first-attempt partition, whatever the budgets and the arrival order.
    #[test]
    fn retries_never_pause_a_first_attempt_partition(
        ops in prop::collection::vec((any::<bool>(), 0u8..2, 1usize..300), 1..3_000),
        retry_records in 1usize..200,
        retry_bytes in 1usize..20_000,
        completions in 0usize..4,
    ) {
        let mut lanes = Lanes::new(LaneLimits {
            partition_records: 10_000,
            partition_bytes: 1 << 30,
            total_records: 10_000,
            total_bytes: 1 << 30,
            retry_total_records: retry_records,
            retry_total_bytes: retry_bytes,
            ..limits(4, &[])
        }).unwrap();
        let mut offset = 0;
        let mut first = 0;
        for (retry, p, bytes) in ops {
            offset += 1;
            let (p, sub) = if retry { (2 + p, "r") } else { first += 1; (p, "f") };
            let flow = lanes.push(job(p, offset, sub, sub, retry, bytes), 2, at_us(0)).unwrap();
            if !retry {
                prop_assert_eq!(flow, Flow::Continue);
            }
            for _ in 0..completions {
                if let Some(s) = lanes.pop_ready_at(at_us(0)) {
                    lanes.complete(&s).unwrap();
                }
            }
            prop_assert!(!lanes.is_paused(&0) && !lanes.is_paused(&1));
        }
        prop_assert!(first == 0 || lanes.class_buffered(false).0 <= first);
    }
}

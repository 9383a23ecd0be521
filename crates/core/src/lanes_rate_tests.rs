//! Rate limits in `Lanes`: table tests and property tests against a token model.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, UNIX_EPOCH};

use proptest::prelude::*;

use super::*;

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn job(partition: u8, offset: i64, sub: &str, tenant: &str, retry: bool) -> Job<u8> {
    Job {
        partition,
        offset,
        lane: LaneKey {
            subscription_id: sub.to_owned(),
        },
        tenant_id: tenant.to_owned(),
        retry,
        overflow: false,
        bytes: 1,
    }
}

fn big() -> LaneLimits {
    LaneLimits {
        global_in_flight: 1_000,
        tenant_in_flight: 1_000,
        retry_share_percent: 100,
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

fn rated(rate: f64) -> LaneSettings {
    LaneSettings {
        max_in_flight: 1_000,
        rate_per_s: Some(rate),
    }
}

fn pop_all(lanes: &mut Lanes<u8>, now: SystemTime) -> Vec<(String, i64)> {
    std::iter::from_fn(|| lanes.pop_ready_at(now))
        .map(|s| (s.job.lane.subscription_id, s.job.offset))
        .collect()
}

#[test]
fn rate_limited_lane_bursts_its_capacity_then_starts_at_the_rate() {
    let mut lanes = Lanes::new(big()).unwrap();
    for o in 0..6 {
        let _ = lanes
            .push_with(job(0, o, "a", "t", false), rated(2.0), at(0))
            .unwrap();
    }
    assert_eq!(pop_all(&mut lanes, at(0)).len(), 2, "capacity ceil(2) = 2");
    assert_eq!(lanes.rate_limited_subscriptions(), 1);
    assert_eq!(lanes.next_rate_wakeup(), Some(at(500)));
    assert_eq!(lanes.pop_ready_at(at(499)), None);
    assert_eq!(
        pop_all(&mut lanes, at(500)),
        vec![("a".to_owned(), 2)],
        "one token per 1/rate"
    );
    assert_eq!(lanes.next_rate_wakeup(), Some(at(1_000)));
    assert_eq!(pop_all(&mut lanes, at(1_200)).len(), 1);
    assert_eq!(
        pop_all(&mut lanes, at(5_000)).len(),
        2,
        "refilled to capacity"
    );
    assert_eq!(lanes.queued_records(), 0);
    assert_eq!(lanes.next_rate_wakeup(), None, "nothing queued to wake for");
    assert_eq!(lanes.rate_limited_subscriptions(), 0);
}

#[test]
fn rate_limited_lane_does_not_block_other_lanes() {
    let mut lanes = Lanes::new(big()).unwrap();
    for o in 0..10 {
        let _ = lanes
            .push_with(job(0, o, "slow", "t", false), rated(1.0), at(0))
            .unwrap();
        let _ = lanes
            .push(job(0, 100 + o, "fast", "t", false), 1_000, at(0))
            .unwrap();
    }
    let started = pop_all(&mut lanes, at(0));
    assert_eq!(started.iter().filter(|(s, _)| s == "slow").count(), 1);
    assert_eq!(started.iter().filter(|(s, _)| s == "fast").count(), 10);
    assert_eq!(lanes.next_rate_wakeup(), Some(at(1_000)));
}

#[test]
fn draining_a_rate_limited_lane_grants_no_new_burst() {
    let mut lanes = Lanes::new(big()).unwrap();
    let _ = lanes
        .push_with(job(0, 0, "a", "t", false), rated(1.0), at(0))
        .unwrap();
    let s = lanes.pop_ready_at(at(0)).unwrap();
    lanes.complete(&s).unwrap();
    assert!(lanes.is_idle());
    let _ = lanes
        .push_with(job(0, 1, "a", "t", false), rated(1.0), at(10))
        .unwrap();
    assert_eq!(lanes.pop_ready_at(at(10)), None);
    assert_eq!(lanes.next_rate_wakeup(), Some(at(1_000)));
    assert!(lanes.pop_ready_at(at(1_000)).is_some());
}

#[test]
fn an_idle_subscriptions_bucket_is_forgotten_once_full_within_the_prune_interval() {
    let mut lanes = Lanes::new(big()).unwrap();
    let _ = lanes
        .push_with(job(0, 0, "a", "t", false), rated(1.0), at(0))
        .unwrap();
    let s = lanes.pop_ready_at(at(0)).unwrap();
    lanes.complete(&s).unwrap();
    // Spent, so kept (forgetting it would grant a fresh burst).
    assert_eq!(lanes.pop_ready_at(at(500)), None);
    assert!(lanes.buckets.contains_key("a"));
    // Full again at 1 s; gone by the first look a prune interval later.
    let later = at(1_000) + BUCKET_PRUNE_EVERY;
    assert_eq!(lanes.pop_ready_at(later), None);
    assert!(lanes.buckets.is_empty(), "{:?}", lanes.buckets);
}

#[test]
fn buckets_are_not_walked_on_every_push_and_start() {
    // Prunes are spaced by the clock, not by calls: many calls within one
    // interval prune once.
    let mut lanes = Lanes::new(big()).unwrap();
    let _ = lanes
        .push_with(job(0, 0, "a", "t", false), rated(1_000.0), at(0))
        .unwrap();
    let first = lanes.pruned_at;
    for ms in 1..100 {
        let _ = lanes.pop_ready_at(at(ms));
    }
    assert_eq!(lanes.pruned_at, first);
    let _ = lanes.pop_ready_at(at(0) + BUCKET_PRUNE_EVERY);
    assert_eq!(lanes.pruned_at, Some(at(0) + BUCKET_PRUNE_EVERY));
}

#[test]
fn first_attempts_and_retries_share_the_subscription_bucket() {
    let mut lanes = Lanes::new(big()).unwrap();
    for o in 0..3 {
        let _ = lanes
            .push_with(job(0, o, "a", "t", false), rated(2.0), at(0))
            .unwrap();
        let _ = lanes
            .push_with(job(1, o, "a", "t", true), rated(2.0), at(0))
            .unwrap();
    }
    assert_eq!(pop_all(&mut lanes, at(0)).len(), 2);
    assert_eq!(lanes.lane_count(), 2);
}

#[test]
fn non_positive_or_non_finite_rate_is_unlimited() {
    for rate in [0.0, -3.0, f64::NAN, f64::INFINITY] {
        let mut lanes = Lanes::new(big()).unwrap();
        for o in 0..50 {
            let _ = lanes
                .push_with(job(0, o, "a", "t", false), rated(rate), at(0))
                .unwrap();
        }
        assert_eq!(pop_all(&mut lanes, at(0)).len(), 50, "{rate}");
        assert_eq!(lanes.next_rate_wakeup(), None);
    }
}

#[test]
fn the_latest_push_sets_or_lifts_the_rate() {
    let mut lanes = Lanes::new(big()).unwrap();
    for o in 0..4 {
        let _ = lanes
            .push_with(job(0, o, "a", "t", false), rated(1.0), at(0))
            .unwrap();
    }
    assert_eq!(pop_all(&mut lanes, at(0)).len(), 1);
    let _ = lanes
        .push(job(0, 4, "a", "t", false), 1_000, at(0))
        .unwrap();
    assert_eq!(pop_all(&mut lanes, at(0)).len(), 4, "rate lifted");
}

#[test]
fn pop_ready_uses_the_latest_time_passed_in() {
    let mut lanes = Lanes::new(big()).unwrap();
    for o in 0..3 {
        let _ = lanes
            .push_with(job(0, o, "a", "t", false), rated(1.0), at(0))
            .unwrap();
    }
    assert!(lanes.pop_ready().is_some());
    assert_eq!(lanes.pop_ready(), None);
    // A clock that goes backwards refills nothing.
    assert_eq!(lanes.pop_ready_at(at(0)), None);
    assert!(lanes.pop_ready_at(at(1_000)).is_some());
    assert_eq!(lanes.pop_ready_at(at(500)), None);
}

// ---- property tests ----

/// Rates as (numerator, denominator) per second, so bounds are checked exactly.
const RATES: &[(u64, u64)] = &[(1, 2), (1, 1), (2, 1), (5, 2), (3, 1), (5, 1), (10, 1)];

#[derive(Debug, Clone)]
enum Op {
    Push { sub: u8, retry: bool, mif: u8 },
    Pop,
    Complete(usize),
    Advance(u16),
    Drop(u8),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            5 => (0u8..5, any::<bool>(), 1u8..4).prop_map(|(sub, retry, mif)| Op::Push { sub, retry, mif }),
            5 => Just(Op::Pop),
            3 => any::<usize>().prop_map(Op::Complete),
            3 => (0u16..700).prop_map(Op::Advance),
            1 => (0u8..2).prop_map(Op::Drop),
        ],
        0..250,
    )
}

/// Per subscription: `None` unlimited, or an index into `RATES`.
fn sub_rates() -> impl Strategy<Value = Vec<Option<usize>>> {
    prop::collection::vec(prop::option::of(0..RATES.len()), 5)
}

fn limits() -> impl Strategy<Value = LaneLimits> {
    (1u32..8, 1u32..5, 1u8..=100).prop_map(|(global, tenant, pct)| LaneLimits {
        global_in_flight: global,
        tenant_in_flight: tenant,
        retry_share_percent: pct,
        overflow_share_percent: 100,
        ..big()
    })
}

fn rate_f64(i: usize) -> f64 {
    let (n, d) = RATES[i];
    n as f64 / d as f64
}

/// The token-count form of the bucket, in nanoseconds of credit (one token is one
/// interval), kept independently of the TAT form under test.
#[derive(Debug, Clone)]
struct ModelBucket {
    interval: u128,
    capacity: u128,
    credit: u128,
    last: u128,
}

impl ModelBucket {
    fn new(i: usize) -> Self {
        let (n, d) = RATES[i];
        let interval = (u128::from(d) * 1_000_000_000).div_ceil(u128::from(n));
        let capacity = u128::from(n.div_ceil(d));
        Self {
            interval,
            capacity,
            credit: capacity * interval,
            last: 0,
        }
    }

    fn refill(&mut self, now: u128) {
        self.credit = (self.credit + (now - self.last)).min(self.capacity * self.interval);
        self.last = now;
    }

    fn allows(&self) -> bool {
        self.credit >= self.interval
    }
}

struct Model {
    limits: LaneLimits,
    rates: Vec<Option<usize>>,
    mif: BTreeMap<u8, u32>,
    lanes: BTreeMap<(u8, bool), VecDeque<(u8, i64)>>,
    buckets: BTreeMap<u8, ModelBucket>,
    in_flight: Vec<Started<u8>>,
    /// Start times (ms) per subscription.
    starts: BTreeMap<u8, Vec<u64>>,
    now_ms: u64,
}

fn sub_of(job: &Job<u8>) -> u8 {
    job.lane.subscription_id[1..].parse().unwrap()
}

fn tenant(sub: u8) -> String {
    format!("t{}", sub % 2)
}

impl Model {
    fn now_ns(&self) -> u128 {
        u128::from(self.now_ms) * 1_000_000
    }

    fn caps_allow(&self, sub: u8, retry: bool) -> bool {
        let count =
            |f: &dyn Fn(&Job<u8>) -> bool| self.in_flight.iter().filter(|s| f(&s.job)).count();
        self.in_flight.len() < self.limits.global_in_flight as usize
            && count(&|j| sub_of(j) == sub) < self.mif[&sub] as usize
            && count(&|j| j.tenant_id == tenant(sub)) < self.limits.tenant_in_flight as usize
            && (!retry || count(&|j| j.retry) < self.limits.retry_slots() as usize)
    }

    fn rate_allows(&mut self, sub: u8) -> bool {
        let now = self.now_ns();
        match self.buckets.get_mut(&sub) {
            Some(b) => {
                b.refill(now);
                b.allows()
            }
            None => true,
        }
    }

    fn popped(&mut self, got: Option<Started<u8>>) -> Result<(), TestCaseError> {
        match got {
            Some(s) => {
                let sub = sub_of(&s.job);
                prop_assert!(self.caps_allow(sub, s.job.retry), "past a cap: {:?}", s.job);
                prop_assert!(self.rate_allows(sub), "past the rate: {:?}", s.job);
                if let Some(b) = self.buckets.get_mut(&sub) {
                    b.credit -= b.interval;
                }
                let lane = self.lanes.get_mut(&(sub, s.job.retry)).unwrap();
                prop_assert_eq!(lane.pop_front(), Some((s.job.partition, s.job.offset)));
                self.lanes.retain(|_, q| !q.is_empty());
                self.starts.entry(sub).or_default().push(self.now_ms);
                self.in_flight.push(s);
            }
            None => {
                // Never idle while some lane could start: a rate-limited lane
                // never holds up another one.
                let heads: Vec<(u8, bool)> = self.lanes.keys().copied().collect();
                for (sub, retry) in heads {
                    let can = self.caps_allow(sub, retry) && self.rate_allows(sub);
                    prop_assert!(!can, "idle although s{sub} (retry {retry}) could start");
                }
            }
        }
        Ok(())
    }

    /// In any window [t, t + w]: starts ≤ capacity + rate × w, checked exactly.
    fn check_windows(&self) -> Result<(), TestCaseError> {
        for (sub, times) in &self.starts {
            let Some(i) = self.rates[usize::from(*sub)] else {
                continue;
            };
            let (n, d) = RATES[i];
            let capacity = n.div_ceil(d);
            for a in 0..times.len() {
                for b in a..times.len() {
                    let count = (b - a + 1) as u64;
                    let w_ms = times[b] - times[a];
                    // count ≤ capacity + (n / d) × w_ms / 1000
                    prop_assert!(
                        count.saturating_sub(capacity) * d * 1000 <= n * w_ms,
                        "s{} started {} times in {} ms at {}/{} per s",
                        sub,
                        count,
                        w_ms,
                        n,
                        d
                    );
                }
            }
        }
        Ok(())
    }
}

fn run(limits: LaneLimits, rates: Vec<Option<usize>>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut lanes = Lanes::new(limits.clone()).unwrap();
    let mut m = Model {
        limits,
        rates: rates.clone(),
        mif: BTreeMap::new(),
        lanes: BTreeMap::new(),
        buckets: BTreeMap::new(),
        in_flight: Vec::new(),
        starts: BTreeMap::new(),
        now_ms: 0,
    };
    let mut next_offset = [0i64; 2];
    for op in ops {
        match op {
            Op::Push { sub, retry, mif } => {
                let partition = u8::from(retry);
                let offset = next_offset[usize::from(partition)];
                next_offset[usize::from(partition)] += 1;
                let rate = rates[usize::from(sub)];
                let settings = LaneSettings {
                    max_in_flight: mif.into(),
                    rate_per_s: rate.map(rate_f64),
                };
                let j = job(partition, offset, &format!("s{sub}"), &tenant(sub), retry);
                let _ = lanes.push_with(j, settings, at(m.now_ms)).unwrap();
                m.mif.insert(sub, mif.into());
                if let Some(i) = rate {
                    let now = m.now_ns();
                    m.buckets.entry(sub).or_insert_with(|| {
                        let mut b = ModelBucket::new(i);
                        b.last = now;
                        b
                    });
                }
                m.lanes
                    .entry((sub, retry))
                    .or_default()
                    .push_back((partition, offset));
            }
            Op::Pop => {
                let got = lanes.pop_ready_at(at(m.now_ms));
                m.popped(got)?;
            }
            Op::Complete(i) => {
                if !m.in_flight.is_empty() {
                    let s = m.in_flight.swap_remove(i % m.in_flight.len());
                    lanes.complete(&s).unwrap();
                }
            }
            Op::Advance(ms) => m.now_ms += u64::from(ms),
            Op::Drop(p) => {
                let _ = lanes.drop_partition(&p);
                for q in m.lanes.values_mut() {
                    q.retain(|(qp, _)| *qp != p);
                }
                m.lanes.retain(|_, q| !q.is_empty());
            }
        }
        prop_assert_eq!(lanes.in_flight(), m.in_flight.len());
    }
    // Drain: with nothing in flight, either something starts now or the next rate
    // wakeup is in the future and something starts then.
    while !lanes.is_idle() {
        for s in std::mem::take(&mut m.in_flight) {
            lanes.complete(&s).unwrap();
        }
        loop {
            let got = lanes.pop_ready_at(at(m.now_ms));
            let none = got.is_none();
            m.popped(got)?;
            if none {
                break;
            }
        }
        if m.in_flight.is_empty() && !lanes.is_idle() {
            let wake = lanes.next_rate_wakeup();
            prop_assert!(wake.is_some(), "stuck with work queued and no wakeup");
            let wake = wake.unwrap();
            prop_assert!(wake > at(m.now_ms), "wakeup not in the future");
            // Wake no earlier than asked (ms resolution: round up).
            let ns = wake.duration_since(UNIX_EPOCH).unwrap().as_nanos();
            m.now_ms = u64::try_from(ns.div_ceil(1_000_000)).unwrap();
            let got = lanes.pop_ready_at(at(m.now_ms));
            prop_assert!(got.is_some(), "nothing started at the wakeup");
            m.popped(got)?;
        }
    }
    m.check_windows()
}

/// Applies the same ops to a `Lanes` driven through the old calls and one driven
/// through `push_with` (no rate), both popping at the same arbitrary times (time
/// matters without rates too: the deficit round robin charges slot time).
fn same_without_rates(
    limits: LaneLimits,
    ops: Vec<Op>,
    times: Vec<u64>,
) -> Result<(), TestCaseError> {
    let mut old = Lanes::new(limits.clone()).unwrap();
    let mut new = Lanes::new(limits).unwrap();
    let mut in_flight: Vec<Started<u8>> = Vec::new();
    let mut next_offset = [0i64; 2];
    for (k, op) in ops.into_iter().enumerate() {
        let now = at(times[k % times.len()]);
        match op {
            Op::Push { sub, retry, mif } => {
                let partition = u8::from(retry);
                let offset = next_offset[usize::from(partition)];
                next_offset[usize::from(partition)] += 1;
                let j = job(partition, offset, &format!("s{sub}"), &tenant(sub), retry);
                let a = old.push(j.clone(), mif.into(), now).unwrap();
                let b = new
                    .push_with(j, LaneSettings::unlimited_rate(mif.into()), now)
                    .unwrap();
                prop_assert_eq!(a, b);
            }
            Op::Pop => {
                let a = old.pop_ready_at(now);
                let b = new.pop_ready_at(now);
                prop_assert_eq!(&a, &b);
                in_flight.extend(a);
            }
            Op::Complete(i) => {
                if !in_flight.is_empty() {
                    let s = in_flight.swap_remove(i % in_flight.len());
                    old.complete(&s).unwrap();
                    new.complete(&s).unwrap();
                }
            }
            Op::Advance(_) => {}
            Op::Drop(p) => prop_assert_eq!(old.drop_partition(&p), new.drop_partition(&p)),
        }
        prop_assert_eq!(new.next_rate_wakeup(), None);
        prop_assert_eq!(old.in_flight(), new.in_flight());
        prop_assert_eq!(old.lane_count(), new.lane_count());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn starts_per_window_never_exceed_capacity_plus_rate_times_window_and_no_lane_waits_on_another(
        limits in limits(),
        rates in sub_rates(),
        ops in ops(),
    ) {
        run(limits, rates, ops)?;
    }

    #[test]
    fn unlimited_lanes_behave_exactly_as_before(
        limits in limits(),
        ops in ops(),
        times in prop::collection::vec(0u64..10_000, 1..20),
    ) {
        same_without_rates(limits, ops, times)?;
    }
}

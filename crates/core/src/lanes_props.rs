//! Property tests of `Lanes` against a simple model.

use std::collections::VecDeque;

use super::*;

/// The one retry-tier partition of the model (a partition is of one class).
const RETRY_PARTITION: u8 = 2;

#[derive(Debug, Clone)]
enum Op {
    Push {
        partition: u8,
        sub: u8,
        retry: bool,
        bytes: u16,
        mif: u8,
    },
    Pop,
    Complete(usize),
    Drop(u8),
    Resume,
}

fn op(max_mif: u8) -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..3, 0u8..6, any::<bool>(), 1u16..200, 1u8..=max_mif)
            .prop_map(|(partition, sub, _, bytes, mif)| Op::Push {
                partition, sub, retry: partition == RETRY_PARTITION, bytes, mif,
            }),
        4 => Just(Op::Pop),
        3 => any::<usize>().prop_map(Op::Complete),
        1 => (0u8..3).prop_map(Op::Drop),
        1 => Just(Op::Resume),
    ]
}

fn limits() -> impl Strategy<Value = LaneLimits> {
    (
        1u32..8,
        1u32..6,
        1u8..=100,
        1usize..10,
        1usize..2000,
        1usize..20,
        1usize..4000,
        (1usize..20, 1usize..4000),
    )
        .prop_map(
            |(global, tenant, pct, pr, pb, tr, tb, (rr, rb))| LaneLimits {
                global_in_flight: global,
                tenant_in_flight: tenant,
                retry_share_percent: pct,
                overflow_share_percent: 100,
                partition_records: pr,
                partition_bytes: pb,
                total_records: tr,
                total_bytes: tb,
                retry_total_records: rr,
                retry_total_bytes: rb,
                tenant_weights: TenantWeights::NONE,
            },
        )
}

fn sub_name(sub: u8) -> String {
    format!("s{sub}")
}

fn tenant_of(sub: u8) -> String {
    format!("t{}", sub % 3)
}

/// What the scheduler should be doing, kept the obvious way.
#[derive(Default)]
struct Model {
    limits: Option<LaneLimits>,
    lanes: BTreeMap<(String, bool), VecDeque<(u8, i64)>>,
    mif: BTreeMap<String, u32>,
    next_offset: BTreeMap<u8, i64>,
    in_flight: Vec<Started<u8>>,
    held: BTreeMap<u8, (usize, usize)>,
    bytes_of: BTreeMap<(u8, i64), usize>,
    paused: BTreeSet<u8>,
    pushed: BTreeSet<(u8, i64)>,
    started: BTreeSet<(u8, i64)>,
    dropped: BTreeSet<(u8, i64)>,
}

impl Model {
    fn limits(&self) -> &LaneLimits {
        self.limits.as_ref().unwrap()
    }

    fn retry_slots(&self) -> usize {
        let l = self.limits();
        // The smallest slot count whose share of the global cap reaches the percentage.
        let wanted = l.global_in_flight as usize * l.retry_share_percent as usize;
        (1..).find(|n| n * 100 >= wanted).unwrap()
    }

    fn may_start(&self, job: &Job<u8>) -> bool {
        let l = self.limits();
        let count =
            |f: &dyn Fn(&Job<u8>) -> bool| self.in_flight.iter().filter(|s| f(&s.job)).count();
        let sub = count(&|j| j.lane == job.lane);
        let tenant = count(&|j| j.tenant_id == job.tenant_id);
        let retries = count(&|j| j.retry);
        self.in_flight.len() < l.global_in_flight as usize
            && sub < self.mif[&job.lane.subscription_id] as usize
            && tenant < l.tenant_in_flight as usize
            && (!job.retry || retries < self.retry_slots())
    }

    fn totals(&self) -> (usize, usize) {
        self.held
            .values()
            .fold((0, 0), |(r, b), (r2, b2)| (r + r2, b + b2))
    }

    /// Held by the partitions of one class: retries (partition [`RETRY_PARTITION`]) or first attempts.
    fn class_totals(&self, retry: bool) -> (usize, usize) {
        self.held
            .iter()
            .filter(|(p, _)| (**p == RETRY_PARTITION) == retry)
            .fold((0, 0), |(r, b), (_, (r2, b2))| (r + r2, b + b2))
    }

    fn release(&mut self, partition: u8, offset: i64) {
        let bytes = self.bytes_of[&(partition, offset)];
        let held = self.held.get_mut(&partition).unwrap();
        held.0 -= 1;
        held.1 -= bytes;
    }

    /// Applies a pop result, checking it against the model.
    fn popped(&mut self, got: Option<Started<u8>>) -> Result<(), TestCaseError> {
        match got {
            Some(s) => {
                prop_assert!(self.may_start(&s.job), "started past a cap: {:?}", s.job);
                let lane = self
                    .lanes
                    .get_mut(&(s.job.lane.subscription_id.clone(), s.job.retry))
                    .unwrap();
                prop_assert_eq!(
                    lane.pop_front(),
                    Some((s.job.partition, s.job.offset)),
                    "not the lane's head"
                );
                self.lanes.retain(|_, q| !q.is_empty());
                prop_assert!(
                    self.started.insert((s.job.partition, s.job.offset)),
                    "started twice"
                );
                self.in_flight.push(s);
            }
            None => {
                for ((sub, retry), queue) in &self.lanes {
                    let (partition, offset) = queue[0];
                    let sub_id: u8 = sub[1..].parse().unwrap();
                    let head = Job {
                        partition,
                        offset,
                        lane: LaneKey {
                            subscription_id: sub.clone(),
                        },
                        tenant_id: tenant_of(sub_id),
                        retry: *retry,
                        overflow: false,
                        bytes: 0,
                    };
                    prop_assert!(!self.may_start(&head), "idle although {head:?} could start");
                }
            }
        }
        Ok(())
    }

    fn check(&self, lanes: &Lanes<u8>) -> Result<(), TestCaseError> {
        let l = self.limits();
        prop_assert_eq!(lanes.in_flight(), self.in_flight.len());
        prop_assert!(lanes.in_flight() <= l.global_in_flight as usize);
        let retries = self.in_flight.iter().filter(|s| s.job.retry).count();
        prop_assert_eq!(lanes.retry_in_flight() as usize, retries);
        prop_assert!(retries <= self.retry_slots());
        for t in 0..3 {
            let tenant = format!("t{t}");
            let n = self
                .in_flight
                .iter()
                .filter(|s| s.job.tenant_id == tenant)
                .count();
            prop_assert_eq!(lanes.tenant_in_flight(&tenant) as usize, n);
            prop_assert!(n <= l.tenant_in_flight as usize);
        }
        let (records, bytes) = self.totals();
        prop_assert_eq!(
            (lanes.buffered_records(), lanes.buffered_bytes()),
            (records, bytes)
        );
        prop_assert_eq!(lanes.queued_records(), records - self.in_flight.len());
        prop_assert_eq!(lanes.lane_count(), self.lanes.len());
        for p in 0..3 {
            let held = self.held.get(&p).copied().unwrap_or((0, 0));
            prop_assert_eq!(lanes.partition_buffered(&p), held);
            prop_assert_eq!(lanes.is_paused(&p), self.paused.contains(&p));
        }
        Ok(())
    }
}

fn run(limits: LaneLimits, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut lanes = Lanes::new(limits.clone()).unwrap();
    let mut m = Model {
        limits: Some(limits.clone()),
        ..Model::default()
    };
    for op in ops {
        match op {
            Op::Push {
                partition,
                sub,
                retry,
                bytes,
                mif,
            } => {
                let offset = *m
                    .next_offset
                    .entry(partition)
                    .and_modify(|o| *o += 1)
                    .or_insert(0);
                let j = job(
                    partition,
                    offset,
                    &sub_name(sub),
                    &tenant_of(sub),
                    retry,
                    bytes.into(),
                );
                let flow = lanes.push(j, mif.into(), at(offset as u64)).unwrap();
                m.mif.insert(sub_name(sub), mif.into());
                m.lanes
                    .entry((sub_name(sub), retry))
                    .or_default()
                    .push_back((partition, offset));
                m.pushed.insert((partition, offset));
                m.bytes_of.insert((partition, offset), bytes.into());
                let held = m.held.entry(partition).or_default();
                held.0 += 1;
                held.1 += usize::from(bytes);
                let (pr, pb) = *held;
                let (tr, tb) = m.class_totals(retry);
                let (tr_max, tb_max) = limits.class_totals(retry);
                if pr >= limits.partition_records
                    || pb >= limits.partition_bytes
                    || tr >= tr_max
                    || tb >= tb_max
                {
                    m.paused.insert(partition);
                }
                prop_assert_eq!(flow == Flow::Pause, m.paused.contains(&partition));
            }
            Op::Pop => m.popped(lanes.pop_ready())?,
            Op::Complete(i) => {
                if !m.in_flight.is_empty() {
                    let s = m.in_flight.swap_remove(i % m.in_flight.len());
                    lanes.complete(&s).unwrap();
                    m.release(s.job.partition, s.job.offset);
                }
            }
            Op::Drop(p) => {
                let got = lanes.drop_partition(&p);
                let mut expected = Vec::new();
                for queue in m.lanes.values_mut() {
                    expected.extend(queue.iter().filter(|(qp, _)| *qp == p).map(|(_, o)| *o));
                    queue.retain(|(qp, _)| *qp != p);
                }
                m.lanes.retain(|_, q| !q.is_empty());
                expected.sort_unstable();
                prop_assert_eq!(&got, &expected);
                for o in got {
                    m.release(p, o);
                    m.dropped.insert((p, o));
                }
                m.paused.remove(&p);
            }
            Op::Resume => {
                let expected: Vec<u8> = m
                    .paused
                    .iter()
                    .copied()
                    .filter(|p| {
                        let retry = *p == RETRY_PARTITION;
                        let (tr, tb) = m.class_totals(retry);
                        let (tr_max, tb_max) = limits.class_totals(retry);
                        let (r, b) = m.held.get(p).copied().unwrap_or((0, 0));
                        r <= limits.partition_records / 2
                            && b <= limits.partition_bytes / 2
                            && tr <= tr_max / 2
                            && tb <= tb_max / 2
                    })
                    .collect();
                for p in 0..3 {
                    prop_assert_eq!(lanes.should_resume(&p), expected.contains(&p));
                }
                prop_assert_eq!(lanes.take_resumable(), expected.clone());
                for p in expected {
                    m.paused.remove(&p);
                }
            }
        }
        m.check(&lanes)?;
    }
    // Drain: with nothing in flight something must start, so this terminates, and
    // every pushed record is accounted for exactly once.
    while !lanes.is_idle() {
        for s in std::mem::take(&mut m.in_flight) {
            lanes.complete(&s).unwrap();
            m.release(s.job.partition, s.job.offset);
        }
        let before = m.started.len();
        while let Some(s) = lanes.pop_ready() {
            m.popped(Some(s))?;
        }
        m.popped(None)?;
        m.check(&lanes)?;
        prop_assert!(
            m.started.len() > before || lanes.is_idle(),
            "stuck with work queued"
        );
    }
    prop_assert!(m.started.is_disjoint(&m.dropped));
    let accounted: BTreeSet<_> = m.started.union(&m.dropped).copied().collect();
    prop_assert_eq!(accounted, m.pushed);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn caps_hold_lanes_stay_fifo_and_nothing_is_lost(
        limits in limits(),
        ops in prop::collection::vec(op(4), 0..200),
    ) {
        run(limits, ops)?;
    }

    #[test]
    fn max_in_flight_one_starts_each_lane_in_push_order_one_at_a_time(
        limits in limits(),
        ops in prop::collection::vec(op(1), 0..200),
    ) {
        // `run` checks each start is its lane's head and that the subscription had
        // nothing in flight (cap 1) when it started.
        run(limits, ops)?;
    }

    #[test]
    fn a_new_lane_starts_within_lane_count_pops(
        whale in 1_000usize..10_000,
        sizes in prop::collection::vec(1usize..50, 0..20),
        mifs in prop::collection::vec(1u32..4, 20),
        warmup in 0usize..60,
        completions in prop::collection::vec(any::<bool>(), 64),
    ) {
        let mut lanes = Lanes::new(caps(1_000_000, 1_000_000, 100)).unwrap();
        for o in 0..whale {
            let _ = lanes.push(job(0, o as i64, "whale", "whale", false, 1), 1_000_000, at(0)).unwrap();
        }
        let mut offset = 0;
        for (i, size) in sizes.iter().enumerate() {
            for _ in 0..*size {
                let _ = lanes.push(job(1, offset, &format!("l{i}"), &format!("t{i}"), false, 1), mifs[i], at(0)).unwrap();
                offset += 1;
            }
        }
        let mut in_flight = Vec::new();
        for _ in 0..warmup {
            in_flight.extend(lanes.pop_ready());
        }
        let _ = lanes.push(job(2, 0, "new", "new", false, 1), 1, at(0)).unwrap();
        let bound = lanes.lane_count();
        let mut pops = 0;
        loop {
            if completions[pops % completions.len()] {
                for s in in_flight.drain(..) {
                    lanes.complete(&s).unwrap();
                }
            }
            let s = lanes.pop_ready().expect("the new lane can always start");
            pops += 1;
            if s.job.lane.subscription_id == "new" {
                break;
            }
            in_flight.push(s);
        }
        prop_assert!(pops <= bound, "{} pops with {} lanes", pops, bound);
    }
}

//! The dispatcher's fair scheduler: a record starts only when every cap allows it
//! (subscription `max_in_flight`, tenant, global, retry share, overflow share),
//! each lane starts its
//! records in push order, tenants take turns by deficit round robin charged in
//! worker-seconds (the time each attempt held a slot, over the tenant's weight; see
//! [`crate::fair`]) so a tenant with slow or many attempts never starves one with
//! few, and buffering is bounded by backpressure — never by dropping: every
//! pushed record is started, or returned by [`Lanes::drop_partition`], exactly once.
//!
//! Buffering has two budgets: first attempts (`deliveries`, `deliveries.strict`)
//! count against `total_records`/`total_bytes`, retries (the tiers) against
//! `retry_total_records`/`retry_total_bytes`. A partition is paused by its own
//! limits or its class's totals only, so no volume of due retries pauses a
//! first-attempt partition, and no first-attempt flood pauses a tier.
//!
//! Lanes are keyed by subscription *and* by first-attempt/retry: a subscription has
//! up to two FIFO lanes sharing its `max_in_flight`. Keeping retries in their own lane
//! means a retry waiting for the retry share never holds up a first attempt behind it
//! (docs/design.md#lanes-caps-and-fairness: a backlog of failing retries
//! never delays first attempts). At
//! `max_in_flight = 1` first attempts still start strictly in order, one at a time.
//!
//! A subscription may also have a rate limit ([`TokenBucket`], shared by its two
//! lanes): in any window of length `w` it starts at most `capacity + rate × w`
//! records. A lane whose bucket is empty is skipped by the round robin like a lane
//! at its cap, so other lanes keep flowing; [`Lanes::next_rate_wakeup`] says when
//! it may start again. Lanes without a rate behave exactly as if rates did not exist.
//!
//! A started job can be given back to the *front* of its lane, not to start again
//! before a time ([`Lanes::defer`]): its slots are freed meanwhile, its buffer share
//! stays held, and nothing behind it in its lane starts first. This is how a strict
//! subscription's head waits out its backoff in place (`ordering = strict`).
//!
//! Records read back from an overflow lane topic (`Job::overflow`: a hot
//! subscription's backlog moved out of `deliveries`) draw on their own share of
//! the global slots, `overflow_share_percent`, as retries draw on theirs: however
//! many subscriptions are promoted, together they never hold more of a replica's
//! slots than that share, and the rest stays for everyone else.

use std::collections::{hash_map::Entry, BTreeMap, HashMap, VecDeque};
use std::time::{Duration, SystemTime};

use crate::fair::{Decayed, SubscriptionUsage, TenantUsage, TenantWeights, Usage, QUANTUM};
use crate::rate::{RateLimit, TokenBucket};

/// How often, at most, buckets of subscriptions that hold nothing any more
/// are forgotten once full again (memory only; see `Lanes::tick`).
const BUCKET_PRUNE_EVERY: Duration = Duration::from_secs(1);

/// Identifies a lane: the subscription whose records it holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaneKey {
    pub subscription_id: String,
}

/// A buffered record, as the scheduler sees it. `P` names a partition, e.g.
/// `(topic_index, partition)`; (`partition`, `offset`) must be unique while held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job<P> {
    pub partition: P,
    pub offset: i64,
    pub lane: LaneKey,
    pub tenant_id: String,
    /// From a retry tier (counts against the retry share) rather than the ready queue.
    pub retry: bool,
    /// From an overflow lane topic (counts against the overflow share).
    pub overflow: bool,
    /// Memory held while buffered (payload size is a fine estimate).
    pub bytes: usize,
}

/// A job handed out by [`Lanes::pop_ready`]; give it back to [`Lanes::complete`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started<P> {
    pub job: Job<P>,
    pub enqueued_at: SystemTime,
}

/// What a push asks of the consumer for the record's partition.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Pause fetching this partition; [`Lanes::take_resumable`] says when to resume.
    Pause,
}

/// What a push says about its subscription; the latest push sets both.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaneSettings {
    /// Cap on the subscription's records in flight (0 is treated as 1).
    pub max_in_flight: u32,
    /// Cap on starts per second; `None`, non-positive or non-finite is unlimited.
    pub rate_per_s: Option<f64>,
}

impl LaneSettings {
    pub fn unlimited_rate(max_in_flight: u32) -> Self {
        Self {
            max_in_flight,
            rate_per_s: None,
        }
    }
}

/// Caps, buffer bounds and tenant weights. Buffered = queued + in flight (memory held).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneLimits {
    pub global_in_flight: u32,
    pub tenant_in_flight: u32,
    /// Retries may hold at most `ceil(global_in_flight × pct / 100)` slots (1..=100).
    pub retry_share_percent: u8,
    /// Records of overflow lanes may hold at most
    /// `ceil(global_in_flight × pct / 100)` slots (1..=100).
    pub overflow_share_percent: u8,
    pub partition_records: usize,
    pub partition_bytes: usize,
    /// First attempts' budget: records held from non-retry partitions in all.
    pub total_records: usize,
    pub total_bytes: usize,
    /// Retries' budget: records held from retry-tier partitions in all.
    pub retry_total_records: usize,
    pub retry_total_bytes: usize,
    /// Deficit round robin weights per tenant (default 1).
    pub tenant_weights: TenantWeights,
}

impl Default for LaneLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl LaneLimits {
    /// [`DEFAULT`](Self::DEFAULT)'s `global_in_flight`, on its own for the
    /// consts that follow it (the HTTP pool's idle connections per host):
    /// `DEFAULT` itself cannot be read in a const, as it owns the weights.
    pub const DEFAULT_GLOBAL_IN_FLIGHT: u32 = 256;

    /// The product's limits: the dispatcher's flags (`--global-in-flight`,
    /// `--partition-buffer-records`, ...) default to these fields, so the flags
    /// and the library cannot disagree.
    pub const DEFAULT: Self = Self {
        global_in_flight: Self::DEFAULT_GLOBAL_IN_FLIGHT,
        tenant_in_flight: 32,
        retry_share_percent: 50,
        overflow_share_percent: 50,
        partition_records: 5_000,
        partition_bytes: 32 << 20,
        total_records: 50_000,
        total_bytes: 256 << 20,
        retry_total_records: 20_000,
        retry_total_bytes: 128 << 20,
        tenant_weights: TenantWeights::NONE,
    };

    /// (records, bytes): the totals of retries' budget (`retry`) or first attempts'.
    pub fn class_totals(&self, retry: bool) -> (usize, usize) {
        if retry {
            (self.retry_total_records, self.retry_total_bytes)
        } else {
            (self.total_records, self.total_bytes)
        }
    }

    /// Slots retries may occupy: `ceil(global × share)`, at least 1.
    pub fn retry_slots(&self) -> u32 {
        self.share_slots(self.retry_share_percent)
    }

    /// Slots records of overflow lanes may occupy: `ceil(global × share)`, at least 1.
    pub fn overflow_slots(&self) -> u32 {
        self.share_slots(self.overflow_share_percent)
    }

    fn share_slots(&self, percent: u8) -> u32 {
        let slots = (u64::from(self.global_in_flight) * u64::from(percent)).div_ceil(100);
        u32::try_from(slots).unwrap_or(u32::MAX).max(1)
    }

    pub fn validate(&self) -> Result<(), LaneError> {
        let positive = [
            ("global_in_flight", self.global_in_flight as usize),
            ("tenant_in_flight", self.tenant_in_flight as usize),
            ("partition_records", self.partition_records),
            ("partition_bytes", self.partition_bytes),
            ("total_records", self.total_records),
            ("total_bytes", self.total_bytes),
            ("retry_total_records", self.retry_total_records),
            ("retry_total_bytes", self.retry_total_bytes),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(LaneError::InvalidLimit {
                field,
                requirement: "at least 1",
            });
        }
        for (field, percent) in [
            ("retry_share_percent", self.retry_share_percent),
            ("overflow_share_percent", self.overflow_share_percent),
        ] {
            if !(1..=100).contains(&percent) {
                return Err(LaneError::InvalidLimit {
                    field,
                    requirement: "between 1 and 100",
                });
            }
        }
        if !self.tenant_weights.valid() {
            return Err(LaneError::InvalidLimit {
                field: "tenant_weights",
                requirement: "each between 0.01 and 100",
            });
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaneError {
    #[error("lane limit `{field}` must be {requirement}")]
    InvalidLimit {
        field: &'static str,
        requirement: &'static str,
    },
    #[error("offset {offset} of this partition is already queued or in flight")]
    Duplicate { offset: i64 },
    #[error("offset {offset} of this partition is not in flight")]
    NotInFlight { offset: i64 },
}

/// (subscription, is_retry): one FIFO lane.
type LaneId = (LaneKey, bool);

/// One FIFO lane, in the round robin of the tenant of the record that opened it.
#[derive(Debug)]
struct Lane<P> {
    queue: VecDeque<Started<P>>,
}

#[derive(Debug, Default)]
struct SubState {
    in_flight: u32,
    max_in_flight: u32,
    queued: usize,
    /// The tenant of its latest pushed record (for [`Lanes::usage`]).
    tenant: String,
}

/// A tenant's deficit round robin account; kept while it has queued lanes or
/// records in flight (their charges are still to come).
#[derive(Debug)]
struct Account {
    /// Worker-seconds it may still start against; it starts only while positive.
    deficit: f64,
    /// `QUANTUM × weight`, in seconds: its credit per round and its credit cap.
    quantum: f64,
    /// Round-robin order of its non-empty lanes.
    lanes: VecDeque<LaneId>,
}

#[derive(Debug, Default)]
struct PartitionState {
    /// Queued (not started) offsets with their enqueue time.
    queued: BTreeMap<i64, SystemTime>,
    /// Held records and bytes: queued + in flight.
    records: usize,
    bytes: usize,
    /// We asked the consumer to pause it and have not yet said resume.
    paused: bool,
    /// A retry-tier partition (its records count against the retry budget).
    retry: bool,
}

#[derive(Debug)]
struct InFlight {
    subscription: String,
    tenant: String,
    retry: bool,
    overflow: bool,
    bytes: usize,
    /// Up to when its slot time has been charged (from its start).
    charged_until: SystemTime,
}

/// Records and bytes held by one class (first attempts or retries).
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    records: usize,
    bytes: usize,
}

/// The scheduler. Pure state: the engine pushes fetched records, pops what may start,
/// completes what finished, and pauses/resumes partitions as told.
#[derive(Debug)]
pub struct Lanes<P> {
    limits: LaneLimits,
    retry_slots: u32,
    overflow_slots: u32,
    lanes: HashMap<LaneId, Lane<P>>,
    /// Round-robin order of the tenants with queued lanes: exactly the accounts
    /// whose `lanes` is non-empty.
    ring: VecDeque<String>,
    accounts: HashMap<String, Account>,
    subs: HashMap<String, SubState>,
    tenants: HashMap<String, u32>,
    partitions: BTreeMap<P, PartitionState>,
    in_flight: BTreeMap<(P, i64), InFlight>,
    retry_in_flight: u32,
    overflow_in_flight: u32,
    /// Held per class: `[first attempts, retries]`.
    held: [Held; 2],
    /// Rate-limited subscriptions' buckets. A bucket outlives its subscription's
    /// records until it is full again, so draining a lane never grants a new burst.
    buckets: HashMap<String, TokenBucket>,
    /// The latest `now` passed in; rate decisions never see time go backwards.
    clock: Option<SystemTime>,
    /// When [`tick`](Self::tick) last forgot idle full buckets.
    pruned_at: Option<SystemTime>,
    /// Lanes whose head was given back by [`defer`](Self::defer): the head's
    /// (partition, offset) and the time before which it may not start.
    deferred: HashMap<LaneId, (P, i64, SystemTime)>,
    /// Decayed worker-seconds charged per tenant and per subscription.
    tenant_usage: HashMap<String, Decayed>,
    sub_usage: HashMap<String, Decayed>,
    /// Usage maps are swept of spent entries when they grow past this.
    usage_sweep_at: usize,
}

fn class(retry: bool) -> usize {
    usize::from(retry)
}

impl<P: Ord + Clone> Lanes<P> {
    pub fn new(limits: LaneLimits) -> Result<Self, LaneError> {
        limits.validate()?;
        Ok(Self {
            retry_slots: limits.retry_slots(),
            overflow_slots: limits.overflow_slots(),
            limits,
            lanes: HashMap::new(),
            ring: VecDeque::new(),
            accounts: HashMap::new(),
            subs: HashMap::new(),
            tenants: HashMap::new(),
            partitions: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            retry_in_flight: 0,
            overflow_in_flight: 0,
            held: [Held::default(); 2],
            buckets: HashMap::new(),
            clock: None,
            pruned_at: None,
            deferred: HashMap::new(),
            tenant_usage: HashMap::new(),
            sub_usage: HashMap::new(),
            usage_sweep_at: 64,
        })
    }

    pub fn limits(&self) -> &LaneLimits {
        &self.limits
    }

    /// [`push_with`](Self::push_with) for a subscription without a rate limit.
    pub fn push(
        &mut self,
        job: Job<P>,
        max_in_flight: u32,
        now: SystemTime,
    ) -> Result<Flow, LaneError> {
        self.push_with(job, LaneSettings::unlimited_rate(max_in_flight), now)
    }

    /// Buffers a fetched record; always accepted (never dropped). `settings` are the
    /// subscription's current caps; the latest push sets them. Returns `Pause`
    /// while the partition is over its share — at or above a partition limit or
    /// its class's total (first attempts' or retries') — until
    /// [`take_resumable`](Self::take_resumable) releases it.
    pub fn push_with(
        &mut self,
        job: Job<P>,
        settings: LaneSettings,
        now: SystemTime,
    ) -> Result<Flow, LaneError> {
        let queued = self
            .partitions
            .get(&job.partition)
            .is_some_and(|p| p.queued.contains_key(&job.offset));
        if queued
            || self
                .in_flight
                .contains_key(&(job.partition.clone(), job.offset))
        {
            return Err(LaneError::Duplicate { offset: job.offset });
        }
        let part = self
            .partitions
            .entry(job.partition.clone())
            .or_insert_with(|| PartitionState {
                retry: job.retry,
                ..PartitionState::default()
            });
        part.queued.insert(job.offset, now);
        part.records += 1;
        part.bytes += job.bytes;
        let held = &mut self.held[class(part.retry)];
        held.records += 1;
        held.bytes += job.bytes;
        let limits = &self.limits;
        let (total_records, total_bytes) = limits.class_totals(part.retry);
        if part.records >= limits.partition_records
            || part.bytes >= limits.partition_bytes
            || held.records >= total_records
            || held.bytes >= total_bytes
        {
            part.paused = true;
        }
        let flow = if part.paused {
            Flow::Pause
        } else {
            Flow::Continue
        };

        let sub = self
            .subs
            .entry(job.lane.subscription_id.clone())
            .or_default();
        sub.max_in_flight = settings.max_in_flight.max(1);
        sub.queued += 1;
        if sub.tenant != job.tenant_id {
            sub.tenant.clone_from(&job.tenant_id);
        }
        match settings.rate_per_s.and_then(RateLimit::per_second) {
            Some(limit) => match self.buckets.entry(job.lane.subscription_id.clone()) {
                Entry::Occupied(mut b) => b.get_mut().set_limit(limit),
                Entry::Vacant(slot) => {
                    slot.insert(TokenBucket::new(limit));
                }
            },
            None => {
                self.buckets.remove(&job.lane.subscription_id);
            }
        }
        self.tick(now);
        let id = (job.lane.clone(), job.retry);
        let entry = Started {
            job,
            enqueued_at: now,
        };
        self.enqueue(id, entry, false);
        Ok(flow)
    }

    /// Puts `entry` at the back (or, `front`, the front) of lane `id`, opening
    /// the lane in its tenant's round robin (and the tenant in the ring) if new.
    fn enqueue(&mut self, id: LaneId, entry: Started<P>, front: bool) {
        match self.lanes.entry(id) {
            Entry::Occupied(mut lane) => {
                let queue = &mut lane.get_mut().queue;
                if front {
                    queue.push_front(entry);
                } else {
                    queue.push_back(entry);
                }
            }
            Entry::Vacant(slot) => {
                let tenant = entry.job.tenant_id.clone();
                let id = slot.key().clone();
                slot.insert(Lane {
                    queue: VecDeque::from([entry]),
                });
                let account = self.accounts.entry(tenant.clone()).or_insert_with(|| {
                    let quantum =
                        QUANTUM.as_secs_f64() * self.limits.tenant_weights.weight(&tenant);
                    Account {
                        deficit: quantum,
                        quantum,
                        lanes: VecDeque::new(),
                    }
                });
                if account.lanes.is_empty() {
                    self.ring.push_back(tenant);
                }
                account.lanes.push_back(id);
            }
        }
    }

    /// [`pop_ready_at`](Self::pop_ready_at) at the latest time passed in so far
    /// (rate limits refill nothing).
    pub fn pop_ready(&mut self) -> Option<Started<P>> {
        let now = self.clock?;
        self.pop_ready_at(now)
    }

    /// Starts the head of a lane that every cap and its subscription's rate limit
    /// allow at `now`: of the first tenant, in round-robin order, with credit
    /// (a positive deficit) and such a lane, the first such lane in its own
    /// round robin; that lane and that tenant then go to the back of their
    /// orders. When only tenants without credit could start, every tenant with
    /// queued lanes is credited rounds of its quantum until one of them may
    /// (see [`crate::fair`]). `None` when nothing queued may start now (call
    /// again after a push, a completion or at
    /// [`next_rate_wakeup`](Self::next_rate_wakeup)).
    ///
    /// Cost: tenants at their tenant cap are skipped without looking at their
    /// lanes; otherwise O(tenants + lanes looked at).
    pub fn pop_ready_at(&mut self, now: SystemTime) -> Option<Started<P>> {
        let now = self.tick(now);
        if self.in_flight.len() >= self.limits.global_in_flight as usize {
            return None;
        }
        let (tenant_index, lane_index) = match self.find_start(now, true) {
            Some(found) => found,
            None => {
                let rounds = self.rounds_to_credit(now)?;
                for account in self.accounts.values_mut() {
                    if !account.lanes.is_empty() {
                        account.deficit =
                            (account.deficit + rounds * account.quantum).min(account.quantum);
                    }
                }
                // Rounding can leave the one credited at exactly zero: start it anyway.
                self.find_start(now, true)
                    .or_else(|| self.find_start(now, false))?
            }
        };
        let tenant = self
            .ring
            .remove(tenant_index)
            .expect("index from find_start");
        let account = self
            .accounts
            .get_mut(&tenant)
            .expect("ring and accounts agree");
        let id = account
            .lanes
            .remove(lane_index)
            .expect("index from find_start");
        let lane = self.lanes.get_mut(&id).expect("accounts and lanes agree");
        let started = lane
            .queue
            .pop_front()
            .expect("lanes in a ring are non-empty");
        self.deferred.remove(&id);
        if lane.queue.is_empty() {
            self.lanes.remove(&id);
        } else {
            account.lanes.push_back(id);
        }
        if !account.lanes.is_empty() {
            self.ring.push_back(tenant);
        }

        let job = &started.job;
        if let Some(bucket) = self.buckets.get_mut(&job.lane.subscription_id) {
            let took = bucket.try_take(now);
            debug_assert!(took, "head_can_start checked the bucket");
        }
        let sub = self
            .subs
            .get_mut(&job.lane.subscription_id)
            .expect("queued job has a subscription");
        sub.in_flight += 1;
        sub.queued -= 1;
        *self.tenants.entry(job.tenant_id.clone()).or_default() += 1;
        if job.retry {
            self.retry_in_flight += 1;
        }
        if job.overflow {
            self.overflow_in_flight += 1;
        }
        if let Some(part) = self.partitions.get_mut(&job.partition) {
            part.queued.remove(&job.offset);
        }
        self.in_flight.insert(
            (job.partition.clone(), job.offset),
            InFlight {
                subscription: job.lane.subscription_id.clone(),
                tenant: job.tenant_id.clone(),
                retry: job.retry,
                overflow: job.overflow,
                bytes: job.bytes,
                charged_until: now,
            },
        );
        Some(started)
    }

    /// (ring index, lane index in its account) of the first tenant — with
    /// credit, when `credited` — having a lane whose head may start now.
    fn find_start(&self, now: SystemTime, credited: bool) -> Option<(usize, usize)> {
        self.ring.iter().enumerate().find_map(|(t, tenant)| {
            let account = self.accounts.get(tenant)?;
            if credited && account.deficit <= 0.0 {
                return None;
            }
            self.first_startable(tenant, account, now).map(|l| (t, l))
        })
    }

    fn first_startable(&self, tenant: &str, account: &Account, now: SystemTime) -> Option<usize> {
        // A tenant at its cap is skipped whole, in O(1). (A lane's records are of
        // the tenant that opened it, unless its subscription moved to another
        // tenant meanwhile; such a head waits for the old tenant to drop below
        // its cap, which its in-flight completions bring.)
        if self.tenant_in_flight(tenant) >= self.limits.tenant_in_flight {
            return None;
        }
        account
            .lanes
            .iter()
            .position(|id| self.head_can_start(id, now))
    }

    /// How many rounds of credit make the first tenant that could start (all
    /// of them in debt) creditworthy; `None` when no tenant could start.
    fn rounds_to_credit(&self, now: SystemTime) -> Option<f64> {
        self.ring
            .iter()
            .filter_map(|tenant| {
                let account = self.accounts.get(tenant)?;
                self.first_startable(tenant, account, now)?;
                Some((-account.deficit / account.quantum).floor() + 1.0)
            })
            .reduce(f64::min)
    }

    /// Advances the clock to `now` unless it is behind; returns the clock. At
    /// most once per [`BUCKET_PRUNE_EVERY`] of the clock, forgets buckets that
    /// are full and whose subscription holds nothing. Only memory depends on
    /// when: a full bucket allows exactly what a new one would. (Pruning on
    /// every call walked every bucket per push and per start: 0.1 ms a record
    /// with 1,000 rate-limited subscriptions, see `benches/lanes_rate_limited.rs`.)
    fn tick(&mut self, now: SystemTime) -> SystemTime {
        let now = self.clock.map_or(now, |c| c.max(now));
        self.clock = Some(now);
        let due = self.pruned_at.is_none_or(|at| {
            now.duration_since(at)
                .is_ok_and(|since| since >= BUCKET_PRUNE_EVERY)
        });
        if due {
            self.pruned_at = Some(now);
            let subs = &self.subs;
            self.buckets
                .retain(|sub, b| subs.contains_key(sub) || !b.is_full(now));
        }
        now
    }

    fn head_can_start(&self, id: &LaneId, now: SystemTime) -> bool {
        let Some(head) = self.lanes.get(id).and_then(|l| l.queue.front()) else {
            return false;
        };
        let job = &head.job;
        if let Some((partition, offset, not_before)) = self.deferred.get(id) {
            if *partition == job.partition && *offset == job.offset && now < *not_before {
                return false;
            }
        }
        let sub_ok = self
            .subs
            .get(&job.lane.subscription_id)
            .is_some_and(|s| s.in_flight < s.max_in_flight);
        let tenant = self.tenants.get(&job.tenant_id).copied().unwrap_or(0);
        sub_ok
            && tenant < self.limits.tenant_in_flight
            && (!job.retry || self.retry_in_flight < self.retry_slots)
            && (!job.overflow || self.overflow_in_flight < self.overflow_slots)
            && self
                .buckets
                .get(&job.lane.subscription_id)
                .is_none_or(|b| b.allows(now))
    }

    /// The earliest time a subscription with queued records, held back by its rate
    /// limit as of the latest `now`, may start one; `None` when none is held back.
    /// (It may still wait on another cap then; a completion wakes it for that.)
    pub fn next_rate_wakeup(&self) -> Option<SystemTime> {
        let now = self.clock?;
        self.rate_held()
            .map(|b| b.next_start())
            .filter(|t| *t > now)
            .min()
    }

    /// The earliest time a deferred head (see [`defer`](Self::defer)) may start,
    /// when one is still waiting as of the latest `now`.
    pub fn next_deferred_wakeup(&self) -> Option<SystemTime> {
        let now = self.clock?;
        self.deferred
            .iter()
            .filter(|(id, (partition, offset, _))| {
                self.lanes
                    .get(*id)
                    .and_then(|l| l.queue.front())
                    .is_some_and(|h| h.job.partition == *partition && h.job.offset == *offset)
            })
            .map(|(_, (_, _, t))| *t)
            .filter(|t| *t > now)
            .min()
    }

    /// Charges a started job's tenant (and subscription) for the time it has held
    /// its slot up to `now`: the engine calls it when the attempt ends, just before
    /// the slot is freed. [`complete`](Self::complete) and [`defer`](Self::defer)
    /// charge whatever is left up to the latest time the lanes were given, so a
    /// job is charged once for its whole slot time, and at least for what the
    /// lanes saw pass. Time going backwards charges nothing.
    pub fn charge(&mut self, started: &Started<P>, now: SystemTime) -> Result<(), LaneError> {
        let offset = started.job.offset;
        let info = self
            .in_flight
            .get_mut(&(started.job.partition.clone(), offset))
            .ok_or(LaneError::NotInFlight { offset })?;
        let Ok(held) = now.duration_since(info.charged_until) else {
            return Ok(());
        };
        info.charged_until = now;
        let (tenant, sub) = (info.tenant.clone(), info.subscription.clone());
        self.bill(&tenant, &sub, held.as_secs_f64(), now);
        Ok(())
    }

    /// Charges what is left of a job leaving its slot, up to the lanes' clock.
    fn settle(&mut self, info: &InFlight) {
        let Some(now) = self.clock else { return };
        if let Ok(held) = now.duration_since(info.charged_until) {
            self.bill(&info.tenant, &info.subscription, held.as_secs_f64(), now);
        }
    }

    fn bill(&mut self, tenant: &str, sub: &str, seconds: f64, now: SystemTime) {
        if seconds <= 0.0 {
            return;
        }
        if let Some(account) = self.accounts.get_mut(tenant) {
            account.deficit -= seconds;
        }
        self.tenant_usage
            .entry(tenant.to_owned())
            .or_insert_with(|| Decayed::new(now))
            .add(seconds, now);
        self.sub_usage
            .entry(sub.to_owned())
            .or_insert_with(|| Decayed::new(now))
            .add(seconds, now);
        let len = self.tenant_usage.len().max(self.sub_usage.len());
        if len > self.usage_sweep_at {
            // Forget what has decayed below a millisecond (amortised O(1)).
            let spent = |d: &Decayed| d.at(now) < 1e-3;
            self.tenant_usage.retain(|_, d| !spent(d));
            self.sub_usage.retain(|_, d| !spent(d));
            let len = self.tenant_usage.len().max(self.sub_usage.len());
            self.usage_sweep_at = (len * 2).max(64);
        }
    }

    /// Drops the account of a tenant with nothing queued and nothing in flight
    /// (its debt or credit is forgotten: it comes back with one quantum).
    fn forget_idle_account(&mut self, tenant: &str) {
        if self
            .accounts
            .get(tenant)
            .is_some_and(|a| a.lanes.is_empty())
            && !self.tenants.contains_key(tenant)
        {
            self.accounts.remove(tenant);
        }
    }

    /// Gives a started job back to the front of its lane, not to start before
    /// `not_before`: its subscription, tenant, retry and global slots are freed
    /// (and its slot time charged as by [`complete`](Self::complete)),
    /// its buffer share stays held, and the records behind it in its lane wait
    /// behind it (whatever their subscription's `max_in_flight`, they start only
    /// after it, since a lane starts in order). It starts again through
    /// [`pop_ready_at`](Self::pop_ready_at), or is dropped with its partition.
    pub fn defer(&mut self, started: Started<P>, not_before: SystemTime) -> Result<(), LaneError> {
        let offset = started.job.offset;
        let key = (started.job.partition.clone(), offset);
        let info = self
            .in_flight
            .remove(&key)
            .ok_or(LaneError::NotInFlight { offset })?;
        self.settle(&info);
        let sub = self.subs.entry(info.subscription.clone()).or_default();
        sub.in_flight = sub.in_flight.saturating_sub(1);
        sub.queued += 1;
        sub.max_in_flight = sub.max_in_flight.max(1);
        if let Some(count) = self.tenants.get_mut(&info.tenant) {
            *count -= 1;
            if *count == 0 {
                self.tenants.remove(&info.tenant);
            }
        }
        if info.retry {
            self.retry_in_flight -= 1;
        }
        if info.overflow {
            self.overflow_in_flight -= 1;
        }
        self.partitions
            .entry(key.0.clone())
            .or_default()
            .queued
            .insert(offset, started.enqueued_at);
        let id = (started.job.lane.clone(), started.job.retry);
        self.deferred
            .insert(id.clone(), (key.0, offset, not_before));
        self.enqueue(id, started, true);
        self.forget_idle_account(&info.tenant);
        Ok(())
    }

    /// Lets the deferred head at `offset` of `partition` start as soon as its
    /// caps allow: what it waited for has come. Nothing when no such head is
    /// deferred (it started, or was dropped or withdrawn meanwhile).
    pub fn undefer(&mut self, partition: &P, offset: i64) {
        self.deferred
            .retain(|_, (p, o, _)| !(p == partition && *o == offset));
    }

    /// Subscriptions with queued records whose rate limit holds them back now.
    pub fn rate_limited_subscriptions(&self) -> usize {
        self.rate_held().count()
    }

    fn rate_held(&self) -> impl Iterator<Item = &TokenBucket> {
        let now = self.clock;
        self.buckets.iter().filter_map(move |(sub, b)| {
            let queued = self.subs.get(sub).is_some_and(|s| s.queued > 0);
            (queued && now.is_some_and(|now| !b.allows(now))).then_some(b)
        })
    }

    /// Frees the slots of a started job (whatever its outcome) and charges its
    /// slot time not yet charged by [`charge`](Self::charge), up to the latest
    /// time the lanes were given. Caps and buffer accounting use what was
    /// recorded at start, not the fields passed back.
    pub fn complete(&mut self, started: &Started<P>) -> Result<(), LaneError> {
        let offset = started.job.offset;
        let info = self
            .in_flight
            .remove(&(started.job.partition.clone(), offset))
            .ok_or(LaneError::NotInFlight { offset })?;
        self.settle(&info);
        if let Some(sub) = self.subs.get_mut(&info.subscription) {
            sub.in_flight -= 1;
            if sub.in_flight == 0 && sub.queued == 0 {
                self.subs.remove(&info.subscription);
            }
        }
        if let Some(count) = self.tenants.get_mut(&info.tenant) {
            *count -= 1;
            if *count == 0 {
                self.tenants.remove(&info.tenant);
            }
        }
        if info.retry {
            self.retry_in_flight -= 1;
        }
        if info.overflow {
            self.overflow_in_flight -= 1;
        }
        self.forget_idle_account(&info.tenant);
        self.release(&started.job.partition, 1, info.bytes);
        Ok(())
    }

    /// Removes a revoked partition's queued records and returns their offsets,
    /// ascending; its in-flight records stay in flight and must still be completed.
    /// Clears its pause (the partition is no longer ours to resume).
    pub fn drop_partition(&mut self, partition: &P) -> Vec<i64> {
        let Some(part) = self.partitions.get_mut(partition) else {
            return Vec::new();
        };
        part.paused = false;
        let offsets: Vec<i64> = std::mem::take(&mut part.queued).into_keys().collect();
        let mut bytes = 0;
        for lane in self.lanes.values_mut() {
            lane.queue.retain(|s| {
                if s.job.partition != *partition {
                    return true;
                }
                bytes += s.job.bytes;
                if let Some(sub) = self.subs.get_mut(&s.job.lane.subscription_id) {
                    sub.queued -= 1;
                }
                false
            });
        }
        self.lanes.retain(|_, lane| !lane.queue.is_empty());
        let lanes = &self.lanes;
        for account in self.accounts.values_mut() {
            account.lanes.retain(|id| lanes.contains_key(id));
        }
        let accounts = &self.accounts;
        self.ring
            .retain(|t| accounts.get(t).is_some_and(|a| !a.lanes.is_empty()));
        let tenants = &self.tenants;
        self.accounts
            .retain(|t, a| !a.lanes.is_empty() || tenants.contains_key(t));
        self.deferred.retain(|_, (p, _, _)| p != partition);
        self.subs.retain(|_, s| s.queued > 0 || s.in_flight > 0);
        self.release(partition, offsets.len(), bytes);
        offsets
    }

    /// Removes the queued (not started) first-attempt records of
    /// `subscription_id` on `partition` and returns their offsets, ascending:
    /// they are moved elsewhere (an overflow lane), so their buffer share is
    /// released here. In-flight records of it stay in flight.
    pub fn withdraw(&mut self, partition: &P, subscription_id: &str) -> Vec<i64> {
        let id = (
            LaneKey {
                subscription_id: subscription_id.to_owned(),
            },
            false,
        );
        let Some(lane) = self.lanes.get_mut(&id) else {
            return Vec::new();
        };
        let mut offsets = Vec::new();
        let mut bytes = 0;
        lane.queue.retain(|s| {
            if s.job.partition != *partition {
                return true;
            }
            offsets.push(s.job.offset);
            bytes += s.job.bytes;
            false
        });
        if lane.queue.is_empty() {
            self.lanes.remove(&id);
            for account in self.accounts.values_mut() {
                account.lanes.retain(|l| *l != id);
            }
            let accounts = &self.accounts;
            self.ring
                .retain(|t| accounts.get(t).is_some_and(|a| !a.lanes.is_empty()));
            let tenants = &self.tenants;
            self.accounts
                .retain(|t, a| !a.lanes.is_empty() || tenants.contains_key(t));
        }
        if let Some((p, o, _)) = self.deferred.get(&id) {
            if p == partition && offsets.contains(o) {
                self.deferred.remove(&id);
            }
        }
        if let Some(part) = self.partitions.get_mut(partition) {
            for offset in &offsets {
                part.queued.remove(offset);
            }
        }
        if let Some(sub) = self.subs.get_mut(subscription_id) {
            sub.queued -= offsets.len();
            if sub.queued == 0 && sub.in_flight == 0 {
                self.subs.remove(subscription_id);
            }
        }
        self.release(partition, offsets.len(), bytes);
        offsets.sort_unstable();
        offsets
    }

    fn release(&mut self, partition: &P, records: usize, bytes: usize) {
        let Some(part) = self.partitions.get_mut(partition) else {
            return;
        };
        let held = &mut self.held[class(part.retry)];
        held.records -= records;
        held.bytes -= bytes;
        part.records -= records;
        part.bytes -= bytes;
        if part.records == 0 && !part.paused {
            self.partitions.remove(partition);
        }
    }

    /// Whether a partition we paused has drained enough to resume: it is at or
    /// below half of its partition limits and its class's totals (first
    /// attempts' or retries') are at or below half of theirs (hysteresis, so
    /// partitions do not flap at the limit).
    pub fn should_resume(&self, partition: &P) -> bool {
        self.partitions
            .get(partition)
            .is_some_and(|p| p.paused && self.below_low_water(p))
    }

    /// Every partition that [`should_resume`](Self::should_resume), ascending; each
    /// is forgotten as paused, so it is returned once per pause.
    pub fn take_resumable(&mut self) -> Vec<P> {
        let resumable: Vec<P> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.paused && self.below_low_water(p))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &resumable {
            if let Some(part) = self.partitions.get_mut(key) {
                part.paused = false;
                if part.records == 0 {
                    self.partitions.remove(key);
                }
            }
        }
        resumable
    }

    fn below_low_water(&self, p: &PartitionState) -> bool {
        let l = &self.limits;
        let held = self.held[class(p.retry)];
        let (total_records, total_bytes) = l.class_totals(p.retry);
        p.records <= l.partition_records / 2
            && p.bytes <= l.partition_bytes / 2
            && held.records <= total_records / 2
            && held.bytes <= total_bytes / 2
    }

    pub fn is_paused(&self, partition: &P) -> bool {
        self.partitions.get(partition).is_some_and(|p| p.paused)
    }

    /// Lanes with queued records (a subscription has up to two).
    pub fn lane_count(&self) -> usize {
        self.lanes.len()
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    pub fn retry_in_flight(&self) -> u32 {
        self.retry_in_flight
    }

    /// Started records of overflow lanes not yet completed (at most
    /// [`LaneLimits::overflow_slots`]).
    pub fn overflow_in_flight(&self) -> u32 {
        self.overflow_in_flight
    }

    pub fn subscription_in_flight(&self, subscription_id: &str) -> u32 {
        self.subs.get(subscription_id).map_or(0, |s| s.in_flight)
    }

    pub fn tenant_in_flight(&self, tenant_id: &str) -> u32 {
        self.tenants.get(tenant_id).copied().unwrap_or(0)
    }

    /// Records queued, not yet started.
    pub fn queued_records(&self) -> usize {
        self.buffered_records() - self.in_flight.len()
    }

    /// Records held: queued + in flight.
    pub fn buffered_records(&self) -> usize {
        self.held[0].records + self.held[1].records
    }

    /// Bytes held: queued + in flight.
    pub fn buffered_bytes(&self) -> usize {
        self.held[0].bytes + self.held[1].bytes
    }

    /// (records, bytes) held from retry-tier partitions (`retry`) or from
    /// first-attempt partitions: what each class's budget is measured against.
    pub fn class_buffered(&self, retry: bool) -> (usize, usize) {
        let held = self.held[class(retry)];
        (held.records, held.bytes)
    }

    /// (records, bytes) held for one partition.
    pub fn partition_buffered(&self, partition: &P) -> (usize, usize) {
        self.partitions
            .get(partition)
            .map_or((0, 0), |p| (p.records, p.bytes))
    }

    /// The earliest enqueue time among a partition's queued records (O(queued)).
    pub fn oldest_enqueued(&self, partition: &P) -> Option<SystemTime> {
        self.partitions
            .get(partition)?
            .queued
            .values()
            .min()
            .copied()
    }

    /// A tenant's deficit round robin credit in worker-seconds, while it has an
    /// account (queued lanes or records in flight); for tests and diagnostics.
    pub fn tenant_deficit(&self, tenant_id: &str) -> Option<f64> {
        self.accounts.get(tenant_id).map(|a| a.deficit)
    }

    /// Who uses this replica's slots and buffer, for attribution: per tenant and
    /// per subscription, the worker-seconds charged (slot-held time, decayed
    /// with [`USAGE_HALF_LIFE`](crate::fair::USAGE_HALF_LIFE) as of `now`),
    /// records in flight and records buffered (queued + in flight). Lists every
    /// tenant and subscription holding a record or with usage left, by id.
    /// O(subscriptions + tenants).
    pub fn usage(&self, now: SystemTime) -> Usage {
        let mut tenants: BTreeMap<&str, TenantUsage> = BTreeMap::new();
        let tenant = |id: &str| {
            let weight = self.limits.tenant_weights.weight(id);
            TenantUsage {
                tenant_id: id.to_owned(),
                weight,
                worker_seconds: self.tenant_usage.get(id).map_or(0.0, |d| d.at(now)),
                in_flight: self.tenant_in_flight(id),
                buffered_records: 0,
            }
        };
        let mut subscriptions: BTreeMap<&str, SubscriptionUsage> = BTreeMap::new();
        for (id, s) in &self.subs {
            subscriptions.insert(
                id,
                SubscriptionUsage {
                    subscription_id: id.clone(),
                    tenant_id: s.tenant.clone(),
                    worker_seconds: self.sub_usage.get(id).map_or(0.0, |d| d.at(now)),
                    in_flight: s.in_flight,
                    buffered_records: s.queued + s.in_flight as usize,
                },
            );
            tenants
                .entry(&s.tenant)
                .or_insert_with(|| tenant(&s.tenant))
                .buffered_records += s.queued + s.in_flight as usize;
        }
        for (id, d) in &self.sub_usage {
            subscriptions
                .entry(id)
                .or_insert_with(|| SubscriptionUsage {
                    subscription_id: id.clone(),
                    tenant_id: String::new(),
                    worker_seconds: d.at(now),
                    in_flight: 0,
                    buffered_records: 0,
                });
        }
        for id in self.tenant_usage.keys() {
            tenants.entry(id).or_insert_with(|| tenant(id));
        }
        Usage {
            tenants: tenants.into_values().collect(),
            subscriptions: subscriptions.into_values().collect(),
        }
    }

    /// Nothing queued and nothing in flight.
    pub fn is_idle(&self) -> bool {
        self.buffered_records() == 0
    }
}

#[cfg(test)]
#[path = "lanes_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "lanes_rate_tests.rs"]
mod rate_tests;

#[cfg(test)]
#[path = "lanes_fair_tests.rs"]
mod fair_tests;
